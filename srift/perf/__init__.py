"""Performance models: per-layer compute time on a GPU (compute.py), collectives (comm.py), and the
fitting helpers that learn their parameters from measured data (fit.py). No torch here."""
