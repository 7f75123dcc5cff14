"""Long-context full fine-tuning (data/finetuning/xtuner-long-context-speed-a100.csv): XTuner and
LLaMA-Factory on 8-32 A100-SXM4-80GB at 8K-1M tokens, with the published out-of-memory verdicts
(offline: pandas; scripts/validate.py's fine-tuning group and tests).

Nothing is fitted on these rows. How a row becomes a job (the data's README says the same):

- Llama 2 7B / 70B of the zoo; Yi-34B-200K is left out (no verified architecture in
  data/llm-configs);
- full fine-tuning, one sequence per GPU (XTuner's configs: per-device batch 1), packed to the
  context length (8k = 8,192 tokens ... 1M = 1,048,576);
- the sequence split over the row's ``sequence_parallel_degree`` (XTuner's ``_spN`` configs:
  DeepSpeed-Ulysses style sequence parallelism) as srift's context parallelism ``cp`` in a
  ``--layout tp=1,pp=1,cp=SP`` job: the same activations per GPU; LLaMA-Factory's rows have none
  (cp=1);
- neither page states the ZeRO stage nor the checkpointing, so each row is priced on the most
  memory-saving plan srift has for it: ``fsdp`` (ZeRO-3-like: parameters, gradients and optimizer
  states sharded over every GPU) and checkpointing ``auto`` (the least recompute that fits). A run
  that ran must fit that plan; a printed OOM must not fit even it: a verdict that holds whatever the
  framework chose;
- XTuner's packs attend within each sample (``use_varlen_attn = True`` in the 128k sp8 config at
  the page's commit, the data's README says; srift/simulate/varlen.py): ``--varlen-attention`` with
  every sample at ``XTUNER_ALPACA_SAMPLE_BOUND``. XTuner 0.2.0 on PyPI ships the same speed
  configs with ``use_varlen_attn = False``, but whole-pack attention cannot have run at the
  printed speeds: at 128k tokens srift counts 246 GFLOP per token for the 7B model with it (its
  weights' 6N: 40), and 3,109 tokens/s per GPU of that is 764 TFLOP/s, above the A100's 312.
  LLaMA-Factory's settings are not stated: whole-pack attention (its default ``packing``);
- bf16 (XTuner runs fp16 AMP: fp32 master weights and Adam moments, as srift's layout model counts
  a bf16 job's states);
- 8 A100-SXM4-80GB per node with NVSwitch, InfiniBand between nodes (not stated: the common
  A100 server).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

from srift.cluster import INFINIBAND, Cluster, NodeGroup
from srift.job import Job
from srift.simulate import Predictor
from srift.simulate.prediction import Prediction
from srift.zoo import llm_arch
from srift.zoo.llm import decoder_profile, model_flops_per_token

FILE = Path("finetuning") / "xtuner-long-context-speed-a100.csv"
MODELS = {"Llama2-7B": "llama2-7b", "Llama2-70B": "llama2-70b"}
CONTEXT = {"8k": 8192, "32k": 32768, "128k": 131072, "256k": 262144, "1M": 1048576}
GPU = "A100-80GB"
GPUS_PER_NODE = 8
NODE_LINK, NODE_GBPS = "nvswitch", 1600.0  # an 8 x 200 Gb/s HDR InfiniBand A100 server (assumed)
COLUMNS = ["source", "framework", "label", "model", "gpus", "seq_len", "sp", "oom", "measured"]
# The Alpaca samples XTuner packs are not measured here; XTuner's own Alpaca recipes truncate them at
# 2,048 tokens (xtuner 0.2.0, xtuner/configs/llama/llama2_7b/llama2_7b_qlora_alpaca_e3.py,
# ``max_length = 2048``): every sample priced at that bound, the most attention per-sample masking
# leaves (srift/simulate/varlen.py), so the prediction is the slow end of what the run could reach.
XTUNER_ALPACA_SAMPLE_BOUND = 2048
XTUNER = "XTuner"


def load_rows(data: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The kept rows (COLUMNS; ``measured`` tokens/s per GPU, NaN for an OOM) and those left out
    with ``reason``."""
    table = pd.read_csv(Path(data) / FILE, dtype=str, keep_default_na=False)
    kept, out = [], []
    for r in table.to_dict("records"):
        label = f"{r['model']} {r['context_length']} {r['total_gpus']}xA100 {r['framework']}"
        if r["model"] not in MODELS:
            out.append({"source": r["source_slug"], "label": label, "reason": "model srift does not have"})
            continue
        sp = int(r["sequence_parallel_degree"] or 1)
        kept.append({"source": r["source_slug"], "framework": r["framework"], "label": label, "model": MODELS[r["model"]],
                     "gpus": int(r["total_gpus"]), "seq_len": CONTEXT[r["context_length"]], "sp": sp,
                     "oom": r["oom"] == "yes", "measured": float(r["value"]) if r["value"] else float("nan")})
    return pd.DataFrame(kept, columns=COLUMNS), pd.DataFrame(out, columns=["source", "label", "reason"])


def row_cluster(gpus: int) -> Cluster:
    """``gpus`` A100-80GB in nodes of 8 (module docstring)."""
    per = min(GPUS_PER_NODE, gpus)
    return Cluster(f"{gpus} x {GPU}", (NodeGroup(max(1, gpus // per), per, GPU, NODE_LINK, NODE_GBPS, INFINIBAND),))


def predict_row(r) -> Prediction:  # r: a namedtuple of COLUMNS
    """srift's prediction of one row on its most memory-saving plan (module docstring)."""
    arch = llm_arch(r.model)
    seq, gpus, sp = int(r.seq_len), int(r.gpus), int(r.sp)
    varlen = r.framework == XTUNER and seq > XTUNER_ALPACA_SAMPLE_BOUND
    job = Job(layout=f"tp=1,pp=1,cp={sp}", micro_batch_size=1, global_batch_size=gpus // sp, seq_len=seq,
              precision="bf16", parallelism="fsdp", activation_checkpointing="auto", finetune="full",
              packed=varlen, varlen_attention=varlen, mean_seq_len=XTUNER_ALPACA_SAMPLE_BOUND if varlen else None)
    profile = decoder_profile(arch, batch_size=1, seq_len=seq, precision="bf16")
    return Predictor(profile, job, model_flops_per_token=functools.partial(model_flops_per_token, arch),
                     arch=arch).predict(row_cluster(gpus))


def predict_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Per row: ``predicted`` tokens/s per GPU, ``fit`` (srift's fit state), ``fits`` (not "does
    not fit"), ``memory_gib`` reserved per GPU and the plan's ``checkpointing``; ``verdict_ok``:
    a run that ran fits, a printed OOM does not."""
    out = []
    for r in rows.itertuples():
        p = predict_row(r)
        out.append({"predicted": p.tokens_per_s_per_gpu, "fit": p.memory_fit, "fits": p.fits_in_memory,
                    "memory_gib": p.memory_per_gpu_bytes / 2**30, "checkpointing": p.activation_checkpointing,
                    "verdict_ok": p.fits_in_memory != bool(r.oom)})
    return pd.DataFrame(out, index=rows.index)
