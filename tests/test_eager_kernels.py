"""``--stack hf-trainer`` runs Transformers' own modelling code: its RMSNorm, residual sums, gated
product and rotary embedding are chains of separate PyTorch kernels (srift/simulate/eager.py,
counted from transformers 4.56.1 modeling_llama.py). Checked against a hand count of the bytes on
Mistral 7B (hidden 4096, 8 KV heads of 128, MLP 14336) at 2 x 256 tokens in bf16 (2-byte elements)."""

from __future__ import annotations

import dataclasses

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.job import Job
from srift.simulate import Predictor
from srift.simulate.eager import eager_profile, norm_extra_bytes
from srift.stacks import FusedKernels, eager_kernels, load_stacks
from srift.zoo import llm_arch
from srift.zoo.llm import decoder_profile

TOKENS = 2 * 256


def _mistral():
    return decoder_profile(llm_arch("mistral-7b"), batch_size=2, seq_len=256, precision="bf16")


def test_the_eager_rmsnorm_chain_is_28_plus_4e_forward_and_56_plus_4e_backward_bytes_per_element() -> None:
    # forward: cast to fp32 (2 + 4), pow (4 + 4), mean (4), rsqrt product (4 + 4), cast back (4 + 2),
    # weight product (2 + 2) = 36; the profile's norm already moves 2 + 2.
    # backward: 2 + 2, 2 + 4, 4 + 4, 16, 12, 12, 4 + 2 = 64; the profile's 8.
    assert norm_extra_bytes(2.0) == (32.0, 56.0)


def test_an_analytic_llama_profile_gains_each_blocks_eager_chains_by_hand_count() -> None:
    base = _mistral()
    eager = eager_profile(base)
    added = {x.name: x for x in eager.layers if x.name not in {y.name for y in base.layers}}
    h, kv, inter = 4096, 8 * 128, 14336
    norm = added["model.layers.0.input_layernorm.fp32_chain"]
    assert (norm.fwd_bytes, norm.bwd_bytes) == (32.0 * TOKENS * h, 56.0 * TOKENS * h)
    res = added["model.layers.0.post_attention_layernorm.residual_add"]
    assert (res.fwd_bytes, res.bwd_bytes) == (6.0 * TOKENS * h, 6.0 * TOKENS * h)
    gated = added["model.layers.0.mlp.up_proj.gated_product"]
    assert (gated.fwd_bytes, gated.bwd_bytes) == (6.0 * TOKENS * inter, 12.0 * TOKENS * inter)
    rope = added["model.layers.0.self_attn.sdpa.rotary_apply"]
    assert (rope.fwd_bytes, rope.bwd_bytes) == (24.0 * TOKENS * (h + kv), 24.0 * TOKENS * (h + kv))
    # Per block: 2 norm chains, 2 residual sums, 1 gated product, 1 rotary; the final norm's chain
    # without a residual sum. No FLOPs, no parameters, nothing kept: the memory model is unchanged.
    assert len(added) == 32 * 6 + 1
    assert all(x.fwd_flops == 0 and x.params == 0 and x.activation_bytes == 0 for x in added.values())
    assert eager.params == base.params and eager.fwd_flops == base.fwd_flops
    # The rotary leaf runs before the attention core, the gated product before the down projection.
    names = [x.name for x in eager.layers]
    assert names.index("model.layers.0.self_attn.sdpa.rotary_apply") == names.index("model.layers.0.self_attn.sdpa") - 1
    assert names.index("model.layers.0.mlp.up_proj.gated_product") == names.index("model.layers.0.mlp.down_proj") - 1


def test_a_measured_profile_or_a_model_without_rmsnorm_blocks_is_not_transformed() -> None:
    base = _mistral()
    # A profile whose layers carry measured times timed the eager kernels as they ran.
    measured = dataclasses.replace(base, layers=[dataclasses.replace(x, fwd_s=1e-4, bwd_s=2e-4) for x in base.layers])
    assert measured.measured and eager_profile(measured) is measured
    gpt = decoder_profile(llm_arch("gpt3-175b"), batch_size=2, seq_len=256, precision="bf16")  # LayerNorm blocks
    assert eager_profile(gpt) is gpt


def test_only_the_hf_trainer_stack_runs_eager_kernels_and_its_step_is_slower_by_their_bytes() -> None:
    stacks = load_stacks()
    assert [n for n, s in stacks.items() if s.fused_kernels.value == FusedKernels.TRANSFORMERS_EAGER] == ["hf-trainer"]
    assert eager_kernels(Job(stack="hf-trainer")) and not eager_kernels(Job()) and not eager_kernels(Job(stack="pytorch"))
    cluster = Cluster("1 x H100", (NodeGroup(1, 1, "H100", "nvswitch4", 0.0),))
    prof = decoder_profile(llm_arch("mistral-7b"), batch_size=16, seq_len=2048, precision="bf16")
    plain = Predictor(prof, Job(batch_size=16, precision="bf16", activation_checkpointing="full", stack="pytorch")).predict(cluster)
    hf = Predictor(prof, Job(batch_size=16, precision="bf16", activation_checkpointing="full", stack="hf-trainer")).predict(cluster)
    assert hf.iteration_time_s > plain.iteration_time_s
    assert hf.memory_per_gpu_bytes == pytest.approx(plain.memory_per_gpu_bytes)
    # Forward 520,192 bytes a token and block (2 x 32 h + 2 x 6 h + 6 x MLP + 24 (h + kv)), backward
    # 802,816; each block checkpointed, the forward runs twice; at the compute model's memory rate
    # (its element-wise efficiency and one launch per chain aside, hence the tolerance) the step
    # grows by those bytes' time.
    from srift.perf.compute import kernel_rates
    extra = (2 * 520_192 + 802_816) * 32 * 16 * 2048 / kernel_rates("H100", "bf16").memory_bytes_per_s
    assert hf.iteration_time_s - plain.iteration_time_s == pytest.approx(extra, rel=0.1)
