"""Decoder-only LLMs as data: published architectures and their analytic structural profiles.

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
import functools
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import srift
from srift.errors import SriftError
from srift.files import read_yaml
from srift.job import PRECISIONS
from srift.profile import LayerProfile, Profile
from srift.files import configs_dir

SCHEMA = "srift.zoo.llm/v1"
MLP_KINDS = ("swiglu", "gelu", "relu2")
NORM_KINDS = ("rmsnorm", "layernorm")
POSITION_KINDS = ("rope", "alibi", "learned")
BIAS_PARTS = ("qkv", "o", "mlp", "norm")
NAMINGS = ("hf-llama", "mpt", "hf-gpt2")

# Executed attention FLOPs relative to the full (non-causal) 4 b s^2 h d of QK^T and PV.
CAUSAL_FRACTION = 0.5
# Flash-attention backward: recomputed QK^T, then dV, dP, dQ, dK: five matmuls against two.
ATTENTION_BWD_OVER_FWD = 2.5

# Bytes per element at each precision: (matmul and attention outputs, residual stream).
_ELEMENT_BYTES = {"fp32": (4, 4), "fp32-strict": (4, 4), "tf32": (4, 4), "amp": (2, 4), "bf16": (2, 2)}
GRAD_BYTES_PER_PARAM = 4  # fp32 gradients, as the rest of srift counts them (grad_bytes)
TOKEN_ID_BYTES = 8  # int64 token and position ids
LSE_BYTES = 4  # flash attention's fp32 log-sum-exp per query and head

# Zoo defaults: one sequence per GPU (LLM jobs grow the batch by data parallelism and gradient
# accumulation, and 1 is what fits most often), and 4096 tokens or the model's own context if
# shorter: a length every zoo model was trained at or beyond (MPT 2048, Llama 2 4096, Llama 3
# 8192), so the default is a run people actually make; --seq-len changes it exactly.
DEFAULT_BATCH_SIZE = 1
DEFAULT_SEQ_LEN = 4096


@dataclass(frozen=True)
class DecoderArch:
    """A dense decoder-only transformer's architecture.

    Attributes:
        name: Model name (``llama3-8b``).
        n_layers: Decoder blocks.
        hidden: Model width (``hidden_size``, ``d_model``).
        heads: Query heads.
        kv_heads: Key/value heads (fewer than ``heads``: grouped-query attention).
        intermediate: MLP width.
        vocab: Vocabulary size.
        tied_embeddings: The output head shares the token-embedding matrix.
        mlp: ``swiglu`` (gate, up, down; SiLU), ``gelu`` (up, down; GELU: GPT-2, GPT-3) or
            ``relu2`` (up, down; squared ReLU: Nemotron).
        norm: ``rmsnorm`` or ``layernorm``.
        biases: Parts with bias vectors: any of ``qkv``, ``o``, ``mlp``, ``norm``.
        position: ``rope``, ``alibi`` or ``learned`` (a table of ``max_seq_len`` positions).
        max_seq_len: The longest context the configuration states.
        head_dim: Per-head width; 0 means ``hidden // heads``.
        norm_eps: Norm epsilon (recorded; it costs nothing).
        naming: Module names as in ``hf-llama`` (LlamaForCausalLM), ``mpt`` (MPTForCausalLM,
            which fuses q, k and v into one ``Wqkv`` matmul) or ``hf-gpt2`` (GPT2LMHeadModel,
            fused ``c_attn``).
        source: Where the numbers come from.
    """

    name: str
    n_layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    biases: frozenset[str] = frozenset()
    position: str = "rope"
    max_seq_len: int = 4096
    head_dim: int = 0
    norm_eps: float = 1e-5
    naming: str = "hf-llama"
    source: str = ""

    def __post_init__(self) -> None:
        for key in ("n_layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "max_seq_len"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise _arch_error(self.name, f"'{key}' must be a positive integer, got {value!r}")
        if self.head_dim == 0:
            if self.hidden % self.heads:
                raise _arch_error(self.name, f"hidden {self.hidden} is not a multiple of heads {self.heads}; give head_dim")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        elif not isinstance(self.head_dim, int) or isinstance(self.head_dim, bool) or self.head_dim < 0:
            raise _arch_error(self.name, f"'head_dim' must be a positive integer, got {self.head_dim!r}")
        if self.heads % self.kv_heads:
            raise _arch_error(self.name, f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        for key, allowed in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("position", POSITION_KINDS), ("naming", NAMINGS)):
            if getattr(self, key) not in allowed:
                raise _arch_error(self.name, f"'{key}' must be one of {', '.join(allowed)}, got {getattr(self, key)!r}")
        if not isinstance(self.tied_embeddings, bool):
            raise _arch_error(self.name, f"'tied_embeddings' must be true or false, got {self.tied_embeddings!r}")
        unknown = sorted(set(self.biases) - set(BIAS_PARTS))
        if unknown:
            raise _arch_error(self.name, f"'biases' may name {', '.join(BIAS_PARTS)}, got {', '.join(unknown)}")

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output): heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the keys (and values): kv_heads x head_dim."""
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class ZooLlm:
    """A zoo entry of configs/zoo/llm.yaml: the architecture and what the zoo needs around it.

    Attributes:
        arch: The architecture.
        hf_repo: Hugging Face repository of its config.json, if any (also a name that resolves).
        aliases: More names that resolve to it.
        published_params: The published parameter count.
        published_params_source: Whose count that is.
    """

    arch: DecoderArch
    hf_repo: str | None
    aliases: tuple[str, ...]
    published_params: int
    published_params_source: str


# ---- parameter counts and model FLOPs ------------------------------------------------------------
def _norm_params(arch: DecoderArch) -> int:
    return arch.hidden * (2 if "norm" in arch.biases else 1)


def _mlp_matrices(arch: DecoderArch) -> int:
    return 3 if arch.mlp == "swiglu" else 2


def block_params(arch: DecoderArch) -> int:
    """Parameters of one decoder block (norms, attention projections, MLP, their biases)."""
    d, f, b = arch.hidden, arch.intermediate, arch.biases
    attn = d * (arch.q_width + 2 * arch.kv_width) + arch.q_width * d
    attn += (arch.q_width + 2 * arch.kv_width if "qkv" in b else 0) + (d if "o" in b else 0)
    m = _mlp_matrices(arch)
    mlp = m * d * f + ((m - 1) * f + d if "mlp" in b else 0)
    return 2 * _norm_params(arch) + attn + mlp


def params_count(arch: DecoderArch) -> int:
    """All trainable parameters: token embedding, position table (learned positions), blocks,
    final norm, and the output head unless it is tied to the token embedding."""
    d = arch.hidden
    total = arch.vocab * d + arch.n_layers * block_params(arch) + _norm_params(arch)
    if arch.position == "learned":
        total += arch.max_seq_len * d
    if not arch.tied_embeddings:
        total += arch.vocab * d
    return total


def non_embedding_params(arch: DecoderArch) -> int:
    """Parameters without the input lookup tables (token embedding and a learned position table).

    A tied output head is the token embedding, so it is excluded too (Kaplan et al.'s N); an untied
    head is a separate matrix and stays (torchtitan's count).
    """
    lookup = arch.vocab * arch.hidden + (arch.max_seq_len * arch.hidden if arch.position == "learned" else 0)
    return params_count(arch) - lookup


def model_flops_per_token(arch: DecoderArch, seq_len: int) -> float:
    """Training FLOPs per token for MFU: ``6 N + 12 L H s`` (PaLM appendix B, torchtitan).

    ``N`` is the parameters every token multiplies: ``non_embedding_params`` plus, for a tied
    head, the head's ``vocab x hidden`` matrix (its matmul runs per token whatever owns it). For an
    untied model that is torchtitan's ``N`` (all parameters but the token embedding).
    llm-foundry's MFU counts all parameters instead (the learned position table too: 0.1-0.5 %
    more at 2048 tokens). ``6 N``: forward 2 FLOPs per multiply-add, backward twice forward.
    ``12 L H s`` (``H`` = heads x head_dim) is the attention score and value matmuls of all ``s``
    positions, forward and backward, counted in full as the convention does (causal attention
    executes about half; the profile counts what executes).

    Raises:
        SriftError: for a non-positive ``seq_len``.
    """
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len <= 0:
        raise SriftError(f"sequence length must be a positive integer, got {seq_len!r}.", "pass --seq-len 1 or more.")
    n = non_embedding_params(arch) + (arch.vocab * arch.hidden if arch.tied_embeddings else 0)
    return 6.0 * n + 12.0 * arch.n_layers * arch.q_width * seq_len


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

    d, f, t, bias = arch.hidden, arch.intermediate, sh.tokens, arch.biases
    qw, kvw = arch.q_width, arch.kv_width
    out = [_norm(at(names.norm_1), unit, arch, sh)]
    if names.qkv:
        out.append(_linear(at(names.qkv), unit, d, qw + 2 * kvw, "qkv" in bias, sh, sh.e_res))
    else:
        out += [_linear(at(names.q), unit, d, qw, "qkv" in bias, sh, sh.e_res),
                _linear(at(names.k), unit, d, kvw, "qkv" in bias, sh, sh.e_res),
                _linear(at(names.v), unit, d, kvw, "qkv" in bias, sh, sh.e_res)]
    attn_fwd = CAUSAL_FRACTION * 4.0 * sh.batch * sh.seq * sh.seq * qw
    out.append(_leaf(at(names.core), "ScaledDotProductAttention", unit, 0,
                     in_bytes=t * (qw + 2 * kvw) * sh.e_mm, out_bytes=t * qw * sh.e_mm,
                     fwd_flops=attn_fwd, bwd_flops=ATTENTION_BWD_OVER_FWD * attn_fwd, seq2=True,
                     extra_activation_bytes=t * arch.heads * LSE_BYTES))
    out.append(_linear(at(names.o), unit, qw, d, "o" in bias, sh, sh.e_mm))
    out.append(_norm(at(names.norm_2), unit, arch, sh))
    act_bytes = t * f * sh.e_mm
    if arch.mlp == "swiglu":  # down(act(gate(x)) * up(x)), in the order Hugging Face runs them
        out += [_linear(at(names.gate), unit, d, f, "mlp" in bias, sh, sh.e_res),
                _leaf(at(names.act), "SiLU", unit, 0, act_bytes, act_bytes),
                _linear(at(names.up), unit, d, f, "mlp" in bias, sh, sh.e_res)]
    else:
        out += [_linear(at(names.up), unit, d, f, "mlp" in bias, sh, sh.e_res),
                _leaf(at(names.act), "GELU" if arch.mlp == "gelu" else "SquaredReLU", unit, 0, act_bytes, act_bytes)]
    out.append(_linear(at(names.down), unit, f, d, "mlp" in bias, sh, sh.e_mm))
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
        device={"name": "none (analytic)", "kind": "none", "gpu": None},
        framework={"srift": srift.__version__, "python": platform.python_version()},
        optimizer={"type": "AdamW", "state_bytes_per_param": 8},
        input_bytes_per_sample=float(seq * TOKEN_ID_BYTES),
        notes=[f"analytic structural profile of {arch.name} ({arch.source or 'no source given'}); no timings",
               "attention: causal SDPA/flash, executed FLOPs (half the s^2 scores; backward 2.5x forward), "
               "no s^2 scores kept"],
    )


def default_seq_len(arch: DecoderArch) -> int:
    """The zoo's default sequence length for ``arch``: DEFAULT_SEQ_LEN, or its context if shorter."""
    return min(DEFAULT_SEQ_LEN, arch.max_seq_len)


# ---- the zoo's list (configs/zoo/llm.yaml) --------------------------------------------------------
_ARCH_KEYS = {f.name for f in dataclasses.fields(DecoderArch)} - {"name"}
_ENTRY_KEYS = {"hf_repo", "aliases", "published_params", "published_params_source"}


def llm_catalog_path() -> Path:
    return configs_dir() / "zoo" / "llm.yaml"


@functools.lru_cache(maxsize=2)
def zoo_llms(path: str | None = None) -> dict[str, ZooLlm]:
    """The LLMs of configs/zoo/llm.yaml (or ``path``), by name, validated.

    Raises:
        SriftError: naming the first entry and key that is missing or wrong.
    """
    p = Path(path) if path else llm_catalog_path()
    data = read_yaml(p, "LLM zoo list")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("models"), dict):
        raise _catalog_error(p, f"expected 'schema: {SCHEMA}' and a 'models' mapping")
    return {str(name): _entry(str(name), raw, p) for name, raw in data["models"].items()}


def _entry(name: str, raw: Any, path: Path) -> ZooLlm:
    if not isinstance(raw, dict):
        raise _catalog_error(path, f"models.{name} must be a mapping")
    unknown = sorted(set(raw) - _ARCH_KEYS - _ENTRY_KEYS)
    if unknown:
        raise _catalog_error(path, f"models.{name} has unknown keys {', '.join(unknown)}")
    missing = [k for k in ("n_layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "published_params")
               if k not in raw]
    if missing:
        raise _catalog_error(path, f"models.{name} is missing {', '.join(missing)}")
    fields: dict[str, Any] = {k: raw[k] for k in _ARCH_KEYS if k in raw}
    biases = fields.get("biases", [])
    if not isinstance(biases, list):
        raise _catalog_error(path, f"models.{name}.biases must be a list")
    fields["biases"] = frozenset(str(b) for b in biases)
    if "norm_eps" in fields:
        fields["norm_eps"] = float(fields["norm_eps"])
    published = raw["published_params"]
    if not isinstance(published, int) or isinstance(published, bool) or published <= 0:
        raise _catalog_error(path, f"models.{name}.published_params must be a positive integer")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list):
        raise _catalog_error(path, f"models.{name}.aliases must be a list")
    hf_repo = raw.get("hf_repo")
    return ZooLlm(
        arch=DecoderArch(name=name, **fields),
        hf_repo=None if hf_repo is None else str(hf_repo),
        aliases=tuple(str(a) for a in aliases),
        published_params=published,
        published_params_source=str(raw.get("published_params_source", "")),
    )


def _catalog_error(path: Path, what: str) -> SriftError:
    return SriftError(f"the LLM zoo list '{path}' is not valid: {what}.", "reinstall srift-planner, or fix configs/zoo/llm.yaml.")


def _arch_error(name: str, what: str) -> SriftError:
    return SriftError(f"architecture '{name}' is not valid: {what}.", "fix the architecture's numbers.")
