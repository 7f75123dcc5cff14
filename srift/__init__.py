"""srift: predict where to train a PyTorch job, and what it costs."""

__version__ = "0.1.0"
