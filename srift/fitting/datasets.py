"""The measured data srift fits and validates on, as tables of rows (offline: pandas, no torch).

Used only by ``scripts/`` and tests (through ``srift.fitting``); nothing at run time reads these
files. Each loader takes the data folder (``scripts/fit_models.py --data``) and returns one row per
measurement.

Data used (each folder's README names its source):

- lambda-deeplearning-benchmark (v1 files, head and 2022-07): whole-system training throughput and
  the global batch of resnet50, bert_base_squad, bert_large_squad; ``fp32`` files are TF32 on
  Ampere and newer (srift precision ``tf32``, whose peak equals fp32 on older GPUs), ``fp16`` = AMP.
  Every system whose GPU has a datasheet entry in configs/gpus.yaml (``canonical_gpu`` says which
  do not, and why).
- nvidia-deeplearningexamples: PyTorch BERT SQuAD fine-tuning (BERT-large, sequence 384) on DGX-1
  V100 and DGX A100, with the per-GPU batch printed in the table. (Its ResNet-50 tables give no
  batch size, so they are not used.)
- superbench-results: DDP step times of zoo models on one 8x A100 node, and ``nccl-bw``
  all-reduce times.
- nccl-tests-aws: all-reduce time vs message size across nodes (EFA).
- cm-dare: run-to-run spread of distributed steps over cloud (GCE) ethernet (``comm_fit``).
- dawnbench: fast.ai's multi-node ImageNet runs, for validation only (``load_dawnbench_multinode``).
- ddl-benchmarks: the same jobs on 1-8 servers of 4 RTX 2080 Ti over 10 GbE TCP, 100 Gb/s
  InfiniBand and 100 Gb/s TCP (``load_ddl``): the socket transport's thread limit and the
  networks' latency are fitted on its multi-node rows, as ratios to the same job on one server.
- dlperf-v100-ib: NVIDIA DeepLearningExamples ResNet-50 and BERT-base pre-training on 1-4 nodes of
  8 V100 SXM2 over 100 Gb/s InfiniBand (``load_dlperf``): a multi-node source like ddl-benchmarks.
- csc-ddp: ResNet-50 with PyTorch DDP on 1, 4 and 8 A100 / V100 (two nodes), fp32 and AMP, nine
  PyTorch builds (``load_csc``): a third multi-node source of the same shape.

``ProfileSource`` gives the srift profile of a measured row's model.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import yaml

# The multi-node sources (srift/fitting/multinode_data.py), the all-reduce measurements
# (srift/fitting/nccl_data.py) and the profiles of measured rows (srift/fitting/profile_source.py)
# live in their own modules; every public name of theirs is re-exported here.
from srift.fitting.multinode_data import *
from srift.fitting.nccl_data import *
from srift.fitting.profile_source import *
from srift.hardware import find_gpu, gpu as gpu_spec
from srift.job import TF32


# Dataset model names -> (zoo profile name, sequence length). Only what maps honestly: the Lambda
# and DLE BERT SQuAD runs fine-tune BertForQuestionAnswering at sequence length 384 (DLE
# run_squad default), the zoo's bert-*-squad.
MODEL_MAP: dict[str, tuple[str, int | None]] = {
    "resnet50": ("resnet50", None),
    "bert_base_squad": ("bert-base-squad", 384),
    "bert_large_squad": ("bert-large-squad", 384),
}


# Lambda system labels carry a site/vendor prefix, a GPU count, and on some systems an NVLink
# bridge or a run tag; strip them before alias lookup.
_LABEL_PREFIX = re.compile(r"^((LambdaCloud|DellTexas|Dell|SMC|1CC|RAIDZ1)\s+|(Lambda|Linode) Cloud\s*\W\s*)", re.I)


_COUNT_PREFIX = re.compile(r"^\d+\s*x\s*", re.I)


_LABEL_SUFFIX = re.compile(r"\s+(NVLink|V\d+)$", re.I)


def canonical_gpu(label: str) -> str | None:
    """Canonical GPU name of a dataset system label (``LambdaCloud 8x A100 40GB PCIe``,
    ``4x RTX 2080Ti NVLink``), or None. Laptop (Max-Q) parts and the GTX 1080 Ti have no entry in
    configs/gpus.yaml: a laptop's clocks depend on its power limit, not on a datasheet, and Pascal
    runs amp's half-precision tensors on fp32 units, which srift's precision model does not describe."""
    text = label.strip()
    for _ in range(2):
        text = _LABEL_PREFIX.sub("", text)
        text = _COUNT_PREFIX.sub("", text)
    text = _LABEL_SUFFIX.sub("", text)
    return find_gpu(text) or find_gpu(label)


ROW_COLUMNS = ["source", "dataset_model", "model", "seq_len", "label", "gpu", "n_gpus", "precision",
               "batch_per_gpu", "throughput_total", "iteration_time_s", "watt_per_gpu", "torch_version"]
# The PyTorch a source ran, as its data README states it (srift/perf/optimizer_step.py reads the
# optimizer step's kind from it): NGC PyTorch containers 20.xx-22.xx ship PyTorch 1.x, 23.xx on 2.x
# (NVIDIA's framework support matrix); Lambda v1 ran 22.09, NVIDIA's BERT fine-tuning tables 21.11.
NGC_22_TORCH = "1"


def label_key(name: str) -> str:
    """A system label as both Lambda files should spell it (the throughput file has "RTX Quadro
    8000" where the batch-size file has "Quadro RTX 8000")."""
    return re.sub(r"\s+", " ", str(name).replace("RTX Quadro", "Quadro RTX")).strip()


def load_lambda(data_dir: Path) -> pd.DataFrame:
    """Lambda v1 rows (head and 2022-07) for the mapped models, one row per measurement."""
    out = []
    base = Path(data_dir) / "lambda-deeplearning-benchmark"
    for snapshot in ("head", "2022-07"):
        for file_prec, precision in (("fp32", "tf32"), ("fp16", "amp")):
            thr = pd.read_csv(base / snapshot / f"pytorch-train-throughput-{file_prec}.csv")
            bs = pd.read_csv(base / snapshot / f"pytorch-train-bs-{file_prec}.csv")
            bs = bs.set_index([bs["name_gpu"].map(label_key), bs["num_gpu"].astype(int)])
            for _, r in thr.iterrows():
                n = int(r["num_gpu"])
                key = (label_key(r["name_gpu"]), n)
                gpu = canonical_gpu(str(r["name_gpu"]))
                if gpu is None or key not in bs.index:
                    continue
                for col, (model, seq) in MODEL_MAP.items():
                    total = float(r.get(col, 0) or 0)
                    gbs = bs.loc[key, col]
                    gbs = float(gbs.iloc[0] if hasattr(gbs, "iloc") else gbs)
                    if total <= 0 or gbs <= 0 or gbs % n:
                        continue
                    b = int(gbs // n)
                    out.append({
                        "source": f"lambda/{snapshot}", "dataset_model": col, "model": model, "seq_len": seq,
                        "label": r["name_gpu"], "gpu": gpu, "n_gpus": n, "precision": precision,
                        "batch_per_gpu": b, "throughput_total": total,
                        "iteration_time_s": b * n / total, "watt_per_gpu": float(r["watt"]) / n, "torch_version": NGC_22_TORCH,
                    })
    return pd.DataFrame(out, columns=ROW_COLUMNS)


def load_dle(data_dir: Path) -> pd.DataFrame:
    """NVIDIA DeepLearningExamples PyTorch BERT SQuAD fine-tuning rows (BERT-large, seq 384)."""
    df = pd.read_csv(Path(data_dir) / "nvidia-deeplearningexamples" / "training_throughput_tidy.csv")
    sel = df[(df["framework"] == "PyTorch") & (df["model_dir"] == "LanguageModeling/BERT")
             & df["heading"].str.startswith("Fine-tuning")]
    out = []
    for _, r in sel.iterrows():
        gpu = find_gpu(str(r["gpu"]))
        # "8 and 16" = per-GPU batch for (FP32/TF32, mixed precision) in that order.
        parts = [int(x) for x in re.findall(r"\d+", str(r["batch_per_gpu"]))]
        if gpu is None or len(parts) != 2:
            continue
        precision = {"fp32": "tf32", "tf32": "tf32", "amp_fp16": "amp"}.get(r["precision"])
        if precision is None:
            continue
        b = parts[0] if precision == TF32 else parts[1]
        n = int(r["n_gpus"])
        total = float(r["throughput"])
        out.append({
            "source": "dle/bert-squad", "dataset_model": "bert_large_squad", "model": "bert-large-squad", "seq_len": 384,
            "label": r["heading"], "gpu": gpu, "n_gpus": n, "precision": precision, "batch_per_gpu": b,
            "throughput_total": total, "iteration_time_s": b * n / total, "torch_version": NGC_22_TORCH,
        })
    return pd.DataFrame(out, columns=ROW_COLUMNS)


def load_rows(data_dir: Path) -> pd.DataFrame:
    """All measured rows the zoo and the data share, exact duplicates (same system, same number in
    two snapshots) dropped."""
    rows = pd.concat([load_lambda(data_dir), load_dle(data_dir)], ignore_index=True)
    rows = rows.drop_duplicates(subset=["label", "n_gpus", "precision", "dataset_model", "batch_per_gpu", "throughput_total"])
    return rows.reset_index(drop=True)


# SuperBench model names -> zoo names (only the models the zoo ships).
SUPERBENCH_FP32 = ("float32", "fp32")  # SuperBench's names of fp32 model metrics
SUPERBENCH_MODELS = {
    "resnet50": "resnet50", "resnet152": "resnet152", "bert-base": "bert-base-squad", "bert-large": "bert-large-squad",
    "gpt2-small": "gpt2", "vgg16": "vgg16", "densenet201": "densenet201",
}


# Platform -> (GPU, intra-node link). NDv4 = 8x A100 40GB SXM4 over NVSwitch; NDmv4 = 8x A100 80GB.
# The "V100" box is left out: its GPUs are not identified (its VGG16 steps imply 24 TFLOP/s, above a
# V100's fp32 peak), and neither is its interconnect.
SUPERBENCH_PLATFORMS = {
    "Azure-NDv4-A100": ("A100-40GB", "nvswitch"),
    "Azure-NDmv4-A100": ("A100-80GB", "nvswitch"),
}


def _superbench_config(path: Path) -> tuple[int, dict[str, tuple[int, int | None]]]:
    """(processes, {model: (batch, seq_len)}) from a SuperBench config (YAML anchors resolved)."""
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    benches = cfg["superbench"]["benchmarks"]
    out: dict[str, tuple[int, int | None]] = {}
    procs = 1
    for bench in benches.values():
        models = bench.get("models") if isinstance(bench, dict) else None
        if not models:
            continue
        params = bench.get("parameters") or {}
        modes = bench.get("modes") or []
        if modes:
            procs = int(modes[0].get("proc_num", 1))
        for m in models:
            if "batch_size" in params:
                out[m] = (int(params["batch_size"]), params.get("seq_len"))
    return procs, out


def load_superbench_models(data_dir: Path) -> pd.DataFrame:
    """SuperBench DDP step times of zoo models on one node (8x A100 or the 2x V100 box).

    ``float32`` rows are taken as srift ``tf32`` (PyTorch <= 1.11, used then, enabled TF32 on
    Ampere by default). ``float16`` rows are skipped: SuperBench casts the whole model to fp16,
    which is none of srift's precisions (amp = autocast with fp32 weights). Sequence models without
    an explicit ``seq_len`` in the config are skipped.
    """
    base = Path(data_dir) / "superbench-results"
    sb = pd.read_csv(base / "all_metrics_flat.csv")
    pat = re.compile(r"^\w+_models/pytorch-([\w-]+)/(?:steptime_train_|)(float32|float16|fp32|fp16)(?:_train_step_time|)$")
    configs: dict[tuple[str, str], Path] = {}
    for ver_dir in sorted(base.glob("v*")):
        for plat_dir in sorted(ver_dir.iterdir()):
            ymls = sorted(plat_dir.glob("*.yaml"))
            if ymls:
                configs[(ver_dir.name, plat_dir.name)] = ymls[0]
    out = []
    for _, r in sb.iterrows():
        plat = str(r["platform"])
        m = pat.match(str(r["metric"]))
        key = (str(r["superbench_version"]), plat)
        if not m or plat not in SUPERBENCH_PLATFORMS or key not in configs:
            continue
        sb_model, prec = m.group(1), m.group(2)
        if sb_model not in SUPERBENCH_MODELS or prec not in SUPERBENCH_FP32:
            continue
        procs, table = _superbench_config(configs[key])
        if sb_model not in table:
            continue
        batch, seq = table[sb_model]
        zoo = SUPERBENCH_MODELS[sb_model]
        if zoo.startswith(("bert", "gpt")) and not seq:
            continue
        gpu, link = SUPERBENCH_PLATFORMS[plat]
        step_s = float(r["value"]) * 1e-3
        out.append({
            "source": f"superbench/{key[0]}/{plat}", "dataset_model": sb_model, "model": zoo,
            "seq_len": int(seq) if seq else None, "label": f"{plat} ({link})", "gpu": gpu, "n_gpus": procs,
            "precision": "tf32", "batch_per_gpu": batch, "torch_version": "1",  # PyTorch <= 1.11 (docstring)
            "throughput_total": batch * procs / step_s, "iteration_time_s": step_s, "intra_node": link,
        })
    df = pd.DataFrame(out)
    # v0.4.0 baselines repeat v0.3.0's numbers: keep one of each.
    return df.drop_duplicates(subset=["label", "model", "precision", "iteration_time_s"]).reset_index(drop=True)




def intra_node_of(label: str, gpu: str, watt_per_gpu: float | None = None) -> str:
    """Intra-node link of a measured system, inferred from its label: SXM4 and DGX A100 ->
    NVSwitch, SXM5 (or any non-PCIe Hopper) -> NVSwitch 4, PCIe Gen5 -> PCIe 5, two cards with an
    NVLink bridge -> the bridge (more than two: bridges join pairs, so the ring also crosses PCIe),
    V100 -> NVLink (SXM2, 300 W) unless the system's power says PCIe cards (250 W), other
    Ampere/Ada/Hopper PCIe cards -> PCIe 4, older cards -> PCIe 3."""
    low = label.lower()
    arch = gpu_spec(gpu).architecture
    count = re.search(r"(\d+)\s*x", low)
    if low.endswith("nvlink") and count and int(count.group(1)) == 2:
        return "nvlink-bridge"
    if "sxm5" in low or arch == "hopper" and "pcie" not in low:
        return "nvswitch4"
    if "sxm4" in low or "dgx a100" in low:
        return "nvswitch"
    if "gen5" in low:
        return "pcie5"
    if arch == "volta":
        return "pcie3" if watt_per_gpu is not None and watt_per_gpu <= 250.0 else "nvlink"
    if arch in ("ampere", "ada", "hopper"):
        return "pcie4"
    return "pcie3"


def row_link(row) -> str:
    """Intra-node link of a measured row: its own ``intra_node`` (SuperBench) or the label's."""
    link = getattr(row, "intra_node", None)
    watt = getattr(row, "watt_per_gpu", None)
    return link if isinstance(link, str) else intra_node_of(str(row.label), row.gpu,
                                                            None if watt is None or pd.isna(watt) else float(watt))


