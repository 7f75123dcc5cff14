"""srift's messages besides its output (warnings, progress) go through the ``srift`` logger, and
Python warnings of the libraries it uses through ``py.warnings``; ``-v``/``-q`` set how much shows.

Without ``configure`` (srift used as a library) warnings still reach stderr through logging's
last-resort handler, as plain lines; an application configures logging as it likes.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

LOGGER = logging.getLogger("srift")
#: -q, default, -v, -vv.
LEVELS = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG}


class _Stderr(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment (tests and ``main`` replace it), one plain line."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure(verbosity: int) -> None:
    """Show errors only (``verbosity`` -1, ``-q``), warnings (0), progress (1, ``-v``) or debug
    lines (2, ``-vv``), of srift and of Python warnings, on stderr."""
    level = LEVELS[max(-1, min(2, verbosity))]
    logging.captureWarnings(True)
    for logger in (LOGGER, logging.getLogger("py.warnings")):
        if not any(isinstance(h, _Stderr) for h in logger.handlers):
            logger.addHandler(_Stderr())
        logger.setLevel(level)
        logger.propagate = False
