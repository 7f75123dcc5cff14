"""Every loader, fuzzed through the real command line: 1,000 mutated documents each (slow), plus
the documents that once broke them (fast).

Each mutated document must load or be refused with one ``Error:`` / ``To fix:`` line (exit 2);
no other exception, and on success no NaN, infinite or negative number anywhere in the JSON
result (tests/fuzz_helpers.py). ``SRIFT_FUZZ_EXAMPLES`` changes the count (default 1,000); run
with ``-s`` to see each loader's tally. The examples are the same on every run (CI must not fail
by chance); ``SRIFT_FUZZ_RANDOM=1`` draws new ones to hunt for more (what it finds joins BROKE).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import srift.perf.accuracy as accuracy
import srift.perf.comm as comm
import srift.perf.compute as compute
import srift.perf.input as input_model
from fuzz_helpers import Tally, check_numbers, dump_json, dump_yaml, mutated_text, run_cli, write
from srift.catalog import clear_cache
from srift.catalog.instances import CSV_COLUMNS
from srift.errors import SriftError
from srift.zoo import load_builtin_profile

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("SRIFT_FUZZ_EXAMPLES", "1000"))
RANDOM = os.environ.get("SRIFT_FUZZ_RANDOM", "") not in ("", "0")
SIGNED = ("margin", "margin_pct", "change", "change_pct")  # a check's margins and changes may be negative
# recommend's runners-up against the chosen row (vs_chosen): slower or cheaper reads negative
RECOMMEND_SIGNED = ("throughput_change", "cost_per_hour_change")


def _settings(n: int = EXAMPLES) -> settings:
    return settings(max_examples=n, deadline=None, database=None, derandomize=not RANDOM,
                    suppress_health_check=list(HealthCheck))


# safe_load's documents, several times faster where PyYAML has libyaml (the seeds load at collection)
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_FAST_LOADER)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("SRIFT_DEBUG", raising=False)
    for var in ("SRIFT_MODEL", "SRIFT_PROFILE", "SRIFT_BATCH_SIZE", "SRIFT_STEPS", "SRIFT_INSTANCE"):
        monkeypatch.delenv(var, raising=False)
    yield


def _fuzz(tally: Tally, case: Callable[[st.DataObject, Path], None], n: int = EXAMPLES) -> None:
    """Run ``case`` on ``n`` hypothesis draws, each in a fresh folder; print the tally."""
    with tempfile.TemporaryDirectory() as root:
        counter = iter(range(10**9))

        @_settings(n)
        @given(st.data())
        def run(data: st.DataObject) -> None:
            folder = Path(root) / str(next(counter))
            folder.mkdir()
            case(data, folder)

        run()
    print("\n" + tally.line())
    assert tally.cases >= n


# ---- seeds -------------------------------------------------------------------------------------
def measured_seed() -> dict[str, Any]:
    """vgg16's profile as if measured on a V100 (times per layer, phases): the anchoring path."""
    doc = _load(ROOT / "profiles" / "vgg16.yaml")
    for i, layer in enumerate(doc["layers"]):
        layer["fwd_s"], layer["fwd_s_std"] = 1e-4 * (i + 1), 1e-6
        layer["bwd_s"], layer["bwd_s_std"] = 2e-4 * (i + 1), 2e-6
    doc["device"] = {"name": "Tesla V100-SXM2-16GB", "kind": "cuda", "gpu": "V100-16GB"}
    doc["phases"] = {"data_s": 0.001, "forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.003, "total_s": 0.04,
                     "total_s_std": 0.001}
    doc["iterations"] = 20
    return doc


def llm_seed() -> dict[str, Any]:
    """A decoder LLM's analytic profile (FSDP units): the sharded path."""
    return yaml.load(dump_yaml(load_builtin_profile("mpt-125m", batch_size=2, seq_len=512).to_dict()), Loader=_FAST_LOADER)


PROFILE_SEEDS = [_load(ROOT / "profiles" / "vgg16.yaml"), _load(ROOT / "profiles" / "gpt2.yaml"), measured_seed(), llm_seed()]
CLUSTER_SEEDS = [_load(p) for p in sorted((ROOT / "configs" / "clusters").glob("*.yaml"))] + [{
    "name": "calibrated", "description": "two local GPUs with a measured curve",
    "node_groups": [{"count": 2, "gpus_per_node": 2, "gpu": "T4", "intra_node": "pcie3", "network_gbps": 25,
                     "network": "ethernet", "usd_per_hour": 1.5, "spot": True, "interruption_per_hour": 0.01,
                     "gpu_memory_gib": 16}],
    "comm_calibration": {"backend": "nccl", "world_size": 4, "sizes_bytes": [1024, 1048576, 67108864],
                         "times_s": [1e-4, 1e-3, 5e-2], "p90_times_s": [2e-4, 2e-3, 6e-2],
                         "broadcast_times_s": [5e-5, 5e-4, 3e-2]}}]
JOB_SEEDS = [
    {"model": "resnet50", "batch_size": 64, "precision": "amp", "steps": 50000, "instance": "p3.16xlarge:2",
     "spot": False, "region": "us-east-1", "limits": {"max_cost_usd": 500, "max_hours": 24, "max_usd_per_hour": 30}},
    {"profile": "vgg16.yaml", "batch_size": 32, "epochs": 2, "dataset_size": 100000, "optimizer": "kfac",
     "instance": "g5.12xlarge:1", "spot": True, "limits": {"max_cost_usd": 50}},
    {"model": "bert-base", "seq_len": 128, "steps": 1000, "limits": {"max_hours": 10, "max_usd_per_hour": 20}},
    {"model": "mpt-125m", "seq_len": 1024, "precision": "bf16", "tokens": 10**9, "parallelism": "fsdp",
     "activation_checkpointing": "selective", "grad_accum": 2, "instance": "p4d.24xlarge:1", "confidence": 0.9,
     "limits": {"max_cost_usd": 100}},
]


# ---- the loaders -------------------------------------------------------------------------------
def profile_case(tally: Tally) -> Callable[[st.DataObject, Path], None]:
    def case(data: st.DataObject, folder: Path) -> None:
        seed = data.draw(st.sampled_from(PROFILE_SEEDS), label="seed")
        path = write(folder / "p.yaml", mutated_text(seed, data, dump_yaml, yaml_text=True))
        instance = data.draw(st.sampled_from(["p4d.24xlarge:2", "g5.12xlarge:1+p4d.24xlarge:1", "p3dn.24xlarge:1"]),
                             label="instance")
        optimizer = data.draw(st.sampled_from(["sgd", "sgd", "kfac"]), label="optimizer")
        parallelism = data.draw(st.sampled_from(["auto", "ddp", "fsdp"]), label="parallelism")
        fmt = data.draw(st.sampled_from(["json", "json", "table"]), label="format")
        run_cli(["predict", "--profile", str(path), "--instance", instance, "--optimizer", optimizer, "--parallelism", parallelism,
                 "--format", fmt], tally)
    return case


def cluster_case(tally: Tally) -> Callable[[st.DataObject, Path], None]:
    def case(data: st.DataObject, folder: Path) -> None:
        seed = data.draw(st.sampled_from(CLUSTER_SEEDS), label="seed")
        path = write(folder / "c.yaml", mutated_text(seed, data, dump_yaml, yaml_text=True))
        spot = data.draw(st.sampled_from([[], ["--spot"]]), label="spot")
        fmt = data.draw(st.sampled_from(["json", "json", "table"]), label="format")
        run_cli(["predict", "--model", "vgg16", "--batch-size", "16", "--cluster", str(path), *spot, "--format", fmt], tally)
    return case


def job_case(tally: Tally) -> Callable[[st.DataObject, Path], None]:
    def case(data: st.DataObject, folder: Path) -> None:
        seed = data.draw(st.sampled_from(JOB_SEEDS), label="seed")
        (folder / "vgg16.yaml").write_bytes((ROOT / "profiles" / "vgg16.yaml").read_bytes())
        # Two seeds keep their instance (a deleted one makes check search the catalog: covered by the third).
        protect = ("instance",) if "instance" in seed else ()
        path = write(folder / "srift.yaml", mutated_text(seed, data, dump_yaml, yaml_text=True, protect=protect))
        run_cli(["check", str(path), "--format", "json"], tally, allowed=(0, 1, 2), signed=SIGNED)
    return case


def baseline_case(tally: Tally, job: Path, base: dict[str, Any]) -> Callable[[st.DataObject, Path], None]:
    def case(data: st.DataObject, folder: Path) -> None:
        path = write(folder / "base.json", mutated_text(base, data, dump_json, yaml_text=False))
        run_cli(["check", str(job), "--compare-to", str(path), "--format", "json"], tally, allowed=(0, 1, 2), signed=SIGNED)
    return case


def _csv(rows: Any) -> str:
    """Rows (mutated dicts) back to CSV text: the first row's columns, other cells as their text."""
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        return str(rows)
    buf = io.StringIO()
    header = [str(k) for k in rows[0]]
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        if isinstance(row, dict):
            writer.writerow([_cell(row.get(k, "")) for k in rows[0]])
        else:
            writer.writerow([_cell(row)])
    return buf.getvalue()


def _cell(v: Any) -> str:
    return "true" if v is True else "false" if v is False else "" if v is None else str(v)[:2000]


def cache_case(tally: Tally, seed_rows: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> Callable[[st.DataObject, Path], None]:
    types = sorted({r["instance_type"] for r in seed_rows})

    def case(data: st.DataObject, folder: Path) -> None:
        monkeypatch.setenv("SRIFT_CACHE_DIR", str(folder))
        text = mutated_text(seed_rows, data, _csv, yaml_text=False)
        (folder / "catalog" / "aws").mkdir(parents=True)
        write(folder / "catalog" / "aws" / "us-east-1.csv", text)
        clear_cache()
        itype = data.draw(st.sampled_from(types), label="type")
        command = data.draw(st.sampled_from(["predict", "predict", "list", "show", "recommend"]), label="command")
        argv = {
            "predict": ["predict", "--model", "resnet50", "--instance", f"{itype}:2", "--region", "us-east-1"]
                       + data.draw(st.sampled_from([[], ["--spot"]]), label="spot"),
            "list": ["catalog", "list", "--region", "us-east-1"],
            "show": ["catalog", "show", itype, "--region", "us-east-1"],
            "recommend": ["recommend", "--model", "resnet50", "--budget", "60", "--max-gpus", "8", "--spot", "--region",
                          "us-east-1"],
        }[command]
        run_cli([*argv, "--format", "json"], tally, allowed=(0, 1, 2) if command == "recommend" else (0, 2),
                signed=RECOMMEND_SIGNED if command == "recommend" else ())
    return case


PARAM_FILES = {"comm": "comm.json", "compute": "compute.json", "input": "input.json", "accuracy": "accuracy.json",
               "sharded": "sharded.json"}
_PATH_FUNCTION = {"accuracy": "accuracy_path", "sharded": "llm_params_path"}


def _reset_model_caches() -> None:
    comm.load_params.cache_clear()
    comm._MODEL_CACHE.clear()
    compute.load_params.cache_clear()
    compute.load_llm_params.cache_clear()
    input_model.load_params.cache_clear()
    accuracy.load_accuracy.cache_clear()
    accuracy.typical_error.cache_clear()


def params_case(tally: Tally, which: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[st.DataObject, Path], None]:
    seed = json.loads((ROOT / "configs" / "perf" / PARAM_FILES[which]).read_text(encoding="utf-8"))

    def case(data: st.DataObject, folder: Path) -> None:
        path = write(folder / PARAM_FILES[which], mutated_text(seed, data, dump_json, yaml_text=False))
        module = {"comm": comm, "compute": compute, "input": input_model, "accuracy": accuracy, "sharded": compute}[which]
        monkeypatch.setattr(module, _PATH_FUNCTION.get(which, "params_path"), lambda: path)
        _reset_model_caches()
        if which == "sharded":  # decoder LLMs in half precision use these rates
            seq = data.draw(st.sampled_from(["512", "2048"]), label="seq")
            run_cli(["predict", "--model", "mpt-125m", "--precision", "bf16", "--seq-len", seq, "--instance", "p4d.24xlarge:1",
                     "--format", "json"], tally)
            return
        if which == "input":  # not in predict yet: the loader and the model it feeds
            tally.cases += 1
            try:
                params = input_model.load_params()
                times = [input_model.input_time("images", 64, 8, 224, params=params),
                         input_model.input_time("images", 1, 96, 512, params=params),
                         input_model.input_time("tokens", 8, 4, seq_len=2048, params=params)]
            except SriftError:
                tally.outcomes[2] = tally.outcomes.get(2, 0) + 1
                return
            tally.outcomes[0] = tally.outcomes.get(0, 0) + 1
            tally.numbers_checked += check_numbers([[t.time_s, t.slow_time_s] for t in times])
            return
        model = data.draw(st.sampled_from(["resnet50", "bert-base", "vgg16"]), label="model")
        instance = data.draw(st.sampled_from(["p3.16xlarge:2", "p4d.24xlarge:2", "g5.xlarge:1", "g4dn.12xlarge:3"]),
                             label="instance")
        fmt = data.draw(st.sampled_from(["json", "json", "table"]), label="format")
        run_cli(["predict", "--model", model, "--instance", instance, "--format", fmt], tally)
    return case


HF_SEEDS = [json.loads((ROOT / "tests" / "fixtures" / "hf_configs" / f).read_text(encoding="utf-8"))
            for f in ("Llama-3.2-1B.json", "Llama-3.2-1B.json", "Qwen2.5-7B.json", "Mistral-7B-v0.1.json")]


def hf_case(tally: Tally) -> Callable[[st.DataObject, Path], None]:
    def case(data: st.DataObject, folder: Path) -> None:
        seed = data.draw(st.sampled_from(HF_SEEDS), label="seed")
        path = write(folder / "config.json", mutated_text(seed, data, dump_json, yaml_text=False))
        seq = data.draw(st.sampled_from(["128", "512"]), label="seq")
        run_cli(["predict", "--model-config", str(path), "--instance", "p4d.24xlarge:2", "--batch-size", "1",
                 "--seq-len", seq, "--format", "json"], tally)
    return case


# ---- the slow fuzz tests -----------------------------------------------------------------------
@pytest.mark.slow
def test_fuzz_profile_yaml() -> None:
    tally = Tally("profile YAML (predict --profile)")
    _fuzz(tally, profile_case(tally))


@pytest.mark.slow
def test_fuzz_cluster_yaml() -> None:
    tally = Tally("cluster YAML (predict --cluster)")
    _fuzz(tally, cluster_case(tally))


@pytest.mark.slow
def test_fuzz_job_file() -> None:
    tally = Tally("job file (check)")
    _fuzz(tally, job_case(tally))


@pytest.fixture
def job_and_baseline(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    job = tmp_path / "srift.yaml"
    job.write_text(dump_yaml(JOB_SEEDS[0]), encoding="utf-8")
    out = tmp_path / "base.json"
    assert run_cli(["check", str(job), "--out-file", str(out), "--format", "json"], Tally("setup"), allowed=(0, 1), signed=SIGNED)
    return job, json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_fuzz_compare_to_baseline(job_and_baseline: tuple[Path, dict[str, Any]]) -> None:
    tally = Tally("--compare-to baseline (check)")
    _fuzz(tally, baseline_case(tally, *job_and_baseline))


def _aws_rows(region: str = "us-east-1") -> list[dict[str, str]]:
    with open(ROOT / "configs" / "catalog" / "aws.csv", encoding="utf-8") as fh:
        return [row for row in csv.DictReader(fh) if row["region"] == region]


@pytest.mark.slow
def test_fuzz_price_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    tally = Tally("price cache CSV (predict, catalog list/show, recommend)")
    try:
        _fuzz(tally, cache_case(tally, _aws_rows(), monkeypatch))
    finally:
        monkeypatch.undo()
        clear_cache()


@pytest.mark.slow
@pytest.mark.parametrize("which", list(PARAM_FILES))
def test_fuzz_fitted_parameters(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tally = Tally(f"fitted parameters configs/perf/{PARAM_FILES[which]}")
    try:
        _fuzz(tally, params_case(tally, which, monkeypatch))
    finally:
        monkeypatch.undo()
        _reset_model_caches()


@pytest.mark.slow
def test_fuzz_hugging_face_config() -> None:
    tally = Tally("Hugging Face config.json (predict --model-config)")
    _fuzz(tally, hf_case(tally))


# ---- fast: documents of the kinds that broke the loaders before they were validated -------------
def _edited(seed: Any, edit: Callable[[Any], None]) -> Any:
    doc = json.loads(json.dumps(seed, default=str))
    edit(doc)
    return doc


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Any], None]:
    def edit(doc: Any) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _layers(**fields: Any) -> Callable[[Any], None]:
    def edit(doc: Any) -> None:
        for layer in doc["layers"]:
            layer.update(fields)
    return edit


VGG, GPT2, MEASURED, _ = PROFILE_SEEDS
BROKE = {  # name -> (loader, document); each once raised, or predicted a NaN, infinite or negative number
    "profile: params .inf (OverflowError)": ("profile", _edited(VGG, _set(("layers", 0, "params"), math.inf))),
    "profile: a bucket's rank .inf": ("profile", _edited(MEASURED, _set(("allreduce",), [
        {"rank": math.inf, "index": 0, "size_bytes": 1, "time_s": 0.1}]))),
    "profile: framework is a list (AttributeError)": ("profile", _edited(VGG, _set(("framework",), ["torch"]))),
    "profile: iterations 'abc' (ValueError)": ("profile", _edited(VGG, _set(("iterations",), "abc"))),
    "profile: total_s .nan": ("profile", _edited(MEASURED, _set(("phases", "total_s"), math.nan))),
    "profile: seq2 part above its total (negative FLOPs)": ("profile", _edited(GPT2, _layers(fwd_flops_seq2=1e15))),
    "profile: no work (ZeroDivisionError)": ("profile", _edited(VGG, _layers(fwd_flops=0, bwd_flops=0, fwd_bytes=0, bwd_bytes=0))),
    "profile: measured times all zero (ZeroDivisionError)": ("profile", _edited(MEASURED, _layers(fwd_s=0.0, bwd_s=0.0))),
    "profile: state bytes .inf": ("profile", _edited(VGG, _set(("optimizer",), {"state_bytes_per_param": math.inf}))),
    "profile: name with rich markup": ("profile", _edited(VGG, _set(("name",), "[bold]x[/y]"))),
    "cluster: intra_node a list (TypeError)": ("cluster", _edited(CLUSTER_SEEDS[0], _set(("node_groups", 0, "intra_node"), ["x"]))),
    "cluster: network_gbps .nan": ("cluster", _edited(CLUSTER_SEEDS[0], _set(("node_groups", 0, "network_gbps"), math.nan))),
    "cluster: usd_per_hour .inf (cost inf)": ("cluster", _edited(CLUSTER_SEEDS[0], _set(("node_groups", 0, "usd_per_hour"), math.inf))),
    "cluster: keys 1 and 'a' (sorting TypeError)": ("cluster", _edited(CLUSTER_SEEDS[0], _set((1,), "x"))),
    "cluster: network_gbps null (TypeError)": ("cluster", _edited(CLUSTER_SEEDS[0], _set(("node_groups", 0, "network_gbps"), None))),
    "cluster: network_gbps 1e-300 (times overflow)": ("cluster", _edited(CLUSTER_SEEDS[0], _set(("node_groups", 0, "network_gbps"), 1e-300))),
    "cluster: calibration NaN": ("cluster", _edited(CLUSTER_SEEDS[-1], _set(("comm_calibration", "times_s", 1), math.nan))),
    "job: batch_size 10^400 (OverflowError)": ("job", _edited(JOB_SEEDS[0], _set(("batch_size",), 10**400))),
    "job: max_cost_usd .inf": ("job", _edited(JOB_SEEDS[0], _set(("limits", "max_cost_usd"), math.inf))),
    "job: max_hours 1e-320 (margin -inf %)": ("job", _edited(JOB_SEEDS[0], _set(("limits", "max_hours"), 1e-320))),
    "job: spot job of 1e-303 epochs (p90 inf)": ("job", {**_edited(JOB_SEEDS[1], _set(("epochs",), 1.18e-303)),
                                                          "profile": str(ROOT / "profiles" / "vgg16.yaml")}),
    "baseline: negative cost": ("baseline", {"schema": "srift.check/v1", "predicted_cost_usd": -5.0, "predicted_hours": 1.0,
                                             "cost_per_hour_usd": 1.0}),
    "baseline: denormal cost (change inf %)": ("baseline", {"schema": "srift.check/v1", "predicted_cost_usd": 5e-324,
                                                             "predicted_hours": 1.0, "cost_per_hour_usd": 1.0}),
    "hf: hidden_size 10^30": ("hf", {**HF_SEEDS[0], "hidden_size": 10**30}),
    "hf: rms_norm_eps 10^400 (OverflowError)": ("hf", {**HF_SEEDS[0], "rms_norm_eps": 10**400}),
}


@pytest.mark.parametrize("name", list(BROKE))
def test_documents_that_broke_a_loader(name: str, tmp_path: Path) -> None:
    loader, doc = BROKE[name]
    tally = Tally(name)
    if loader == "profile":
        path = write(tmp_path / "p.yaml", dump_yaml(doc))
        run_cli(["predict", "--profile", str(path), "--instance", "p4d.24xlarge:2", "--seq-len", "64"]
                if doc.get("seq_len") else ["predict", "--profile", str(path), "--instance", "p4d.24xlarge:2"], tally)
        run_cli(["predict", "--profile", str(path), "--instance", "p4d.24xlarge:2", "--format", "json"], tally)
    elif loader == "cluster":
        path = write(tmp_path / "c.yaml", dump_yaml(doc))
        run_cli(["predict", "--model", "vgg16", "--batch-size", "16", "--cluster", str(path), "--format", "json"], tally)
    elif loader == "job":
        path = write(tmp_path / "srift.yaml", dump_yaml(doc))
        run_cli(["check", str(path), "--format", "json"], tally, allowed=(0, 1, 2), signed=SIGNED)
    elif loader == "baseline":
        job = write(tmp_path / "srift.yaml", dump_yaml(JOB_SEEDS[0]))
        base = write(tmp_path / "base.json", dump_json(doc))
        run_cli(["check", str(job), "--compare-to", str(base), "--format", "json"], tally, allowed=(0, 1, 2), signed=SIGNED)
    else:
        path = write(tmp_path / "config.json", dump_json(doc))
        run_cli(["predict", "--model-config", str(path), "--instance", "p4d.24xlarge:2", "--format", "json"], tally)
    assert tally.cases >= 1


PARAMS_BROKE = {  # fitted-parameter files: name -> (file, edit)
    "comm: shape 100 (infinite times)": ("comm", _set(("classes", "nvswitch", "shape"), 100.0)),
    "comm: eff_max 0 (division by zero)": ("comm", _set(("classes", "nvswitch", "eff_max"), 0.0)),
    "comm: a network's t_half_s 1e300 (no bandwidth)": ("comm", _set(("networks", "efa", "t_half_s"), 1e300)),
    "comm: an MTU of 40 bytes (negative goodput)": ("comm", _set(("nccl_socket_defaults", "generic", "mtu_bytes"), 40)),
    "comm: classes a list (AttributeError)": ("comm", _set(("classes",), [])),
    "compute: a NaN coefficient": ("compute", _set(("inv_eff", "conv", 0), "NaN")),
    "compute: launch_s 'x' (ValueError)": ("compute", _set(("launch_s",), "x")),
    "input: reference size 1e400 (OverflowError)": ("input", _set(("images", "reference_image_size"), 1e300 * 1e300)),
    "accuracy: logo 'x' (ValueError)": ("accuracy", _set(("groups", "single_gpu", "logo"), "x")),
    "accuracy: a group without rows (KeyError)": ("accuracy", _set(("groups", "single_gpu"), {"fit": 9.0})),
    "accuracy: max_nodes null (TypeError)": ("accuracy", _set(("groups", "multi_node", "max_nodes"), None)),
    "comm: per_thread_gbps 1e-300 (times overflow)": ("comm", _set(("networks", "ethernet", "per_thread_gbps"), 1e-300)),
}


@pytest.mark.parametrize("name", list(PARAMS_BROKE))
def test_parameter_files_that_broke_a_prediction(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    which, edit = PARAMS_BROKE[name]
    doc = _edited(json.loads((ROOT / "configs" / "perf" / PARAM_FILES[which]).read_text(encoding="utf-8")), edit)
    path = write(tmp_path / PARAM_FILES[which], json.dumps(doc))  # inf becomes Infinity: not JSON, refused
    module = {"comm": comm, "compute": compute, "input": input_model, "accuracy": accuracy, "sharded": compute}[which]
    monkeypatch.setattr(module, _PATH_FUNCTION.get(which, "params_path"), lambda: path)
    _reset_model_caches()
    try:
        if which == "input":
            with pytest.raises(SriftError):
                input_model.load_params()
        else:
            code, _, _ = run_cli(["predict", "--model", "resnet50", "--instance", "p4d.24xlarge:2", "--format", "json"],
                                 Tally(name))
            assert code == 2
    finally:
        monkeypatch.undo()
        _reset_model_caches()


def test_llm_kernel_rates_beyond_any_float_are_refused() -> None:
    # (the fuzzer found float(10**400) raising OverflowError; the loader is not reached by a CNN's prediction)
    doc = json.loads((ROOT / "configs" / "perf" / PARAM_FILES["sharded"]).read_text(encoding="utf-8"))
    for key in ("fused_attention_efficiency", "llm_matmul_factor"):
        with pytest.raises(SriftError, match=key):
            compute.LlmKernelParams.from_dict({**doc, key: 10**400})


def test_catalog_columns_are_what_the_cache_fuzzer_writes() -> None:
    assert list(_aws_rows()[0]) == CSV_COLUMNS


# ---- output targets ------------------------------------------------------------------------------
def _target(kind: str, path: Path) -> None:
    """Make ``path`` a thing that is not a regular file (private nodes only, never the real /dev)."""
    import stat as stat_

    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        os.mknod(path, 0o666 | stat_.S_IFCHR, os.makedev(1, 7))
    elif kind == "link to a folder":
        (path.parent / "d").mkdir(exist_ok=True)
        path.symlink_to(path.parent / "d")
    elif kind == "dangling link":
        path.symlink_to(path.parent / "nothing")
    elif kind == "link to a fifo":
        os.mkfifo(path.parent / "fifo")
        path.symlink_to(path.parent / "fifo")


OUTPUT_KINDS = ["fifo", "folder", "link to a folder", "dangling link", "link to a fifo"] + (["device"] if os.geteuid() == 0 else [])
WRITERS = [["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--out-file"],
           ["predict", "--model", "resnet50", "--instance", "p3.2xlarge", "--skypilot"],
           ["catalog", "show", "g5.xlarge", "--out-file"], ["catalog", "gpus", "--infra", "lambda", "--out-file"],
           ["calibrate", "comm", "-o"], ["profile", "--model", "gpt2", "--force", "-o"]]


@pytest.mark.slow
def test_fuzz_output_targets() -> None:
    """Every writer, every kind of target that is not a regular file, under names drawn by hypothesis
    (nested, dotted, long): refused with one Error: / To fix: line, the target as it was."""
    tally = Tally("output targets")

    def case(data: st.DataObject, folder: Path) -> None:
        kind = data.draw(st.sampled_from(OUTPUT_KINDS), label="kind")
        writer = data.draw(st.sampled_from(WRITERS), label="writer")
        name = data.draw(st.sampled_from(["out", "out.json", ".hidden", "a" * 200, "sub/out.yaml", "-x"]), label="name")
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        _target(kind, target)
        before = os.lstat(target)
        code, _, _ = run_cli([*writer, str(target)], tally, allowed=(2,))
        after = os.lstat(target)
        assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
        assert not [p for p in folder.rglob("*.tmp")]

    _fuzz(tally, case, n=min(EXAMPLES, 60))
