"""Run srift in a subprocess where `import torch` fails, as in a CI job that installs only srift."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_without_torch(args: list[str], tmp_path: Path, cwd: Path | None = None,
                      blocked: tuple[str, ...] = ("torch",)) -> subprocess.CompletedProcess:
    """``srift ARGS`` where importing any of ``blocked`` fails (torch by default)."""
    shim = tmp_path / "no_torch_shim"
    for name in blocked:
        (shim / name).mkdir(parents=True, exist_ok=True)
        (shim / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed (test shim)')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(shim) + os.pathsep + env.get("PYTHONPATH", "")
    code = "import sys; from srift.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=str(cwd or tmp_path), timeout=120)
