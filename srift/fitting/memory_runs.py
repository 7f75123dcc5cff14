"""Every shared run whose model, per-GPU batch and GPU are known, with srift's memory prediction;
the caching allocator's fit on the runs that published their peak (offline: pandas; used by
scripts/validate_memory.py and tests).

A run that people ran fits its GPU: predicting ``does not fit`` for one is a false refusal. Sources
(data/, each folder's README names its origin): Lambda's ``*-bs-*`` batch sizes (ResNet-50,
BERT SQuAD; 1-16 GPUs), NVIDIA DeepLearningExamples' BERT-large SQuAD tables, DLPerf (NVIDIA's
ResNet-50 and BERT-base recipes on 16 GB V100s), ddl-benchmarks (RTX 2080 Ti), DAWNBench (fast.ai
on p3.16xlarge), and the PyTorch FSDP rows of llm-training-throughput (llm-foundry, torchtitan,
torchao, NeMo AutoModel) that srift can lay out: data parallel only (no tensor, pipeline or
context parallelism), a zoo model, an NVIDIA GPU. FP8 and torch.compile rows are predicted as
eager bf16 (FP8 training keeps bf16 weights and gradients; compilation saves memory, so the
prediction is an upper bound there). What is not modelled is listed with the reason
(``skipped_runs``): LoRA/QLoRA and pure-bf16 fine-tuning (LitGPT), Megatron/NeMo layouts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from srift.fitting import datasets, sharded
from srift.hardware import gpu as gpu_spec
from srift.job import AMP, BF16, DDP, HSDP
from srift.simulate.memory import ALLOCATOR_FIXED_BYTES, allocated_parts, fit_state, memory_breakdown_bytes, sharded_memory_bytes
from srift.zoo import load_builtin_profile

RUN_COLUMNS = ["source", "model", "seq_len", "gpu", "capacity_gib", "n_gpus", "precision", "batch_per_gpu",
               "parallelism", "checkpointing", "reduce_dtype", "fused_loss", "meas_peak_gib", "flags"]
# The LLM table's GPU labels -> srift GPU and its memory (GiB, as configs/gpus.yaml counts it). Meta's
# H100 with 96 GB of HBM2e is not a catalog GPU: torchtitan's README states its memory.
LLM_GPUS = {"a100_40gb": ("A100-40GB", None), "a100_80gb": ("A100-80GB", None), "h100_80gb": ("H100", None),
            "h100": ("H100", None), "h200": ("H200", None), "h100_hbm2e_meta": ("H100", 96.0)}
DLPERF = Path("dlperf-v100-ib") / "dlperf-pytorch-dle.csv"
DLPERF_MODELS = {"resnet50": ("resnet50", None), "bert-base": ("bert-base", 128)}


def _run(source: str, model: str, seq: int | None, gpu: str, n: int, precision: str, batch: int,
         capacity: float | None = None, **more) -> dict:
    row = {"source": source, "model": model, "seq_len": seq, "gpu": gpu,
           "capacity_gib": capacity if capacity is not None else gpu_spec(gpu).memory_gib, "n_gpus": n,
           "precision": precision, "batch_per_gpu": batch, "parallelism": "ddp", "checkpointing": "none",
           "reduce_dtype": "fp32", "fused_loss": False, "meas_peak_gib": np.nan, "flags": ""}
    row.update(more)
    return row


def _source_name(source: str) -> str:
    return source.split("/")[0]


def ddp_runs(data: Path) -> pd.DataFrame:
    """The zoo-model runs: Lambda, NVIDIA DLE, ddl-benchmarks, DAWNBench and DLPerf (one row per
    distinct model, GPU, precision and per-GPU batch: memory does not depend on the GPU count)."""
    out = []
    frames = [datasets.load_rows(data), datasets.load_ddl(data), datasets.load_dawnbench_multinode(data)]
    for df in frames:
        for r in df.itertuples():
            if r.gpu is None or pd.isna(r.gpu):
                continue
            seq = None if pd.isna(r.seq_len) else int(r.seq_len)
            out.append(_run(_source_name(str(r.source)), str(r.model), seq, str(r.gpu), int(r.n_gpus), str(r.precision),
                            int(r.batch_per_gpu)))
    path = Path(data) / DLPERF
    if path.is_file():
        for r in pd.read_csv(path).itertuples():
            model, seq = DLPERF_MODELS[str(r.model).split(" ")[0]]
            out.append(_run("dlperf", model, seq, "V100-16GB", int(r.gpus_total), "amp" if r.precision == AMP else "fp32",
                            int(r.batch_size_per_gpu)))
    runs = pd.DataFrame(out, columns=RUN_COLUMNS)
    runs = runs.assign(one_gpu=runs["n_gpus"] == 1)  # one GPU runs without DDP's gradient buckets
    return runs.drop_duplicates(subset=["source", "model", "seq_len", "gpu", "precision", "batch_per_gpu", "one_gpu"]).drop(
        columns="one_gpu").reset_index(drop=True)


def llm_runs(data: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The PyTorch FSDP runs of llm-training-throughput srift can lay out, and those it cannot
    (``source``, ``model``, ``reason``)."""
    kept, skipped = [], []
    for r, why in sharded.fsdp_records(data, _llm_reason):
        if why:
            skipped.append({"source": r["source_id"], "model": r["model_name"], "reason": why})
            continue
        gpu, capacity = LLM_GPUS[r["gpu_type"]]
        flags = ",".join(f for f, on in (("fp8", r["precision"] != BF16), ("compiled", r["torch_compile"].startswith("yes")))
                         if on)
        kept.append(_run(
            r["source_id"], str(sharded._model(r)), int(r["seq_len"]), gpu, int(r["n_gpus"]), "bf16",
            int(float(r["micro_batch_size"] or r["local_batch_size"])), capacity,
            parallelism=sharded.STRATEGIES[r["sharding_strategy"].split(" ")[0]],
            checkpointing=sharded.CHECKPOINTING[r["activation_checkpointing"]],
            reduce_dtype="bf16" if r["mixed_precision_mode"] == "PURE" else "fp32",
            fused_loss=r["source_id"].startswith("llmfoundry"),
            meas_peak_gib=float(r["meas_peak_mem_gib"]) if r["meas_peak_mem_gib"] else np.nan, flags=flags))
    return pd.DataFrame(kept, columns=RUN_COLUMNS), pd.DataFrame(skipped, columns=["source", "model", "reason"])


def _llm_reason(r: dict[str, str]) -> str:
    """Why an FSDP row is not predicted, or "" when it is."""
    if r["training_type"] != "pretrain":
        return "LoRA fine-tuning (not modelled)"
    if any(sharded._num(r[k]) != 1.0 for k in ("tp_degree", "pp_degree", "cp_degree") if r[k]):
        return "tensor/pipeline/context parallel (not modelled)"
    if r["activation_cpu_offload"] == "True":
        return "activation CPU offload (not modelled)"
    if r["gpu_type"] not in LLM_GPUS:
        return f"GPU {r['gpu_type']} (not an NVIDIA GPU srift knows)"
    if sharded._model(r) is None:
        return f"model {r['model_name']} not in the zoo"
    if r["sharding_strategy"].split(" ")[0] not in sharded.STRATEGIES or r["activation_checkpointing"] not in sharded.CHECKPOINTING:
        return "sharding or checkpointing not stated"
    if not (r["micro_batch_size"] or r["local_batch_size"]):
        return "no per-GPU batch"
    return ""


def skipped_finetuning(data: Path) -> pd.DataFrame:
    """The fine-tuning tables' runs (data/finetuning), none of which srift lays out yet: LitGPT's
    LoRA, QLoRA and pure-bf16 full fine-tuning, NeMo's Megatron layouts and PEFT LoRA."""
    out = []
    for name in ("litgpt-finetune-a10g.csv", "dgxc-benchmarking-h100-finetune.csv"):
        path = Path(data) / "finetuning" / name
        if not path.is_file():
            continue
        for r in pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records"):
            kind = r["training_type"]
            why = ("pure-bf16 full fine-tuning (bf16 weights and optimizer states; not modelled)" if kind == "sft_full_finetune"
                   and r["framework"].startswith("LitGPT") else f"{kind} with {r['framework'].split(' (')[0]} (not modelled)")
            out.append({"source": r["source_slug"], "model": r["model"], "reason": why})
    return pd.DataFrame(out, columns=["source", "model", "reason"]).drop_duplicates().reset_index(drop=True)


def predicted_breakdown(r) -> dict[str, float]:
    """srift's memory breakdown (bytes, allocator included) of one run (a RUN_COLUMNS row)."""
    seq = None if r.seq_len is None or pd.isna(r.seq_len) else int(r.seq_len)
    if r.parallelism == DDP and not r.source.startswith(sharded.FSDP_SOURCES):
        prof = load_builtin_profile(r.model, batch_size=int(r.batch_per_gpu), seq_len=seq, precision=r.precision)
        return memory_breakdown_bytes(prof, r.precision, buckets=int(r.n_gpus) > 1)
    prof = sharded._profile(r.model, int(seq or 0), int(r.batch_per_gpu))
    n = int(r.n_gpus)
    shard = min(n, sharded.GPUS_PER_NODE) if r.parallelism == HSDP else n
    return sharded_memory_bytes(prof, "bf16", r.parallelism, r.checkpointing, shard, r.reduce_dtype, bool(r.fused_loss))


def predict_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with ``allocated_gib``, ``reserved_gib`` (predicted peak) and ``state`` (fit_state)."""
    alloc, reserved, state = [], [], []
    for r in runs.itertuples():
        m = predicted_breakdown(r)
        total = sum(m.values())
        alloc.append(sum(allocated_parts(m).values()) / 2**30)
        reserved.append(total / 2**30)
        state.append(fit_state(total, float(r.capacity_gib)))
    return runs.assign(allocated_gib=alloc, reserved_gib=reserved, state=state)


def fit_allocator(allocated_gib: np.ndarray, reserved_gib: np.ndarray,
                  fixed_gib: float = ALLOCATOR_FIXED_BYTES / 2**30, floor: float = 1.0) -> float:
    """The ``factor`` of ``reserved = factor x allocated + fixed`` (``fixed`` given: the measured
    peaks are all tens of GiB, which cannot tell it apart) that minimises the squared relative
    error over measured peaks; at least ``floor`` (1: the allocator never reserves less than it
    allocates; a fit below 1 says the allocated memory is over-predicted, e.g. for compiled runs)."""
    a = np.asarray(allocated_gib, dtype=float) / np.asarray(reserved_gib, dtype=float)
    c = fixed_gib / np.asarray(reserved_gib, dtype=float)
    return max(floor, float(np.sum(a * (1.0 - c)) / np.sum(a * a)))


def leave_one_source_out(runs: pd.DataFrame) -> np.ndarray:
    """Predicted reserved GiB of each measured run with the allocator fitted without its source."""
    out = np.empty(len(runs))
    src = runs["source"].to_numpy()
    a, r = runs["allocated_gib"].to_numpy(float), runs["meas_peak_gib"].to_numpy(float)
    for s in np.unique(src):
        train = src != s
        out[~train] = fit_allocator(a[train], r[train]) * a[~train] + ALLOCATOR_FIXED_BYTES / 2**30
    return out
