"""Measured expert-parallel MoE runs (data/moe-training) as layouts srift predicts, and their
errors (offline: pandas; used by scripts/validate.py).

Rows kept: bf16 pre-training, metric ``tokens_per_s_per_gpu``, on a GPU srift's catalog has in
the source's nodes (DGX H100, B200, B300: 8 GPUs on NVSwitch, 8 NICs of InfiniBand) and a model
of srift's zoo. Left out and counted: fp8 rows (srift does not model FP8 GEMMs, as the layout
group leaves them out), GB200/GB300 rows (an NVL72 rack's 72-GPU NVLink domain is not a node
srift models; its GPUs are not in the catalog), models not in the zoo, layouts that do not
multiply out.

How a row becomes a prediction: the layout as printed with EP (``interleaved`` when it prints
VP > 1, else 1F1B), ``grad_accum = global / (micro x DP)``, the distributed optimizer, the
least activation recomputation that fits (not stated; ``srift predict``'s rule: none, else full
recompute), force-balanced
routing (``BALANCED_ROUTING``: the source's footnote), the compute factor as shipped
(configs/perf/layouts.json, fitted on dense Llama/GPT/Nemotron runs of data/llm-parallel-layouts).
No figure is fitted on these rows, so each prediction is already held out from its model and its
source: leave-one-model-out and leave-one-source-out equal the plain error.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from srift.cluster import Cluster, NodeGroup
from srift.fitting import megatron_rows
from srift.perf.fp8 import Fp8Recipe
from srift.simulate.layouts import Layout, plan_layout
from srift.simulate.moe import BALANCED_ROUTING
from srift.zoo import llm_arch

FOLDER = Path("moe-training")
# The source's systems: DGX H100 (8 x 400 Gb/s ConnectX-7), DGX B200 (8 x 400 Gb/s ConnectX-7),
# DGX B300 (8 x 800 Gb/s ConnectX-8).
GPUS = {"H100-SXM5-80GB": ("H100", "nvswitch4", 3200.0), "B200": ("B200", "nvswitch5", 3200.0),
        "B300": ("B300", "nvswitch5", 6400.0)}


def dgx_cluster(gpu_label: str, gpus: int, gpus_per_node: int) -> Cluster:
    """The source's nodes: ``gpus_per_node`` GPUs on NVSwitch, InfiniBand between nodes."""
    gpu, link, gbps = GPUS[gpu_label]
    return Cluster(f"{gpus} x {gpu}", (NodeGroup(count=max(1, gpus // gpus_per_node), gpus_per_node=min(gpus, gpus_per_node),
                                                 gpu=gpu, intra_node=link, network_gbps=gbps, network="infiniband"),))


# The source's precision labels: bf16, or a Transformer Engine FP8 recipe (srift/perf/fp8.py):
# "fp8" / "fp8-cs" per-tensor (current) scaling on Hopper, "fp8-mx" / "mxfp8" Blackwell's MXFP8.
FP8_RECIPE_OF: dict[str, Fp8Recipe | None] = {"bf16": None, "fp8": "tensorwise", "fp8-cs": "tensorwise",
                                              "fp8-mx": "mxfp8", "mxfp8": "mxfp8"}


def _why_left_out(r) -> str | None:
    if r.metric != "tokens_per_s_per_gpu":
        return f"metric {r.metric}"
    if str(r.precision).lower() not in FP8_RECIPE_OF:
        return f"precision {r.precision} not mapped"
    if r.gpu not in GPUS:
        return f"{r.gpu} (NVL72 rack not modelled)" if str(r.gpu).startswith("GB") else f"GPU {r.gpu} not mapped"
    return None


def load_rows(data: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows srift predicts and, by reason, how many were left out."""
    return megatron_rows.load_rows(data, FOLDER, _why_left_out, lambda m: m.split(" ")[0].lower())


def row_layout(r) -> Layout:
    vp = int(r.vp) if not pd.isna(r.vp) and int(r.vp) > 1 else 1
    mb, dp = int(r.micro_batch), int(r.dp)
    return Layout(int(r.tp), int(r.pp), int(r.cp), dp, vp, mb, int(r.global_batch) // (mb * dp),
                  "interleaved" if vp > 1 else "1f1b", int(r.ep))


CHECKPOINTING = ("none", "full")  # srift predict's: the least recompute that fits


@functools.lru_cache(maxsize=1024)
def _predict(zoo: str, gpu: str, gpus: int, per_node: int, layout: Layout, seq_len: int,
             fp8: Fp8Recipe | None) -> tuple[float, str]:
    plan = None
    for policy in CHECKPOINTING:
        plan = plan_layout(llm_arch(zoo), dgx_cluster(gpu, gpus, per_node), layout, seq_len, "bf16", policy,
                           imbalance=BALANCED_ROUTING, fp8=fp8)
        if plan.fits:
            break
    assert plan is not None
    return plan.tokens_per_s / gpus, plan.checkpointing if plan.fits else "does not fit"


def predict_row(r) -> tuple[float, str]:
    """(predicted tokens/s per GPU, the recompute policy that fits or "does not fit") of a row."""
    return _predict(r.zoo, r.gpu, int(r.gpus_total), int(r.gpus_per_node), row_layout(r), int(r.seq_len),
                    FP8_RECIPE_OF[str(r.precision).lower()])
