"""The multi-node data-parallel measurements, as rows (offline: pandas): DAWNBench's ImageNet runs
(``load_dawnbench_multinode``, validation only), ddl-benchmarks (``load_ddl``), dlperf-v100-ib
(``load_dlperf``) and csc-ddp (``load_csc``), and each source's scaling rows with the same job's
1-GPU and one-node times (``*_scaling_rows``, ``multi_node_scaling_rows``): what the network fit
compares with. srift/fitting/datasets.py describes every source and re-exports every name here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from srift.hardware import find_gpu
from srift.job import AMP, FP32, TF32

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
