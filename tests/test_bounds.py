"""What srift models, and what it refuses: bounds with the bound in the message, jobs that do not
fit, names that are names, files that are files, writes that never clobber, and the five cases of
issue #19 (the profiler's timeout and the kill tests are in tests/test_crash_safety.py)."""

from __future__ import annotations

import copy
import json
import math
import os
import re
from pathlib import Path

import pytest
import yaml

import srift.bounds as bounds
from srift import api
from srift.bounds import require, shown
from srift.catalog import clear_cache, get_instance
from srift.catalog.spec import cluster_from_spec
from srift.cli import main
from srift.cluster import cluster_from_dict
from srift.errors import SriftError
from srift.files import (
    atomic_write_text, check_name, file_in, input_file, load_yaml, name_from, output_file, read_json, read_yaml,
)
from srift.job import Job, JobLength
from srift.profile import Profile
from srift.simulate.memory import USABLE_FRACTION
from srift.simulate.predictor import predict
from srift.zoo import load_builtin_profile

ROOT = Path(__file__).resolve().parents[1]


def _error(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 2) -> str:
    """Run srift; assert it exits ``code`` with one Error: and one To fix: line; the Error: line."""
    assert main(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("Error: ") and err[1].startswith("To fix: "), err
    return err[0]


# ---- the five cases of issue #19 ---------------------------------------------------------------
def test_a_cluster_of_ten_to_the_eleven_instances_is_refused_with_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["predict", "--model", "resnet50", "--instance", "p3.2xlarge:99999999999"], capsys)
    assert "99999999999" in err and f"{bounds.MAX_NODES:,} instances" in err


def test_a_batch_of_ten_to_the_eight_is_outside_what_srift_models(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--batch-size", "100000000"], capsys)
    assert err == "Error: --batch-size is 100,000,000; srift models at most 1,048,576."


def test_a_sequence_of_a_million_tokens_does_not_fit_and_says_how_much_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["predict", "--model", "gpt2", "--instance", "p3.2xlarge", "--seq-len", "1000000"], capsys)
    pred = predict(load_builtin_profile("gpt2"), cluster_from_spec("p3.2xlarge"), Job(seq_len=1_000_000))
    assert not pred.fits_in_memory and pred.memory_per_gpu_bytes > 16 * 2**30 * USABLE_FRACTION
    assert f"the most loaded GPU needs {pred.memory_per_gpu_bytes / 2**30:,.1f} GiB" in err
    assert "a V100-16GB has 16 GiB (95% of it usable)" in err


def test_a_job_that_does_not_fit_gets_no_iteration_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--batch-size", "100000", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)  # --format json: the document says why, with no iteration time
    assert doc["ok"] is False and "iteration_time_s" not in doc and "does not fit in GPU memory" in doc["error"]["message"]
    assert "does not fit in GPU memory" in err
    # the same job at a batch that fits is predicted
    assert main(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--batch-size", "32", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits_in_memory"] is True


def test_a_name_with_a_path_is_refused_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    err = _error(["profile", "--model", "gpt2", "--name", "../../x"], capsys)
    assert "'../../x' is not a plain name" in err
    assert not list(tmp_path.rglob("*")) and not (tmp_path.parent.parent / "x.yaml").exists()


def test_a_device_and_a_folder_say_what_they_are(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(["check", "/dev/null"], capsys) == "Error: job file '/dev/null' is a device, not a regular file."
    err = _error(["predict", "--profile", str(tmp_path), "--instance", "p3.2xlarge"], capsys)
    assert err == f"Error: profile '{tmp_path}' is a folder, not a file."


def test_recommend_bounds_its_search(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["recommend", "--model", "resnet50", "--budget", "20", "--max-gpus", "100000"], capsys)
    assert err == f"Error: --max-gpus 100,000 is beyond the largest cluster srift searches ({bounds.MAX_SEARCH_GPUS:,} GPUs)."


# ---- bounds ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, message", [
    (0, "must be at least 1, got 0"),
    (2**20 + 1, "is 1,048,577; srift models at most 1,048,576"),
    (10**400, "is a 401-digit number; srift models at most 1,048,576"),
    (math.nan, "must be an integer, got nan"),
    (True, "must be an integer, got True"),
    (2.5, "must be an integer, got 2.5"),
    ("8", "must be an integer, got '8'"),
])
def test_require_names_the_bound(value: object, message: str) -> None:
    with pytest.raises(SriftError, match=re.escape(f"--batch-size {message}.")):
        require(value, "--batch-size", 1, bounds.MAX_BATCH_SIZE, integer=True, hint="x")
    assert require(64, "--batch-size", 1, bounds.MAX_BATCH_SIZE, integer=True, hint="x") == 64


@pytest.mark.parametrize("value, message", [
    (math.nan, "must be a finite number, got nan"), (-math.inf, "must be a finite number, got -inf"),
    (0.0, "must be above 0 $/h, got 0"),
    (1e8, "is 100,000,000 $/h; srift models at most 10,000,000 $/h"),
])
def test_require_on_floats(value: float, message: str) -> None:
    with pytest.raises(SriftError, match=re.escape(f"--budget {message}.")):
        require(value, "--budget", 0, bounds.MAX_BUDGET_USD_PER_HOUR, low_open=True, unit="$/h", hint="x")


def test_shown_cuts_long_values() -> None:
    assert shown("x" * 1000) == "'" + "x" * 56 + "..."
    assert len(shown(list(range(10**4)))) == 60


@pytest.mark.parametrize("job", [
    dict(batch_size=bounds.MAX_BATCH_SIZE + 1), dict(seq_len=bounds.MAX_SEQ_LEN + 1),
    dict(global_batch_size=bounds.MAX_GLOBAL_BATCH_SIZE + 1), dict(kfac_factor_steps=bounds.MAX_KFAC_INTERVAL + 1),
])
def test_job_settings_are_bounded(job: dict[str, int]) -> None:
    with pytest.raises(SriftError, match="srift models at most"):
        Job(**job)


@pytest.mark.parametrize("length", [dict(steps=bounds.MAX_STEPS + 1), dict(epochs=math.inf, dataset_size=10),
                                    dict(epochs=1.0, dataset_size=bounds.MAX_DATASET_SIZE + 1)])
def test_job_length_is_bounded(length: dict[str, float]) -> None:
    with pytest.raises(SriftError):
        JobLength(**length)  # type: ignore[arg-type]


def _group(**changes: object) -> dict[str, object]:
    return {"name": "lab", "node_groups": [{"count": 2, "gpus_per_node": 4, "gpu": "V100-32GB", "intra_node": "nvlink",
                                            "network_gbps": 25, **changes}]}


@pytest.mark.parametrize("changes, message", [
    (dict(count=bounds.MAX_NODES + 1), "count must be an integer from 1 to 16,384"),
    (dict(gpus_per_node=bounds.MAX_GPUS_PER_NODE + 1), "gpus_per_node must be an integer from 1 to 256"),
    (dict(network_gbps=math.nan), "network_gbps must be a number from 0 to 100,000, got nan"),
    (dict(usd_per_hour=math.inf), "usd_per_hour must be a number from 0 to 100,000, got inf"),
    (dict(interruption_per_hour=-1), "interruption_per_hour must be a number from 0 to 60"),
    (dict(gpu_memory_gib=0), "gpu_memory_gib must be a number from above 0"),
    (dict(intra_node=["nvlink"]), "intra_node must be one of"),
    (dict(spot="no"), "spot must be true or false, got 'no'"),
])
def test_cluster_fields_are_bounded(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SriftError, match=re.escape(message)):
        cluster_from_dict(_group(**changes))


def test_a_cluster_over_the_total_bounds_is_refused() -> None:
    doc = _group(count=bounds.MAX_NODES)
    doc["node_groups"] = doc["node_groups"] * 2  # type: ignore[operator]
    with pytest.raises(SriftError, match="32,768 nodes and 131,072 GPUs; srift models at most 16,384 nodes"):
        cluster_from_dict(doc)


_VGG = yaml.safe_load((ROOT / "profiles" / "vgg16.yaml").read_text(encoding="utf-8"))  # parsed once; each test edits a copy


def _vgg(**changes: object) -> dict[str, object]:
    doc = copy.deepcopy(_VGG)
    for key, value in changes.items():
        if key.startswith("layer0."):
            doc["layers"][0][key.split(".", 1)[1]] = value
        else:
            doc[key] = value
    return doc


@pytest.mark.parametrize("changes, message", [
    ({"layer0.fwd_flops": math.nan}, "layers[0].fwd_flops must be a number from 0 to 1e+24, got nan"),
    ({"layer0.params": 10**400}, "layers[0].params must be an integer from 0 to 10,000,000,000,000"),
    ({"layer0.fwd_flops_seq2": 1e20}, "layers[0].fwd_flops_seq2 (1e+20) is more than its total fwd_flops"),
    ({"batch_size": 2**21}, "batch_size must be an integer from 1 to 1,048,576"),
    ({"world_size": "x"}, "world_size must be an integer"),
    ({"framework": ["torch"]}, "'framework' must be a mapping"),
    ({"device": {"gpu": ["V100"]}}, "'device' must map names to plain values"),
    ({"name": "a\nb"}, "name must be a one-line name"),
])
def test_profile_fields_are_bounded(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SriftError, match=re.escape(message)):
        Profile.from_dict(_vgg(**changes))


def test_a_profile_that_does_no_work_is_refused() -> None:
    doc = _vgg()
    for layer in doc["layers"]:  # type: ignore[union-attr]
        for key in ("fwd_flops", "bwd_flops", "fwd_bytes", "bwd_bytes"):
            layer[key] = 0
    with pytest.raises(SriftError, match="its layers do no work"):
        Profile.from_dict(doc)
    for layer in doc["layers"]:  # type: ignore[union-attr]
        layer["fwd_s"], layer["bwd_s"] = 0.0, 0.0
    with pytest.raises(SriftError, match="its measured times add up to 0 s"):
        Profile.from_dict(doc)


def test_baseline_figures_are_validated(tmp_path: Path) -> None:
    base = {"schema": "srift.check/v1", "predicted_cost_usd": 10.0, "predicted_hours": 1.0, "cost_per_hour_usd": 10.0}
    path = tmp_path / "base.json"
    for key, bad in (("predicted_cost_usd", -5), ("predicted_hours", "x"), ("cost_per_hour_usd", 1e30)):
        path.write_text(json.dumps({**base, key: bad}), encoding="utf-8")
        with pytest.raises(SriftError, match=re.escape(f"'{key}'")):
            api.load_baseline(str(path))
    path.write_text(json.dumps({**base, "predicted_cost_usd": 5e-324}), encoding="utf-8")
    assert api.load_baseline(str(path))["predicted_cost_usd"] == 5e-324  # a denormal base: valid, but no "infinite %"


def test_a_corrupted_price_cache_is_ignored_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SRIFT_CACHE_DIR", str(tmp_path))
    bundled = (ROOT / "configs" / "catalog" / "aws.csv").read_text(encoding="utf-8").splitlines()
    rows = [bundled[0]] + [l for l in bundled[1:] if ",us-east-1,p3.2xlarge," in l]
    cache = tmp_path / "catalog" / "aws" / "us-east-1.csv"
    cache.parent.mkdir(parents=True)
    header = bundled[0].split(",")
    cells = rows[1].split(",")
    cells[header.index("on_demand_usd_per_hour")] = "nan"
    cache.write_text("\n".join([bundled[0], ",".join(cells)]) + "\n", encoding="utf-8")
    clear_cache()
    try:
        inst = get_instance("p3.2xlarge", "aws/us-east-1")
        assert inst.on_demand_usd_per_hour is not None and math.isfinite(inst.on_demand_usd_per_hour)
        assert "ignoring the unreadable catalog cache" in capsys.readouterr().err
    finally:
        clear_cache()


# ---- files -------------------------------------------------------------------------------------
def test_input_file_names_what_a_path_is(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "big.yaml").write_bytes(b"x" * 2048)
    cases = {tmp_path / "pipe": "is a pipe, not a regular file", tmp_path: "is a folder, not a file",
             tmp_path / "missing": "does not exist", Path("/dev/null"): "is a device, not a regular file",
             tmp_path / "big.yaml" / "x": "does not exist"}
    for path, what in cases.items():
        with pytest.raises(SriftError, match=re.escape(what)):
            input_file(path, "profile")
    with pytest.raises(SriftError, match=r"is 0.0 MiB, more than the 0 MiB srift reads"):
        input_file(tmp_path / "big.yaml", "profile", max_bytes=1024)


def test_an_unreadable_file_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("x: 1\n", encoding="utf-8")
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads anything: make the check see what a user would
        monkeypatch.setattr(os, "access", lambda p, mode: False)
    with pytest.raises(SriftError, match=re.escape(f"profile '{path}' cannot be read: permission denied.")):
        input_file(path, "profile")


@pytest.mark.slow
def test_yaml_is_refused_by_size_before_it_is_built() -> None:
    laughs = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
    with pytest.raises(SriftError, match="expands to more than 2,500,000 values"):
        load_yaml(laughs, "doc")
    with pytest.raises(SriftError, match="nests deeper than 64 levels"):
        load_yaml("[" * 100_000 + "]" * 100_000, "doc")  # the C composer would overflow its stack
    with pytest.raises(SriftError, match="a document that contains itself"):
        load_yaml("a: &a [1, *a]", "doc")
    assert load_yaml("a: &x [1, 2]\nb: *x\n", "doc") == {"a": [1, 2], "b": [1, 2]}  # ordinary aliases still work
    assert load_yaml("[" * 64 + "]" * 64, "doc") is not None


def test_json_nesting_and_non_json_numbers_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(SriftError, match="nests deeper than srift reads"):
        read_json(path, "baseline", "hint")
    path.write_text('{"a": NaN}', encoding="utf-8")
    with pytest.raises(SriftError, match="is not valid JSON"):
        read_json(path, "baseline", "hint")


def test_names_are_names(tmp_path: Path) -> None:
    for bad in ("../x", "/etc/passwd", "", ".hidden", "a b", "x" * 201, "a\x00b"):
        with pytest.raises(SriftError, match="is not a plain name"):
            check_name(bad)
    assert check_name("resnet50_v1.5-amp+ddp") == "resnet50_v1.5-amp+ddp"
    assert name_from("../../my train (v2)") == "my-train-v2-"
    assert name_from("...") == "profile"
    assert file_in(tmp_path, "a.b", ".yaml") == tmp_path / "a.b.yaml"


def test_writes_never_clobber_unasked(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    atomic_write_text(path, "old\n")
    with pytest.raises(FileExistsError):
        atomic_write_text(path, "new\n", overwrite=False)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["p.yaml"]  # no temporary left
    atomic_write_text(path, "new\n")
    assert path.read_text() == "new\n"
    with pytest.raises(SriftError, match="already exists"):
        output_file(path, "profile", False, "pass --force")
    assert output_file(path, "profile", True, "pass --force") == path
    with pytest.raises(SriftError, match="'/dev/null' is not a folder"):
        atomic_write_text("/dev/null/x.yaml", "x")


def test_an_existing_profile_is_kept_without_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    # a decoder LLM of the zoo: its profile is arithmetic, no torch
    assert main(["profile", "--model", "mpt-125m", "--seq-len", "256"]) == 0
    first = (tmp_path / "profiles" / "mpt-125m.yaml").read_bytes()
    capsys.readouterr()
    err = _error(["profile", "--model", "mpt-125m", "--seq-len", "128"], capsys)
    assert err == "Error: profile 'profiles/mpt-125m.yaml' already exists; srift does not replace it unasked."
    assert (tmp_path / "profiles" / "mpt-125m.yaml").read_bytes() == first
    assert main(["profile", "--model", "mpt-125m", "--seq-len", "128", "--force"]) == 0
    assert Profile.load(tmp_path / "profiles" / "mpt-125m.yaml").seq_len == 128


def test_read_yaml_keeps_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("a: [1,\n", encoding="utf-8")
    with pytest.raises(SriftError, match=r"is not valid YAML at line 2"):
        read_yaml(path, "cluster file")


# ---- the command line --------------------------------------------------------------------------
def test_usage_errors_are_one_error_and_one_fix_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--batch-size", "abc"], capsys)
    assert err.startswith("Error: Invalid value for '--batch-size'")
    # click's own words: "No such option: --bogus" (typer's bundled click), "No such option '--bogus'." (click 8.5)
    assert re.fullmatch(r"Error: No such option(: --bogus| '--bogus'\.)", _error(["predict", "--bogus"], capsys))


def test_the_help_still_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0 and "Usage" in capsys.readouterr().out
    assert main(["predict", "--help"]) == 0


def test_every_bound_is_documented() -> None:
    doc = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    names = [n for n in vars(bounds) if n.isupper()]
    assert len(names) > 30 and [n for n in names if f"`{n}`" not in doc] == []
