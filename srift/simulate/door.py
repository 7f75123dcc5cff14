"""Route at the door: which simulator prices a job is decided once, where the job comes in, so
the same job gets one answer whichever way the user spells it.

A decoder LLM's job can be spelled two ways: ``--parallelism fsdp`` (the data-parallel simulator,
srift/simulate/predictor.py, over the model's profile) or ``--layout tp=1,pp=1,cp=1 --parallelism
fsdp`` (the layout simulator, srift/simulate/layouts.py, over the architecture's blocks). A layout
that splits nothing (tp = pp = cp = ep = 1) under FSDP or HSDP is the data-parallel plan, in the
same stack (PyTorch FSDP2, torchtitan's per-op selective recompute), so both spellings go to one
simulator, chosen from the data (scripts/validate.py; the 402 llm-foundry FSDP runs priced both
ways: 7.4 % MAPE either way; the five torchtitan data-parallel runs that state memory: 5.4 % against
4.9 %): the data-parallel one, which the sharded and fine-tuning groups validate through this door,
and which models what the layout one does not for these jobs (LoRA and QLoRA under FSDP, 8-bit
optimizers, a fused loss, the input pipeline). ``--parallelism zero1`` (Megatron's distributed
optimizer) is modelled by the layout simulator alone: without a layout it is the layout
``tp=1,pp=1,cp=1``.

A layout under ``ddp`` or ``zero1`` stays Megatron-Core's stack (its kernels, its recompute
modules), a different job from PyTorch DDP: those are not rerouted.
"""

from __future__ import annotations

import dataclasses

from srift.errors import SriftError
from srift.job import ADAMW8BIT, ALLTOALL, DEFAULT_MOE_IMBALANCE, PAGED_ADAMW8BIT, TOKENS, ZERO1, Job, parse_layout
from srift.simulate.layouts import SHARDED_FLAVOURS
from srift.zoo.llm import DecoderArch

DATA_PARALLEL_LAYOUT = "tp=1,pp=1,cp=1"
DEFAULT_BUCKET_CAP_MB = Job.bucket_cap_mb  # the job's default (PyTorch DDP's)


def splits_nothing(layout: str) -> bool:
    """Whether ``--layout`` fixes every degree at 1 (``auto`` searches: it may split)."""
    r = parse_layout(layout)
    return not r.auto and (r.tp, r.pp, r.cp, r.ep or 1) == (1, 1, 1, 1)


def is_data_parallel_layout(job: Job, arch: DecoderArch | None) -> bool:
    """Whether ``job``'s layout is the data-parallel plan the data-parallel simulator prices: a
    dense decoder, every degree 1, FSDP or HSDP, and no setting only the layout simulator models
    (FP8 GEMMs, a pipeline schedule, multi-token prediction, a token dispatcher)."""
    return (job.layout is not None and arch is not None and not arch.is_moe and splits_nothing(job.layout)
            and job.parallelism in SHARDED_FLAVOURS and job.fp8 is None and job.pipeline_schedule is None
            and job.virtual_stages == 1 and job.mtp_layers is None and job.moe_dispatcher == ALLTOALL
            and not job.moe_ep_overlap)


def route(job: Job, arch: DecoderArch | None, gpus: int) -> Job:
    """``job`` as the simulator that prices it takes it (module docstring), on ``gpus`` GPUs:

    - a data-parallel layout (``is_data_parallel_layout``) without its layout: its micro-batch per
      GPU and its global batch (default: micro-batch x GPUs x ``grad_accum``, as the layout's);
    - ``--parallelism zero1`` without a layout, for a decoder LLM: the layout ``tp=1,pp=1,cp=1``
      with the per-GPU batch as its micro-batch and the same global batch;
    - any other job as it is.
    """
    if is_data_parallel_layout(job, arch):
        micro = job.micro_batch_size or 1
        global_batch = job.global_batch_size or micro * gpus * job.grad_accum
        return dataclasses.replace(job, layout=None, micro_batch_size=micro, global_batch_size=global_batch, grad_accum=1)
    if job.layout is None and job.parallelism == ZERO1 and arch is not None:
        micro = job.micro_batch_size or job.batch_size or 1
        accum = job.grad_accum if job.micro_batch_size is None else 1
        return dataclasses.replace(job, layout=DATA_PARALLEL_LAYOUT, micro_batch_size=micro, batch_size=None,
                                   grad_accum=accum)
    return job


def data_parallel_options(job: Job) -> list[str]:
    """The options ``job`` gives that only the data-parallel simulator models (``--fused-loss``,
    ``--bucket-cap-mb``, ``--data-loading`` other than tokens)."""
    given = (("--fused-loss", job.fused_loss), ("--bucket-cap-mb", job.bucket_cap_mb != DEFAULT_BUCKET_CAP_MB),
             (f"--data-loading {job.data_loading}", job.data_loading not in (None, TOKENS)))
    return [flag for flag, g in given if g]


def refuse_ignored(job: Job, layout_path: bool) -> None:
    """Refuse an option the path that prices ``job`` would otherwise ignore: bitsandbytes' 8-bit
    AdamW is modelled for data-parallel fine-tuning (srift/simulate/finetune.py; pre-training
    prices the optimizer state the profile records, a layout Megatron's fp32 Adam); a layout
    prices its stack's loss, its gradient reduction and no input pipeline (``--fused-loss``,
    ``--bucket-cap-mb``, ``--data-loading`` other than tokens).

    Raises:
        SriftError: saying which option, and how to fix it.
    """
    for flag in data_parallel_options(job) if layout_path else ():
        raise SriftError(f"{flag} is modelled with data parallelism, not in a --layout (which prices its stack's "
                         "loss and gradient reduction, and pre-tokenized data).",
                         f"drop {flag.split()[0]}, or drop --layout.")
    if job.optimizer not in (ADAMW8BIT, PAGED_ADAMW8BIT):
        return
    if job.finetune is None:
        raise SriftError(f"--optimizer {job.optimizer} is modelled for fine-tuning (--finetune), not pre-training.",
                         f"add --finetune full, lora or qlora, or drop --optimizer {job.optimizer}.")
    if layout_path:
        raise SriftError(f"--optimizer {job.optimizer} is modelled with data parallelism, not in a --layout "
                         "(Megatron-Core keeps fp32 Adam states).",
                         f"drop --layout (use --parallelism ddp or fsdp), or drop --optimizer {job.optimizer}.")


def refuse_expert_options(arch: DecoderArch | None, imbalance: float, dispatcher: str, ep_overlap: bool) -> None:
    """Refuse a mixture of experts' option (``--moe-imbalance``, ``--moe-dispatcher``,
    ``--moe-ep-overlap``) for a dense model, which routes no token: the one rule, for the
    data-parallel and the layout simulator (an option left at its default is never refused).

    Raises:
        SriftError: naming the first such option.
    """
    if arch is None or arch.is_moe:
        return
    given = (("--moe-imbalance", imbalance != DEFAULT_MOE_IMBALANCE), ("--moe-dispatcher", dispatcher != ALLTOALL),
             ("--moe-ep-overlap", ep_overlap))
    for flag, on in given:
        if on:
            raise SriftError(f"{flag} sets how a mixture of experts routes its tokens; {arch.name} is a dense model "
                             "(no experts).", f"drop {flag}, or choose a mixture-of-experts model.")


def route_note(job: Job, routed: Job) -> list[str]:
    """What a prediction says when ``route`` changed the way its job is priced (none otherwise)."""
    if routed.layout is None and job.layout is not None:
        return [f"--layout {job.layout} under {job.parallelism} splits nothing: the data-parallel plan, priced as "
                f"--parallelism {job.parallelism} is (one simulator for one job: srift/simulate/door.py)"]
    if routed.layout is not None and job.layout is None:
        return [f"--parallelism {job.parallelism} (Megatron-Core's distributed optimizer) is priced as --layout "
                f"{routed.layout} (srift/simulate/door.py)"]
    return []
