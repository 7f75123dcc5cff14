"""Issue 45: numbers typed as text read by one strict parser, names escaped for each sink (the
terminal's Error: line, a plot, a generated workflow), settings refused where they cannot apply,
and a price refresh that found nothing usable reported as a failure."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest
import yaml

from srift.bounds import parse_number
from srift.cli import main
from srift.errors import SriftError
from srift.examples import check_pin, copy_examples, pinned_workflow
from srift.testing import price_list_csv, price_list_row
from srift.job import Job, parse_layout

from cli_helpers import run  # noqa: E402  (tests/cli_helpers.py)

ROOT = Path(__file__).resolve().parents[1]
JOB = "model: llama3-8b\nsteps: 100\ninstance: p4d.24xlarge:1\nlimits: {max_cost_usd: 100000}\n"


def refused(code: int, err: str, words: str) -> bool:
    lines = err.strip().splitlines()
    return (code == 2 and len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("To fix: ")
            and words in lines[0])


# ---- one strict number parser ----------------------------------------------------------------------
@pytest.mark.parametrize(("text", "integer", "value"), [("8", True, 8), ("0012", True, 12), (" 3 ", True, 3),
                                                        ("1e9", False, 1e9), ("2.5", False, 2.5), ("1_000", False, 1000.0)])
def test_ascii_numbers_are_read(text: str, integer: bool, value: float) -> None:
    assert parse_number(text, "x", hint="h", integer=integer) == value


@pytest.mark.parametrize("text", ["²", "３２", "٣", "1.5", "-1", "", "1e3", "9" * 41, "1" * 5000])
def test_anything_but_ascii_digits_is_not_an_integer(text: str) -> None:
    with pytest.raises(SriftError):
        parse_number(text, "x", hint="h", integer=True)


@pytest.mark.parametrize(("layout", "says"), [("tp=²", "got '²'"), ("tp=" + "1" * 5000, "5,000 characters long"),
                                              ("tp=٣", "got '٣'"), ("tp=0", "at least 1")])
def test_a_layout_degree_that_is_not_ascii_digits_is_refused(layout: str, says: str) -> None:
    with pytest.raises(SriftError, match=says):
        parse_layout(layout)
    code, _, err = run(["predict", "--model", "gpt2", "--instance", "p4d.24xlarge", "--layout", layout])
    assert refused(code, err, says)


def test_job_file_and_environment_numbers_are_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.yaml").write_text(JOB + 'layout: "tp=²"\n')
    (tmp_path / "b.yaml").write_text(JOB)
    code, _, err = run(["check", "a.yaml"], cwd=tmp_path)
    assert refused(code, err, "got '²'")  # exit 2, not the 1 of an exceeded limit
    monkeypatch.setenv("SRIFT_LAYOUT", "tp=" + "7" * 1000)  # (over 4,096 characters the text itself is refused)
    code, _, err = run(["check", "b.yaml"], cwd=tmp_path)
    assert refused(code, err, "1,000 characters long")
    monkeypatch.delenv("SRIFT_LAYOUT")
    monkeypatch.setenv("SRIFT_MICRO_BATCH_SIZE", "３２")  # float() and int() read full-width digits as 32
    code, _, err = run(["check", "b.yaml"], cwd=tmp_path)
    assert refused(code, err, "'micro_batch_size' must be a number")


def test_an_instance_count_in_other_digits_is_refused() -> None:
    code, _, err = run(["predict", "--model", "resnet50", "--instance", "p3.2xlarge:٣"])
    assert refused(code, err, "must be a whole number")
    code, _, err = run(["calibrate", "comm", "--sizes", "1024,１０２４０"])  # int() would read 10240
    assert refused(code, err, "must be a whole number")


# ---- sinks -----------------------------------------------------------------------------------------
def test_terminal_escapes_never_reach_the_error_line() -> None:
    code, _, err = run(["predict", "--model", "\x1b[2J\x1b]0;pwned\x07evil", "--instance", "p3.2xlarge"])
    assert refused(code, err, "evil") and "\x1b" not in err and "\x07" not in err


def test_a_dollar_name_is_drawn_literally(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from srift.report.plot import plot_recommend
    from srift.results import RecommendResult
    from srift.search import search
    from srift.search.limits import Constraints
    from srift.testing import SpeedModel, instance

    c = Constraints(budget_usd_per_hour=7.0, max_gpus=4)
    found = search([instance("a.small", "G$\\frac{$", 1, 1.0, None)], SpeedModel({"G$\\frac{$": 100.0}), c, exhaustive=True)
    result = RecommendResult(found, c, Job(), "x$\\frac{$y $^^$", "fp32", 10, None, "test")
    path = plot_recommend(result, str(tmp_path / "p.png"))  # mathtext would raise ValueError on \frac{
    assert path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("repo", "ref", "says"), [
    ("https://github.com/x/srift", "v1*) touch pwned ;; *zz", "--ref"),
    ("https://github.com/x/srift\nfoo: bar", "v1", "--repo"),
    ("https://github.com/x/srift\"; curl evil", "v1", "--repo"),
    ("https://github.com/x/srift", "$(id)", "--ref"),
    ("https://github.com/x/srift", "a..b", "--ref"),
])
def test_a_pin_that_would_inject_is_refused(repo: str, ref: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(SriftError, match=says):
        check_pin(repo, ref)
    code, _, err = run(["examples", str(tmp_path / "ex"), "--repo", repo, "--ref", ref])
    assert refused(code, err, says) and not (tmp_path / "ex").exists()


def test_the_pin_is_quoted_and_changes_only_the_two_settings(tmp_path: Path) -> None:
    copied = copy_examples(tmp_path, pin=("https://github.com/you/srift", "v0.1.0"))
    text = (tmp_path / "configs" / "ci" / "srift-check.yml").read_text()
    original = (ROOT / "configs" / "ci" / "srift-check.yml").read_text()
    assert copied.pinned == ("https://github.com/you/srift", "v0.1.0")
    assert yaml.safe_load(text)["env"] == {"SRIFT_REPO": "https://github.com/you/srift", "SRIFT_REF": "v0.1.0"}
    changed = [(a, b) for a, b in zip(original.splitlines(), text.splitlines()) if a != b]
    assert changed == [("  SRIFT_REPO: https://github.com/OWNER/srift", '  SRIFT_REPO: "https://github.com/you/srift"'),
                       ("  SRIFT_REF: COMMIT_SHA", '  SRIFT_REF: "v0.1.0"')]  # the run: step's guard stays as written
    assert pinned_workflow("  SRIFT_REF: X\n", "https://h/r", "abc123") == '  SRIFT_REF: "abc123"\n'


def test_examples_into_a_loop_of_links_is_refused(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for dest in ("loop", "a/x"):
        code, _, err = run(["examples", str(tmp_path / dest)])
        assert refused(code, err, "loop of symbolic links")


# ---- settings that cannot apply ----------------------------------------------------------------------
@pytest.mark.parametrize(("argv", "says"), [
    (["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--layout", "tp=2,pp=1", "--virtual-stages", "2"], "has pp=1"),
    (["--model", "mixtral-8x7b", "--instance", "p4d.24xlarge:2", "--layout", "tp=1,ep=8", "--moe-imbalance", "60"],
     "more than ep=8 allows"),
    (["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--lora-rank", "8"], "trains none"),
    (["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--lora-targets", "qv"], "trains no adapters"),
    (["--model", "llama3-8b", "--instance", "p4d.24xlarge", "--finetune", "lora", "--quantize-head"], "only QLoRA"),
    (["--model", "llama3.2-1b", "--instance", "g4dn.xlarge", "--precision", "bf16"], "no bf16 tensor cores"),
    (["--model", "llama3.2-1b", "--instance", "g4dn.xlarge", "--finetune", "lora"], "no bf16 tensor cores"),
])
def test_a_setting_that_cannot_apply_is_refused(argv: list[str], says: str) -> None:
    code, _, err = run(["predict", *argv])
    assert refused(code, err, says)


def test_the_imbalance_bound_is_the_expert_parallel_degree() -> None:
    assert Job(layout="tp=1,ep=8", moe_imbalance=8.0).moe_imbalance == 8.0  # every token on one of 8 ranks: 8 x the mean
    with pytest.raises(SriftError, match="from 1 to 8"):
        Job(layout="tp=1,ep=8", moe_imbalance=8.5)
    assert Job(layout="tp=1,pp=2", virtual_stages=2).virtual_stages == 2
    assert Job(finetune="lora", lora_rank=8).lora_rank == 8


def test_a_config_with_more_dense_blocks_than_blocks_is_refused(tmp_path: Path) -> None:
    config = json.loads((ROOT / "tests" / "fixtures" / "hf_configs" / "DeepSeek-V3.json").read_text())
    config["first_k_dense_replace"] = config["num_hidden_layers"] + 5
    (tmp_path / "c.json").write_text(json.dumps(config))
    code, _, err = run(["predict", "--model-config", str(tmp_path / "c.json"), "--instance", "p5.48xlarge:4"])
    assert refused(code, err, "'first_k_dense_replace' is 66, more than its 61 blocks")


def test_a_refresh_with_no_usable_price_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "mirror" / "offers" / "v1.0" / "aws" / "AmazonEC2" / "current"
    (base / "us-west-2").mkdir(parents=True)
    (base / "region_index.json").write_text(json.dumps({"regions": {"us-west-2": {}}}))
    (tmp_path / "mirror" / "advisor.json").write_text(json.dumps({"ranges": [{"index": 0, "label": "<5%"}], "spot_advisor": {}}))
    # AWS's per-region CSV price list, its one GPU row priced at infinity (srift.testing builds the rows)
    (base / "us-west-2" / "index.csv").write_bytes(price_list_csv([price_list_row("S", "g5.xlarge", "Infinity")]))
    monkeypatch.setenv("SRIFT_AWS_PRICE_LIST_URL", f"file://{tmp_path / 'mirror'}")
    monkeypatch.setenv("SRIFT_AWS_SPOT_ADVISOR_URL", f"file://{tmp_path / 'mirror' / 'advisor.json'}")
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = run(["catalog", "refresh", "--infra", "aws"])
    assert refused(code, err, "no usable on-demand price") and not (tmp_path / "cache" / "catalog").exists()


# ---- the hand-off ------------------------------------------------------------------------------------
def test_a_type_skypilot_does_not_know_is_reported_with_the_nearest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path / "no-sky"))  # no catalog SkyPilot fetched: srift's copy of it
    code, out, err = run(["predict", "--model", "resnet50", "--instance", "g7e.4xlarge:2", "--skypilot", str(tmp_path / "t.yaml")])
    # g7e.4xlarge (1 x RTX PRO 6000, 96 GB) came from Karpenter's data, not SkyPilot's catalog; the nearest SkyPilot
    # rows have one GPU and the most memory: g6e (1 x L40S, 48 GB).
    assert refused(code, err, 'would fail with "No instance type g7e.4xlarge found"') and "nearest it knows: g6e." in err
    assert "--instance g6e." in err and out == "" and not (tmp_path / "t.yaml").exists()


def test_the_installed_skypilot_catalog_decides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from srift.catalog.load import bundled_rows
    from srift.report import skypilot_catalog as sc

    rows = bundled_rows("aws")
    g7e = next(r for r in rows if r.instance_type == "g7e.4xlarge")
    folder = tmp_path / ".sky" / "catalogs" / "v8" / "aws"
    folder.mkdir(parents=True)
    (folder / "vms.csv").write_text("InstanceType,AcceleratorName,AcceleratorCount\ng7e.4xlarge,RTXPRO6000,1\n")
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(sc.metadata, "version", lambda dist: "0.14.1")
    known = sc.installed_catalog("aws")
    assert known is not None and known.types == {"g7e.4xlarge"} and "SkyPilot 0.14.1" in known.where
    sc.require_known(g7e, 1, rows)  # a newer SkyPilot knows it: no refusal
    p5 = next(r for r in rows if r.instance_type == "p5.48xlarge")
    with pytest.raises(SriftError, match="not in SkyPilot 0.14.1's catalog"):
        sc.require_known(p5, 1, rows)


def test_the_task_and_the_torchrun_lines_carry_the_layout(tmp_path: Path) -> None:
    task_file = tmp_path / "t.yaml"
    code, out, err = run(["predict", "--model", "llama3-8b", "--instance", "p4d.24xlarge:2", "--layout", "tp=2,pp=2",
                          "--global-batch-size", "64", "--micro-batch-size", "2", "--torchrun", "--skypilot", str(task_file)])
    assert code == 0, err
    envs = yaml.safe_load(task_file.read_text())["envs"]
    want = {"SRIFT_TP": "2", "SRIFT_PP": "2", "SRIFT_CP": "1", "SRIFT_EP": "1", "SRIFT_VP": "1", "SRIFT_MICRO_BATCH": "2",
            "SRIFT_GLOBAL_BATCH": "64"}
    assert {k: envs[k] for k in want} == want
    lines = [ln for ln in out.splitlines() if "torchrun --" in ln and not ln.startswith("#")]
    assert len(lines) == 2 and all(ln.startswith("SRIFT_TP=2 SRIFT_PP=2 SRIFT_CP=1 ") and "SRIFT_MICRO_BATCH=2" in ln for ln in lines)
