"""Fine-tuning measurements (data/finetuning) as runs srift can predict, and their predictions
(offline: pandas; used by scripts/validate.py's fine-tuning group and tests).

Nothing here is fitted: every constant of the fine-tuning model is published or derived
(srift/simulate/finetune.py), and the compute and communication fits it runs on were made on other
data (data/lambda-deeplearning-benchmark, data/llm-training-throughput, ...). Every figure of the
group is therefore out of sample, for each source left out as for all of them.

How a row becomes a job (the source's setting where it states one, srift's default where not):

- model: the zoo's shape (Llama 3.1 8B as llama3-8b, Mistral 7B v0.2 as mistral-7b: the same
  shapes, the data's README says so); LitGPT's rows with an untied output head (``LITGPT_TIES``:
  LitGPT's ``GPT`` has no weight tying, its checkpoint conversion copies a tied embedding into
  ``lm_head``; Llama 3.2 1B/3B train 263M/394M more weights than the Hugging Face model);
- mode: ``sft_full_finetune`` -> ``full``, ``lora_finetune`` -> ``lora``, ``qlora_finetune`` ->
  ``qlora``; LoRA's rank and targets as the row's notes state them (LitGPT: r=32 on query and value,
  ``qv``; Hugging Face PEFT: r=8 on q,k,v,o,gate,up,down, ``all-linear``); NeMo's rows state none:
  their recipe's (``NEMO_LORA``: rank 8 for 8B, 16 for 70B, on ``linear_qkv`` -> ``qkv``, read in
  nemo_toolkit 2.1.0's recipes under the performance mode the rows' layouts show);
- precision ``bf16`` (LitGPT's ``bf16-true``, the NeMo and PEFT rows' BF16); FP8 rows are left out
  (srift has no FP8 precision);
- batch: ``micro_batch`` sequences per GPU, ``global_batch / (micro_batch x data-parallel GPUs)``
  micro-batches per step; sequence length as stated (NeMo and PEFT pack sequences to it; LitGPT
  truncates Alpaca samples at 512 and pads a micro-batch to its longest, so the peak is at 512);
- GPUs of LitGPT's full fine-tunes (``LITGPT_FULL_DEVICES``): 4 A10G, not the table's 1xA10G. One
  GPU cannot hold them: bf16 weights, gradients and AdamW's two bf16 moments of Llama 3.2 1B/3B
  (1.50B/3.61B weights, untied) are 12.0/28.9 GB before any activation, above the printed peaks
  (8.70/16.51 GB) and, for 3B, above the A10G's 24 GB. The Studio cost of these rows, 3.0-5.8 $/h
  (cost / runtime), is the 4xA10G machine's (the 1xA10G rows: 1.6-1.9 $/h); and LitGPT's
  ``finetune/full.py`` runs FSDP with each Block checkpointed when ``devices`` > 1, which is how the
  row is priced (``fsdp``, ``full``). An inference from the source's own figures, stated as such;
- parallelism: one GPU ``ddp``; LitGPT on 4 GPUs ``fsdp``; Hugging Face PEFT + FSDP ``fsdp``; NeMo
  rows through the layout model (srift/simulate/layouts.py: Megatron-Core, Transformer Engine) with
  their printed TP/PP/VP (``--layout``; DP the rest), Megatron's distributed optimizer (``zero1``) for
  SFT and DDP for LoRA (the recipes set ``use_distributed_optimizer = False`` with LoRA): the path
  the same repository's pre-training tables are validated on (data/llm-parallel-layouts);
- checkpointing: as stated (PEFT: ``gradient_checkpointing True`` -> ``full``; LitGPT's scripts
  checkpoint each Block under FSDP only -> ``full`` on 4 GPUs, ``none`` on one); NeMo's "not
  stated" -> ``auto`` (the least recompute that fits);
- GPUs: A10G in one PCIe node (1 or 4); H100 SXM in DGX H100 nodes (8 GPUs, NVSwitch, 8 x 400 Gb/s
  InfiniBand);
- stack: a data-parallel row's (configs/source_stacks.yaml): ``hf-trainer`` for Hugging Face
  PEFT (Transformers' eager element-wise chains, srift/simulate/eager.py), ``lightning`` for
  LitGPT; NeMo rows through the layout model as its pre-training rows are;
- QLoRA: LitGPT's ``quantize=bnb.nf4`` is Lightning's ``BitsandbytesPrecision("nf4")``: no double
  quantization, every ``nn.Linear`` quantized, the head too (``nf4_double_quant`` False,
  ``quantize_head`` True); other rows srift's defaults.

Measured figures: ``peak_memory_gb`` (LitGPT prints ``torch.cuda.max_memory_allocated() / 1e9``:
compared with srift's allocated bytes, without the allocator's slack and the CUDA context);
``step_time_s`` and ``samples_per_s_total`` as tokens/s per GPU, the former a steady state (NeMo:
the mean of the last 20 steps), the latter a whole run's mean with its warm-up (Hugging Face
Trainer's ``train_samples_per_second`` over 30 or 100 steps: ``steady`` False, kept aside). LitGPT's ``train_runtime_min``
is not compared: its Alpaca samples are shorter than 512 tokens by an amount the table does not
give, and the runtime includes validation.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from srift.cluster import INFINIBAND, Cluster, Network, NodeGroup
from srift.fitting.stack_tags import stack_of
from srift.job import DEFAULT_LORA_RANK, LORA, LORA_ALL_LINEAR, QLORA, Job, Stack
from srift.profile import Profile
from srift.simulate import Predictor
from srift.simulate.finetune import LoraSpec, allocated_bytes
from srift.simulate.layouts import PlanSettings, plan_layout
from srift.simulate.prediction import Prediction
from srift.simulate.varlen import arch_with_sample_attention
from srift.zoo import llm_arch
from srift.zoo.llm import DecoderArch, decoder_profile, model_flops_per_token

FOLDER = Path("finetuning")
FILES = ("litgpt-finetune-a10g.csv", "dgxc-benchmarking-h100-finetune.csv")
MODELS = {"Llama-2-7B": "llama2-7b", "Llama-2-70B": "llama2-70b", "Llama-3-8B": "llama3-8b", "Llama-3.1-8B": "llama3-8b",
          "Llama-3-70B": "llama3-70b", "Llama-3.2-1B": "llama3.2-1b", "Llama-3.2-3B": "llama3.2-3b",
          "Mistral-7B-v0.1": "mistral-7b", "Mistral-7B-v0.2": "mistral-7b"}
GPUS = {"A10G": "A10G", "H100-SXM5-80GB": "H100"}
MODES = {"sft_full_finetune": "full", "lora_finetune": "lora", "qlora_finetune": "qlora"}
# LitGPT (srift/fitting/finetune.py's docstring): the output head is never tied, and a full
# fine-tune of the config hub ran FSDP over a 4xA10G Studio (inferred from the rows' peaks and cost).
LITGPT_TIES = False
LITGPT_FULL_DEVICES = 4
# DGX H100 reference nodes, as the rows' interconnect column states them.
H100_NODE: tuple[str, float, Network] = ("nvswitch4", 3200.0, INFINIBAND)
GPUS_PER_NODE = 8
# NeMo's LoRA as the rows ran it: nemo_toolkit 2.1.0 (PyPI; the NeMo release of the rows' 24.12
# container), nemo/collections/llm/recipes/llama3_8b.py and llama3_70b.py, ``finetune_recipe``:
# ``peft.dim`` 8 (8B) and 16 (70B), and under ``performance_mode`` (``finetune_performance_optimizations``)
# ``peft.target_modules = ['linear_qkv']``. The rows ran performance mode: their layouts are its
# (8B SFT TP1, where the default recipe sets TP2; 70B SFT TP4 PP4 VP5; 70B LoRA TP2 PP4) and so are
# their packed 4,096-token sequences (the default recipe: 2,048 unpacked). An inference, stated.
NEMO_LORA = {"Llama-3-8B": (8, "qkv"), "Llama-3-70B": (16, "qkv")}
# NeMo's packed sequences attend within each sample (nemo_toolkit 2.1.0,
# nemo/collections/llm/gpt/model/base.py ``get_packed_seq_params``: the samples' ``cu_seqlens``
# to Transformer Engine, ``qkv_format='thd'``; srift/simulate/varlen.py). The rows' SQuAD samples
# ("Context: ... Question: ... Answer:" and the answer, nemo/collections/llm/gpt/data/squad.py) are
# not measured here; NeMo's own SQuAD recipes bound them: its T5 recipes
# (nemo/collections/llm/recipes/t5_220m.py, t5_3b.py, t5_11b.py) read SQuAD at ``seq_length=512``
# for the context and question and ``seq_length_dec=128`` for the answer. srift prices every sample
# at that bound, 640 tokens: the most attention per-sample masking leaves (E[l^2]/E[l] <= the longest
# sample), so the prediction is the slow end of what the recipe can run.
NEMO_SQUAD_SAMPLE_BOUND = 512 + 128
COLUMNS = ["source", "framework", "label", "model", "tied_head", "gpu", "gpus", "finetune", "lora_rank", "lora_targets",
           "nf4_double_quant", "quantize_head", "seq_len", "micro_batch", "grad_accum", "parallelism", "checkpointing",
           "layout", "vp", "global_batch", "sample_len", "metric", "measured", "steady"]
# Throughput metrics that time the steady state (NeMo's step time: the mean of the last 20 steps, the
# rows' notes say) as against a whole run's mean (Hugging Face Trainer's ``train_samples_per_second``
# divides the samples by ``train_runtime``, warm-up included, over 30 or 100 steps): only the
# former are srift's figure (its iteration time is a steady-state one).
STEADY_METRICS = ("step_time_s",)


def _gpu(name: str) -> str | None:
    return next((v for k, v in GPUS.items() if name.startswith(k)), None)


def _lora(notes: str, model: str, nemo: bool) -> tuple[int, str]:
    """Rank and targets a row's notes state, NeMo's recipe's (``NEMO_LORA``), else srift's defaults."""
    if nemo and model in NEMO_LORA:
        return NEMO_LORA[model]
    m = re.search(r"LoRA r=(\d+)", notes)
    rank = int(m.group(1)) if m else 16
    if "query+value only" in notes:
        return rank, "qv"
    return rank, "all-linear"


def _reason(r: dict[str, str]) -> str:
    """Why a row is left out, or "" when it is kept."""
    if not r["precision"].startswith("bf16"):
        return "FP8 (srift has no FP8 precision)"
    if r["metric"] == "train_runtime_min":
        return "LitGPT runtime (sample lengths not given; includes validation)"
    if r["model"] not in MODELS or _gpu(r["gpu"]) is None or r["training_type"] not in MODES:
        return "model, GPU or mode srift does not have"
    return ""


def _label(r: dict[str, str], gpus: int) -> str:
    return f"{r['model']} {r['training_type'].split('_')[0]} {gpus}x{r['gpu'].split(' ')[0]}"


def _job_columns(r: dict[str, str]) -> dict:
    """The job of a kept row (COLUMNS but ``metric`` and ``measured``; see the module docstring)."""
    framework = r["framework"].split(" (")[0].split(",")[0].split(" +")[0]  # LitGPT, NeMo 24.12 container, HF transformers Trainer
    litgpt = framework.startswith("LitGPT")
    nemo = framework.startswith("NeMo")
    gpus, micro, seq = int(r["gpus_total"]), int(r["micro_batch"]), int(r["seq_len"])
    if litgpt and r["training_type"] == "sft_full_finetune":
        gpus = LITGPT_FULL_DEVICES
    # NeMo runs Megatron-Core layouts (TP x PP x DP, the row's): the layout model
    # (srift/simulate/layouts.py) with Megatron's distributed optimizer for full SFT and DDP for LoRA
    # (the recipes set ``use_distributed_optimizer = False`` with LoRA). Every other row is data-parallel.
    tp, pp = int(r["tp"] or 1), int(r["pp"] or 1)
    vp = int(r["vp"]) if r.get("vp") and int(r["vp"]) > 1 else 1
    layout = f"tp={tp},pp={pp},cp=1" if nemo else None
    dp = gpus // (tp * pp)
    accum = max(1, int(r["global_batch"]) // (micro * dp))
    if nemo:
        parallelism = "zero1" if r["training_type"] == "sft_full_finetune" else "ddp"
    else:
        parallelism = "ddp" if gpus == 1 else ("fsdp" if "FSDP" in r["framework"] or litgpt else "zero2")
    if r["activation_checkpointing"].startswith("full"):
        checkpointing = "full"
    elif litgpt:
        checkpointing = "full" if gpus > 1 else "none"  # LitGPT checkpoints each Block under FSDP only
    else:
        checkpointing = "auto"
    rank, targets = _lora(r["notes"], r["model"], nemo and r["training_type"] == "lora_finetune")
    return {"source": r["source_slug"], "framework": framework, "label": _label(r, gpus), "model": MODELS[r["model"]],
            "tied_head": LITGPT_TIES if litgpt else None, "gpu": _gpu(r["gpu"]), "gpus": gpus,
            "finetune": MODES[r["training_type"]], "lora_rank": rank, "lora_targets": targets,
            # LitGPT's --quantize bnb.nf4: Lightning's BitsandbytesPrecision("nf4"), no double
            # quantization, every nn.Linear replaced (the head too); srift's defaults otherwise.
            "nf4_double_quant": not (litgpt and "quantize=bnb.nf4;" in r["notes"]), "quantize_head": litgpt, "seq_len": seq,
            "micro_batch": micro, "grad_accum": accum, "parallelism": parallelism, "checkpointing": checkpointing,
            "layout": layout, "vp": vp, "global_batch": int(r["global_batch"]),
            "sample_len": NEMO_SQUAD_SAMPLE_BOUND if nemo else 0}


def load_rows(data: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The kept rows (COLUMNS; ``measured`` in the row's metric: GB, or tokens/s per GPU) and the
    rows left out with ``reason``.

    Raises:
        FileNotFoundError: when a CSV is not under ``data``.
    """
    kept, out = [], []
    for name in FILES:
        table = pd.read_csv(Path(data) / FOLDER / name, dtype=str, keep_default_na=False)
        for r in table.to_dict("records"):
            why = _reason(r)
            if why:
                out.append({"source": r["source_slug"], "label": _label(r, int(r["gpus_total"])), "metric": r["metric"],
                            "reason": why})
                continue
            row = _job_columns(r)
            value, seq, gpus = float(r["value"]), row["seq_len"], row["gpus"]
            if r["metric"] == "step_time_s":
                value = int(r["global_batch"]) * seq / value / gpus
            elif r["metric"] == "samples_per_s_total":
                value = value * seq / gpus
            kept.append({**row, "metric": "peak_memory_gb" if r["metric"].startswith("peak_memory") else "tokens_per_s_per_gpu",
                         "measured": value, "steady": r["metric"] in STEADY_METRICS})
    return pd.DataFrame(kept, columns=COLUMNS), pd.DataFrame(out, columns=["source", "label", "metric", "reason"])


# LitGPT's Alpaca2k split: 1,900 training samples (the data's notes).
LITGPT_TRAIN_SAMPLES = 1900


def load_runtime_rows(data: Path) -> pd.DataFrame:
    """LitGPT's end-to-end runtimes (COLUMNS, ``measured`` in minutes, plus ``epochs``): not
    comparable with a prediction (shorter samples than 512 tokens, validation included), so only
    a bound: a run of 512-token samples without validation takes what srift predicts."""
    table = pd.read_csv(Path(data) / FOLDER / FILES[0], dtype=str, keep_default_na=False)
    runtime = table[table["metric"] == "train_runtime_min"]
    rows = []
    for r in runtime.to_dict("records"):
        m = re.search(r"(\d+) epoch", r["notes"])
        rows.append({**_job_columns(r), "metric": "train_runtime_min", "measured": float(r["value"]),
                     "epochs": int(m.group(1)) if m else 1})
    return pd.DataFrame(rows, columns=[*COLUMNS, "epochs"])


def predicted_runtime_min(r) -> float:  # r: a row of load_runtime_rows
    """Minutes of ``epochs`` over LITGPT_TRAIN_SAMPLES samples of ``seq_len`` tokens, as srift predicts."""
    pred = predict_row(r)
    steps = r.epochs * -(-LITGPT_TRAIN_SAMPLES // (int(r.micro_batch) * int(r.grad_accum) * int(r.gpus)))
    return steps * pred.iteration_time_s / 60.0


def row_cluster(gpu: str, gpus: int) -> Cluster:
    """A10G in one PCIe node (the Studio's 1x or 4x machine), or DGX H100 nodes of 8."""
    if gpu != "H100":
        return Cluster(f"{gpus} x {gpu}", (NodeGroup(1, gpus, gpu, "pcie4", 25.0),))
    per = min(GPUS_PER_NODE, gpus)
    link, gbps, net = H100_NODE
    return Cluster(f"{gpus} x {gpu}", (NodeGroup(max(1, gpus // per), per, gpu, link, gbps, net),))


def _arch(model: str, tied_head: bool | None) -> DecoderArch:
    """The zoo's shape, with the row's head tying where the framework sets its own (None: the zoo's)."""
    arch = llm_arch(model)
    return arch if tied_head is None or pd.isna(tied_head) else dataclasses.replace(arch, tied_embeddings=bool(tied_head))


@functools.lru_cache(maxsize=256)
def _profile(model: str, tied_head: bool | None, seq_len: int, micro_batch: int) -> Profile:
    return decoder_profile(_arch(model, tied_head), batch_size=micro_batch, seq_len=seq_len, precision="bf16")


def predict_row(r) -> Prediction:  # r: a namedtuple or Series of COLUMNS
    """srift's prediction of one kept row (a NeMo row through the layout model: ``layout`` set)."""
    adapters = r.finetune in (LORA, QLORA)  # the adapter settings of a row that trains adapters (Job refuses them otherwise)
    common = dict(seq_len=int(r.seq_len), precision="bf16", parallelism=r.parallelism,
                  activation_checkpointing=r.checkpointing, finetune=r.finetune,
                  lora_rank=int(r.lora_rank) if adapters else DEFAULT_LORA_RANK,
                  lora_targets=r.lora_targets if adapters else LORA_ALL_LINEAR, nf4_double_quant=bool(r.nf4_double_quant),
                  quantize_head=bool(r.quantize_head) and r.finetune == QLORA)
    if isinstance(r.layout, str):
        vp = int(r.vp)
        samples = int(r.sample_len)  # packed, each sample attending within itself (NEMO_SQUAD_SAMPLE_BOUND)
        job = Job(layout=r.layout, micro_batch_size=int(r.micro_batch), global_batch_size=int(r.global_batch),
                  virtual_stages=vp, pipeline_schedule="interleaved" if vp > 1 else None,
                  packed=samples > 0, varlen_attention=samples > 0, mean_seq_len=samples or None, **common)
    else:
        # The row's stack (configs/source_stacks.yaml: Hugging Face's Trainer, LitGPT's Lightning);
        # a NeMo row's layout is priced as the layout group prices its source's pre-training rows.
        job = Job(batch_size=int(r.micro_batch), grad_accum=int(r.grad_accum),
                  stack=cast(Stack, stack_of(str(r.source), str(r.framework))), **common)
    tied = None if r.tied_head is None or pd.isna(r.tied_head) else bool(r.tied_head)
    arch = _arch(r.model, tied)
    flops = functools.partial(model_flops_per_token, arch)
    return Predictor(_profile(r.model, tied, int(r.seq_len), int(r.micro_batch)), job, model_flops_per_token=flops,
                     arch=arch).predict(row_cluster(r.gpu, int(r.gpus)))


@functools.lru_cache(maxsize=8)
def held_out_factor(data: Path, source: str) -> float:
    """``megatron_compute_factor`` refitted on data/llm-parallel-layouts without ``source``'s rows
    (srift/fitting/layouts.py ``fit_factor``, as the layout group's leave-one-source-out does it)."""
    from srift.fitting import layouts as lf

    rows, _ = lf.load_rows(data)
    return lf.fit_factor(rows[rows["source_slug"] != source])


def held_out_tokens_per_s(r, data: Path) -> float:
    """Tokens/s per GPU of a NeMo (layout) row with its source held out: the layout model's one
    fitted figure, ``megatron_compute_factor``, is fitted on pre-training tables of the same
    repository (data/llm-parallel-layouts' ``dgxc-benchmarking-h100``), so here it is refitted
    without them (``held_out_factor``). Other rows: NaN (nothing of their sources is fitted)."""
    if not isinstance(r.layout, str):
        return float("nan")
    pred = predict_row(r)
    layout = pred.layout
    if layout is None:
        return float("nan")
    lora = LoraSpec(int(r.lora_rank), str(r.lora_targets)) if r.finetune == LORA else None
    arch = _arch(r.model, None)
    if int(r.sample_len):  # as predict_row prices it: equal samples of sample_len (srift/simulate/varlen.py)
        arch = arch_with_sample_attention(arch, float(r.sample_len))
    plan = plan_layout(arch, row_cluster(r.gpu, int(r.gpus)), layout, int(r.seq_len),
                       PlanSettings(precision="bf16", checkpointing=pred.activation_checkpointing or "none",
                                    dp_flavour=pred.parallelism or "zero1",
                                    compute_factor=held_out_factor(Path(data), str(r.source)), lora=lora))
    return plan.tokens_per_s / int(r.gpus)


def predict_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Per row: ``predicted`` in the row's metric (GB allocated at the peak, or tokens/s per GPU),
    ``fits``, ``memory_gib`` (srift's peak reserved per GPU) and the plan's ``checkpointing``."""
    out = []
    for r in rows.itertuples():
        p = predict_row(r)
        value = (allocated_bytes(p.memory_breakdown_bytes) / 1e9 if r.metric == "peak_memory_gb"
                 else p.tokens_per_s_per_gpu)
        out.append({"predicted": value, "fits": p.fits_in_memory, "memory_gib": p.memory_per_gpu_bytes / 2**30,
                    "plan_checkpointing": p.activation_checkpointing})
    return pd.DataFrame(out, index=rows.index)


def error_pct(rows: pd.DataFrame, predicted: pd.DataFrame) -> np.ndarray:
    """Signed error of each prediction, % of the measurement (+ = predicted more)."""
    return (predicted["predicted"].to_numpy(float) / rows["measured"].to_numpy(float) - 1.0) * 100.0
