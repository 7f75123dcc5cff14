"""srift: predict where to train a PyTorch job, and what it costs."""

__version__ = "0.1.0"

#: The distribution name (pip, PyPI). The PyPI project named ``srift`` is an unrelated tool: install
#: hints and docs name this one.
DISTRIBUTION = "srift-planner"
