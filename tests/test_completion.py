"""Value completion: the shell's completion protocol (bash) asks srift for the values of --model,
--gpu, --instance and --infra that start with what is typed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from srift.commands import complete
from srift.errors import SriftError

ROOT = Path(__file__).resolve().parents[1]


def test_values_complete_from_srifts_own_tables():
    assert {"llama3-8b", "llama3-70b", "llama3.2-1b"} <= set(complete.models("llama3"))
    assert all(m.startswith("llama3") for m in complete.models("llama3"))
    assert {"H100", "H200"} <= set(complete.gpus("h"))  # any case
    assert "p4d.24xlarge" in complete.instances("p4") and "a2-highgpu-8g" in complete.instances("a2-")
    assert "g5.xlarge:2+p4d.24xlarge" in complete.instances("g5.xlarge:2+p4d")  # the type after the last +
    assert complete.instances("p4d.24xlarge:") == []  # a count is not completed
    assert complete.infra("") == ["aws", "azure", "gcp", "lambda"]
    assert "aws,gcp" in complete.infra("aws,g") and "aws/us-west-2" in complete.infra("aws/us-w")
    assert complete.models("no-such-model") == []


def test_completion_never_raises(monkeypatch):
    import srift.api

    def broken(_kind):
        raise SriftError("the catalog cannot be read", "reinstall")

    monkeypatch.setattr(srift.api, "completion_names", broken)  # a broken install: nothing, no traceback
    assert complete.instances("p4") == []


@pytest.mark.slow
@pytest.mark.parametrize("words,cword,want", [
    ("srift predict --model resn", 3, "resnet50"),
    ("srift recommend --gpu H10", 3, "H100"),
    ("srift predict --instance p4d.2", 3, "p4d.24xlarge"),
    ("srift catalog list --infra gcp/us-centr", 4, "gcp/us-central1"),
])
def test_the_shell_protocol_completes_values(tmp_path, words, cword, want):
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), "_SRIFT_COMPLETE": "complete_bash",
           "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", "from srift.cli import entry; entry()"], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert want in res.stdout.split(), (res.stdout[-500:], res.stderr[-1000:])
