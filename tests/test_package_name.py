"""The distribution is ours: no shipped file sends anyone to the PyPI project `srift` (an unrelated
peer-to-peer file-transfer tool with its own `srift` command), and the CI workflow installs the
real package from a pinned commit."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from srift import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]

# `pip install srift`, `pip3 install -U "srift[plot]"`, `pipx install srift`, `uv pip install 'srift'`:
# an installer, optional flags, then the bare name `srift` (extras allowed), not `srift-planner`.
WRONG_INSTALL = re.compile(r"\b(?:pip3?|pipx|uv\s+pip)\s+install\s+(?:-\S+\s+)*[\"']?srift(?![\w.-])"
                           r"|\breinstall\s+srift(?![\w.-])")  # a hint to reinstall must name the distribution
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache", "build", "dist"}


def shipped_text_files() -> list[Path]:
    """Every text file of the repository a user gets, except the data/ provenance READMEs (they
    quote their sources) and this test (it spells the wrong line out)."""
    out = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            path = Path(folder) / name
            rel = path.relative_to(ROOT)
            if (rel.parts[0] == "data" and name == "README.md") or path == Path(__file__):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            if "\0" not in text:
                out.append(path)
    return out


def test_the_pattern_catches_every_spelling_and_spares_the_real_name():
    bad = ["pip install srift", "pip3 install -U srift", "pip install 'srift[plot]'", 'pip install "srift[torch]"',
           "pipx install srift", "uv pip install srift", "run: pip install srift\n", "reinstall srift, or re-run"]
    good = ["pip install srift-planner", "pip install -e '.[plot]'", "pip install 'srift-planner[plot]'",
            'pip install "srift-planner @ git+https://x/srift@abc"', "pip install sriftx", "srift install", "reinstall srift-planner, or"]
    assert [s for s in bad if not WRONG_INSTALL.search(s)] == []
    assert [s for s in good if WRONG_INSTALL.search(s)] == []


def test_no_shipped_file_says_pip_install_srift():
    files = shipped_text_files()
    assert len(files) > 100  # the walk found the repository (code, configs, docs, tests)
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if WRONG_INSTALL.search(line)]
    assert hits == []


def test_the_distribution_is_srift_planner_with_the_srift_command():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == "srift-planner"
    assert project["scripts"] == {"srift": "srift.cli:entry"}


def test_the_workflow_installs_srift_planner_from_a_pinned_commit():
    flow = yaml.safe_load((ROOT / "configs/ci/srift-check.yml").read_text(encoding="utf-8"))
    runs = "\n".join(step.get("run", "") for step in flow["jobs"]["cost"]["steps"])
    installs = [line.strip() for line in runs.splitlines() if "pip install" in line]
    assert installs == ['pip install "srift-planner @ git+${SRIFT_REPO}@${SRIFT_REF}"']
    # Until the user fills them in, the placeholders stop the job before anything is installed.
    assert flow["env"] == {"SRIFT_REPO": "https://github.com/OWNER/srift", "SRIFT_REF": "COMMIT_SHA"}
    guard = runs.index("*OWNER*|*COMMIT_SHA*")
    assert guard < runs.index("pip install") and "exit 1" in runs[guard:runs.index("pip install")]


def test_error_hints_name_the_real_distribution(monkeypatch):
    import builtins

    from srift import api
    from srift.errors import SriftError

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    try:
        api.require_torch("srift profile")
    except SriftError as exc:
        assert "srift-planner" in exc.hint and not WRONG_INSTALL.search(exc.hint)
    else:
        raise AssertionError("require_torch did not refuse without torch")
