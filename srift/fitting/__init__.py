"""Offline fitting and validation of srift's models against measured data (pandas, scikit-learn).

Used only by ``scripts/`` and tests, never at run time: ``datasets`` loads the measurements,
``compute_fit`` and ``comm_fit`` fit the parameters shipped in configs/perf/, ``validation``
compares predictions with measurements.
"""

import importlib.util as _util
import sys as _sys

_missing = [m for m in ("pandas", "sklearn", "scipy") if _util.find_spec(m) is None]
if _missing:  # the `fit` extra: a core install (predict, recommend, check, catalog) does without it
    print(f"Error: srift.fitting needs {', '.join(_missing)}, which a core install leaves out.\n"
          "To fix: pip install -e '.[fit]' (or '.[test]'), then run it again.", file=_sys.stderr)
    raise SystemExit(2)
