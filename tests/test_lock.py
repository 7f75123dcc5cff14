"""The README's test command installs from the lock, torch's own dependencies included: a new
release of sympy or networkx cannot change the test environment overnight."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("<!-- srift:test -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]


def _locked() -> set[str]:
    lines = (ROOT / "test-constraints.txt").read_text(encoding="utf-8").splitlines()
    return {re.split(r"[=<>!]", line)[0].strip().lower().replace("_", "-") for line in lines if line and not line.startswith("#")}


def test_every_pip_install_of_the_test_command_reads_the_lock():
    installs = [part for part in _test_command().split("&&") if "pip install" in part]
    assert installs and all("-c test-constraints.txt" in part for part in installs), installs


def test_the_lock_pins_what_torch_pulls_in():
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        pytest.skip("torch is not installed here")
    needed = {re.split(r"[ ;<>=!\[(~]", r)[0].lower().replace("_", "-") for r in requires if "extra ==" not in r}
    # Platform-only requirements (CUDA wheels, triton) do not apply to the CPU build the lock is for.
    needed = {n for n in needed if not n.startswith(("nvidia-", "triton", "cuda-"))}
    assert needed <= _locked(), sorted(needed - _locked())
