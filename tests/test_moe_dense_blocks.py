"""Dense blocks among a mixture of experts' MoE blocks, read from the Hugging Face config as
transformers 5.24.0 builds them (#46): Qwen2/3-MoE's ``mlp_only_layers`` (``layer_idx not in
config.mlp_only_layers``) and DeepSeek-V3's ``moe_layer_freq``, which transformers' DeepseekV3 does
not read (named in the notes, not refused). Parameter counts and the plan checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

from srift.cli import main
from srift.cluster import Cluster, NodeGroup
from srift.simulate.layouts import Layout, PlanSettings, block_parts, plan_layout
from srift.zoo.hf_config import arch_from_hf_config
from srift.zoo.llm import active_params_count, params_count

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
# Qwen3-30B-A3B's MLP parts (hidden 2048): 128 experts of 3 x 2048 x 768 and the router 2048 x 128,
# or a dense SwiGLU MLP of intermediate_size 6144 (3 x 2048 x 6144).
EXPERTS_AND_ROUTER = 128 * 3 * 2048 * 768 + 2048 * 128
DENSE_MLP = 3 * 2048 * 6144


def _config(tmp_path: Path, name: str, **changes: object) -> Path:
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**data, **changes}))
    return path


def test_mlp_only_layers_are_dense_blocks_by_hand(tmp_path):
    base = arch_from_hf_config(FIXTURES / "Qwen3-30B-A3B.json")
    arch = arch_from_hf_config(_config(tmp_path, "Qwen3-30B-A3B", mlp_only_layers=[0, 47]))
    assert arch.dense_blocks == frozenset({0, 47}) and base.dense_blocks == frozenset()
    assert [arch.is_moe_block(i) for i in (0, 1, 46, 47)] == [False, True, True, False]
    assert arch.moe_blocks == 46
    assert params_count(base) - params_count(arch) == 2 * (EXPERTS_AND_ROUTER - DENSE_MLP)
    # active: 8 of 128 experts (and the router) per MoE block, against the dense MLP
    assert active_params_count(base) - active_params_count(arch) == 2 * (8 * 3 * 2048 * 768 + 2048 * 128 - DENSE_MLP)


def test_a_stage_of_dense_blocks_holds_no_experts(tmp_path):
    arch = arch_from_hf_config(_config(tmp_path, "Qwen3-30B-A3B", mlp_only_layers=[0, 1, 2, 3, 4, 5]))
    parts = block_parts(arch, 1, 1, 1, 4096, "bf16", "H100", 8)
    assert parts.moe_fraction == 42 / 48 and parts.kinds is not None
    moe, dense = parts.kinds
    assert moe.local_expert_params == 16 * 3 * 2048 * 768 and dense.local_expert_params == 0.0
    cluster = Cluster("16 H100", (NodeGroup(count=2, gpus_per_node=8, gpu="H100", intra_node="nvswitch4",
                                            network_gbps=3200.0, network="infiniband"),))
    plan = plan_layout(arch, cluster, Layout(1, 8, 1, 2, micro_batch=1, grad_accum=8, ep=2), 4096,
                       PlanSettings(checkpointing="full"))
    assert plan.fits and plan.iteration_s > 0.0


def test_moe_layer_freq_is_named_not_refused(tmp_path):
    path = _config(tmp_path, "DeepSeek-V3", moe_layer_freq=2)
    arch = arch_from_hf_config(path)
    assert arch.moe_blocks == 61 - 3  # as transformers builds it: every block from first_k_dense_replace
    assert any("'moe_layer_freq' 2" in n for n in arch.unmodelled)
    out = tmp_path / "out.json"
    code = main(["predict", "--model-config", str(path), "--instance", "p5.48xlarge:32", "--layout",
                 "tp=1,pp=8,cp=1,ep=32", "--seq-len", "4096", "--global-batch-size", "1024", "--format", "json",
                 "--out-file", str(out)])
    assert code == 0
    assert any(n.startswith("not modelled: 'moe_layer_freq' 2") for n in json.loads(out.read_text())["notes"])
