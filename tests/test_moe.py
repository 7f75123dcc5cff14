"""Mixtures of experts: architectures read from Hugging Face configs, total and active parameter
counts against the published ones, MLA, and the expert-parallel simulator's volumes, shapes and
memory by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from srift.errors import SriftError
from srift.zoo import llm_arch
from srift.zoo.hf_config import arch_from_hf_config
from srift.zoo.llm import (DecoderArch, active_params_count, decoder_profile, model_flops_per_token, params_count,
                           zoo_llms)

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"

# (config, published total, published active, source). GPT-OSS's card counts the active
# parameters without the input embedding (a lookup: 0.58B), so its row compares that way.
PUBLISHED = [
    ("Mixtral-8x7B-v0.1", 46.7e9, 12.9e9, "Mistral AI, 'Mixtral of experts' (2023): 46.7B total, 12.9B per token"),
    ("Qwen3-30B-A3B", 30.5e9, 3.3e9, "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    ("Qwen1.5-MoE-A2.7B", 14.3e9, 2.7e9, "Qwen blog 'Qwen1.5-MoE' (2024): 14.3B total, 2.7B activated"),
    ("DeepSeek-V3", 671e9, 37e9, "DeepSeek-V3 technical report: 671B total, 37B activated (MTP module excluded)"),
    ("Llama-4-Maverick-17B-128E", 400e9, 17e9, "Meta, 'The Llama 4 herd' (2025): 400B total, 17B active"),
    ("gpt-oss-120b", 116.83e9, 5.13e9, "OpenAI gpt-oss model card table 1: 116.83B total, 5.13B active"),
]


@pytest.mark.parametrize("name,total,active,source", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_moe_parameter_counts_match_published(name, total, active, source):
    arch = arch_from_hf_config(FIXTURES / f"{name}.json")
    assert arch.is_moe
    assert params_count(arch) == pytest.approx(total, rel=0.006)
    got_active = active_params_count(arch) - (arch.vocab * arch.hidden if name == "gpt-oss-120b" else 0)
    assert got_active == pytest.approx(active, rel=0.02)


def test_mixtral_counts_by_hand():
    a = arch_from_hf_config(FIXTURES / "Mixtral-8x7B-v0.1.json")
    attention = 4096 * (4096 + 2 * 1024) + 4096 * 4096
    expert = 3 * 4096 * 14336
    block = attention + 8 * expert + 4096 * 8 + 2 * 4096  # + router, + 2 RMSNorms
    assert params_count(a) == 32 * block + 2 * 32000 * 4096 + 4096
    assert active_params_count(a) == params_count(a) - 32 * 6 * expert
    # decoder_profile's leaves own exactly the parameters counted
    prof = decoder_profile(a, 1, 128, "bf16")
    assert sum(l.params for l in prof.layers) == params_count(a)


def test_deepseek_mla_and_dense_layers_by_hand():
    a = llm_arch("deepseek-v3")
    assert a.is_mla and a.moe_blocks == 58 and not a.is_moe_block(2) and a.is_moe_block(3)
    mla = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * (512 + 64) + 512 + 512 * 128 * (128 + 128)
           + 128 * 128 * 7168)
    dense = mla + 3 * 7168 * 18432 + 2 * 7168
    moe = mla + 7168 * 256 + 256 + 257 * 3 * 7168 * 2048 + 2 * 7168  # router + bias, 256 routed + 1 shared
    assert params_count(a) == 3 * dense + 58 * moe + 2 * 129280 * 7168 + 7168
    assert sum(l.params for l in decoder_profile(a, 1, 64, "bf16").layers) == params_count(a)
    # MFU FLOPs on active parameters: 6 N_active + 6 L s heads (192 + 128)
    s = 4096
    n_active = active_params_count(a) - 129280 * 7168
    assert model_flops_per_token(a, s) == pytest.approx(6 * n_active + 6 * 61 * s * 128 * (192 + 128))


def test_zoo_moe_entries_agree_with_their_configs_and_cards():
    llms = zoo_llms()
    for name, config in (("mixtral-8x7b", "Mixtral-8x7B-v0.1"), ("qwen3-30b-a3b", "Qwen3-30B-A3B"),
                         ("deepseek-v3", "DeepSeek-V3")):
        entry = llms[name]
        from_config = arch_from_hf_config(FIXTURES / f"{config}.json")
        assert params_count(entry.arch) == params_count(from_config)
        assert active_params_count(entry.arch) == active_params_count(from_config)
        assert active_params_count(entry.arch) == pytest.approx(entry.published_active_params, rel=0.02)


def test_moe_config_errors(tmp_path):
    import json
    data = json.loads((FIXTURES / "Qwen3-30B-A3B.json").read_text())
    for changes, message in (({"num_experts_per_tok": 200}, "'num_experts_per_tok' 200 is more than the 128"),
                             ({"mlp_only_layers": [0]}, "'mlp_only_layers'"),
                             ({"moe_intermediate_size": None}, "'moe_intermediate_size' is missing"),
                             ({"model_type": "dbrx"}, "model_type 'dbrx'")):
        path = tmp_path / "c.json"
        path.write_text(json.dumps({**data, **changes}))
        with pytest.raises(SriftError, match=message):
            arch_from_hf_config(path)
    with pytest.raises(SriftError, match="experts per token"):
        DecoderArch("x", 2, 64, 4, 4, 128, 100, experts=4, experts_per_token=5, expert_intermediate=32)
