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

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import yaml

from srift.catalog import get_instance
from srift.hardware import find_gpu, gpu as gpu_spec
from srift.job import AMP, FP32, TF32
from srift.profile import Profile

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


# ImageNet-1k training images: one epoch of the DAWNBench runs.
IMAGENET_TRAIN_IMAGES = 1_281_167


def _expand_schedule(phases: list[dict], key: str) -> list[int]:
    """``[{key: v, "epochs": n}, ...]`` -> the value of every epoch in order."""
    return [int(ph[key]) for ph in phases for _ in range(int(ph["epochs"]))]


def load_dawnbench_multinode(data_dir: Path) -> pd.DataFrame:
    """The multi-node PyTorch DDP measurements: fast.ai's DAWNBench ImageNet ResNet-50 runs on 4, 8
    and 16 p3.16xlarge (8x V100 each, NCCL over the instance's 25 Gb/s network), 2018.

    Each run changes image size and global batch by epoch (its entry's ``batchSize`` and
    ``imageSize`` schedules). Only epochs at 224 px match the zoo's ResNet-50: from the longest
    run of 224-px epochs with one batch size, the first epoch is dropped (the switch: cuDNN
    autotuning, data-loader restart) and the median epoch time is taken. Iteration time = epoch
    seconds x global batch / 1,281,167 images, so it holds each epoch's validation pass and
    data-loader start as well, which srift's iteration does not model. The images are real JPEGs
    decoded on the instance's vCPUs (``data_loading`` ``images``); NCCL then ran one socket
    thread with one socket (``nccl_socket_threads``); whether the instances were in a cluster
    placement group is not recorded (srift's default: outside one). Precision ``amp`` is an
    assumption: the entries do not state it, and the runs' NVIDIA-derived training code trained in
    half precision on the V100 tensor cores. A run without 224-px epochs is skipped.
    """
    base = Path(data_dir) / "dawnbench" / "ImageNet" / "train"
    out = []
    for path in sorted(base.glob("fastai_resnet50_p3_*_machine_pytorch.json")):
        nodes = int(re.search(r"_p3_(\d+)_machine", path.name).group(1))  # type: ignore[union-attr]
        misc = json.loads(path.read_text())["misc"]
        batch = _expand_schedule(misc["batchSize"], "batch_size")
        size = _expand_schedule(misc["imageSize"], "image_size")
        table = pd.read_csv(path.with_suffix(".tsv"), sep="\t")
        seconds = np.diff(np.concatenate([[0.0], table["hours"].to_numpy(float)])) * 3600.0
        runs: list[list[int]] = []
        for e in range(min(len(seconds), len(batch), len(size))):
            if size[e] != 224:
                continue
            if runs and runs[-1][-1] == e - 1 and batch[runs[-1][-1]] == batch[e]:
                runs[-1].append(e)
            else:
                runs.append([e])
        if not runs or len(max(runs, key=len)) < 2:
            continue
        epochs = max(runs, key=len)[1:]
        gbs, n_gpus = batch[epochs[0]], 8 * nodes
        iteration_s = float(np.median(seconds[epochs])) * gbs / IMAGENET_TRAIN_IMAGES
        out.append({
            "source": "dawnbench/fastai", "dataset_model": "resnet50", "model": "resnet50", "seq_len": None,
            "label": f"fast.ai {nodes}x p3.16xlarge", "gpu": "V100-16GB", "n_gpus": n_gpus, "precision": "amp",
            "batch_per_gpu": gbs // n_gpus, "throughput_total": gbs / iteration_s, "iteration_time_s": iteration_s,
            "instance": "p3.16xlarge", "nodes": nodes, "torch_version": "1.0", "epochs_used": len(epochs), "data_loading": "images",
            # NCCL of 2018 (2.2-2.3, with PyTorch 0.4/1.0) had one socket per connection: its
            # NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD exist "since 2.4.8" (NCCL docs).
            "nccl_socket_threads": 1, "nccl_nsocks_perthread": 1,
        })
    return pd.DataFrame(out)


# ddl-benchmarks network column -> (srift network class, what it is).
DDL_NETWORKS = {
    "ethernet-10g-tcp": "ethernet",
    "infiniband": "infiniband",
    "ethernet-100g-tcp (IPoIB, NCCL_IB_DISABLE=1)": "ethernet",
}
# Its model column -> (zoo profile, the Hugging Face class it ran: BertForPreTraining for the BERTs).
DDL_MODELS = {"resnet50": "resnet50", "bert-base": "bert-base", "bert-large": "bert-large"}


def load_ddl(data_dir: Path) -> pd.DataFrame:
    """ddl-benchmarks' MG-WFBP rows: ResNet-50 and BERT-base/large (BertForPreTraining, sequence
    64) in fp32 on 1-8 servers of 4 RTX 2080 Ti (PCIe 3, no peer-to-peer), synthetic data.

    Columns as ``load_rows`` plus ``nodes``, ``gpus_per_node``, ``network`` (srift class:
    ``ethernet`` = NCCL over TCP sockets, also for the 100 Gb/s IPoIB rows that disable NCCL's IB
    transport; ``infiniband``), ``network_gbps``, ``network_label`` (the source's) and
    ``data_loading`` (``synthetic``). On premises: NCCL's generic socket defaults (one thread, one
    socket) and no per-flow limit. One-server rows have no network (``network`` is empty).
    Precision ``fp32`` on Turing is full FP32 (no TF32 units).
    """
    df = pd.read_csv(Path(data_dir) / "ddl-benchmarks" / "mgwfbp-throughput.csv")
    out = []
    for _, r in df.iterrows():
        model = DDL_MODELS[str(r["model"])]
        nodes, per_node = int(r["nodes"]), int(r["gpus_per_node"])
        n = nodes * per_node
        b = int(r["batch_per_gpu"])
        total = float(r["throughput_samples_per_s_total"])
        label = "" if pd.isna(r["network"]) else str(r["network"])
        seq = None if pd.isna(r["seq_len"]) else int(r["seq_len"])
        out.append({
            "source": "ddl-benchmarks/mgwfbp", "dataset_model": str(r["model"]), "model": model, "seq_len": seq,
            "label": f"{nodes}x 4x RTX 2080 Ti {label or 'one server'}".strip(), "gpu": find_gpu(str(r["gpu"])),
            "n_gpus": n, "precision": "fp32", "batch_per_gpu": b, "throughput_total": total,
            "iteration_time_s": b * n / total, "nodes": nodes, "gpus_per_node": per_node, "intra_node": "pcie3",
            "network": DDL_NETWORKS[label] if label else "", "network_gbps": float(r["network_gbps"]) if label else 0.0,
            "network_label": label, "data_loading": "synthetic", "torch_version": "1.4",  # README: PyTorch 1.4
        })
    return pd.DataFrame(out)


def ddl_scaling_rows(data_dir: Path, one_server: bool = False) -> pd.DataFrame:
    """ddl-benchmarks' multi-node rows (and with ``one_server`` the 4-GPU one-server rows) with
    their job's measured 1-GPU time (``t1``) and one-server time (``ref_time_s``): what the network
    and interference fits compare with (srift.fitting.comm_fit)."""
    ddl = load_ddl(data_dir)
    one_gpu = ddl[ddl["n_gpus"] == 1].set_index("model")["iteration_time_s"]
    servers = ddl[(ddl["nodes"] == 1) & (ddl["n_gpus"] > 1)].set_index("model")["iteration_time_s"]
    multi = ddl[(ddl["n_gpus"] > 1) if one_server else (ddl["nodes"] > 1)].reset_index(drop=True)
    return multi.assign(t1=multi["model"].map(one_gpu).to_numpy(), ref_time_s=multi["model"].map(servers).to_numpy())


# What a row's model ran beyond the zoo's profile: the masked-LM head's layers, which BERT
# pre-training in NVIDIA DeepLearningExamples runs on the masked positions only (``head_positions``).
MLM_HEAD_LAYERS: dict[str, tuple[str, ...]] = {"bert-base": ("cls_transform", "cls_act", "cls_ln", "cls_decoder"),
                                               "bert-large": ("cls_transform", "cls_act", "cls_ln", "cls_decoder")}
# dlperf-v100-ib's model column -> zoo model; its README: "DLE computes the MLM head only on the masked
# positions" (max 20 of 128 per sequence).
DLPERF_MODELS = {"resnet50": "resnet50", "bert-base": "bert-base"}
DLPERF_MLM_POSITIONS = 20
# NVIDIA DLE BERT pre-training (run_pretraining.py) all-reduces the whole gradient once, after
# backward: apex DDP with message_size=250000000 elements (one bucket for BERT-base's 110M
# gradients), or, with --allreduce_post_accumulation (run_pretraining.sh's default), one flat
# torch.distributed.all_reduce before the optimizer step. Under apex AMP O2 the gradients are fp16
# (and --allreduce_post_accumulation_fp16, also the script's default, reduces them in fp16).
DLE_BERT_MESSAGE_ELEMENTS = 250_000_000


def dle_bert_allreduce(precision: str) -> dict[str, Any]:
    """How DLE BERT pre-training all-reduces its gradients (``DLE_BERT_MESSAGE_ELEMENTS``), as a
    row's ``bucket_cap_mb`` (one bucket: 250M elements of fp32) and ``grad_compression`` (the
    Job's: fp16 on the wire under AMP, as ``--allreduce_post_accumulation_fp16`` reduces)."""
    return {"bucket_cap_mb": DLE_BERT_MESSAGE_ELEMENTS * 4 / 2**20, "grad_compression": "fp16" if precision == AMP else "none"}


def load_dlperf(data_dir: Path) -> pd.DataFrame:
    """dlperf-v100-ib rows: NVIDIA DeepLearningExamples' ResNet-50 v1.5 (real ImageNet through DALI)
    and BERT-base pre-training (sequence 128, masked-LM head on at most 20 positions) in PyTorch DDP
    on 1, 4 and 8 V100-SXM2-16GB of one node and 2-4 such nodes over 100 Gb/s EDR InfiniBand (NCCL's
    IB transport), as ``load_ddl``'s columns: ``nodes``, ``gpus_per_node``, ``network``
    (``infiniband``; empty on one node), ``network_gbps``, ``network_label``, ``intra_node``
    (``nvlink``: the hybrid cube mesh), ``data_loading`` (``images`` for ResNet-50, whose JPEGs are
    decoded on the CPUs, ``synthetic`` otherwise; the hosts' CPU count is not stated, so no input
    bound applies) and ``head_positions``. Rows of one job (model, precision, batch, loss scale) share
    a ``job`` key.
    """
    path = Path(data_dir) / "dlperf-v100-ib" / "dlperf-pytorch-dle.csv"
    df = pd.read_csv(path)
    out = []
    for _, r in df.iterrows():
        model = DLPERF_MODELS[str(r["model"]).split(" ")[0]]
        nodes, per_node = int(r["nodes"]), int(r["gpus_per_node"])
        n, b = nodes * per_node, int(r["batch_size_per_gpu"])
        total = float(r["samples_per_s_total"])
        seq = None if pd.isna(r["seq_len"]) else int(r["seq_len"])
        precision = str(r["precision"])
        multi = nodes > 1
        out.append({
            "source": "dlperf-v100-ib/dle", "dataset_model": str(r["model"]), "model": model, "seq_len": seq,
            "label": f"{nodes}x {per_node}x V100 SXM2 {'EDR InfiniBand' if multi else 'one node'}",
            "gpu": find_gpu(str(r["gpu"])), "n_gpus": n, "precision": precision, "batch_per_gpu": b,
            "throughput_total": total, "iteration_time_s": b * n / total, "nodes": nodes, "gpus_per_node": per_node,
            "torch_version": "1.5.0",  # README: NGC 20.03, PyTorch 1.5.0a0
            "intra_node": "nvlink", "network": "infiniband" if multi else "", "network_gbps": 100.0 if multi else 0.0,
            "network_label": "infiniband-edr" if multi else "", "data_loading": "images" if model == "resnet50" else "synthetic",
            "head_positions": DLPERF_MLM_POSITIONS if model in MLM_HEAD_LAYERS else None,
            **(dle_bert_allreduce(precision) if model in MLM_HEAD_LAYERS else {}),
            "job": f"{model}/{precision}/{b}/{r['section']}",
        })
    return pd.DataFrame(out)


def dlperf_scaling_rows(data_dir: Path, one_server: bool = False) -> pd.DataFrame:
    """dlperf-v100-ib's multi-node rows (with ``one_server`` its one-node multi-GPU rows too) with
    each job's measured 1-GPU time (``t1``) and one-node 8-GPU time (``ref_time_s``), as
    ``ddl_scaling_rows``."""
    rows = load_dlperf(data_dir)
    one_gpu = rows[rows["n_gpus"] == 1].set_index("job")["iteration_time_s"]
    node = rows[(rows["nodes"] == 1) & (rows["n_gpus"] == rows["gpus_per_node"].max())].set_index("job")["iteration_time_s"]
    multi = rows[(rows["n_gpus"] > 1) if one_server else (rows["nodes"] > 1)].reset_index(drop=True)
    return multi.assign(t1=multi["job"].map(one_gpu).to_numpy(), ref_time_s=multi["job"].map(node).to_numpy())


# csc-ddp: the clusters srift prices (LUMI's MI250X is not one) -> (GPU, intra-node link), and the
# rows of the source's plain DDP script. Links and the network are not stated in the source
# repository (data/csc-ddp/README.md): NVLink 3 between Mahti's 4 A100 SXM4, NVLink 2 between
# Puhti's 4 V100 SXM2, NCCL's InfiniBand transport at 200 Gb/s between nodes.
CSC_CLUSTERS = {"mahti": ("A100-40GB", "nvswitch"), "puhti": ("V100-32GB", "nvlink")}
CSC_DDP_LABELS = {"DDP, synthetic": FP32, "DDP, synthetic, fp16": AMP}
CSC_NETWORK_GBPS = 200.0
# csc-ddp's rows of the same ResNet-50 job under other stacks (data/csc-ddp/README.md: left out of
# the DDP groups): label -> (precision, stack); srift/fitting/stack_group.py predicts them under
# their stack (configs/stacks.yaml).
CSC_STACK_LABELS = {"DDP Lightning, synthetic": (FP32, "lightning"), "DeepSpeed, synthetic data": (FP32, "deepspeed")}


def load_csc(data_dir: Path, stacks: bool = False) -> pd.DataFrame:
    """csc-ddp rows: torchvision ResNet-50, 32 images per GPU, synthetic data, PyTorch DDP (fp32:
    PyTorch's default, srift's ``fp32``: TF32 convolutions and, from PyTorch 1.12 on, FP32 matmuls;
    PyTorch 1.11 ran matmuls in TF32 too, srift's ``tf32``; fp16: autocast + GradScaler, ``amp``) on
    1 and 4 GPUs of one node and 8 GPUs of two nodes (Mahti A100, Puhti V100; ``CSC_CLUSTERS``),
    one row per PyTorch build, GPU count and precision (the median of repeated rows), with a
    ``job`` key per cluster, build and precision, as ``load_dlperf``'s columns. ``stacks``: the
    rows of the other stacks instead (``CSC_STACK_LABELS``), each with its ``stack``."""
    labels = {k: v[0] for k, v in CSC_STACK_LABELS.items()} if stacks else CSC_DDP_LABELS
    df = pd.read_csv(Path(data_dir) / "csc-ddp" / "csc-ml-benchmarks-ddp.csv")
    df = df[df["cluster"].isin(list(CSC_CLUSTERS)) & df["benchmark_label"].isin(list(labels))
            & df["model"].str.startswith("resnet50") & df["total_gpus"].isin([1, 4, 8]) & df["value"].notna()]
    out = []
    for (cluster, build, label, n), g in df.groupby(["cluster", "framework", "benchmark_label", "total_gpus"]):
        gpu, link = CSC_CLUSTERS[str(cluster)]
        per_node, nodes = int(g["gpus_per_node"].iloc[0]), int(g["nodes"].iloc[0])
        total, b, precision = float(g["value"].median()), 32, labels[str(label)]
        if precision == FP32 and str(build).startswith("PyTorch 1.11"):
            precision = TF32
        multi = nodes > 1
        out.append({
            "source": "csc-ddp/ml-benchmarks", "dataset_model": "resnet50", "model": "resnet50", "seq_len": None,
            "label": f"{cluster} {nodes}x {min(int(n), per_node)}x {gpu} {build}", "gpu": gpu, "n_gpus": int(n),
            "precision": precision, "batch_per_gpu": b, "throughput_total": total, "iteration_time_s": b * int(n) / total,
            "nodes": nodes, "gpus_per_node": min(int(n), per_node), "intra_node": link,
            "network": "infiniband" if multi else "", "network_gbps": CSC_NETWORK_GBPS if multi else 0.0,
            "network_label": "infiniband-csc" if multi else "", "data_loading": "synthetic",
            "job": f"{cluster}/{build}/{precision}", "torch_version": str(build).removeprefix("PyTorch "),
            **({"stack": CSC_STACK_LABELS[str(label)][1]} if stacks else {}),
        })
    return pd.DataFrame(out)


def csc_scaling_rows(data_dir: Path, one_server: bool = False) -> pd.DataFrame:
    """csc-ddp's two-node rows (with ``one_server`` its 4-GPU rows too) with each job's measured
    1-GPU time (``t1``) and one-node 4-GPU time (``ref_time_s``), as ``ddl_scaling_rows``."""
    rows = load_csc(data_dir)
    one_gpu = rows[rows["n_gpus"] == 1].set_index("job")["iteration_time_s"]
    node = rows[(rows["nodes"] == 1) & (rows["n_gpus"] == 4)].set_index("job")["iteration_time_s"]
    multi = rows[(rows["n_gpus"] > 1) if one_server else (rows["nodes"] > 1)]
    multi = multi[multi["job"].isin(one_gpu.index) & multi["job"].isin(node.index)].reset_index(drop=True)
    return multi.assign(t1=multi["job"].map(one_gpu).to_numpy(), ref_time_s=multi["job"].map(node).to_numpy())


def multi_node_scaling_rows(data_dir: Path, one_server: bool = False) -> pd.DataFrame:
    """Every multi-node source whose jobs were also measured on one GPU and one node (ddl-benchmarks,
    dlperf-v100-ib, csc-ddp), with ``t1`` and ``ref_time_s``: what the network fit compares with
    (``srift.fitting.comm_fit.fit_ddl_networks``). Sources without those (DAWNBench) are in no fit."""
    return pd.concat([ddl_scaling_rows(data_dir, one_server), dlperf_scaling_rows(data_dir, one_server),
                      csc_scaling_rows(data_dir, one_server)], ignore_index=True)


NCCL_COLUMNS = ["source", "nodes", "gpus_per_node", "intra_node", "network_gbps", "network", "size_bytes", "time_s"]


def load_nccl(data_dir: Path) -> pd.DataFrame:
    """All-reduce (size, time) rows: nccl-tests-aws (p4de, p5; EFA) and SuperBench nccl-bw
    (Azure NDv4 A100 8 GPUs over NVSwitch; the 2-GPU V100 box, whose 11.7 GB/s peak bus bandwidth
    is a PCIe 3 figure). Rows under 1 KiB are dropped (latency-only, noisy)."""
    out = []
    df = pd.read_csv(Path(data_dir) / "nccl-tests-aws" / "allreduce_awsome_distributed_training.csv")
    for _, r in df.iterrows():
        if str(r["nranks"]) == "?" or str(r["nodes"]) == "?":
            continue
        inst = get_instance(str(r["instance_type"]), "us-east-1")
        nodes, ranks = int(r["nodes"]), int(r["nranks"])
        size = float(r["size_bytes"])
        if size < 1024:
            continue
        out.append({"source": f"nccl-tests-aws/{r['instance_type']}/block{r['block']}", "nodes": nodes,
                    "gpus_per_node": ranks // nodes, "intra_node": inst.intra_node,
                    "network_gbps": inst.network_gbps, "network": "efa" if inst.efa else "ethernet",
                    "size_bytes": size, "time_s": float(r["oop_time_us"]) * 1e-6})
    sb = pd.read_csv(Path(data_dir) / "superbench-results" / "all_metrics_flat.csv")
    sb = sb[sb["benchmark"] == "nccl-bw"]
    pat = re.compile(r"nccl-bw/allreduce_(\d+)_time")
    setups = {"Azure-NDv4-A100": (8, "nvswitch"), "Azure-NDmv4-A100": (8, "nvswitch"), "V100": (2, "pcie3")}
    for _, r in sb.iterrows():
        m = pat.match(str(r["metric"]))
        plat = str(r["platform"])
        if not m or plat not in setups:
            continue
        size = float(m.group(1))
        if size < 1024:
            continue
        g, link = setups[plat]
        out.append({"source": f"superbench/{r['superbench_version']}/{plat}", "nodes": 1, "gpus_per_node": g,
                    "intra_node": link, "network_gbps": 0.0, "network": "ethernet", "size_bytes": size,
                    "time_s": float(r["value"]) * 1e-6})
    return pd.DataFrame(out, columns=NCCL_COLUMNS)


def p3dn_issue_rows() -> pd.DataFrame:
    """The 2x p3dn.24xlarge (100 Gb/s, early EFA) all-reduce figures quoted in the nccl-tests-aws
    README (aws-ofi-nccl #33: bus bandwidth at 1/2/4 MiB; nccl-tests #22: 1 GB ring in 268 ms),
    converted to times with busbw = algbw * 2(n-1)/n, n = 16. Used for the plain-ethernet class
    (the slowest AWS multi-node figures on record; srift has no TCP-only NCCL measurement)."""
    n = 16
    factor = 2 * (n - 1) / n
    rows = [(2**20, 1.90), (2**21, 5.86), (2**22, 6.90)]
    out = [{"source": "nccl-tests-aws README (p3dn issues)", "nodes": 2, "gpus_per_node": 8, "intra_node": "nvlink",
            "network_gbps": 100.0, "network": "ethernet", "size_bytes": float(s), "time_s": s * factor / (bw * 1e9)}
           for s, bw in rows]
    out.append({"source": "nccl-tests-aws README (p3dn issues)", "nodes": 2, "gpus_per_node": 8, "intra_node": "nvlink",
                "network_gbps": 100.0, "network": "ethernet", "size_bytes": 1e9, "time_s": 0.268})
    return pd.DataFrame(out, columns=NCCL_COLUMNS)


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


# SuperBench puts a small classifier on the bare GPT-2 decoder; the zoo's GPT-2 carries its LM head
# (a 50257-way projection), which is dropped for the comparison (the classifier is < 0.01% of the
# FLOPs and is left out). SuperBench's BERTs map to the zoo's bert-*-squad (encoder, 2-way head).
PRETRAINING_HEADS: dict[str, tuple[str, ...]] = {"gpt2": ("lm_head",)}


def without_pretraining_head(profile: Profile, model: str) -> Profile:
    """The profile minus its pre-training/LM head layers (see PRETRAINING_HEADS)."""
    prefixes = PRETRAINING_HEADS.get(model)
    if not prefixes:
        return profile
    keep = [l for l in profile.layers if not l.name.split(".")[-1].startswith(prefixes) and not l.name.startswith(prefixes)]
    if len(keep) == len(profile.layers):
        return profile
    return dataclasses.replace(profile, layers=keep, notes=profile.notes + [f"dropped pre-training head layers {prefixes}"])


def masked_head(profile: Profile, model: str, share: float) -> Profile:
    """``profile`` with the masked-LM head's layers (``MLM_HEAD_LAYERS``) doing ``share`` of their
    per-token work: FLOPs, moved and activation bytes; the weights' gradients stay whole."""
    names = MLM_HEAD_LAYERS.get(model, ())
    if not names or share >= 1.0:
        return profile

    def part(total: float, fixed: float) -> float:
        keep = min(total, fixed)
        return (total - keep) * share + keep

    layers = [dataclasses.replace(l, fwd_flops=l.fwd_flops * share, bwd_flops=l.bwd_flops * share,
                                  fwd_bytes=part(l.fwd_bytes, l.grad_bytes), bwd_bytes=part(l.bwd_bytes, 2.0 * l.grad_bytes),
                                  activation_bytes=l.activation_bytes * share)
              if l.name.split(".")[-1] in names else l for l in profile.layers]
    return dataclasses.replace(profile, layers=layers, notes=profile.notes + [f"masked-LM head on {share:.0%} of positions"])


class ProfileSource:
    """Structural profiles of the mapped models at any (batch, seq_len), cached; the measured
    runs' models have no pre-training head, so it is dropped (``without_pretraining_head``)."""

    def __init__(self, loader: Callable[[str, int, int | None], Profile]) -> None:
        self._loader = loader
        self._cache: dict[tuple[str, int, int | None, bool], Profile] = {}
        self._masked: dict[tuple[str, int, int, float, str | None], Profile] = {}
        self._torch: dict[tuple[int, str], Profile] = {}

    def get(self, model: str, batch: int, seq_len: int | None, keep_head: bool = False) -> Profile:
        key = (model, batch, seq_len, keep_head)
        if key not in self._cache:
            p = self._loader(model, batch, seq_len)
            self._cache[key] = p if keep_head else without_pretraining_head(p, model)
        return self._cache[key]

    def _with_torch(self, profile: Profile, version: object) -> Profile:
        """The profile as run on the row's stated PyTorch (``torch_version``; unstated: as it is)."""
        if not isinstance(version, str) or not version:
            return profile
        key = (id(profile), version)
        if key not in self._torch:
            self._torch[key] = dataclasses.replace(profile, framework={**profile.framework, "torch": version})
        return self._torch[key]

    def for_row(self, r) -> Profile:
        """The profile of a measured row (its model, micro-batch, sequence length, head; a row's
        ``head_positions`` runs the masked-LM head on that many positions per sequence only)."""
        seq = getattr(r, "seq_len", None)
        head = getattr(r, "head", None)
        seq_len = None if seq is None or pd.isna(seq) else int(seq)
        profile = self.get(r.model, int(r.batch_per_gpu), seq_len, keep_head=isinstance(head, str) and head == "pretraining")
        profile = self._with_torch(profile, getattr(r, "torch_version", None))
        positions = getattr(r, "head_positions", None)
        if positions is None or pd.isna(positions) or not seq_len:
            return profile
        key = (r.model, int(r.batch_per_gpu), seq_len, float(positions), profile.framework.get("torch"))  # one object per case
        if key not in self._masked:
            self._masked[key] = masked_head(profile, r.model, float(positions) / seq_len)
        return self._masked[key]
