"""Offline fitting and validation of srift's models against measured data (pandas, scikit-learn).

Used only by ``scripts/`` and tests, never at run time: ``datasets`` loads the measurements,
``compute_fit`` and ``comm_fit`` fit the parameters shipped in configs/perf/, ``validation``
compares predictions with measurements.
"""
