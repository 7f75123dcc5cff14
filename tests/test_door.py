"""One job, one answer: the same decoder LLM job through ``--parallelism`` and through ``--layout
tp=1,pp=1,cp=1`` gets the same iteration time and memory per GPU (srift/simulate/door.py)."""

from __future__ import annotations

import dataclasses

import pytest

from srift import api
from srift.errors import SriftError
from srift.job import Job
from srift.simulate.door import is_data_parallel_layout, route
from srift.zoo import llm_arch

LLAMA = llm_arch("llama3-8b")

# (the job through --parallelism, instance): the two jobs, FSDP with selective recompute (the
# layout door priced it 53 % heavier before) and FSDP with full recompute at micro-batch 2 (13 %
# slower before), LoRA under FSDP (the layout door refused it) and
# ZeRO-1 (the data-parallel door refused it).
CASES = {
    "fsdp-selective": (Job(seq_len=8192, micro_batch_size=1, parallelism="fsdp", activation_checkpointing="selective"),
                       "p5.48xlarge:4"),
    "fsdp-full-mb2": (Job(seq_len=4096, micro_batch_size=2, parallelism="fsdp", activation_checkpointing="full"),
                      "p4d.24xlarge:2"),
    "lora-fsdp": (Job(seq_len=4096, micro_batch_size=1, parallelism="fsdp", activation_checkpointing="full",
                      finetune="lora"), "p4d.24xlarge:2"),
    "zero1": (Job(seq_len=4096, micro_batch_size=1, parallelism="zero1", activation_checkpointing="full"),
              "p5.48xlarge:2"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_doors_give_one_answer(case: str) -> None:
    job, instance = CASES[case]
    by_parallelism = api.predict(job, model="llama3-8b", instance=instance).prediction
    by_layout = api.predict(dataclasses.replace(job, layout="tp=1,pp=1,cp=1"), model="llama3-8b",
                            instance=instance).prediction
    assert by_layout.global_batch_size == by_parallelism.global_batch_size
    assert by_layout.iteration_time_s == pytest.approx(by_parallelism.iteration_time_s, rel=0.03)
    assert by_layout.memory_per_gpu_bytes == pytest.approx(by_parallelism.memory_per_gpu_bytes, rel=0.03)
    assert by_layout.parallelism == by_parallelism.parallelism == job.parallelism


def test_route_keeps_the_batch() -> None:
    """A data-parallel layout's batch by hand: micro-batch 2 on 16 GPUs, 4 accumulations -> 128
    sequences a step, as the layout counts them (micro x DP x accumulation)."""
    job = Job(seq_len=4096, layout="tp=1,pp=1,cp=1", micro_batch_size=2, grad_accum=4, parallelism="fsdp")
    routed = route(job, LLAMA, 16)
    assert routed.layout is None and routed.global_batch_size == 2 * 16 * 4 and routed.micro_batch_size == 2
    zero1 = route(Job(seq_len=4096, batch_size=2, grad_accum=4, parallelism="zero1"), LLAMA, 16)
    assert zero1.layout == "tp=1,pp=1,cp=1" and zero1.micro_batch_size == 2 and zero1.grad_accum == 4


def test_layouts_that_split_or_need_megatron_stay() -> None:
    """A layout that splits the model, Megatron's DDP, or a setting only the layout simulator
    models (FP8 GEMMs) stays on the layout path."""
    for job in (Job(layout="tp=2,pp=1,cp=1", parallelism="fsdp"), Job(layout="tp=1,pp=1,cp=1", parallelism="ddp"),
                Job(layout="auto", parallelism="fsdp"), Job(layout="tp=1,pp=1,cp=1", parallelism="fsdp", fp8="tensorwise")):
        assert not is_data_parallel_layout(job, LLAMA)
        assert route(job, LLAMA, 8) == job


@pytest.mark.parametrize("extra", [{}, {"finetune": "lora", "layout": "tp=2,pp=1,cp=1", "parallelism": "zero1"}])
def test_eight_bit_adamw_is_refused_where_it_is_not_modelled(extra: dict) -> None:
    job = Job(seq_len=2048, optimizer="adamw8bit", **extra)
    with pytest.raises(SriftError) as err:
        api.predict(job, model="llama3-8b", instance="p5.48xlarge:1")
    assert "adamw8bit" in str(err.value) and err.value.hint


def test_a_layout_answers_may_not_fit_by_the_one_fit_rule() -> None:
    """Llama 3 70B at tp=8,pp=2 with full recompute on 16 H100s: about 67 GiB reserved at the peak.
    By hand: 80 GiB x 0.95 = 76 GiB usable; the peak's 90th percentile, x (1 + 1.2816 x 0.137),
    is about 78.6 GiB, above it; the median is below: ``may not fit``, as the data-parallel path
    says of the same numbers (srift.simulate.memory.fit_state), and the prediction is still shown."""
    job = Job(seq_len=4096, layout="tp=8,pp=2,cp=1", activation_checkpointing="full")
    pred = api.predict(job, model="llama3-70b", instance="p5.48xlarge:2").prediction
    gib = pred.memory_per_gpu_bytes / 2**30
    assert 60 < gib < 76 and gib * (1 + 1.2816 * 0.137) > 80 * 0.95
    assert pred.memory_fit == "may not fit" and pred.fits_in_memory


def test_a_layout_job_builds_no_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route at the door: a --layout job is priced from the architecture's blocks alone (the
    884-layer profile of Llama 3 70B and a data-parallel workload were built and never used)."""
    def no_profile(*args: object, **kwargs: object) -> None:
        raise AssertionError("a layout job built a profile")
    monkeypatch.setattr(api, "resolve_profiles", no_profile)
    job = Job(seq_len=4096, layout="tp=8,pp=2,cp=1", activation_checkpointing="full")
    result = api.predict(job, model="llama3-70b", instance="p5.48xlarge:2")
    assert result.model == "llama3-70b" and result.precision == "bf16" and result.prediction.layout is not None


@pytest.mark.parametrize("option", [{"fused_loss": True}, {"bucket_cap_mb": 100.0}, {"data_loading": "synthetic"}])
def test_a_layout_refuses_the_options_it_would_ignore(option: dict) -> None:
    """The layout simulator prices its stack's loss and gradient reduction and no input pipeline:
    these options changed nothing there, so they are refused, not silently dropped."""
    job = Job(seq_len=4096, layout="tp=2,pp=1,cp=1", activation_checkpointing="full", **option)
    with pytest.raises(SriftError) as err:
        api.predict(job, model="llama3-8b", instance="p5.48xlarge:1")
    assert "--layout" in str(err.value) and "drop" in err.value.hint
