"""Predict one data-parallel training iteration of a profile on a cluster.

``Predictor(profile, job).predict(cluster)`` is a facade over three rooms: the workload
(srift/simulate/workload.py: everything that does not depend on the cluster, cached, so the
recommender can score thousands of clusters quickly), the plans (srift/simulate/plans.py: DDP or
sharded, ``auto``'s choice, the memory fit, on a ``ClusterView`` computed once per cluster) and the
input loader (srift/simulate/loader.py). ``predict`` is the one-shot form.

The job's ``parallelism`` picks the simulator: ``ddp``, or ``zero2``, ``fsdp``, ``hsdp``
(srift/simulate/sharded.py, with activation checkpointing). ``auto`` (the default) simulates, per
cluster, every parallelism and checkpointing policy whose memory fits (sharded.py's units; hsdp
only across nodes of several GPUs) and keeps the fastest (plans.py). A profile without FSDP units
(a CNN, BERT) is trained with DDP, as are K-FAC jobs and one GPU. A profile of an FSDP script
(``srift profile``) says how the script ran (``Profile.parallelism``,
``activation_checkpointing``): that is the job's default, in place of ``auto``.

Mixed clusters split the batch by speed (mixed.py) and every collective waits for the slowest
worker. Data: the loader runs beside the GPUs (loader.py); ``data`` is what it needs beyond the
GPUs' iteration, and the bottleneck is ``input`` when there is any; a measured profile's own data
time is added as measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from srift.cluster import Cluster
from srift.errors import SriftError
from srift.hardware import CPU
from srift.job import AUTO, DDP, FULL_FINETUNE, QLORA, Job
from srift.perf.accuracy import MEASURED_ELSEWHERE, MEASURED_HERE
from srift.perf.compute import LayerTimes, measured_gpu
from srift.profile import Profile
from srift.simulate.assemble import PlanGroup, PricedPlan, assemble, typical_error_of
from srift.simulate.breakdown import DATA
from srift.simulate.kfac import KfacPlan
from srift.simulate.door import refuse_expert_options, refuse_ignored
from srift.simulate.loader import InputLoader, image_side_px
from srift.simulate.mixed import batches_for_fastest, split_batch
from srift.simulate.offload import trick_notes
from srift.simulate.plans import Candidate, ClusterView, Plans, plan_choices
from srift.simulate.prediction import BatchShare, Prediction, bottleneck
from srift.simulate.varlen import arch_for_job
from srift.simulate.workload import Workload, measured_sources, profile_flops_per_token
from srift.stacks import job_stack, stack_note
from srift.zoo.llm import DecoderArch

__all__ = ["Predictor", "predict", "job_with_profile_defaults", "bottleneck", "measured_sources",
           "profile_flops_per_token", "image_side_px"]


class Predictor:
    """Predictions for one profile and job on many clusters (see module docstring).

    Args:
        profile: The job's profile (measured or structural).
        job: Batch, sequence length, precision, optimizer, parallelism, checkpointing.
        more_profiles: The same job measured on other GPUs (``srift profile`` on each): a node
            group's compute comes from the profile measured on its GPU (at the job's precision if
            there is one), else from ``profile``. Memory, data loading and the gradient buckets
            come from ``profile``.
        model_flops_per_token: Training FLOPs per token at a sequence length, for MFU (the zoo's
            ``srift.zoo.llm.model_flops_per_token`` of the model's architecture); None: 3 x the
            forward FLOPs of the profile's matmul and attention layers, as the profile counts them.
        arch: The decoder LLM's architecture (zoo or Hugging Face config): a job with a ``layout``
            is predicted from it (srift/simulate/layout_prediction.py).

    Raises:
        SriftError: for a seq_len the profile cannot take, ``more_profiles`` that do not fit
            (``measured_sources``), activation checkpointing of a profile without FSDP units, or a
            layout's setting without a layout (``Job.require_layout_settings``).
    """

    def __init__(self, profile: Profile, job: Job, more_profiles: Sequence[Profile] = (),
                 model_flops_per_token: Callable[[int], float] | None = None, arch: DecoderArch | None = None) -> None:
        refuse_expert_options(arch, job.moe_imbalance, job.moe_dispatcher, job.moe_ep_overlap)
        job.require_layout_settings(takes_layout=arch is not None and not more_profiles)
        refuse_ignored(job, layout_path=job.layout is not None)
        job = job_with_profile_defaults(job, profile)
        if job.layout is not None and (arch is None or more_profiles):
            raise SriftError("--layout is modelled for a decoder LLM of the zoo or a --model-config, not for a profile.",
                             "pass --model NAME (a decoder LLM) or --model-config config.json with --layout.")
        w = self.workload = Workload(profile, job, more_profiles, model_flops_per_token)
        self.arch = arch_for_job(arch, job, w.seq_len) if arch is not None and w.seq_len else arch  # simulate/varlen.py
        self.job, self.base, self.precision, self.ref_batch = job, w.base, w.precision, w.ref_batch
        self.layout, self.bucket_sizes_bytes, self.units = w.layout, w.bucket_sizes_bytes, w.units
        self.seq_len, self.flops_per_token, self.compute_cv = w.seq_len, w.flops_per_token, w.compute_cv
        self.plans = Plans(w, *plan_choices(job, w.units.blocks, w.base.name))
        self.parallelisms, self.checkpointings = self.plans.parallelisms, self.plans.checkpointings
        self.loader = InputLoader(w, profile)
        self.data_loading = self.loader.data_loading
        # The rooms' entry points, as the Predictor's (callers and tests use them).
        self.profile_at, self.source_for, self.compute = w.profile_at, w.source_for, w.compute
        self.memory, self.plan_memory = w.memory, w.plan_memory
        self.could_fit, self.input_time = self.plans.could_fit, self.loader.input_time

    # ---- batches ---------------------------------------------------------------------------
    def batches(self, cluster: Cluster) -> list[int]:
        """Per-GPU batch (micro-batch, with gradient accumulation) of each node group."""
        groups = cluster.node_groups
        gpus = [g.gpus for g in groups]
        if not cluster.heterogeneous:
            if self.job.global_batch_size is None:
                return [self.ref_batch] * len(groups)
            speeds = [1.0] * len(groups)
        else:
            speeds = [self.compute(g.gpu, self.ref_batch).speed for g in groups]
            if self.job.global_batch_size is None:
                return batches_for_fastest(speeds, self.ref_batch)
        gb = self.job.global_batch_size // self.job.grad_accum  # per micro-batch
        if gb < cluster.gpus:
            raise SriftError(
                f"global batch {gb} is smaller than the {cluster.gpus} GPUs of {cluster.name}.",
                "raise --global-batch-size or use fewer GPUs.",
            )
        if not cluster.heterogeneous and gb % cluster.gpus:  # equal per-GPU batches cannot make it: say so, never round
            accum = self.job.grad_accum
            lower, upper = gb // cluster.gpus * cluster.gpus * accum, -(-gb // cluster.gpus) * cluster.gpus * accum
            per_micro = f" ({gb:,} per micro-batch of --grad-accum {accum})" if accum > 1 else ""
            raise SriftError(
                f"global batch {self.job.global_batch_size:,}{per_micro} does not divide over the {cluster.gpus} GPUs of "
                f"{cluster.name} (equal per-GPU batches make {lower:,} or {upper:,}).",
                f"pass --global-batch-size {upper:,} (or another multiple of {cluster.gpus * accum}), "
                "or --batch-size per GPU instead.")
        return split_batch(speeds, gpus, gb)

    # ---- the prediction --------------------------------------------------------------------
    def throughput_bound(self, cluster: Cluster, tight: bool = True) -> float | None:
        """Samples per second ``predict(cluster)`` cannot exceed, known without simulating
        (srift/simulate/layout/bound.py; a layout search only), else None. ``tight=False``: a
        looser bound, cheaper (the compute alone)."""
        if self.job.layout is None or self.arch is None:
            return None
        from srift.simulate.layout.bound import layout_throughput_bound
        from srift.simulate.layout_prediction import LayoutSettings
        return layout_throughput_bound(self.arch, cluster, LayoutSettings.of(self.job), self.seq_len or 1, self.precision,
                                       tight)

    def on_network(self, cluster: Cluster) -> Prediction:
        """The job on ``cluster``, a network variant of the one predicted (srift.api.network_fallbacks;
        ``LayoutPredictor.on_network`` keeps its plan): a data-parallel plan is chosen again."""
        return self.predict(cluster)

    def predict(self, cluster: Cluster) -> Prediction:
        """Predict one iteration (one optimizer step) of the job on ``cluster``."""
        if self.job.layout is not None and self.arch is not None:  # tensor/pipeline/context parallelism
            from srift.simulate.layout_prediction import LayoutSettings, predict_layout
            return predict_layout(self.arch, cluster, LayoutSettings.of(self.job), self.seq_len or 1, self.precision,
                                  self.flops_per_token)
        groups = cluster.node_groups
        batches = self.batches(cluster)
        comps = [self.compute(g.gpu, b) for g, b in zip(groups, batches)]
        view = ClusterView.of(cluster)
        comm = view.comm
        plan = self.plans.choose(view, batches, comps, self.plans.candidates(view))
        breakdown = plan.breakdown
        accum = self.job.grad_accum
        inputs = self.loader.inputs_for(cluster, [b * accum for b in batches], comm)
        gpu_s = breakdown.total_s
        p90 = max(plan.p90_s, gpu_s)
        known = [t for t in inputs if t is not None]
        loader = max(known, key=lambda t: t.time_s) if known and len(known) == len(inputs) else None
        if loader is not None and loader.kind == "measured":
            breakdown = breakdown.with_phase(DATA, loader.time_s)  # the measured wait, as the profile saw it
            p90 += loader.time_s
        elif loader is not None:
            # The loader runs beside the GPUs: only what it needs beyond their iteration shows.
            breakdown = breakdown.with_phase(DATA, max(0.0, loader.time_s - gpu_s))
            p90 = max(p90, max(t.slow_time_s for t in known))
        global_batch = sum(b * g.gpus for b, g in zip(batches, groups)) * accum
        crit = max(comps, key=lambda c: c.compute_end_s)
        times = crit.times
        measured = (MEASURED_ELSEWHERE if times.anchored_from else MEASURED_HERE) if times.anchored else None
        stack = job_stack(self.job)
        error = typical_error_of(PlanGroup(
            cluster, sharded=plan.parallelism != DDP, finetune=self.workload.frozen is not None, stack=stack.name,
            measured=measured, net_class=comm.topology.net_class,
            cpu_profile=self.base.measured and self.base.device.kind == CPU, kfac=self.job.kfac,
            params=self.units.params))
        state_bytes = self.units.params * (4.0 + float(self.base.optimizer.state_bytes_per_param))
        if plan.parallelism != DDP:
            state_bytes /= cluster.nodes  # every node writes its own shards of the checkpoint
        return assemble(PricedPlan(
            cluster=cluster, parallelism=plan.parallelism, checkpointing=plan.checkpointing, breakdown=breakdown,
            p90_s=p90, comm_cost_s=plan.comm_cost_s, memory=plan.memory, global_batch=global_batch,
            batch_split=[BatchShare(g.label, g.gpu, b * accum, g.gpus) for g, b in zip(groups, batches)],
            grad_accum=accum, micro_batch_size=batches[0] if len(set(batches)) == 1 else None,
            state_bytes=state_bytes, error=error, precision=self.precision,
            notes=(self._notes(times, plan.kfac) + unknown_gpu_notes(self.workload.base) + self._finetune_notes()
                   + self.workload.sequence_notes(batches[0])
                   + comm.assumptions() + [stack_note(stack, False, plan.parallelism)]
                   + self.loader.input_notes(loader, inputs, gpu_s)),
            seq_len=self.seq_len, tokens_per_sample=self.workload.tokens_per_sample,
            flops_per_token=self.flops_per_token, model_flops_per_token=self.flops_per_token if self.seq_len else None,
            input_bound=loader is not None and loader.kind != "measured" and breakdown[DATA] > 0,
            data_loading=loader.kind if loader is not None else self.data_loading,
            input_time_s=loader.time_s if loader is not None and loader.kind != "measured" else None,
            memory_safe_batch=(self.plans.safe_batch(view, batches, Candidate(plan.parallelism, plan.checkpointing))
                               if plan.memory.state != "fits" else None),
            grad_compression=(self.job.grad_compression if plan.parallelism == DDP and cluster.gpus > 1
                              and self.job.compression.active else None),
            stack=stack.name))

    def _finetune_notes(self) -> list[str]:
        """What a fine-tuning job trains and stores (srift/simulate/finetune.py)."""
        f = self.workload.frozen
        if f is None:
            return []
        if f.unit_measured_bytes is not None:
            return [f"profiled {f.mode} fine-tuning: {f.trainable_params / 1e6:,.1f}M trainable parameters, "
                    f"{f.stored_bytes(self.precision) / 2**30:,.2f} GiB of frozen weights as the profile recorded them"]
        base = "" if f.mode == FULL_FINETUNE else (
            f"; {f.frozen_params / 1e9:,.2f}B base weights frozen"
            + (f" ({f.quantized_params / 1e9:,.2f}B in NF4, "
               f"{'double quantization' if self.job.nf4_double_quant else 'fp32 block constants'})" if f.mode == QLORA else "")
            + (f", LoRA rank {self.job.lora_rank} on {self.job.lora_targets}"))
        return [f"{f.mode} fine-tuning: {f.trainable_params / 1e6:,.1f}M trainable parameters{base}; {f.optimizer} states "
                f"for them only; every tensor in {self.precision} (no fp32 master copy)", *trick_notes(self.workload.tricks)]

    @staticmethod
    def _notes(times: LayerTimes, kfac: KfacPlan | None) -> list[str]:
        notes = []
        if times.anchored_from:
            notes.append(f"compute scaled from times measured on {times.anchored_from}, carrying part of their "
                         "departure from the model (a GPU's own quirks do not carry over; README: Accuracy)")
        elif times.anchored:
            notes.append("compute anchored on measured times")
        if kfac is not None:
            notes.append("K-FAC kernels from the profile's measured times (srift profile --kfac)" if kfac.measured_kernels
                         else f"K-FAC kernels ({kfac.inverse_method}): {kfac.kernels.basis} (docs/kfac.md)")
        return notes


def unknown_gpu_notes(profile: Profile) -> list[str]:
    """Say so when a profile's times were measured on a GPU srift does not know (review item C1: a
    variant such as the H100 NVL, a MIG slice): they are not used, the model predicts compute."""
    dev = profile.device
    if not profile.measured or dev.kind != "cuda" or measured_gpu(profile) is not None:
        return []
    return [f"times measured on '{dev.name}', a GPU srift does not know (configs/gpus.yaml): not used, "
            "compute predicted from the profile's FLOPs and bytes"]


def job_with_profile_defaults(job: Job, profile: Profile) -> Job:
    """``job`` with the parallelism and checkpointing the profiled script ran (an FSDP script's
    profile records them) where the job leaves them to ``auto``, and the stack ``srift profile``
    detected where the job names none; K-FAC jobs keep DDP."""
    if job.stack is None and profile.stack is not None:
        job = dataclasses.replace(job, stack=profile.stack.name)
    parallelism, checkpointing = job.parallelism, job.activation_checkpointing
    if parallelism == AUTO and profile.parallelism is not None and not job.kfac:
        parallelism = profile.parallelism
    if checkpointing == AUTO and profile.activation_checkpointing is not None:
        checkpointing = profile.activation_checkpointing
    if (parallelism, checkpointing) == (job.parallelism, job.activation_checkpointing):
        return job
    return dataclasses.replace(job, parallelism=parallelism, activation_checkpointing=checkpointing)


def predict(profile: Profile, cluster: Cluster, job: Job | None = None, more_profiles: Sequence[Profile] = (),
            model_flops_per_token: Callable[[int], float] | None = None) -> Prediction:
    """Predict one iteration of ``profile`` trained as ``job`` on ``cluster`` (``more_profiles``:
    the same job measured on other GPUs; see ``Predictor``)."""
    return Predictor(profile, job or Job(), more_profiles, model_flops_per_token).predict(cluster)
