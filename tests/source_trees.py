"""srift's modules as syntax trees, parsed once per test process: tests/test_architecture.py,
test_vocabulary.py and test_assemble.py each read every module's tree (parsing the package takes
about 1.3 s of CPU, several seconds on a loaded machine). Nothing here imports srift."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "srift"


@functools.lru_cache(maxsize=1)
def _trees() -> tuple[tuple[Path, ast.Module], ...]:
    return tuple((p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(PACKAGE.rglob("*.py")))


def package_trees() -> dict[Path, ast.Module]:
    """Every module of srift/ (its path) -> its syntax tree, in path order (shared: do not change a tree)."""
    return dict(_trees())
