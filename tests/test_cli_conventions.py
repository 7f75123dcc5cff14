"""What people expect of a command line: --version, shell completion, readable --help, the same
--format and --out-file on every reporting command, JSON documents that say their schema."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from srift import __version__
from srift.cli import command, main

PYTHON_TYPES = re.compile(r"<(?:str|int|float|bool|list\[[^\]]*\]|path)>")


def _commands(cmd, path=()):
    yield path
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"srift {__version__}"


@pytest.mark.slow
def test_no_help_shows_a_python_type(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    paths = list(_commands(command()))
    assert len(paths) >= 10  # srift, profile, predict, recommend, check, catalog x3, calibrate, comm
    for path in paths:
        assert main([*path, "--help"]) == 0, path
        out = capsys.readouterr().out
        assert PYTHON_TYPES.findall(out) == [], (path, PYTHON_TYPES.findall(out))


_HELP: dict[tuple[str, ...], str] = {}


def _help_200(monkeypatch, capsys, path: list[str]) -> str:
    """``srift PATH --help`` at 200 columns, rendered once per command for this module (rich's
    help panels take ~0.1 s each)."""
    key = tuple(path)
    if key not in _HELP:
        monkeypatch.setenv("COLUMNS", "200")
        assert main([*path, "--help"]) == 0
        _HELP[key] = capsys.readouterr().out
    return _HELP[key]


@pytest.mark.parametrize("path, option, metavar", [
    (["predict"], "--instance", "TYPE[:COUNT]"), (["predict"], "--cluster", "FILE"), (["predict"], "--skypilot", "FILE"),
    (["recommend"], "--budget", "USD"), (["recommend"], "--deadline", "HOURS"), (["recommend"], "--max-gpus", "N"),
    (["recommend"], "--model", "NAME"), (["recommend"], "--profile", "FILE"), (["recommend"], "--format", "table|json|markdown"),
    (["check"], "--max-cost", "USD"), (["catalog", "list"], "--out-file", "FILE"), (["recommend"], "--plot", "FILE.png"),
])
def test_options_show_the_value_people_type(monkeypatch, capsys, path, option, metavar):
    line = next(ln for ln in _help_200(monkeypatch, capsys, path).splitlines() if f"{option} " in ln)
    assert re.search(rf"{re.escape(option)}\s+{re.escape(metavar)}\s", line), line


def test_flags_and_arguments_show_no_type(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["check", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: srift check [OPTIONS] [JOB_FILE]" in out
    assert re.search(r"--spot\s+--no-spot\s+Override spot", out)  # no value after a flag


@pytest.mark.slow
def test_shell_completion_is_installed_and_completes(tmp_path):
    env = {**os.environ, "COMP_WORDS": "srift recommend --sky", "COMP_CWORD": "2", "_SRIFT_COMPLETE": "complete_bash"}
    res = subprocess.run([sys.executable, "-c", "from srift.cli import entry; entry()"], env=env, capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.stdout.split() == ["--skypilot"], res.stderr
    # Name the shell: detection walks the process tree, which has no shell when the suite runs
    # detached (typer's own switch makes --show-completion take the name given).
    res = subprocess.run([sys.executable, "-c", "from srift.cli import entry; entry()", "--show-completion", "bash"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert res.returncode == 0 and "_srift_completion()" in res.stdout and "_SRIFT_COMPLETE=complete_bash" in res.stdout


REPORTS = {
    "predict": ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2"],
    "recommend": ["recommend", "--model", "resnet50", "--budget", "20", "--max-gpus", "8"],
    "catalog list": ["catalog", "list", "--gpu", "A100"],
    "catalog show": ["catalog", "show", "p4d.24xlarge"],
}
SCHEMAS = {"predict": "srift.predict/v1", "catalog list": "srift.catalog/v1", "catalog show": "srift.catalog/v1"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REPORTS))
def test_every_report_takes_the_three_formats_and_writes_its_json(tmp_path, capsys, name):
    args = REPORTS[name]
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    if name in SCHEMAS:
        assert doc["schema"] == SCHEMAS[name]
    out_file = tmp_path / "out.json"
    assert main([*args, "--format", "markdown", "--out-file", str(out_file)]) == 0
    md = capsys.readouterr().out
    assert md.startswith("**") and "┃" not in md
    assert json.loads(out_file.read_text()) == doc  # the same document, whatever was printed
    assert main([*args, "--format", "yaml"]) == 2


def test_predict_markdown_has_the_breakdown_that_adds_up(capsys):
    assert main([*REPORTS["predict"], "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main([*REPORTS["predict"], "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.splitlines()[0] == "**resnet50 on p3.16xlarge:2, fp32**"
    assert "| Throughput | " + f"{doc['throughput_samples_per_s']:,.1f} samples/s |" in md
    phases = [ln for ln in md.splitlines() if ln.startswith("| ") and ln.endswith("% |") and not ln.startswith("| total")]
    shown_ms = sum(float(ln.split(" | ")[1].split()[0]) * (1e-3 if " us" in ln else 1) for ln in phases if " s |" not in ln)
    assert shown_ms == pytest.approx(doc["iteration_time_s"] * 1e3, abs=0.1 * len(phases))


@pytest.mark.parametrize("columns", ["80", "100"])
def test_help_is_readable_at_80_and_100_columns(monkeypatch, capsys, columns):
    """No line wider than the terminal and no option name cut (`--activation-chec…`)."""
    monkeypatch.setenv("COLUMNS", columns)
    for path in (["recommend"], ["predict"], ["check"], ["catalog", "list"]):
        assert main([*path, "--help"]) == 0
        out = capsys.readouterr().out
        assert max(len(ln) for ln in out.splitlines()) <= int(columns), path
        assert "…" not in out
        for param in command().commands[path[0]].params if len(path) == 1 else ():
            for opt in (o for o in param.opts if o.startswith("-")):
                assert opt in out, (path, opt)
