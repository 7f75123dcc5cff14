"""Running `srift` in-process for tests that read its standard output and error apart."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from srift.cli import main


def run(argv: list[str], cwd: Path | None = None) -> tuple[int, str, str]:
    """``srift ARGV`` in ``cwd`` (default: here): (exit code, standard output, standard error)."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()
