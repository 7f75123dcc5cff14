"""Issue 45 on the surfaces added after it: every number typed as text (a PowerSGD rank, a lengths
file, SRIFT_SPOT_INTERRUPTIONS_PER_HOUR, torchrun's variables, $COLUMNS) read as ASCII digits, and a
mixture of experts' options refused where no token is routed across ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from srift.bounds import ascii_integer
from srift.errors import SriftError
from srift.job import Job
from srift.job_vocabulary import GradCompression

from cli_helpers import run  # noqa: E402  (tests/cli_helpers.py)

DDP = ["predict", "--model", "resnet50", "--instance", "p3.16xlarge:2"]


def refused(code: int, err: str, words: str) -> bool:
    lines = err.strip().splitlines()
    return (code == 2 and len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("To fix: ")
            and words in lines[0])


@pytest.mark.parametrize(("text", "value"), [("8", 8), (" 12 ", 12), ("²", None), ("٣", None), ("３２", None), ("-1", None),
                                             ("1e3", None), ("", None), ("9" * 41, None)])
def test_ascii_integer_reads_ascii_digits_only(text: str, value: int | None) -> None:
    assert ascii_integer(text) == value


@pytest.mark.parametrize(("text", "says"), [("powersgd:²", "got '²'"), ("powersgd:٣", "got '٣'"), ("powersgd:", "got ''"),
                                            ("powersgd:0", "at least 1"), ("fp16:", "unknown gradient compression")])
def test_a_powersgd_rank_is_ascii_digits(text: str, says: str) -> None:
    with pytest.raises(SriftError, match=says):
        GradCompression.parse(text)  # int('²') raised ValueError (a traceback); int('٣') read 3
    code, _, err = run([*DDP, "--grad-compression", text])
    assert refused(code, err, says)


def test_powersgd_ranks_still_read() -> None:
    assert GradCompression.parse("powersgd") == GradCompression("powersgd", 1)
    assert GradCompression.parse(" PowerSGD:4 ") == GradCompression("powersgd", 4)


def test_a_job_file_powersgd_rank_in_other_digits_is_exit_2(tmp_path: Path) -> None:
    job = "model: resnet50\nbatch_size: 32\nsteps: 1000\ninstance: p3.16xlarge:1\nlimits: {max_cost_usd: 100}\n"
    (tmp_path / "j.yaml").write_text(job + 'grad_compression: "powersgd:²"\n', encoding="utf-8")
    code, _, err = run(["check", "j.yaml"], cwd=tmp_path)
    assert refused(code, err, "got '²'")  # was a traceback and exit 1, which `srift check` means as "over a limit"


@pytest.mark.parametrize("word", ["²", "٣٠٠"])
def test_a_lengths_file_of_other_digits_is_refused(word: str, tmp_path: Path) -> None:
    (tmp_path / "len.txt").write_text(f"100\n{word}\n", encoding="utf-8")
    code, _, err = run(["predict", "--model", "llama3-8b", "--instance", "p4d.24xlarge", "--packed", "--lengths-file",
                        str(tmp_path / "len.txt")])
    assert refused(code, err, f"has '{word}', not a positive integer")


def test_the_spot_rate_variable_is_ascii_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SRIFT_SPOT_INTERRUPTIONS_PER_HOUR", "٠")  # float() reads 0.0
    code, _, err = run(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--spot"])
    assert refused(code, err, "is not a rate from 0 to 60 per hour")
    monkeypatch.setenv("SRIFT_SPOT_INTERRUPTIONS_PER_HOUR", "0.5")
    code, out, err = run(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--spot", "--format", "json"])
    assert code == 0, err


@pytest.mark.parametrize(("env", "says"), [({"WORLD_SIZE": "²", "RANK": "0"}, "WORLD_SIZE must be a whole number"),
                                           ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE must be at least 1")])
def test_torchrun_variables_are_read_strictly(env: dict[str, str], says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = run(["calibrate", "comm"])
    assert refused(code, err, says)


@pytest.mark.parametrize("value", ["²", "٣٣", "abc"])
def test_a_columns_variable_that_is_not_ascii_digits_is_ignored(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", value)  # rich's Console: '²'.isdigit() and then int('²'): a traceback
    code, out, err = run(["predict", "--model", "resnet50", "--instance", "p3.2xlarge"])
    assert code == 0 and "Traceback" not in err and out.startswith("resnet50 on p3.2xlarge")


# ---- a mixture of experts' options where no token is routed across ranks --------------------------------
@pytest.mark.parametrize(("argv", "says"), [
    (["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--layout", "auto", "--moe-imbalance", "2"],
     "llama3-8b is a dense model"),
    (["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--moe-imbalance", "2"], "llama3-8b is a dense model"),
    (["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--layout", "auto", "--moe-ep-overlap"], "llama3-8b is a dense model"),
    (["--model", "mixtral-8x7b", "--instance", "p4d.24xlarge:8", "--layout", "tp=2,pp=4", "--moe-imbalance", "3"], "has ep=1"),
    (["--model", "mixtral-8x7b", "--instance", "p4d.24xlarge:8", "--moe-imbalance", "3"], "--moe-imbalance needs a --layout"),
    (["--model", "resnet50", "--instance", "p3.2xlarge", "--moe-imbalance", "2"], "--moe-imbalance is modelled in a --layout"),
])
def test_an_expert_option_that_cannot_apply_is_refused(argv: list[str], says: str) -> None:
    code, _, err = run(["predict", *argv])
    assert refused(code, err, says)


def test_recommend_refuses_the_imbalance_of_a_dense_model() -> None:
    code, _, err = run(["recommend", "--model", "llama3-8b", "--budget", "100", "--max-gpus", "8", "--moe-imbalance", "2"])
    assert refused(code, err, "llama3-8b is a dense model")


def test_the_imbalance_still_prices_an_expert_parallel_layout() -> None:
    assert Job(layout="tp=2,pp=4,ep=4", moe_imbalance=3.0).moe_imbalance == 3.0
    with pytest.raises(SriftError, match="has ep=1"):
        Job(layout="tp=2,pp=4", moe_imbalance=3.0)
    assert Job(layout="tp=2,pp=4", moe_imbalance=1.25).moe_imbalance == 1.25  # the default is never refused


# ---- issue 45's items 4 and 5 on every surface it names ----------------------------------------------
def test_terminal_escapes_from_a_layout_an_infra_or_a_config_never_reach_the_error_line(tmp_path: Path) -> None:
    import json

    config = json.loads((Path(__file__).parent / "fixtures" / "hf_configs" / "Llama-3.2-1B.json").read_text())
    (tmp_path / "c.json").write_text(json.dumps({**config, "model_type": "\x1b[2J\x1b]0;pwned\x07llama"}))
    for argv, words in ((["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--layout", "tp=\x1b[31m2"], "--layout's tp"),
                        (["--model", "resnet50", "--instance", "p3.2xlarge", "--infra", "\x1b[31maws"], "no catalog for region"),
                        (["--model-config", str(tmp_path / "c.json"), "--instance", "p4d.24xlarge"], "which srift does not model")):
        code, _, err = run(["predict", *argv])
        assert refused(code, err, words) and "\x1b" not in err and "\x07" not in err


def test_an_oversized_job_file_or_profile_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("model: resnet50\nsteps: 10\n" + "".join(f"unknown_key_{i}: {i}\n" for i in range(80_000)))
    code, _, err = run(["check", "job.yaml"], cwd=tmp_path)  # 1.8 MiB of unknown keys
    assert refused(code, err, "more than the 1 MiB srift reads")
    (tmp_path / "p.yaml").write_text("# " + "x" * (17 << 20) + "\n")
    code, _, err = run(["predict", "--instance", "p3.2xlarge", "--profile", "p.yaml"], cwd=tmp_path)
    assert refused(code, err, "more than the 16 MiB srift reads")
