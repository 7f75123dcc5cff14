"""Performance models used at run time: per-layer compute time on a GPU (compute.py), collective
communication (comm.py) and how far such predictions have been from measurements (accuracy.py).
Their parameters are fitted offline by srift/fitting/. No torch here."""
