"""NO_COLOR (https://no-color.org): set to anything, srift's terminal output carries no colour,
even where colour is forced (FORCE_COLOR, as CI logs do); piped output carries no escape at all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ESCAPE = re.compile(r"\x1b\[([0-9;]*)m")
COLOUR = {*range(30, 38), 38, *range(40, 48), 48, *range(90, 98), *range(100, 108)}  # SGR codes that set a colour


def _run(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS")}
    res = subprocess.run([sys.executable, "-m", "srift.cli", "predict", "--model", "resnet50", "--instance", "p3.16xlarge"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env={**base, "PYTHONPATH": str(ROOT), "COLUMNS": "120", **env})
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _colours(text: str) -> set[int]:
    return {int(code) for seq in ESCAPE.findall(text) for code in seq.split(";") if code} & COLOUR


def test_no_color_removes_colour_even_when_colour_is_forced():
    forced = _run(FORCE_COLOR="1")
    assert _colours(forced)  # the check can fail: forced, srift colours its numbers
    plain = _run(FORCE_COLOR="1", NO_COLOR="1")
    assert not _colours(plain)
    assert ESCAPE.sub("", plain) == ESCAPE.sub("", forced)  # the same text
    assert not ESCAPE.search(_run())  # piped: no escape sequence at all
