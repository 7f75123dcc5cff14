"""`--help` groups each command's options into panels and ends with examples a user can paste
(srift/commands/panels.py): every example's flags exist on its command, and one runs as shown."""

from __future__ import annotations

import shlex

import pytest

from srift.cli import command, main
from srift.commands import panels


def _help(capsys, *args: str) -> str:
    assert main([*args, "--help"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", [100, 140])  # click's plain layout, then rich's boxes
def test_predict_help_shows_its_panels_and_examples(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    text = _help(capsys, "predict").replace(" \\\n      ", " ")  # a wrapped example, as the shell reads it
    for panel in (panels.WORKLOAD, panels.JOB, panels.CLUSTER, panels.OUTPUT):
        assert panel in text
    for example in panels.EXAMPLES["predict"]:
        assert f"$ {example}" in text  # one a line, not rewrapped


def test_every_example_uses_flags_its_command_has():
    tree = command()
    for name, examples in panels.EXAMPLES.items():
        cmd = tree.commands[name]
        flags = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
        for example in examples:
            words = shlex.split(example)
            if words[0] != "srift":  # torchrun ... srift profile: the flags after srift's command
                words = words[words.index("srift"):]
            script_args = words.index("--") if "--" in words else len(words)
            used = {w for w in words[2:script_args] if w.startswith("-")}
            assert used <= flags, (name, sorted(used - flags))


def test_the_job_options_sit_in_the_job_panels():
    tree = command()
    predict = tree.commands["predict"]
    by_flag = {p.opts[0]: getattr(p, "rich_help_panel", None) for p in predict.params if p.opts}
    assert by_flag["--precision"] == panels.JOB
    assert by_flag["--instance"] == panels.CLUSTER
    recommend = tree.commands["recommend"]
    by_flag = {p.opts[0]: getattr(p, "rich_help_panel", None) for p in recommend.params if p.opts}
    assert by_flag["--epochs"] == panels.LENGTH and by_flag["--budget"] == panels.SEARCH


def test_the_first_predict_example_runs(capsys):
    assert main(shlex.split(panels.EXAMPLES["predict"][0])[1:]) == 0
    assert "g5.12xlarge" in capsys.readouterr().out
