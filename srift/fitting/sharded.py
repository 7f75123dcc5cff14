"""Sharded LLM training measurements (data/llm-training-throughput) as rows srift can predict,
and their predictions (offline: pandas; used by scripts/validate.py, scripts/fit_models.py and
tests).

Rows kept: PyTorch FSDP pretraining in bf16, data parallel only (no tensor, pipeline or context
parallelism), eager (no torch.compile), no activation CPU offload, on a GPU configs/gpus.yaml
describes, of a model the zoo has. In practice these are llm-foundry's MPT tables (FSDP1
FULL_SHARD / SHARD_GRAD_OP, 125M to 70B, A100-40GB, A100-80GB, H100-80GB, 8 to 512 GPUs); the
torchtitan / torchao / NeMo AutoModel rows fall out on one of the rules (``excluded`` says which).

How a row becomes a job (each choice is the source's, where it states one):

- model: the zoo's MPT shape with ``max_seq_len`` = the row's sequence length (llm-foundry's
  NumParams counts a learned position table of that many rows; tests/test_zoo_llm.py reproduces
  it); Llama 3 / 3.1 8B and 70B as the zoo's llama3-8b / llama3-70b (same shapes).
- batch: ``micro_batch_size`` sequences per GPU per micro-batch, ``grad_accum`` micro-batches per
  optimizer step (every row has ``global = micro x accum x GPUs``); FSDP reduce-scatters each
  micro-batch (Composer does not use ``no_sync`` with FSDP).
- parallelism: FULL_SHARD -> ``fsdp``, SHARD_GRAD_OP -> ``zero2``; activation checkpointing as
  stated (llm-foundry checkpoints whole blocks: ``full``).
- precision ``bf16`` (FSDP MixedPrecision param_dtype bf16 in every row: Composer's DEFAULT in the
  torch 2.1 images and PURE); gradients reduced in fp32 under DEFAULT, bf16 under PURE (the
  README's Composer semantics; every DEFAULT row here is from the torch 2.1 era).
- GPUs: a100_40gb -> A100-40GB, a100_80gb -> A100-80GB, h100_80gb / h100 -> H100 (SXM); 8 per node
  (the README: assumed by the source); NVSwitch within a node (A100: NVLink 3, H100: NVLink 4).
- network: the A100 tables state 1600 Gbps RoCE; the H100 tables state nothing, and srift assumes
  3200 Gbps (8 x 400 Gb/s, the HGX H100 reference design that MosaicML's H100 clusters follow).
  Both are RDMA, priced with srift's ``infiniband`` class (``NETWORK_CLASS``: the one place to
  change when a RoCE class exists).
- loss: llm-foundry's MPT computes it with flash-attn's fused cross-entropy (its ``loss_fn``
  default, ``fused_crossentropy``): ``Job.fused_loss`` (memory only).
- measured: tokens per second per GPU (``derived_tokens_per_sec_per_gpu``, the source's T/s/GPU).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd

from scipy.optimize import least_squares

from srift.cluster import INFINIBAND, Cluster, NodeGroup
from srift.job import BF16, Auto, Checkpointing, Job, Parallelism
from srift.perf import compute
from srift.perf.compute import LlmKernelParams
from srift.profile import Profile
from srift.simulate import Predictor
from srift.simulate.breakdown import BACKWARD, FORWARD, RECOMPUTE
from srift.simulate.prediction import Prediction
from srift.zoo import llm_arch
from srift.zoo.llm import decoder_profile, model_flops_per_token, zoo_llms

CSV = Path("llm-training-throughput") / "llm-training-throughput.csv"
GPUS = {"a100_40gb": "A100-40GB", "a100_80gb": "A100-80GB", "h100_80gb": "H100", "h100": "H100"}
LINKS = {"A100-40GB": "nvswitch", "A100-80GB": "nvswitch", "H100": "nvswitch4"}
NETWORK_GBPS = {"A100-40GB": 1600.0, "A100-80GB": 1600.0, "H100": 3200.0}
NETWORK_CLASS: Final = INFINIBAND
GPUS_PER_NODE = 8
FSDP_SOURCES = ("llmfoundry", "torchtitan", "torchao", "nemo")  # the CSV's PyTorch FSDP sources (source_id prefixes)
STRATEGIES = {"FULL_SHARD": "fsdp", "SHARD_GRAD_OP": "zero2", "FSDP2": "fsdp"}
CHECKPOINTING = {"none": "none", "full": "full", "selective_op": "selective", "selective": "selective"}
LLAMA = {"llama 3.1 8b": "llama3-8b", "llama3-8b": "llama3-8b", "llama 3 8b": "llama3-8b", "llama3 8b": "llama3-8b",
         "llama 3.1 70b": "llama3-70b", "llama 3 70b": "llama3-70b", "llama3 70b": "llama3-70b"}

COLUMNS = ["row_id", "source", "model", "size_b", "gpu", "n_gpus", "nodes", "seq_len", "micro_batch", "grad_accum",
           "parallelism", "checkpointing", "reduce_dtype", "tokens_per_s_per_gpu", "meas_mfu_pct"]


def _num(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return float("nan")


def _reason(r: dict[str, str]) -> str:
    """Why a row is left out, or "" when it is kept."""
    if r["training_type"] != "pretrain":
        return "not pretraining (LoRA)"
    if r["precision"] != BF16:
        return "not bf16 (fp8)"
    if any(_num(r[k]) not in (1.0,) for k in ("tp_degree", "pp_degree", "cp_degree") if r[k]):
        return "tensor/pipeline/context parallel"
    if r["torch_compile"].startswith("yes"):
        return "torch.compile (srift models eager PyTorch)"
    if r["activation_cpu_offload"] == "True":
        return "activation CPU offload"
    if r["gpu_type"] not in GPUS:
        return f"GPU {r['gpu_type']} not in configs/gpus.yaml"
    if "suspect_outlier" in r["quality_flags"]:
        return "flagged suspect outlier by the data's README"
    if _model(r) is None:
        return f"model {r['model_name']} not in the zoo"
    strategy = r["sharding_strategy"].split(" ")[0]
    if strategy not in STRATEGIES or r["activation_checkpointing"] not in CHECKPOINTING:
        return "sharding or checkpointing not mapped"
    if not r["micro_batch_size"] or not r["derived_tokens_per_sec_per_gpu"]:
        return "no micro-batch or no tokens/s"
    return ""


def _model(r: dict[str, str]) -> str | None:
    name = r["model_name"].strip().lower()
    if name in zoo_llms():
        return name
    return LLAMA.get(name)


def fsdp_records(data: Path, reason: Callable[[dict[str, str]], str]) -> Iterator[tuple[dict[str, str], str]]:
    """Each PyTorch FSDP run of the CSV (its columns as text) with why ``reason`` leaves it out ("" when kept).

    Raises:
        FileNotFoundError: when the CSV is not under ``data``.
    """
    table = pd.read_csv(Path(data) / CSV, dtype=str, keep_default_na=False)
    for r in table.to_dict("records"):
        if r["source_id"].startswith(FSDP_SOURCES):
            yield r, reason(r)


def load_rows(data: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The kept rows (COLUMNS) and the PyTorch-FSDP rows left out, with ``reason``.

    Raises:
        FileNotFoundError: when the CSV is not under ``data``.
    """
    kept, out = [], []
    for r, why in fsdp_records(data, _reason):
        if why:
            out.append({"row_id": int(r["row_id"]), "source": r["source_id"], "model": r["model_name"],
                        "gpu": r["gpu_type"], "reason": why})
            continue
        gpu = GPUS[r["gpu_type"]]
        n = int(r["n_gpus"])
        mb = int(float(r["micro_batch_size"]))
        accum = int(float(r["grad_accum"] or 1))
        mode = r["mixed_precision_mode"]
        kept.append({
            "row_id": int(r["row_id"]), "source": r["source_id"], "model": _model(r),
            "size_b": float(r["derived_params_billion_nominal"] or "nan"), "gpu": gpu, "n_gpus": n,
            "nodes": max(1, n // GPUS_PER_NODE), "seq_len": int(r["seq_len"]), "micro_batch": mb, "grad_accum": accum,
            "parallelism": STRATEGIES[r["sharding_strategy"].split(" ")[0]],
            "checkpointing": CHECKPOINTING[r["activation_checkpointing"]],
            "reduce_dtype": "bf16" if mode == "PURE" else "fp32",
            "tokens_per_s_per_gpu": float(r["derived_tokens_per_sec_per_gpu"]),
            "meas_mfu_pct": _num(r["meas_mfu"]) * (100.0 if r["meas_util_unit"] == "fraction" else 1.0),
        })
    return pd.DataFrame(kept, columns=COLUMNS), pd.DataFrame(out, columns=["row_id", "source", "model", "gpu", "reason"])


def row_cluster(gpu: str, n_gpus: int) -> Cluster:
    """The cluster of a row: nodes of 8 GPUs (fewer GPUs: one node of them)."""
    per = min(GPUS_PER_NODE, n_gpus)
    return Cluster(f"{n_gpus} x {gpu}", (NodeGroup(max(1, n_gpus // per), per, gpu, LINKS[gpu], NETWORK_GBPS[gpu],
                                                    NETWORK_CLASS),))


def row_arch(model: str, seq_len: int):  # -> DecoderArch
    """The zoo architecture of a row's model; MPT's learned position table has the run's length."""
    arch = llm_arch(model)
    return dataclasses.replace(arch, max_seq_len=seq_len) if arch.position == "learned" else arch


@functools.lru_cache(maxsize=1024)
def _profile(model: str, seq_len: int, micro_batch: int) -> Profile:
    return decoder_profile(row_arch(model, seq_len), batch_size=micro_batch, seq_len=seq_len, precision="bf16")


def predict_row(r, parallelism: Parallelism | Auto | None = None, checkpointing: Checkpointing | Auto | None = None) -> Prediction:
    """srift's prediction of one kept row (a namedtuple or Series of COLUMNS); ``parallelism`` and
    ``checkpointing`` replace the row's (e.g. ``auto``)."""
    arch = row_arch(r.model, int(r.seq_len))
    profile = _profile(r.model, int(r.seq_len), int(r.micro_batch))
    job = Job(batch_size=int(r.micro_batch), seq_len=int(r.seq_len), precision="bf16",
              parallelism=parallelism or r.parallelism, activation_checkpointing=checkpointing or r.checkpointing,
              grad_accum=int(r.grad_accum), reduce_dtype=r.reduce_dtype, fused_loss=r.source.startswith("llmfoundry"))
    flops = (lambda s, a=arch: model_flops_per_token(a, s))
    return Predictor(profile, job, model_flops_per_token=flops).predict(row_cluster(r.gpu, int(r.n_gpus)))


def predict_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Predictions of every kept row: ``pred`` (tokens/s per GPU), ``mfu_pct``, ``compute_s``
    (forward + backward + recompute per iteration), ``iteration_s``, ``memory_gib``, ``fits``."""
    out = []
    for r in rows.itertuples():
        p = predict_row(r)
        b = p.breakdown
        out.append({"pred": p.tokens_per_s_per_gpu, "mfu_pct": (p.mfu or np.nan) * 100.0,
                    "compute_s": b[FORWARD] + b[BACKWARD] + b.get(RECOMPUTE, 0.0),
                    "iteration_s": p.iteration_time_s, "memory_gib": p.memory_per_gpu_bytes / 2**30,
                    "fits": p.fits_in_memory})
    return pd.DataFrame(out, index=rows.index)


@contextmanager
def llm_params(params: LlmKernelParams) -> Iterator[None]:
    """Predict with ``params`` instead of the shipped configs/perf/sharded.json meanwhile."""
    shipped = compute.load_llm_params
    compute.load_llm_params = lambda path=None: params  # type: ignore[assignment]
    try:
        yield
    finally:
        compute.load_llm_params = shipped


# What predict_row reads of a row: equal keys, equal predictions.
_JOB_FIELDS = ("model", "seq_len", "micro_batch", "grad_accum", "parallelism", "checkpointing", "reduce_dtype", "source",
               "gpu", "n_gpus")
Memo = dict[tuple, float | None]


def predicted_tokens(rows: pd.DataFrame, params: LlmKernelParams, memo: Memo | None = None) -> np.ndarray:
    """Tokens/s per GPU of every row with ``params``; ``memo`` keeps each (row, params) prediction
    for the next call (the held-out fits start alike and some train on the same rows)."""
    memo = {} if memo is None else memo
    with llm_params(params):
        out = []
        for r in rows.itertuples():
            key = (params, *(getattr(r, f) for f in _JOB_FIELDS))
            if key not in memo:
                memo[key] = predict_row(r).tokens_per_s_per_gpu
            out.append(memo[key])
        return np.array(out, dtype=float)


# The fit's starting point and bounds: (fused_attention_efficiency, llm_matmul_factor).
_START = (0.3, 1.0)
_BOUNDS = ((0.05, 0.7), (0.8, 1.6))


def fit_llm_kernels(rows: pd.DataFrame, memo: Memo | None = None) -> tuple[LlmKernelParams, float]:
    """Fit ``fused_attention_efficiency`` and ``llm_matmul_factor`` (srift/perf/compute.py) to the
    rows' tokens/s per GPU: least squares on log(predicted / measured), every other part of srift
    as shipped (the compute fit, the communication model and its interference, the schedule).
    Returns the parameters and their in-fit MAPE (%)."""
    meas = rows["tokens_per_s_per_gpu"].to_numpy(float)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log(predicted_tokens(rows, LlmKernelParams(float(x[0]), float(x[1])), memo) / meas)

    lo, hi = zip(*_BOUNDS)
    sol = least_squares(residuals, _START, bounds=(lo, hi), diff_step=1e-3, xtol=1e-4, ftol=1e-6)
    params = LlmKernelParams(float(sol.x[0]), float(sol.x[1]))
    err = np.exp(sol.fun) - 1.0
    return params, float(np.mean(np.abs(err)) * 100.0)


def held_out(rows: pd.DataFrame, key: str, memo: Memo | None = None) -> np.ndarray:
    """Predictions of every row from the fit without the rows that share its ``key`` value
    (``memo``: see ``predicted_tokens``; one memo may serve several keys of the same rows)."""
    memo = {} if memo is None else memo
    out = np.full(len(rows), np.nan)
    for _, idx in rows.groupby(key).indices.items():
        train = rows.drop(index=rows.index[idx])
        params, _ = fit_llm_kernels(train, memo)
        out[idx] = predicted_tokens(rows.iloc[idx], params, memo)
    return out


MEMORY_COLUMNS = ["row_id", "source", "model", "gpu", "n_gpus", "seq_len", "micro_batch", "checkpointing", "compiled",
                  "meas_peak_gib"]


def load_memory_rows(data: Path) -> pd.DataFrame:
    """The rows that state peak memory per GPU and that srift can model (MEMORY_COLUMNS): PyTorch
    FSDP in bf16, data parallel only, a zoo model, an NVIDIA GPU (the GPU's speed does not enter;
    the ROCm rows' allocator behaves differently). torch.compile rows are kept (``compiled``:
    compilation fuses ops and saves some memory; srift models eager PyTorch). torchtitan reports
    the caching allocator's peak reserved memory."""
    table = pd.read_csv(Path(data) / CSV, dtype=str, keep_default_na=False)
    out = []
    for r in table.to_dict("records"):
        if not r["meas_peak_mem_gib"] or r["precision"] != BF16 or r["training_type"] != "pretrain":
            continue
        if any(_num(r[k]) != 1.0 for k in ("tp_degree", "pp_degree", "cp_degree") if r[k]):
            continue
        if not r["gpu_type"].startswith("h100") or _model(r) is None or r["activation_checkpointing"] not in CHECKPOINTING:
            continue
        out.append({"row_id": int(r["row_id"]), "source": r["source_id"], "model": _model(r), "gpu": r["gpu_type"],
                    "n_gpus": int(r["n_gpus"]), "seq_len": int(r["seq_len"]),
                    "micro_batch": int(float(r["local_batch_size"] or r["micro_batch_size"])),
                    "checkpointing": CHECKPOINTING[r["activation_checkpointing"]],
                    "compiled": r["torch_compile"].startswith("yes"), "meas_peak_gib": float(r["meas_peak_mem_gib"])})
    return pd.DataFrame(out, columns=MEMORY_COLUMNS)


def predicted_peak_gib(r) -> float:
    """srift's peak reserved memory per GPU of a memory row (FSDP, plain cross-entropy as
    torchtitan computes it): what torchtitan reports (the allocator's peak reserved memory)."""
    from srift.simulate.memory import sharded_memory_bytes

    profile = decoder_profile(row_arch(r.model, int(r.seq_len)), batch_size=int(r.micro_batch), seq_len=int(r.seq_len),
                              precision="bf16")
    m = sharded_memory_bytes(profile, "bf16", "fsdp", r.checkpointing, int(r.n_gpus))
    return sum(m.values()) / 2**30
