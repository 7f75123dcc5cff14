"""The decoder-LLM zoo: published parameter counts, FLOPs by hand, the torch analysis of a tiny
Hugging Face Llama as reference, exact rescaling, FSDP units, MFU FLOPs, and config.json reading."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from srift.cli import main
from srift.errors import SriftError
from srift.perf.compute import layer_kind
from srift.profile import Profile
from srift.zoo import MODELS, canonical_name, llm_arch, load_builtin_profile
from srift.zoo.hf_config import arch_from_hf_config, hf_config_profile
from srift.zoo.llm import (DecoderArch, decoder_profile, model_flops_per_token, non_embedding_params, params_count,
                           zoo_llms)

from no_torch import run_without_torch

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
LLMS = [n for n, m in MODELS.items() if m.llm]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ---- parameter counts ---------------------------------------------------------------------------
def test_the_zoo_has_the_issue_models():
    assert set(LLMS) == {
        "llama2-7b", "llama2-13b", "llama2-34b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.2-1b",
        "llama3.2-3b", "mistral-7b", "qwen2.5-7b", "mpt-125m", "mpt-350m", "mpt-760m", "mpt-1b", "mpt-3b",
        "mpt-7b", "mpt-13b", "mpt-30b", "mpt-70b", "llama3.1-405b", "gpt3-175b", "nemotron-4-15b", "nemotron-4-340b",
        "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b", "kimi-k2"}


# Published counts: model cards for Llama/Mistral/Qwen (data/llm-configs, in billions, rounded);
# llm-foundry's NumParams column at 2048 tokens for MPT (data/llm-training-throughput).
PUBLISHED = {
    "llama2-7b": 6.74e9, "llama2-13b": 13.0e9, "llama2-34b": 33.7e9, "llama2-70b": 69.0e9,
    "llama3-8b": 8.03e9, "llama3-70b": 70.6e9, "llama3.2-1b": 1.24e9, "llama3.2-3b": 3.21e9,
    "mistral-7b": 7.24e9, "qwen2.5-7b": 7.62e9,
    "mpt-125m": 125_311_488, "mpt-350m": 355_985_408, "mpt-760m": 760_470_528, "mpt-1b": 1_315_950_592,
    "mpt-3b": 2_651_837_440, "mpt-7b": 6_658_859_008, "mpt-13b": 12_853_954_560, "mpt-30b": 29_975_214_080,
    "mpt-70b": 64_862_437_376,
    "llama3.1-405b": 405e9, "gpt3-175b": 175e9, "nemotron-4-15b": 15.7e9, "nemotron-4-340b": 340e9,
    "mixtral-8x7b": 46.7e9, "qwen3-30b-a3b": 30.5e9, "deepseek-v3": 671e9, "gpt-oss-120b": 116.83e9,  # active: test_moe.py
    "kimi-k2": 1.04e12,  # the Kimi K2 report's 1.04T; srift counts 1.026T (-1.3 %: test_moe.py)
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    arch = llm_arch(name)
    assert params_count(arch) == pytest.approx(PUBLISHED[name], rel=0.015)
    assert MODELS[name].params == PUBLISHED[name]
    profile = load_builtin_profile(name, batch_size=1, seq_len=128)
    assert profile.params == params_count(arch)


def test_parameter_counts_by_hand():
    # Llama 3 8B: embedding and untied head 128256 x 4096 each; per block q/o 4096^2, k/v 4096 x 1024,
    # three MLP matrices 4096 x 14336, two RMSNorm weights; final norm.
    block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert params_count(llm_arch("llama3-8b")) == 2 * 128256 * 4096 + 32 * block + 4096 == 8_030_261_248
    # Qwen2.5 7B adds q/k/v biases (3584 + 2 x 512 per block).
    qwen_block = 2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944 + 2 * 3584 + (3584 + 2 * 512)
    assert params_count(llm_arch("qwen2.5-7b")) == 2 * 152064 * 3584 + 28 * qwen_block + 3584 == 7_615_616_512
    # Llama 3.2 1B ties its head: one 128256 x 2048 matrix.
    tied_block = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
    assert params_count(llm_arch("llama3.2-1b")) == 128256 * 2048 + 16 * tied_block + 2048 == 1_235_814_400


def test_architectures_are_the_published_configs():
    """Every data/llm-configs row is a zoo entry with the same shape, repository and count."""
    rows = _csv(ROOT / "data" / "llm-configs" / "llm-configs.csv")
    assert len(rows) == 10
    for row in rows:
        entry = zoo_llms()[row["model"]]
        a = entry.arch
        assert (a.n_layers, a.hidden, a.heads, a.kv_heads, a.intermediate, a.vocab) == tuple(
            int(row[k]) for k in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "intermediate_size", "vocab_size"))
        assert (a.tied_embeddings, a.mlp, a.norm) == (row["tied_embeddings"] == "true", row["ffn"], row["norm"])
        assert entry.hf_repo == row["hf_repo"]
        assert entry.published_params == round(float(row["published_params_b"]) * 1e9)


def test_mpt_counts_reproduce_every_llm_foundry_row():
    """llm-foundry's NumParams = our count with the run's sequence length as the learned position
    table: blocks of 12 d^2 + 13 d (biases everywhere, LayerNorm with bias) and d x (vocab +
    max_seq_len + 2), tied head. Checked exactly on every MPT row of the measurements."""
    rows = [r for r in _csv(ROOT / "data" / "llm-training-throughput" / "llm-training-throughput.csv")
            if r["model_family"] == "MPT"]
    assert len(rows) > 250
    for row in rows:
        arch = llm_arch(row["model_name"])
        shape = tuple(int(float(row[k])) for k in ("n_layers", "d_model", "n_heads", "ffn_dim", "vocab_size"))
        assert shape == (arch.n_layers, arch.hidden, arch.heads, arch.intermediate, arch.vocab)
        at_seq = dataclasses.replace(arch, max_seq_len=int(row["seq_len"]))
        assert params_count(at_seq) == int(float(row["n_params"])), row["row_id"]
    d, layers, seq = 4096, 32, 2048  # mpt-7b by hand
    assert params_count(llm_arch("mpt-7b")) == layers * (12 * d * d + 13 * d) + d * (50368 + seq + 2)


def test_non_embedding_params():
    a = llm_arch("llama3-8b")
    assert non_embedding_params(a) == 8_030_261_248 - 128256 * 4096  # the untied head stays
    t = llm_arch("mpt-125m")  # tied head and the position table are both lookups of the input
    assert non_embedding_params(t) == 125_311_488 - 768 * (50368 + 2048)


# ---- FLOPs, bytes, activations ------------------------------------------------------------------
def test_one_llama3_8b_block_by_hand():
    b, s = 2, 4096
    t = b * s  # 8192 tokens
    prof = decoder_profile(llm_arch("llama3-8b"), batch_size=b, seq_len=s, precision="amp")
    block = {l.name.removeprefix("model.layers.5."): l for l in prof.layers if l.unit == "model.layers.5"}
    assert list(block) == ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                           "self_attn.sdpa", "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj",
                           "mlp.act_fn", "mlp.up_proj", "mlp.down_proj"]
    # Linears: 2 FLOPs per multiply-add over all tokens; q and o are 4096 x 4096, k and v 4096 x 1024
    # (8 KV heads of 128), the MLP 4096 x 14336.
    assert block["self_attn.q_proj"].fwd_flops == 2 * 8192 * 4096 * 4096 == 274_877_906_944
    assert block["self_attn.k_proj"].fwd_flops == 2 * 8192 * 4096 * 1024 == 68_719_476_736
    assert block["mlp.down_proj"].fwd_flops == 2 * 8192 * 14336 * 4096 == 962_072_674_304
    assert block["mlp.gate_proj"].bwd_flops == 2 * block["mlp.gate_proj"].fwd_flops
    # Causal flash attention executes half of QK^T and PV: 0.5 x 4 x b x s^2 x (32 heads x 128).
    core = block["self_attn.sdpa"]
    assert core.fwd_flops == core.fwd_flops_seq2 == 0.5 * 4 * 2 * 4096 ** 2 * 4096 == 274_877_906_944
    assert core.bwd_flops == core.bwd_flops_seq2 == 2.5 * 274_877_906_944  # five matmuls against two
    assert sum(l.fwd_flops for l in block.values()) == (
        3 * 274_877_906_944 + 2 * 68_719_476_736 + 3 * 962_072_674_304) == 3_848_290_697_216
    assert sum(l.bwd_flops for l in block.values()) == (
        2 * (3_848_290_697_216 - 274_877_906_944) + 2.5 * 274_877_906_944) == 7_834_020_347_904
    # Bytes under amp: the q projection reads its fp32 input (the residual stream), writes a 16-bit
    # output and reads its weights (counted at 4 bytes, as grad_bytes); backward moves twice that.
    q = block["self_attn.q_proj"]
    assert q.fwd_bytes == 8192 * 4096 * 4 + 8192 * 4096 * 2 + 4 * 4096 * 4096 == 268_435_456
    assert q.bwd_bytes == 2 * q.fwd_bytes and q.activation_bytes == 8192 * 4096 * 2
    # Flash attention keeps its output and the fp32 log-sum-exp per query and head, no s x s scores.
    assert core.activation_bytes == 8192 * 4096 * 2 + 8192 * 32 * 4 and core.activation_bytes_seq2 == 0
    assert block["input_layernorm"].activation_bytes == t * 4096 * 4  # fp32 under autocast


def test_layers_follow_hugging_face_order_and_units():
    prof = decoder_profile(llm_arch("llama3.2-1b"), batch_size=1, seq_len=256)
    names = [l.name for l in prof.layers]
    assert names[:3] == ["model.embed_tokens", "model.rotary_emb", "model.layers.0.input_layernorm"]
    assert names[-2:] == ["model.norm", "lm_head"]
    assert len(prof.layers) == 2 + 16 * 11 + 2
    assert {l.unit for l in prof.layers} == {None} | {f"model.layers.{i}" for i in range(16)}
    assert all(l.unit is None for l in prof.layers if not l.name.startswith("model.layers."))
    assert all(l.name.startswith(l.unit + ".") for l in prof.layers if l.unit)
    head = prof.layers[-1]
    assert head.params == 0 and head.fwd_flops == 2 * 256 * 2048 * 128256  # tied: the embedding owns it
    # MPT: llm-foundry's names, fused Wqkv, GELU MLP, learned positions.
    mpt = [l.name for l in decoder_profile(llm_arch("mpt-125m"), batch_size=1, seq_len=64).layers[:11]]
    assert mpt == ["transformer.wte", "transformer.wpe", "transformer.blocks.0.norm_1", "transformer.blocks.0.attn.Wqkv",
                   "transformer.blocks.0.attn.sdpa", "transformer.blocks.0.attn.out_proj",
                   "transformer.blocks.0.norm_2", "transformer.blocks.0.ffn.up_proj", "transformer.blocks.0.ffn.act",
                   "transformer.blocks.0.ffn.down_proj", "transformer.blocks.1.norm_1"]


def test_layer_kinds_price_attention_without_scores():
    prof = decoder_profile(llm_arch("mistral-7b"), batch_size=1, seq_len=1024)
    kinds = {l.type: layer_kind(l.type) for l in prof.layers}
    assert kinds == {"Embedding": "embedding", "RotaryEmbedding": "embedding", "RMSNorm": "norm", "Linear": "matmul",
                     "ScaledDotProductAttention": "attention", "SiLU": "elementwise"}
    assert sum(l.activation_bytes_seq2 for l in prof.layers) == 0  # compute.py adds no score traffic
    assert {l.type for l in prof.layers if l.fwd_flops_seq2} == {"ScaledDotProductAttention"}


@pytest.mark.parametrize("name", ["llama3-8b", "llama3.2-1b", "qwen2.5-7b", "mpt-125m"])
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_rescale_to_another_batch_and_length_is_exact(name, precision):
    arch = llm_arch(name)
    fresh = decoder_profile(arch, batch_size=3, seq_len=4096, precision=precision)
    rescaled = decoder_profile(arch, batch_size=2, seq_len=1000, precision=precision).rescale(batch_size=3, seq_len=4096)
    assert len(rescaled.layers) == len(fresh.layers)
    for got, want in zip(rescaled.layers, fresh.layers):
        for f in dataclasses.fields(want):
            a, b = getattr(got, f.name), getattr(want, f.name)
            if isinstance(b, float):  # pytest.approx(b, rel=1e-12, abs=0), written out: ~9,000 fields a case
                assert a == b or abs(a - b) <= 1e-12 * abs(b), (want.name, f.name, a, b)
            else:
                assert a == b, (want.name, f.name)


def test_profile_totals_against_the_closed_forms():
    arch, b, s = llm_arch("llama2-70b"), 1, 4096
    prof = decoder_profile(arch, batch_size=b, seq_len=s, precision="fp32")
    weights = sum(l.params for l in prof.layers if l.type == "Linear")  # untied, no biases
    assert sum(l.fwd_flops for l in prof.layers if l.type == "Linear") == 2 * b * s * weights
    # Executed training FLOPs = 6 x matmul weights x tokens + causal attention (2 + 5) b s^2 H per block;
    # the MFU convention counts the attention in full, 12 L H s per token (= 6 b s^2 H per block).
    attention_executed = arch.n_layers * 7 * b * s * s * arch.q_width
    assert prof.fwd_flops + prof.bwd_flops == 6 * b * s * weights + attention_executed
    assert weights == non_embedding_params(arch) - 80 * 2 * 8192 - 8192  # minus the norms' weights
    assert prof.grad_bytes == 4 * prof.params and prof.optimizer.state_bytes_per_param == 8


# ---- model FLOPs for MFU ------------------------------------------------------------------------
def test_model_flops_per_token_by_hand():
    # Llama 3 8B at 8192: N = 8,030,261,248 - 128256 x 4096 (token embedding) = 7,504,924,672;
    # 6N + 12 x 32 layers x 4096 x 8192.
    assert model_flops_per_token(llm_arch("llama3-8b"), 8192) == 6 * 7_504_924_672 + 12 * 32 * 4096 * 8192
    # A tied head still multiplies every token: its 128256 x 2048 matrix is counted.
    tied = llm_arch("llama3.2-1b")
    assert model_flops_per_token(tied, 1024) == 6 * (non_embedding_params(tied) + 128256 * 2048) + 12 * 16 * 2048 * 1024
    with pytest.raises(SriftError, match="sequence length"):
        model_flops_per_token(tied, 0)


def test_model_flops_reproduce_published_mfu():
    """torchtitan's MFU (6N + 12 l h q t, bf16 peak 989 TFLOP/s): Llama 3.1 405B at 8192 tokens, 109
    tokens/s per GPU, 29.0 %. llm-foundry's MFU counts every parameter (6 N_all + 12 L d s): it is
    reproduced on all its bf16 rows, from the zoo's counts, to the rounding of its tokens/s."""
    llama405 = DecoderArch("llama3.1-405b", n_layers=126, hidden=16384, heads=128, kv_heads=8, intermediate=53248,
                           vocab=128256, max_seq_len=131072)  # meta-llama/Llama-3.1-405B config.json
    assert 109 * model_flops_per_token(llama405, 8192) / 989e12 == pytest.approx(0.290, abs=0.0015)
    rows = [r for r in _csv(ROOT / "data" / "llm-training-throughput" / "llm-training-throughput.csv")
            if r["source_id"].startswith("llmfoundry") and r["precision"] == "bf16" and r["meas_mfu"]]
    assert len(rows) > 400
    for row in rows:
        s = int(row["seq_len"])
        arch = dataclasses.replace(llm_arch(row["model_name"]), max_seq_len=s)
        per_token = 6 * params_count(arch) + 12 * arch.n_layers * arch.hidden * s
        peak = 312e12 if row["gpu_type"].startswith("a100") else 989e12
        mfu = float(row["meas_mfu"]) / (100.0 if row["meas_util_unit"] == "percent" else 1.0)
        assert float(row["meas_tokens_per_sec_per_gpu"]) * per_token / peak == pytest.approx(mfu, rel=0.005), row["row_id"]


# ---- the FSDP unit field ------------------------------------------------------------------------
def test_unit_round_trips_and_old_profiles_load(tmp_path):
    prof = decoder_profile(llm_arch("mpt-125m"), batch_size=1, seq_len=128)
    data = prof.to_dict()
    assert "unit" not in data["layers"][0] and data["layers"][2]["unit"] == "transformer.blocks.0"
    back = Profile.load(prof.save(tmp_path / "p.yaml"))
    assert [l.unit for l in back.layers] == [l.unit for l in prof.layers]
    old = Profile.load(ROOT / "profiles" / "gpt2.yaml")  # written before the field existed
    assert all(l.unit is None for l in old.layers)
    data["layers"][2]["unit"] = 3
    with pytest.raises(SriftError, match=r"layers\[2\]\.unit must be a module name"):
        Profile.from_dict(data)


# ---- the zoo: names, defaults, torch-free ---------------------------------------------------------
def test_aliases_resolve():
    assert canonical_name("Llama-3-8B") == "llama3-8b"
    assert canonical_name("meta-llama/Meta-Llama-3-8B") == "llama3-8b"
    assert canonical_name("codellama/CodeLlama-34b-hf") == "llama2-34b"
    assert canonical_name("Llama-3.2-1B") == "llama3.2-1b"
    assert canonical_name("mosaicml/mpt-1b") == "mpt-1b"
    assert canonical_name("Qwen/Qwen2.5-7B") == "qwen2.5-7b"
    with pytest.raises(SriftError, match="unknown model 'llama9-8b'"):
        canonical_name("llama9-8b")
    with pytest.raises(SriftError, match="not a decoder LLM"):
        llm_arch("gpt2")


def test_builtin_profile_defaults_and_request():
    info = MODELS["llama3-8b"]
    assert (info.batch_size, info.seq_len, info.kind, info.optimizer) == (1, 4096, "sequence", "AdamW")
    assert MODELS["mpt-7b"].seq_len == 2048  # its context is shorter than the default
    prof = load_builtin_profile("llama3-8b", batch_size=1, seq_len=8192)
    assert (prof.batch_size, prof.seq_len, prof.precision) == (1, 8192, "fp32")
    assert prof.fwd_flops == decoder_profile(llm_arch("llama3-8b"), 1, 8192).fwd_flops


@pytest.mark.slow
def test_llm_profiles_need_no_torch(tmp_path):
    code = ("import sys; from srift.zoo import load_builtin_profile as l; from srift.zoo import hf_config; "
            "p = l('llama3-70b', batch_size=1, seq_len=8192); print(len(p.layers), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["884", "False"]
    res = run_without_torch(["predict", "--model", "Llama-3-8B", "--instance", "p5.48xlarge:1", "--seq-len", "2048",
                             "--batch-size", "1", "--precision", "amp", "--parallelism", "ddp", "--format", "json"], tmp_path)
    # DDP keeps 16 bytes per parameter on each GPU: predict says the job does not fit, with no iteration time
    # (--format json writes the error as its document, so a pipeline reading stdout sees ok: false)
    assert res.returncode == 2 and "does not fit in GPU memory" in res.stderr, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and "does not fit in GPU memory" in doc["error"]["message"] and "iteration_time_s" not in doc
    res = run_without_torch(["profile", "--model", "meta-llama/Meta-Llama-3-8B", "--seq-len", "8192", "-o", "l.yaml"],
                            tmp_path)
    assert res.returncode == 0, res.stderr
    written = Profile.load(tmp_path / "l.yaml")
    assert (written.name, written.seq_len, written.params) == ("llama3-8b", 8192, 8_030_261_248)


def test_bad_zoo_list_is_named(tmp_path):
    bad = tmp_path / "llm.yaml"
    bad.write_text("schema: srift.zoo.llm/v1\nmodels:\n  x:\n    n_layers: 2\n    hidden: 64\n")
    with pytest.raises(SriftError, match="models.x is missing heads"):
        zoo_llms(str(bad))
    bad.write_text("schema: srift.zoo.llm/v1\nmodels:\n  x: {n_layers: 2, hidden: 64, heads: 4, kv_heads: 3, "
                   "intermediate: 8, vocab: 10, published_params: 5}\n")
    with pytest.raises(SriftError, match="heads 4 is not a multiple of kv_heads 3"):
        zoo_llms(str(bad))


# ---- Hugging Face config.json --------------------------------------------------------------------
@pytest.mark.parametrize("fixture,zoo_name", [
    ("Llama-2-7b-hf.json", "llama2-7b"), ("Meta-Llama-3-8B.json", "llama3-8b"), ("Llama-3.2-1B.json", "llama3.2-1b"),
    ("Mistral-7B-v0.1.json", "mistral-7b"), ("Qwen2.5-7B.json", "qwen2.5-7b"), ("gpt3-175b.json", "gpt3-175b"),
    ("Nemotron-4-15B.json", "nemotron-4-15b")])
def test_hf_configs_read_as_the_zoo_architectures(fixture, zoo_name):
    got = arch_from_hf_config(FIXTURES / fixture)
    want = llm_arch(zoo_name)
    skip = {"name", "source"}
    assert {f.name: getattr(got, f.name) for f in dataclasses.fields(got) if f.name not in skip} == \
           {f.name: getattr(want, f.name) for f in dataclasses.fields(want) if f.name not in skip}
    assert got.name == fixture.removesuffix(".json")
    prof = hf_config_profile(FIXTURES / fixture, batch_size=1, seq_len=512)
    assert prof.params == params_count(want) and prof.seq_len == 512


def _write(tmp_path: Path, **changes) -> Path:
    data = json.loads((FIXTURES / "Meta-Llama-3-8B.json").read_text())
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    folder = tmp_path / "My-Llama"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_hf_config_biases_and_names(tmp_path):
    arch = arch_from_hf_config(_write(tmp_path, attention_bias=True, mlp_bias=True))
    assert arch.biases == {"qkv", "o", "mlp"} and arch.name == "My-Llama"
    base = params_count(llm_arch("llama3-8b"))
    assert params_count(arch) == base + 32 * ((4096 + 2 * 1024) + 4096 + (2 * 14336 + 4096))
    assert arch_from_hf_config(_write(tmp_path, _name_or_path="org/Thing-8B")).name == "org/Thing-8B"


@pytest.mark.parametrize("changes,message", [
    ({"num_hidden_layers": ...}, "required key 'num_hidden_layers' is missing"),
    ({"hidden_size": "4096"}, "'hidden_size' must be a positive integer, got '4096'"),
    ({"num_key_value_heads": 0}, "'num_key_value_heads' must be a positive integer, got 0"),
    ({"num_key_value_heads": 5}, "'num_attention_heads' 32 is not a multiple of 'num_key_value_heads' 5"),
    ({"tie_word_embeddings": "no"}, "'tie_word_embeddings' must be true or false"),
    ({"hidden_act": "gelu"}, "'hidden_act' is 'gelu'"),
    ({"model_type": "gpt_neox"}, "model_type 'gpt_neox', which srift does not model"),
    ({"model_type": "gpt2"}, "required key 'n_embd' is missing"),
    ({"model_type": ...}, "'model_type' is missing"),
    ({"num_local_experts": 8}, "mixture-of-experts model \\('num_local_experts': 8\\) of model_type 'llama'"),
])
def test_hf_config_errors_name_the_key(tmp_path, changes, message):
    with pytest.raises(SriftError, match=message) as info:
        arch_from_hf_config(_write(tmp_path, **changes))
    assert info.value.exit_code == 2 and info.value.hint


def test_hf_config_refuses_bad_files(tmp_path):
    with pytest.raises(SriftError, match="does not exist"):
        arch_from_hf_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{'hidden_size': 4096}")  # Python, not JSON: never evaluated
    with pytest.raises(SriftError, match="not valid JSON"):
        arch_from_hf_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(SriftError, match="not a JSON object"):
        arch_from_hf_config(tmp_path / "list.json")


@pytest.mark.slow
def test_predict_and_recommend_take_a_model_config(capsys):
    """--model-config predicts the model a config.json describes: the same as its zoo entry."""
    args = ["--instance", "p4d.24xlarge:1", "--seq-len", "1024", "--batch-size", "1", "--precision", "amp",
            "--format", "json"]
    assert main(["predict", "--model-config", str(FIXTURES / "Llama-3.2-1B.json"), *args]) == 0
    via_config = json.loads(capsys.readouterr().out)
    assert main(["predict", "--model", "llama3.2-1b", *args]) == 0
    via_zoo = json.loads(capsys.readouterr().out)
    assert via_config["iteration_time_s"] == pytest.approx(via_zoo["iteration_time_s"], rel=1e-12)
    assert via_config["memory_per_gpu_bytes"] == via_zoo["memory_per_gpu_bytes"]
    assert main(["recommend", "--model-config", str(FIXTURES / "Llama-3.2-1B.json"), "--budget", "40",
                 "--seq-len", "1024", "--precision", "amp", "--max-gpus", "8", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["recommendations"]
    assert main(["predict", "--model", "gpt2", "--model-config", "c.json", "--instance", "p4d.24xlarge:1"]) == 2
    assert "--model-config alone" in capsys.readouterr().err


# ---- reference: srift's torch analysis of a tiny Hugging Face Llama -----------------------------------
@pytest.mark.slow
@pytest.mark.torch
def test_matches_the_torch_analysis_of_a_tiny_hf_llama():
    """Build LlamaForCausalLM (transformers) on the meta device with a small GQA config, run srift's
    structural analysis (FlopCounterMode + hooks) on one training step, and compare layer by layer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    from srift.profiling.flops import analyze_layers

    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                                   tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    b, s = 2, 128
    ids = torch.randint(0, 1000, (b, s), device="meta")
    ref = {l.name: l for l in analyze_layers(model, lambda: model(input_ids=ids, labels=ids).loss)}
    arch = DecoderArch("tiny", n_layers=2, hidden=256, heads=8, kv_heads=2, intermediate=688, vocab=1000,
                       max_seq_len=512)
    mine = decoder_profile(arch, batch_size=b, seq_len=s, precision="fp32")

    assert mine.params == sum(p.numel() for p in model.parameters())
    compared = 0
    for layer in mine.layers:
        if layer.type in ("Linear", "Embedding", "RMSNorm", "SiLU"):
            r = ref[layer.name]
            assert (layer.params, layer.grad_bytes, layer.fwd_flops, layer.fwd_bytes, layer.activation_bytes) == (
                r.params, r.grad_bytes, r.fwd_flops, r.fwd_bytes, r.activation_bytes), layer.name
            compared += 1
    assert compared == 2 + 2 * 10 + 1  # embedding, head, final norm; 10 such leaves per block
    for layer in mine.layers:  # the units are the modules FSDP wraps
        if layer.unit:
            assert type(model.get_submodule(layer.unit)).__name__ == "LlamaDecoderLayer"

    # Attention: torch's own flash/SDPA formulas (full s^2; backward with recomputed scores), halved
    # for the causal mask that flash attention skips.
    core = next(l for l in mine.layers if l.type == "ScaledDotProductAttention")
    q, kv = (b, 8, s, 32), (b, 2, s, 32)
    assert core.fwd_flops == 0.5 * sdpa_flop_count(q, kv, kv)
    assert core.bwd_flops == 0.5 * sdpa_backward_flop_count(q, q, kv, kv)

    # Whole step as torch counts it: the matmuls equal our Linear FLOPs (forward and backward); on
    # the meta device SDPA runs its math path (full s^2 scores, backward 2x forward, no recompute).
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    total = counter.get_total_flops()
    mm = counter.get_flop_counts()["Global"][torch.ops.aten.mm]
    assert mm == sum(l.fwd_flops + l.bwd_flops for l in mine.layers if l.type == "Linear")
    assert total - mm == arch.n_layers * 3 * (core.fwd_flops / 0.5)
