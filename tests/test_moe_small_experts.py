"""Few rows per expert (#46): the tensor cores multiply each expert's rows in whole instructions
(PTX ISA shapes: Hopper's wgmma m64, Ampere's mma.sync m16, Volta's m8), so a grouped GEMM pads
each expert's last instruction; checked by hand on the FLOPs the compute model is given."""

from __future__ import annotations

import pytest

from srift.perf.compute import kernel_rates, layer_times
from srift.simulate.moe import mma_padded, mma_rows, moe_block_shape, moe_block_times
from srift.zoo.llm import DecoderArch, expert_profile

# One expert: gate and up 64 -> 32, down 32 -> 64.
TINY = DecoderArch("tiny-moe", n_layers=2, hidden=64, heads=4, kv_heads=4, intermediate=256, vocab=100, experts=128,
                   experts_per_token=1, expert_intermediate=32)


def test_instruction_rows_by_compute_capability():
    assert mma_rows("H100") == mma_rows("B200") == mma_rows("GB300") == 64  # sm_90 wgmma, sm_100/103 tcgen05
    assert mma_rows("A100-80GB") == mma_rows("RTX-4090") == mma_rows("T4") == mma_rows("RTX-PRO-6000") == 16
    assert mma_rows("V100-32GB") == 8


def test_padded_flops_by_hand():
    prof = expert_profile(TINY, 20)
    gate = next(layer for layer in prof.layers if layer.type == "Linear")
    assert gate.fwd_flops == 2 * 20 * 64 * 32 and gate.bwd_flops == 2 * gate.fwd_flops
    padded = mma_padded(prof, 20, "H100", "bf16")
    p_gate = next(layer for layer in padded.layers if layer.type == "Linear")
    # forward and the input gradient on 64 rows; the weight gradient reduces over the 20 real ones
    assert p_gate.fwd_flops == pytest.approx(2 * 64 * 64 * 32)
    assert p_gate.bwd_flops == pytest.approx(2 * 64 * 64 * 32 + 2 * 20 * 64 * 32)
    assert p_gate.fwd_bytes == gate.fwd_bytes  # the real rows are read and written
    assert [layer.fwd_flops for layer in mma_padded(prof, 20, "A100-80GB", "bf16").layers if layer.type == "Linear"] \
        == pytest.approx([2 * 32 * 64 * 32] * 2 + [2 * 32 * 32 * 64])  # 20 rows -> 2 instructions of 16
    assert mma_padded(prof, 20, "H100", "fp32") is prof  # CUDA cores: no instruction rows
    assert mma_padded(expert_profile(TINY, 128), 128, "H100", "bf16").layers == expert_profile(TINY, 128).layers


def test_the_experts_time_is_the_padded_rows_by_hand():
    """128 experts of 4096 -> 8192 (Llama 4 Maverick's width), top-1, no EP: 1,409 rows an expert run
    as 1,472 (23 instructions of 64) on H100, where the compute model has these GEMMs FLOP-bound
    (below about 1,300 rows it has them bound by reading the expert's weights, and the padding
    costs nothing)."""
    arch = DecoderArch("wide-moe", n_layers=2, hidden=4096, heads=32, kv_heads=8, intermediate=8192, vocab=1000,
                       experts=128, experts_per_token=1, expert_intermediate=8192)
    shape = moe_block_shape(arch, 1409 * 128, 1, 2.0)
    assert shape.rows_per_expert == 1409 and shape.local_experts == 128
    times = moe_block_times(arch, shape, "H100", "bf16", None)
    mem = kernel_rates("H100", "bf16").memory_bytes_per_s

    def experts_f_s(prof):
        return float(layer_times(prof, "H100", "bf16").fwd_s.sum()) * 128 + shape.permute_bytes / mem

    plain = expert_profile(arch, 1409)
    assert times.experts_f_s == pytest.approx(experts_f_s(mma_padded(plain, 1409, "H100", "bf16")))
    assert times.experts_f_s > 1.02 * experts_f_s(plain)  # 1472 / 1409 on the GEMMs (the activation is not padded)


def test_pytorchs_grouped_mm_launches_once_per_op_by_hand():
    """torchtitan's experts run one torch._grouped_mm per projection over every local expert: the
    compute model's fixed cost per pass counts once per op (PyTorch's stack), where Megatron-Core's
    is priced per expert (the MoE group's validation)."""
    shape = moe_block_shape(TINY, 2560, 1, 2.0)
    rates = kernel_rates("H100", "bf16")
    megatron = moe_block_times(TINY, shape, "H100", "bf16", None)
    pytorch = moe_block_times(TINY, shape, "H100", "bf16", None, one_kernel=True)
    ops = 4  # gate, up, activation, down: each has forward and backward work
    assert megatron.experts_f_s - pytorch.experts_f_s == pytest.approx((128 - 1) * ops * rates.launch_s)
    assert megatron.experts_b_s - pytorch.experts_b_s == pytest.approx((128 - 1) * ops * rates.launch_s)
    assert megatron.act_f_s - pytorch.act_f_s == pytest.approx((128 - 1) * rates.launch_s)
