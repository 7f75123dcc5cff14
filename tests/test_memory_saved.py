"""Activation memory as autograd saves it (srift/profiling/saved.py), and what the memory model
makes of it: the peak reserved memory, fit at confidence, and the runs people ran (issue 29)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from srift.job import Job
from srift.profiling.saved import measure_saved_bytes, per_sample_bytes
from srift.simulate import Predictor
from srift.simulate.memory import (
    ALLOCATOR_ERROR, ALLOCATOR_FACTOR, ALLOCATOR_FIXED_BYTES, USABLE_FRACTION, fit_state, memory_breakdown_bytes,
    reserved_breakdown_bytes,
)
from srift.perf.quantiles import Z90
from srift.zoo import load_builtin_profile
from srift.zoo.text import TransformerBlock


def _cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10))


def _cnn_measure(model: nn.Module, dtype: torch.dtype | None):
    def measure(batch: int, seq: int | None) -> dict[str, float]:
        x, y = torch.randn(batch, 3, 8, 8), torch.zeros(batch, dtype=torch.long)
        return measure_saved_bytes(model, lambda: nn.functional.cross_entropy(model(x), y), dtype)
    return measure


def test_small_cnn_saved_bytes_per_sample_match_hand_count():
    per = {s.name: s.linear for s in per_sample_bytes(_cnn_measure(_cnn(), None))}
    # Per sample, fp32: the conv keeps its input (3x8x8x4); BatchNorm its input (4x8x8x4); the
    # in-place ReLU its output (BatchNorm's, 4x8x8x4); max-pool its input (that same storage,
    # counted once) and int64 indices (4x4x4x8); the Linear its input (4x4x4x4) and, charged to
    # it, the loss: log-softmax's output (10x4) and the int64 target (8).
    assert per == {"0": 768.0, "1": 1024.0, "2": 1024.0, "3": 512.0, "4": 0.0, "5": 256.0 + 40.0 + 8.0}


def test_small_cnn_under_autocast_saves_16_bit_inputs_and_fp32_loss():
    per = {s.name: s.linear for s in per_sample_bytes(_cnn_measure(_cnn(), torch.float16))}
    # Autocast casts the conv's input to fp16 (half of 768); its output, BatchNorm's input and the
    # ReLU's output stay fp16 (half of 1024 each); the indices stay int64; the loss runs in fp32.
    assert per == {"0": 384.0, "1": 512.0, "2": 512.0, "3": 512.0, "4": 0.0, "5": 128.0 + 40.0 + 8.0}


@pytest.mark.slow
def test_small_transformer_block_saved_bytes_and_seq_squared_part():
    block = TransformerBlock(16, 2, 32, pre_norm=True, dropout=0.0)

    def measure(batch: int, seq: int | None) -> dict[str, float]:
        x = torch.randn(batch, seq or 1, 16)
        return measure_saved_bytes(block, lambda: block(x).sum())

    scalings = {s.name: s for s in per_sample_bytes(measure, 8)}
    per_token = {k: s.linear for k, s in scalings.items()}
    # Per token, fp32, width 16: LayerNorm keeps its input (64) and mean and rstd (8); qkv its
    # input (64); attention q and k, views of qkv's output (48 x 4 = 192, one storage, v included);
    # proj, fc its input (64); GELU its input (32 x 4); fc_out GELU's output (128).
    assert per_token == {"ln_1": 72.0, "attn.qkv": 64.0, "attn.core": 192.0, "attn.proj": 64.0, "drop_1": 0.0,
                         "ln_2": 72.0, "fc": 64.0, "act": 128.0, "fc_out": 128.0, "drop_2": 0.0}
    # The softmax's probabilities grow with seq^2: 2 heads x 4 bytes per token pair.
    assert scalings["attn.core"].quad == 8.0
    assert all(s.quad == 0.0 for k, s in scalings.items() if k != "attn.core")
    # The scaling reproduces a measurement at a size it was not fitted on.
    direct = measure(3, 20)
    for name, s in scalings.items():
        assert s.at(3, 20)[0] == pytest.approx(direct[name] - measure(1, 20)[name] + s.at(1, 20)[0], rel=1e-9)


def test_fit_state_uses_the_p90_of_the_reserved_peak():
    cap = 16 * 2**30 * USABLE_FRACTION
    p90 = 1.0 + Z90 * ALLOCATOR_ERROR
    assert fit_state(cap / p90 * 0.999, 16) == "fits"
    assert fit_state(cap / p90 * 1.001, 16) == "may not fit"
    assert fit_state(cap * 0.999, 16) == "may not fit"
    assert fit_state(cap * 1.001, 16) == "does not fit"


def test_resnet50_recipes_people_run_on_a_16gb_v100_fit():
    """NVIDIA's ResNet-50 recipe: fp32 at 128 and AMP at 256 per 16 GB V100 (data/dlperf-v100-ib)."""
    from srift.cluster import Cluster, NodeGroup

    cluster = Cluster("1 x V100", (NodeGroup(1, 1, "V100-16GB", "nvlink", 10.0, "ethernet"),))
    for precision, batch in (("fp32", 128), ("amp", 256)):
        pred = Predictor(load_builtin_profile("resnet50"), Job(batch_size=batch, precision=precision)).predict(cluster)
        assert pred.memory_fit == "fits", (precision, batch, pred.memory_per_gpu_bytes / 2**30)
        parts = pred.memory_breakdown_bytes
        assert sum(parts.values()) == pytest.approx(pred.memory_per_gpu_bytes)
        assert parts["allocator"] == pytest.approx((ALLOCATOR_FACTOR - 1.0) * pred.memory_allocated_bytes
                                                   + ALLOCATOR_FIXED_BYTES)


def test_reserved_breakdown_adds_the_allocator_and_refuses_negative_parts():
    gib = 2**30
    m = reserved_breakdown_bytes(weight_bytes=2 * gib, gradient_bytes=gib, optimizer_bytes=gib, activation_bytes=4 * gib,
                                 adapters=0.5 * gib)
    assert sum(m.values()) == pytest.approx(ALLOCATOR_FACTOR * 8.5 * gib + ALLOCATOR_FIXED_BYTES)
    with pytest.raises(ValueError, match="activations"):
        reserved_breakdown_bytes(weight_bytes=0.0, gradient_bytes=0.0, optimizer_bytes=0.0, activation_bytes=-1.0)


def test_autocast_halves_what_resnet50_saves_from_its_own_measurement():
    prof = load_builtin_profile("resnet50", batch_size=64)
    fp32 = memory_breakdown_bytes(prof, "fp32", buckets=False)["activations"]
    amp = memory_breakdown_bytes(prof, "amp", buckets=False)["activations"]
    # Not a factor: max-pool's int64 indices and the loss stay as they are, so a bit over half.
    assert 0.5 < amp / fp32 < 0.52


@pytest.mark.slow
def test_no_run_of_the_shared_cnn_and_bert_tables_is_refused():
    """Every zoo-model run in data/ (Lambda, NVIDIA DLE, DLPerf, ddl-benchmarks, DAWNBench) ran on
    its GPU: none may be predicted not to fit (scripts/validate_memory.py adds the LLM runs)."""
    from pathlib import Path

    from srift.fitting import memory_runs

    runs = memory_runs.predict_runs(memory_runs.ddp_runs(Path(__file__).resolve().parents[1] / "data"))
    assert {"lambda", "dle", "dlperf", "ddl-benchmarks", "dawnbench"} <= set(runs["source"])
    refused = runs[runs["state"] == "does not fit"]
    assert refused.empty, refused[["source", "model", "gpu", "precision", "batch_per_gpu", "reserved_gib"]].to_string()


def test_a_plan_within_the_error_band_may_not_fit_and_names_the_batch_that_fits_for_sure():
    """torchtitan ran Llama-3-8B, 2 x 8192 tokens per GPU, FSDP, selective checkpointing on 8 GPUs
    (data/llm-training-throughput, 82.4 GiB reserved on 96 GB H100s): on 80 GB H100s srift's median
    is under the usable memory, its p90 is not: shown as "may not fit", never refused."""
    from srift.cluster import Cluster, NodeGroup
    from srift.zoo import llm_arch
    from srift.zoo.llm import model_flops_per_token

    arch = llm_arch("llama3-8b")
    cluster = Cluster("8 x H100", (NodeGroup(1, 8, "H100", "nvswitch4", 3200.0, "infiniband"),))
    job = Job(batch_size=2, seq_len=8192, precision="bf16", parallelism="fsdp", activation_checkpointing="selective")
    predictor = Predictor(load_builtin_profile("llama3-8b", batch_size=2, seq_len=8192, precision="bf16"), job,
                          model_flops_per_token=lambda s: model_flops_per_token(arch, s))
    pred = predictor.predict(cluster)
    assert pred.fits_in_memory and pred.memory_fit == "may not fit"
    assert pred.memory_safe_batch == 1
    one = sum(predictor.plan_memory(1, "fsdp", "selective", 8).values())
    assert fit_state(one, 80) == "fits"
