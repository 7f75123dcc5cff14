"""Expert tensor parallelism (#46): without expert parallelism the experts are split over the TP
ranks like a dense MLP (megatron-core 0.16.1's expert_tensor_parallel_size default), in memory,
compute and TP communication. Hand calculations against srift/simulate/moe.py and the layout plan."""

from __future__ import annotations

import dataclasses
import json

import pytest

from srift.cli import main
from srift.cluster import Cluster, NodeGroup
from srift.perf.comm import CommModel
from srift.simulate.layout.blocks import block_parts
from srift.simulate.layout.collectives import block_comm
from srift.simulate.layouts import Layout, PlanSettings, plan_layout
from srift.simulate.moe import (expert_dp, expert_tp, local_expert_params, moe_act_bytes, moe_activation_bytes,
                                moe_block_shape)
from srift.zoo import llm_arch
from srift.zoo.llm import DecoderArch

TINY = DecoderArch("tiny-moe", n_layers=2, hidden=64, heads=4, kv_heads=4, intermediate=256, vocab=100, experts=8,
                   experts_per_token=2, expert_intermediate=32)


def dgx(gpus: int) -> Cluster:
    return Cluster(f"{gpus} H100", (NodeGroup(count=max(1, gpus // 8), gpus_per_node=min(8, gpus), gpu="H100",
                                              intra_node="nvswitch4", network_gbps=3200.0, network="infiniband"),))


def test_expert_tp_follows_megatron_cores_default_without_expert_parallelism():
    assert expert_tp(8, 1) == 8 and expert_tp(1, 1) == 1
    assert expert_tp(8, 2) == 1  # with EP: whole experts (srift's validated recipes)
    assert expert_dp(8, 1, 2, 1) == 2  # 16 ranks, each expert split 8 ways: two copies of each shard
    assert expert_dp(2, 1, 8, 4) == 4


def test_expert_tp_shape_bytes_and_flops_by_hand():
    # 128 tokens on this rank (its sequence-parallel shard), top-2, 8 experts, TP 4, no EP.
    s = moe_block_shape(TINY, tokens=128, ep=1, element_bytes=2.0, etp=4)
    assert s.routed_rows == 256 and s.local_experts == 8 and s.etp == 4
    # the TP group's 4 x 256 rows gathered, over all 8 experts: 128 rows each, at width 32 / 4 = 8
    assert s.rows_per_expert == 4 * 256 // 8 == 128
    assert s.expert_gemms == ((128, 64, 8), (128, 64, 8), (128, 8, 64))
    assert s.etp_gather_bytes == 4 * 256 * 64 * 2
    # FLOPs per rank: 8 experts x 3 GEMMs x 2 x rows x 64 x 8 = the TP group's routed rows' FLOPs / 4
    flops = s.local_experts * sum(2 * r * i * o for r, i, o in s.expert_gemms)
    assert flops == 8 * 3 * 2 * 128 * 64 * 8 == 4 * 256 * 3 * 2 * 64 * 32 // 4
    # kept for backward: the gathered rows (hidden) and gate/up/product at the split width, fp32 probs
    assert moe_activation_bytes(TINY, s, 2.0) == 4 * 256 * (64 + 3 * 8) * 2 + 128 * 8 * 4
    assert moe_act_bytes(TINY, s, 2.0) == 4 * 256 * 8 * 2
    # weights per rank: all 8 experts at a quarter of their width (gate, up, down)
    assert local_expert_params(TINY, 1, 4) == 8 * 3 * 64 * 8 == local_expert_params(TINY, 1) // 4
    # etp 1 is the shape as before
    assert moe_block_shape(TINY, 128, 1, 2.0, etp=1) == moe_block_shape(TINY, 128, 1, 2.0)


def test_mixtral_tp8_pp2_weights_per_gpu_by_hand():
    """The issue's run (Mixtral 8x7B, TP 8, PP 2, no EP, 32 H100): each GPU holds 1/8 of each expert
    of its 16 blocks, not whole experts."""
    arch = llm_arch("mixtral-8x7b")
    lay = Layout(8, 2, 1, 2, micro_batch=1, grad_accum=64)
    plan = plan_layout(arch, dgx(32), lay, 4096, PlanSettings(precision="bf16"))
    experts = 16 * 8 * 3 * 4096 * (14336 // 8)  # 16 blocks x 8 experts x (gate, up, down) / TP 8
    assert local_expert_params(arch, 1, 8) * 16 == experts
    parts = block_parts(arch, 8, 1, 1, 4096, "bf16", "H100", 1)
    assert parts.local_expert_params == 8 * 3 * 4096 * 1792
    # stage 0: 16 blocks' attention (q, o 4096^2; k, v 4096 x 1024) split 8 ways, their two norms and
    # router (4096 x 8) whole, and the vocab-parallel embedding (32000 x 4096) over the 8 TP ranks
    non_expert = 16 * ((2 * 4096 * 4096 + 2 * 4096 * 1024) // 8 + 2 * 4096 + 4096 * 8) + 32000 * 4096 // 8
    assert plan.memory_breakdown_bytes["weights"] == 2 * (non_expert + experts)  # 5.4 GiB, not 42.2
    # Adam's 12 bytes per parameter over the 2 data-parallel (and expert data-parallel) ranks
    assert plan.memory_breakdown_bytes["optimizer_state"] == 12 * (non_expert + experts) / 2


def test_expert_tp_all_gather_and_reduce_scatter_by_hand():
    arch = llm_arch("mixtral-8x7b")
    comm = CommModel.for_cluster(dgx(8))
    parts = block_parts(arch, 8, 1, 1, 4096, "bf16", "H100", 1)
    # 512 tokens per rank x top-2 x hidden 4096 x 2 bytes, gathered over the 8 TP ranks
    assert parts.etp_gather_bytes == 8 * 512 * 2 * 4096 * 2
    with_etp = block_comm(arch, comm, 8, 1, 1, 4096, 2.0, parts)
    without = block_comm(arch, comm, 8, 1, 1, 4096, 2.0, dataclasses.replace(parts, etp_gather_bytes=0.0))
    tp = comm.subgroup(8, 8)
    dense = 4096 * 4096 * 2.0  # the MLP's own sequence-parallel gather, which the dispatcher's replaces
    extra = (tp.all_gather_time_s(parts.etp_gather_bytes) + tp.reduce_scatter_time_s(parts.etp_gather_bytes)
             - tp.all_gather_time_s(dense) - tp.reduce_scatter_time_s(dense))
    assert extra > 0
    assert with_etp.tp_f_s - without.tp_f_s == pytest.approx(float(extra), rel=1e-9)
    assert with_etp.tp_b_s - without.tp_b_s == pytest.approx(float(extra), rel=1e-9)


def test_predict_mixtral_tp8_pp2_is_priced(capsys):
    assert main(["predict", "--model", "mixtral-8x7b", "--instance", "p5.48xlarge:4", "--layout", "tp=8,pp=2",
                 "--seq-len", "4096", "--micro-batch-size", "1", "--global-batch-size", "128",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"]["tp"] == 8 and out["layout"]["ep"] == 1
    assert out["breakdown"]["exposed_tp"] > 0
    assert any("expert tensor parallelism 8" in n for n in out["notes"])


# ---- expert MLP kinds: gated GeGLU, plain GELU/ReLU ------------------------------------------------
def _mixtral_config(tmp_path, act):
    import srift.zoo.hf_config as hf  # noqa: F401  (the reader under test)
    cfg = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
           "max_position_embeddings": 256, "num_local_experts": 8, "num_experts_per_tok": 2, "hidden_act": act,
           "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    path = tmp_path / f"{act}.json"
    path.write_text(json.dumps(cfg))
    return path


def test_a_geglu_experts_params_and_flops_by_hand(tmp_path):
    from srift.zoo.hf_config import arch_from_hf_config
    from srift.zoo.llm import expert_profile, model_flops_per_token, moe_mlp_params
    arch = arch_from_hf_config(_mixtral_config(tmp_path, "gelu"))
    assert arch.mlp == "geglu" and arch.unmodelled == ()
    # gate, up (64 x 96) and down (96 x 64) per expert, 8 experts, a 64 x 8 router
    assert moe_mlp_params(arch) == 8 * 3 * 64 * 96 + 64 * 8
    assert moe_mlp_params(arch, active=True) == 2 * 3 * 64 * 96 + 64 * 8
    # one expert on 10 rows: three GEMMs of 2 x 10 x 64 x 96 FLOPs forward, twice that backward
    prof = expert_profile(arch, 10)
    gemm = [layer for layer in prof.layers if layer.type == "Linear"]
    assert sum(layer.fwd_flops for layer in gemm) == 3 * 2 * 10 * 64 * 96
    assert sum(layer.bwd_flops for layer in gemm) == 2 * 3 * 2 * 10 * 64 * 96
    assert [layer.type for layer in prof.layers if layer.type != "Linear"] == ["GELU"]
    # 6 x active parameters + attention per token: a GeGLU expert costs a SwiGLU expert's GEMMs
    silu = arch_from_hf_config(_mixtral_config(tmp_path, "silu"))
    assert model_flops_per_token(arch, 128) == model_flops_per_token(silu, 128)
    s = moe_block_shape(arch, 32, 1, 2.0)
    assert s.expert_gemms == ((8, 64, 96), (8, 64, 96), (8, 96, 64))  # 32 x 2 rows over 8 experts


def test_an_activation_srift_does_not_model_is_named_not_refused(tmp_path, capsys):
    from srift.zoo.hf_config import arch_from_hf_config
    arch = arch_from_hf_config(_mixtral_config(tmp_path, "relu"))
    assert arch.mlp == "swiglu" and "'relu'" in arch.unmodelled[0]
    assert arch_from_hf_config(_mixtral_config(tmp_path, "gelu_pytorch_tanh")).mlp == "geglu"
    assert main(["predict", "--model-config", str(_mixtral_config(tmp_path, "relu")), "--instance", "p5.48xlarge",
                 "--layout", "tp=1,pp=1,ep=8", "--seq-len", "256", "--micro-batch-size", "1",
                 "--global-batch-size", "64", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(n.startswith("not modelled: 'hidden_act' 'relu'") for n in out["notes"])


def test_plain_gelu_experts_have_two_matrices():
    from srift.zoo.llm import expert_profile, moe_mlp_params
    plain = dataclasses.replace(TINY, mlp="gelu")
    assert moe_mlp_params(plain) == 8 * 2 * 64 * 32 + 64 * 8
    s = moe_block_shape(plain, tokens=128, ep=4, element_bytes=2.0)
    assert s.expert_gemms == ((128, 64, 32), (128, 32, 64))
    # kept: input rows, the up output and the activation (2 x width), fp32 probabilities
    assert moe_activation_bytes(plain, s, 2.0) == 256 * (64 + 2 * 32) * 2 + 128 * 8 * 4
    relu = expert_profile(dataclasses.replace(TINY, mlp="relu"), 10)
    assert [layer.type for layer in relu.layers] == ["Linear", "ReLU", "Linear"]
    assert sum(layer.fwd_flops for layer in relu.layers if layer.type == "Linear") == 2 * 2 * 10 * 64 * 32


def test_predict_mixtral_tp8_pp2_says_no_all_to_all_without_ep(capsys):
    assert main(["predict", "--model", "mixtral-8x7b", "--instance", "p5.48xlarge:4", "--layout", "tp=8,pp=2",
                 "--seq-len", "4096", "--global-batch-size", "128", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    moe = next(n for n in out["notes"] if n.startswith("mixture of experts"))
    assert "ep=1: every rank computes every expert" in moe and "all-to-alls exposed" not in moe
    assert out["breakdown"]["exposed_ep"] == 0.0


def test_predict_grok1_shaped_geglu_experts_by_hand(tmp_path, capsys):
    """Grok-1's shapes (data/moe-training README: 64 blocks, hidden 6144, 48 heads of 128, 8 key/value
    heads, 8 experts of 32,768, top-2, vocabulary 131,072) as a Mixtral config with GELU experts:
    predicted with EP 8 on 512 H100, its parameters counted by hand (gate, up and down per expert)."""
    cfg = {"model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 32768, "num_hidden_layers": 64,
           "num_attention_heads": 48, "num_key_value_heads": 8, "vocab_size": 131072, "max_position_embeddings": 8192,
           "num_local_experts": 8, "num_experts_per_tok": 2, "hidden_act": "gelu", "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False}
    path = tmp_path / "grok1.json"
    path.write_text(json.dumps(cfg))
    assert main(["predict", "--model-config", str(path), "--instance", "p5.48xlarge:64", "--layout", "tp=4,pp=8,ep=8",
                 "--seq-len", "4096", "--global-batch-size", "1024", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    attention = 2 * 6144 * 6144 + 2 * 6144 * 1024
    block = attention + 2 * 6144 + 6144 * 8 + 8 * 3 * 6144 * 32768
    assert out["params_total"] == 64 * block + 2 * 131072 * 6144 + 6144 == 316_489_340_928
    assert out["params_active"] == 64 * (block - 6 * 3 * 6144 * 32768) + 2 * 131072 * 6144 + 6144
    assert out["layout"]["ep"] == 8 and out["ok"]
    assert not any(n.startswith("not modelled") for n in out["notes"])


def test_a_mixtral_configs_sliding_window_slides_every_block(tmp_path):
    """transformers 5.24.0: MixtralAttention passes config.sliding_window to every block (Mixtral
    8x7B's own config has null); Qwen3-MoE only under use_sliding_window; Qwen2-MoE's partial
    pattern is named, not modelled."""
    from srift.zoo.hf_config import arch_from_hf_config
    from srift.zoo.llm import decoder_profile
    path = _mixtral_config(tmp_path, "silu")
    cfg = json.loads(path.read_text())
    path.write_text(json.dumps(dict(cfg, sliding_window=64)))
    arch = arch_from_hf_config(path)
    assert arch.sliding_window == 64 and arch.sliding_blocks == 2 and arch.unmodelled == ()
    # one block's attention core at 256 tokens: 64-key windows, s w - w^2 / 2 = 14,336 (query, key)
    # pairs, against 256^2 / 2 = 32,768 causal ones: 2 x 4 heads x (16 + 16) FLOPs a pair
    core = next(layer for layer in decoder_profile(arch, batch_size=1, seq_len=256).layers
                if layer.type == "ScaledDotProductAttention")
    assert core.fwd_flops == 2 * 4 * 32 * (256 * 64 - 64 * 64 / 2)
    path.write_text(json.dumps(dict(cfg, sliding_window=None)))
    assert arch_from_hf_config(path).sliding_window == 0
    qwen3 = {"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "vocab_size": 100, "max_position_embeddings": 256, "num_experts": 8, "num_experts_per_tok": 2,
             "sliding_window": 64, "use_sliding_window": False}
    path.write_text(json.dumps(qwen3))
    assert arch_from_hf_config(path).sliding_window == 0  # Qwen3MoeConfig drops it without use_sliding_window
    path.write_text(json.dumps(dict(qwen3, use_sliding_window=True)))
    assert arch_from_hf_config(path).sliding_window == 64
    qwen2 = dict(qwen3, model_type="qwen2_moe", shared_expert_intermediate_size=64, use_sliding_window=True)
    path.write_text(json.dumps(qwen2))
    arch2 = arch_from_hf_config(path)
    assert arch2.sliding_window == 0 and arch2.unmodelled[0].startswith("'use_sliding_window'")
