"""Suite-wide rules: tests that start several processes run one after another on one xdist worker.

With `-n 2 --dist loadgroup` (the README's test command) every test marked ``distributed`` joins one
xdist group, so two multi-process tests never compete for the machine's cores at the same time: on a
loaded 2-core machine that is what made a gloo test miss its timing assumptions.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("distributed") is not None:
            item.add_marker(pytest.mark.xdist_group("distributed"))


@pytest.fixture
def srift_cli() -> Callable[[list[str]], tuple[int, str]]:
    """``srift ARGS`` run in-process: (exit code, stdout and stderr together)."""
    def run(args: list[str]) -> tuple[int, str]:
        from srift.cli import main
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(out):
            code = main(args)
        return code, out.getvalue()
    return run
