"""The analytic structural profile of a decoder-only LLM (``decoder_profile``) and of one routed
expert (``expert_profile``).

Torch-free and weight-free: an architecture (``DecoderArch``, from configs/zoo/llm.yaml or a
Hugging Face config.json, see srift/zoo/hf_config.py) becomes a ``Profile`` by arithmetic, so a
70B model profiles in milliseconds on any machine.

What a profile counts, per leaf module in execution order (names as the Hugging Face model has
them, plus the attention core as its own leaf, ``ScaledDotProductAttention``):

- FLOPs: 2 per multiply-add, matmuls only (as torch's FlopCounterMode counts); a Linear's
  backward is twice its forward (input and weight gradients). Biases, norms and activations
  count no FLOPs, as in torch's count.
- Attention is SDPA/flash-attention: the FLOPs it *executes*, since they set its time. Causal
  attention skips the masked half of the s x s score tiles, so forward is half of the full
  ``4 b s^2 h d`` (QK^T and PV), and backward is 2.5x forward (five matmuls against two: flash
  attention recomputes the scores; torch's own SDPA backward formula counts the same five). All
  of it grows with seq_len squared (the ``_seq2`` fields). No s x s score matrix is stored or
  moved: ``activation_bytes_seq2`` is 0; the core keeps its output and the softmax log-sum-exp
  (fp32, one per query and head). Model FLOPs for MFU use the published convention instead
  (``model_flops_per_token``).
- Bytes: ``fwd_bytes`` = inputs + outputs + the layer's weights read (``grad_bytes``: fp32);
  ``bwd_bytes`` twice that, as the torch structural analysis (srift/profiling/flops.py) counts.
  Activations are the layer's output bytes, kept for backward. Element sizes follow the
  precision: fp32/tf32 4 bytes; amp (autocast) keeps matmul and attention outputs in 16 bits and
  the residual stream (embeddings, norms, whose weights are fp32) in 32; bf16 (parameters in
  bf16, as FSDP mixed precision runs them) 2 bytes everywhere. Token ids are int64.
- A tied output head owns no parameters (the token embedding does, as torch attributes it) and
  its weight reads are counted once, at the embedding: ``Profile.rescale`` keeps exactly
  ``grad_bytes`` of a layer's bytes fixed, which is what makes rescaling exact. The head is
  compute-bound, so its time is unaffected.
- The loss over the vocabulary is not a layer (the torch-built zoo profiles do not count it
  either); the logits it reads are the head's activation.
- ``unit``: the FSDP wrapping unit, the decoder block (``model.layers.{i}``); embeddings, final
  norm and head are in the root unit (None).

Everything but the attention FLOPs is linear in batch x seq_len, so ``Profile.rescale`` to another
batch or sequence length gives exactly the profile built there.
"""

from __future__ import annotations

import dataclasses
import platform
from dataclasses import dataclass
from typing import Any

import srift
from srift.errors import SriftError
from srift.job import PRECISIONS
from srift.profile import CAUSAL_FRACTION, DeviceInfo, LayerProfile, OptimizerInfo, Profile
from srift.profile_ratio import ATTENTION_BWD_OVER_FWD  # flash attention's backward over forward
from srift.zoo.decoder_arch import (
    _ACT_LEAF, _ELEMENT_BYTES, DEFAULT_BATCH_SIZE, GATED_MLPS, GRAD_BYTES_PER_PARAM, LSE_BYTES, MLP_BIAS, O_BIAS, QKV_BIAS,
    TOKEN_ID_BYTES, DecoderArch, _norm_params, default_seq_len, moe_mlp_params,
)


# ---- analytic structural profile -----------------------------------------------------------------
@dataclass(frozen=True)
class _Naming:
    """Module names of one model implementation (``{i}``: block index); "" where it has none."""

    embed: str
    positions: str
    rotary: str
    block: str
    norm_1: str
    q: str
    k: str
    v: str
    qkv: str
    core: str
    o: str
    norm_2: str
    gate: str
    up: str
    act: str
    down: str
    final_norm: str
    head: str


_NAMING = {
    "hf-llama": _Naming(
        embed="model.embed_tokens", positions="model.embed_positions", rotary="model.rotary_emb",
        block="model.layers.{i}", norm_1="input_layernorm", q="self_attn.q_proj", k="self_attn.k_proj",
        v="self_attn.v_proj", qkv="", core="self_attn.sdpa", o="self_attn.o_proj",
        norm_2="post_attention_layernorm", gate="mlp.gate_proj", up="mlp.up_proj", act="mlp.act_fn",
        down="mlp.down_proj", final_norm="model.norm", head="lm_head"),
    "mpt": _Naming(
        embed="transformer.wte", positions="transformer.wpe", rotary="transformer.rotary_emb",
        block="transformer.blocks.{i}", norm_1="norm_1", q="", k="", v="", qkv="attn.Wqkv", core="attn.sdpa",
        o="attn.out_proj", norm_2="norm_2", gate="ffn.gate_proj", up="ffn.up_proj", act="ffn.act",
        down="ffn.down_proj", final_norm="transformer.norm_f", head="lm_head"),
    "hf-gpt2": _Naming(
        embed="transformer.wte", positions="transformer.wpe", rotary="", block="transformer.h.{i}", norm_1="ln_1",
        q="", k="", v="", qkv="attn.c_attn", core="attn.sdpa", o="attn.c_proj", norm_2="ln_2", gate="",
        up="mlp.c_fc", act="mlp.act", down="mlp.c_proj", final_norm="transformer.ln_f", head="lm_head"),
}
# Leaf names (after the block's prefix) that srift/simulate/recompute.py tells Megatron-Core's
# recompute modules apart by: the block's two norms, a dense MLP's projections and activation,
# MLA's up-projections and the shared experts.
BLOCK_NORM_NAMES = frozenset(n for nm in _NAMING.values() for n in (nm.norm_1, nm.norm_2))
MLP_PART_NAMES = frozenset(n for nm in _NAMING.values() for n in (nm.gate, nm.up, nm.act, nm.down) if n)
MLA_UP_PROJ_NAMES = frozenset(("self_attn.q_b_proj", "self_attn.kv_b_proj"))
SHARED_EXPERT_PREFIX = "mlp.shared_expert"


@dataclass(frozen=True)
class _Shape:
    """What every layer formula needs: batch, sequence, tokens and element sizes."""

    batch: int
    seq: int
    tokens: int
    e_mm: int  # bytes per element of matmul and attention outputs
    e_res: int  # bytes per element of the residual stream (embeddings, norms)


def _leaf(name: str, type_: str, unit: str | None, params: int, in_bytes: float, out_bytes: float,
          fwd_flops: float = 0.0, bwd_flops: float | None = None, seq2: bool = False,
          extra_activation_bytes: float = 0.0, backward: bool = True,
          kfac: tuple[int, int, int] | None = None) -> LayerProfile:
    """One leaf with the byte convention of the module docstring (backward: 2x the forward FLOPs
    unless given; ``seq2``: all FLOPs grow with seq_len squared)."""
    grad_bytes = GRAD_BYTES_PER_PARAM * params
    bwd = (2.0 * fwd_flops if bwd_flops is None else bwd_flops) if backward else 0.0
    io = float(in_bytes + out_bytes)
    a, g, sp = kfac if kfac is not None else (None, None, None)
    return LayerProfile(
        name=name, type=type_, params=params, grad_bytes=grad_bytes,
        fwd_flops=float(fwd_flops), bwd_flops=float(bwd),
        fwd_bytes=io + grad_bytes, bwd_bytes=(2.0 * io + 2.0 * grad_bytes) if backward else 0.0,
        activation_bytes=float(out_bytes + extra_activation_bytes),
        fwd_flops_seq2=float(fwd_flops) if seq2 else 0.0, bwd_flops_seq2=float(bwd) if seq2 else 0.0,
        kfac_a_dim=a, kfac_g_dim=g, kfac_spatial=sp, unit=unit,
    )


def _linear(name: str, unit: str | None, d_in: int, d_out: int, bias: bool, sh: _Shape, e_in: int,
            owns_weight: bool = True) -> LayerProfile:
    params = (d_in * d_out + (d_out if bias else 0)) if owns_weight else 0
    return _leaf(name, "Linear", unit, params, sh.tokens * d_in * e_in, sh.tokens * d_out * sh.e_mm,
                 fwd_flops=2.0 * sh.tokens * d_in * d_out, kfac=(d_in + int(bias), d_out, sh.seq))


def _norm(name: str, unit: str | None, arch: DecoderArch, sh: _Shape) -> LayerProfile:
    width = sh.tokens * arch.hidden * sh.e_res
    return _leaf(name, "RMSNorm" if arch.norm == "rmsnorm" else "LayerNorm", unit, _norm_params(arch), width, width)


def _block(arch: DecoderArch, i: int, names: _Naming, sh: _Shape) -> list[LayerProfile]:
    unit = names.block.format(i=i)

    def at(part: str) -> str:
        return f"{unit}.{part}"

    d, t, bias = arch.hidden, sh.tokens, arch.biases
    qw, kvw = arch.q_width, arch.kv_width
    out = [_norm(at(names.norm_1), unit, arch, sh)]
    if arch.is_mla:  # DeepseekV3Attention's projections (module docstring of attention_params)
        heads, rope, vw = arch.heads, arch.qk_rope_head_dim, arch.heads * arch.v_head_dim
        if arch.q_lora_rank:
            q_lat = t * arch.q_lora_rank * sh.e_mm
            out += [_linear(at("self_attn.q_a_proj"), unit, d, arch.q_lora_rank, False, sh, sh.e_res),
                    _leaf(at("self_attn.q_a_layernorm"), "RMSNorm", unit, arch.q_lora_rank, q_lat, q_lat),
                    _linear(at("self_attn.q_b_proj"), unit, arch.q_lora_rank, qw, False, sh, sh.e_mm)]
        else:
            out.append(_linear(at("self_attn.q_proj"), unit, d, qw, False, sh, sh.e_res))
        kv_lat = t * arch.kv_lora_rank * sh.e_mm
        out += [_linear(at("self_attn.kv_a_proj_with_mqa"), unit, d, arch.kv_lora_rank + rope, False, sh, sh.e_res),
                _leaf(at("self_attn.kv_a_layernorm"), "RMSNorm", unit, arch.kv_lora_rank, kv_lat, kv_lat),
                _linear(at("self_attn.kv_b_proj"), unit, arch.kv_lora_rank,
                        heads * (arch.head_dim - rope + arch.v_head_dim), False, sh, sh.e_mm)]
        core_in = t * (2 * qw + vw) * sh.e_mm
    elif names.qkv:
        out.append(_linear(at(names.qkv), unit, d, qw + 2 * kvw, QKV_BIAS in bias, sh, sh.e_res))
        core_in, vw = t * (qw + 2 * kvw) * sh.e_mm, qw
    else:
        out += [_linear(at(names.q), unit, d, qw, QKV_BIAS in bias, sh, sh.e_res),
                _linear(at(names.k), unit, d, kvw, QKV_BIAS in bias, sh, sh.e_res),
                _linear(at(names.v), unit, d, kvw, QKV_BIAS in bias, sh, sh.e_res)]
        core_in, vw = t * (qw + 2 * kvw) * sh.e_mm, qw
    if arch.qk_norm:  # Qwen3's per-head RMSNorm of the queries and keys
        out += [_leaf(at("self_attn.q_norm"), "RMSNorm", unit, arch.head_dim, t * qw * sh.e_mm, t * qw * sh.e_mm),
                _leaf(at("self_attn.k_norm"), "RMSNorm", unit, arch.head_dim, t * kvw * sh.e_mm, t * kvw * sh.e_mm)]
    # Q K^T over the query/key width and P V over the value width (MLA: 192 and 128 per head).
    per_pair = 2.0 * sh.batch * arch.heads * (arch.head_dim + arch.v_head_dim)  # FLOPs per (query, key) pair
    w = arch.sliding_window
    local = arch.is_sliding_block(i) and sh.seq > w
    # A causal window of w keys: s w - w^2 / 2 pairs (linear in s; the rescale keeps it linear,
    # off by the w^2 / 2 corner, w / 2s of it, when the length changes).
    attn_fwd = per_pair * (sh.seq * w - w * w / 2.0) if local else CAUSAL_FRACTION * per_pair * sh.seq * sh.seq
    lam = arch.sample_attention_len  # samples packed, each attending within itself (srift/simulate/varlen.py):
    if 0 < lam < sh.seq and not local:  # still the fused kernel's work (seq2), priced at this length only
        attn_fwd = CAUSAL_FRACTION * per_pair * sh.seq * lam
    out.append(_leaf(at(names.core), "ScaledDotProductAttention", unit, arch.heads if arch.attention_sinks else 0,
                     in_bytes=core_in, out_bytes=t * vw * sh.e_mm,
                     fwd_flops=attn_fwd, bwd_flops=ATTENTION_BWD_OVER_FWD * attn_fwd, seq2=not local,
                     extra_activation_bytes=t * arch.heads * LSE_BYTES))
    out.append(_linear(at(names.o), unit, vw, d, O_BIAS in bias, sh, sh.e_mm))
    out.append(_norm(at(names.norm_2), unit, arch, sh))
    if arch.is_moe_block(i):
        return out + _moe_mlp(arch, unit, sh)
    return out + _mlp(arch, at, names, arch.intermediate, sh, unit)


def _mlp(arch: DecoderArch, at: Any, names: _Naming, f: int, sh: _Shape, unit: str,
         tokens: int | None = None) -> list[LayerProfile]:
    """A dense MLP of width ``f`` on ``tokens`` (default: all of the step's)."""
    d, bias = arch.hidden, arch.biases
    if tokens is not None:
        sh = dataclasses.replace(sh, tokens=tokens)
    act_bytes = sh.tokens * f * sh.e_mm
    out: list[LayerProfile] = []
    if arch.mlp in GATED_MLPS:  # down(act(gate(x)) * up(x)), in the order Hugging Face runs them
        out += [_linear(at(names.gate), unit, d, f, MLP_BIAS in bias, sh, sh.e_res),
                _leaf(at(names.act), _ACT_LEAF[arch.mlp], unit, 0, act_bytes, act_bytes),
                _linear(at(names.up), unit, d, f, MLP_BIAS in bias, sh, sh.e_res)]
    else:
        out += [_linear(at(names.up), unit, d, f, MLP_BIAS in bias, sh, sh.e_res),
                _leaf(at(names.act), _ACT_LEAF[arch.mlp], unit, 0, act_bytes, act_bytes)]
    out.append(_linear(at(names.down), unit, f, d, MLP_BIAS in bias, sh, sh.e_mm))
    return out


# Leaf names of a MoE block's routed experts (srift/simulate/moe.py times them at the per-expert
# token count instead).
EXPERTS_PREFIX = "mlp.experts."


def _moe_mlp(arch: DecoderArch, unit: str, sh: _Shape) -> list[LayerProfile]:
    """A MoE block's MLP: the router, the routed experts as one grouped GEMM per projection (all
    experts' weights, ``tokens x top-k`` rows in all) and the shared experts on every token."""
    d, bias = arch.hidden, arch.biases

    def at(part: str) -> str:
        return f"{unit}.{part}"

    routed = sh.tokens * arch.experts_per_token
    out = [_linear(at("mlp.router"), unit, d, arch.experts, arch.router_bias, sh, sh.e_res)]
    grouped = _Naming(**{**dataclasses.asdict(_NAMING["hf-llama"]), "gate": EXPERTS_PREFIX + "gate_proj",
                         "up": EXPERTS_PREFIX + "up_proj", "act": EXPERTS_PREFIX + "act_fn",
                         "down": EXPERTS_PREFIX + "down_proj"})
    experts = _mlp(arch, at, grouped, arch.expert_intermediate, sh, unit, tokens=routed)
    for layer in experts:  # one leaf holds every expert's weights
        if layer.params:
            layer.params *= arch.experts
            layer.grad_bytes *= arch.experts
            extra = (arch.experts - 1) * GRAD_BYTES_PER_PARAM * layer.params // arch.experts
            layer.fwd_bytes += extra
            layer.bwd_bytes += 2 * extra
    out += experts
    if arch.shared_intermediate:
        shared = _Naming(**{**dataclasses.asdict(_NAMING["hf-llama"]), "gate": "mlp.shared_expert.gate_proj",
                            "up": "mlp.shared_expert.up_proj", "act": "mlp.shared_expert.act_fn",
                            "down": "mlp.shared_expert.down_proj"})
        out += _mlp(arch, at, shared, arch.shared_intermediate, sh, unit)
        if arch.shared_gate:
            out.append(_linear(at("mlp.shared_expert_gate"), unit, d, 1, False, sh, sh.e_res))
    return out


def decoder_profile(arch: DecoderArch, batch_size: int = DEFAULT_BATCH_SIZE, seq_len: int | None = None,
                    precision: str = "fp32") -> Profile:
    """The structural profile of one training step of ``arch`` (see the module docstring).

    Args:
        arch: The architecture.
        batch_size: Sequences per GPU per step.
        seq_len: Tokens per sequence (default: ``default_seq_len(arch)``).
        precision: A training precision of srift.job.PRECISIONS.

    Raises:
        SriftError: for a non-positive batch or sequence length, or an unknown precision.
    """
    seq = default_seq_len(arch) if seq_len is None else seq_len
    for what, value in (("batch size", batch_size), ("sequence length", seq)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            flag = "--batch-size" if what == "batch size" else "--seq-len"
            raise SriftError(f"{what} must be a positive integer, got {value!r}.", f"pass {flag} 1 or more.")
    if precision not in PRECISIONS:
        raise SriftError(f"unknown precision '{precision}'.", f"use one of {', '.join(PRECISIONS)}.")
    e_mm, e_res = _ELEMENT_BYTES[precision]
    sh = _Shape(batch=batch_size, seq=seq, tokens=batch_size * seq, e_mm=e_mm, e_res=e_res)
    names = _NAMING[arch.naming]
    d, t = arch.hidden, sh.tokens
    ids = t * TOKEN_ID_BYTES
    layers = [_leaf(names.embed, "Embedding", None, arch.vocab * d, ids, t * d * e_res)]
    if arch.position == "learned":
        layers.append(_leaf(names.positions, "Embedding", None, arch.max_seq_len * d, ids, t * d * e_res))
    elif arch.position == "rope":  # cos and sin tables per position; nothing flows back through them
        layers.append(_leaf(names.rotary, "RotaryEmbedding", None, 0, ids, 2 * t * arch.head_dim * e_res,
                            backward=False))
    for i in range(arch.n_layers):
        layers.extend(_block(arch, i, names, sh))
    layers.append(_norm(names.final_norm, None, arch, sh))
    layers.append(_linear(names.head, None, d, arch.vocab, False, sh, e_res, owns_weight=not arch.tied_embeddings))
    return Profile(
        name=arch.name,
        batch_size=batch_size,
        precision=precision,
        layers=layers,
        seq_len=seq,
        device=DeviceInfo("none (analytic)"),
        framework={"srift": srift.__version__, "python": platform.python_version()},
        optimizer=OptimizerInfo("AdamW", 8),
        input_bytes_per_sample=float(seq * TOKEN_ID_BYTES),
        notes=[f"analytic structural profile of {arch.name} ({arch.source or 'no source given'}); no timings",
               "attention: causal SDPA/flash, executed FLOPs (half the s^2 scores; backward 2.5x forward), "
               "no s^2 scores kept"],
    )


def expert_profile(arch: DecoderArch, tokens: int, precision: str = "bf16") -> Profile:
    """The structural profile of ONE routed expert's MLP (gated: gate, activation, up, down) on ``tokens``
    rows: what a grouped GEMM runs per expert (srift/simulate/moe.py times it at the per-expert
    token count, where the GEMMs are smallest).

    Raises:
        SriftError: for a dense ``arch``, non-positive ``tokens`` or an unknown precision.
    """
    if not arch.is_moe:
        raise SriftError(f"architecture '{arch.name}' has no experts.", "pass a mixture-of-experts model.")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        raise SriftError(f"tokens per expert must be a positive integer, got {tokens!r}.", "route at least one token.")
    if precision not in PRECISIONS:
        raise SriftError(f"unknown precision '{precision}'.", f"use one of {', '.join(PRECISIONS)}.")
    e_mm, e_res = _ELEMENT_BYTES[precision]
    sh = _Shape(batch=1, seq=tokens, tokens=tokens, e_mm=e_mm, e_res=e_res)
    unit = "expert"
    layers = _mlp(arch, lambda part: f"{unit}.{part}", _NAMING["hf-llama"], arch.expert_intermediate, sh, unit)
    return Profile(name=f"{arch.name} expert", batch_size=1, precision=precision, layers=layers, seq_len=tokens,
                   device=DeviceInfo("none (analytic)"),
                   framework={"srift": srift.__version__, "python": platform.python_version()},
                   optimizer=OptimizerInfo("AdamW", 8), input_bytes_per_sample=0.0,
                   notes=[f"one routed expert of {arch.name} on {tokens} tokens"])
