"""What each memory trick saves: a fine-tuning job's memory what-if (``srift predict --finetune``).

Each row changes one setting of the job (a smaller batch or sequence, full activation
checkpointing, activation offloading, the optimizer stepped in backward, 8-bit paged optimizer
states, CPU offload of the optimizer, a smaller LoRA rank, a lighter fine-tuning mode) and predicts
it on the same cluster with the same simulator and the same plan (parallelism and checkpointing) as
the job got: its peak memory per GPU, what that saves against the job as given, whether it fits and
its speed. A change the job cannot take (``Job`` refuses it: the
optimizer in backward with gradient accumulation, ...) or already has is left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from srift.errors import SriftError
from srift.job import (
    ADAMW8BIT, CHECKPOINTING, CPU_OFFLOAD_OPTIMIZER, FINETUNE_MODES, LORA, NO_CPU_OFFLOAD, PAGED_ADAMW8BIT, QLORA, Job,
)
from srift.simulate.prediction import Prediction

FULL_CHECKPOINTING = CHECKPOINTING[-1]


@dataclass(frozen=True)
class WhatIf:
    """One changed setting and its prediction.

    Attributes:
        change: The flags that make the change (``--optimizer-in-backward``).
        memory_gib: Peak reserved memory per GPU, GiB.
        saved_gib: What it saves against the job as given (negative: costs).
        fit: ``fits``, ``may not fit`` or ``does not fit`` (srift.simulate.memory.fit_state).
        tokens_per_s_per_gpu: Its speed (None without a sequence length).
        iteration_s: Its iteration time.
    """

    change: str
    memory_gib: float
    saved_gib: float
    fit: str
    tokens_per_s_per_gpu: float | None
    iteration_s: float

    def to_dict(self) -> dict[str, object]:
        """The JSON form."""
        return dataclasses.asdict(self)


def trick_changes(job: Job) -> list[tuple[str, dict[str, object]]]:
    """The memory tricks the job does not use yet, as (flags, ``Job`` fields)."""
    out: list[tuple[str, dict[str, object]]] = []
    if job.activation_checkpointing != FULL_CHECKPOINTING:
        out.append((f"--activation-checkpointing {FULL_CHECKPOINTING}", {"activation_checkpointing": FULL_CHECKPOINTING}))
    if not job.activation_offloading:
        out.append(("--activation-offloading", {"activation_offloading": True}))
    if not job.optimizer_in_backward:
        out.append(("--optimizer-in-backward", {"optimizer_in_backward": True}))
    if job.optimizer not in (ADAMW8BIT, PAGED_ADAMW8BIT):
        out.append((f"--optimizer {PAGED_ADAMW8BIT}", {"optimizer": PAGED_ADAMW8BIT}))
    if job.cpu_offload == NO_CPU_OFFLOAD:
        out.append((f"--cpu-offload {CPU_OFFLOAD_OPTIMIZER}", {"cpu_offload": CPU_OFFLOAD_OPTIMIZER}))
    return out


def shape_changes(job: Job, batch: int | None, seq_len: int | None) -> list[tuple[str, dict[str, object]]]:
    """Smaller batches, sequences and LoRA ranks, and the lighter fine-tuning modes."""
    out: list[tuple[str, dict[str, object]]] = []
    if batch and batch > 1:
        out.append((f"--batch-size {batch // 2}", {"batch_size": batch // 2}))
    if seq_len and seq_len > 1 and job.mean_seq_len is None and job.lengths_file is None:
        out.append((f"--seq-len {seq_len // 2}", {"seq_len": seq_len // 2}))
    if job.finetune in (LORA, QLORA) and job.lora_rank > 1:
        out.append((f"--lora-rank {job.lora_rank // 2}", {"lora_rank": job.lora_rank // 2}))
    if job.finetune is not None:
        out += [(f"--finetune {mode}", {"finetune": mode}) for mode in FINETUNE_MODES[FINETUNE_MODES.index(job.finetune) + 1:]]
    return out


def variant(job: Job, fields: dict[str, object]) -> Job | None:
    """``job`` with ``fields`` changed, or None where ``Job`` refuses the change."""
    try:
        return dataclasses.replace(job, **fields)  # type: ignore[arg-type]
    except SriftError:
        return None


def memory_what_if(job: Job, given: Prediction, predict: Callable[[Job], Prediction]) -> tuple[WhatIf, ...]:
    """Each change of ``trick_changes`` and ``shape_changes`` alone, predicted by ``predict`` (the
    same profile and cluster as ``given``, the job's own prediction)."""
    batch = given.micro_batch_size if given.grad_accum > 1 else (job.batch_size or given.micro_batch_size)
    # On the plan the job got (an ``auto`` plan would spend what a change saves on less recompute).
    pinned = variant(job, {"parallelism": given.parallelism or job.parallelism,
                           "activation_checkpointing": given.activation_checkpointing or job.activation_checkpointing})
    base = pinned if pinned is not None else job
    rows = []
    for flags, fields in trick_changes(base) + shape_changes(base, batch, given.seq_len):
        changed = variant(base, fields)
        if changed is None:
            continue
        try:
            pred = predict(changed)
        except SriftError:
            continue
        rows.append(WhatIf(flags, pred.memory_per_gpu_bytes / 2**30,
                           (given.memory_per_gpu_bytes - pred.memory_per_gpu_bytes) / 2**30, pred.memory_fit,
                           pred.tokens_per_s_per_gpu, pred.iteration_time_s))
    return tuple(rows)
