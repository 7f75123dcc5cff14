"""One module per command (``<command>_cmd.py``), each a module-level function that cli.py
registers: parse the flags, call one function of srift/api.py, hand the result to one renderer of
srift/report/. None imports torch at import time."""
