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
from typing import Any, Final, Literal, get_args

import srift
from srift.errors import SriftError
from srift.files import read_yaml
from srift.profile_ratio import ATTENTION_BWD_OVER_FWD  # flash attention's backward over forward
from srift.job import PRECISIONS
from srift.profile import CAUSAL_FRACTION, DeviceInfo, LayerProfile, OptimizerInfo, Profile
from srift.files import configs_dir

SCHEMA = "srift.zoo.llm/v1"
MLP_KINDS = ("swiglu", "geglu", "gelu", "relu", "relu2")
GATED_MLPS = ("swiglu", "geglu")  # gate, up, down: three matrices; the others up, down: two
_ACT_LEAF = {"swiglu": "SiLU", "geglu": "GELU", "gelu": "GELU", "relu": "ReLU", "relu2": "SquaredReLU"}
NORM_KINDS = ("rmsnorm", "layernorm")
POSITION_KINDS = ("rope", "alibi", "learned")
BiasPart = Literal["qkv", "o", "mlp", "norm"]
BIAS_PARTS: tuple[BiasPart, ...] = get_args(BiasPart)
MLP_BIAS: Final = "mlp"  # the bias part of the MLP (the experts' down projection in a mixture)
NAMINGS = ("hf-llama", "mpt", "hf-gpt2")

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
        mlp: ``swiglu`` (gate, up, down; SiLU), ``geglu`` (gate, up, down; GELU: Grok-1-style
            gated GELU), ``gelu`` (up, down; GELU: GPT-2, GPT-3), ``relu`` (up, down; ReLU) or
            ``relu2`` (up, down; squared ReLU: Nemotron). A mixture of experts' routed and shared
            experts are MLPs of the same kind.
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
        experts: Routed experts of a mixture-of-experts block; 0: a dense model.
        experts_per_token: Experts each token is routed to (top-k).
        expert_intermediate: One routed expert's SwiGLU width.
        shared_intermediate: The shared experts' SwiGLU width, all of them together (0: none).
        dense_layers: The first blocks keep the dense MLP (DeepSeek's ``first_k_dense_replace``).
        moe_every: Of the rest, block ``i`` is a MoE block when ``(i + 1) % moe_every == 0``
            (Llama 4's ``interleave_moe_layer_step``, Qwen-MoE's ``decoder_sparse_step``).
        dense_blocks: Blocks (0-based) that keep the dense MLP whatever the rules above
            (Qwen2/3-MoE's ``mlp_only_layers``).
        router_bias: The router has a bias vector (GPT-OSS; DeepSeek-V3's score-correction bias).
        shared_gate: A sigmoid gate of width 1 on the shared expert (Qwen2-MoE).
        q_lora_rank: Multi-head latent attention (MLA): rank of the query compression (0: none).
        kv_lora_rank: MLA's key/value latent width; 0: ordinary (grouped-query) attention. Under
            MLA, ``head_dim`` is the query/key head width (``qk_nope_head_dim + qk_rope_head_dim``).
        qk_rope_head_dim: MLA's decoupled rotary width of queries and keys (shared by all heads).
        v_head_dim: Value head width; 0: ``head_dim``.
        qk_norm: Per-head RMSNorm of queries and keys with weights (Qwen3).
        attention_sinks: One learned sink logit per head (GPT-OSS).
        sliding_window: Blocks with local attention attend to at most this many previous tokens
            (0: none); they are the blocks ``i`` with ``i % sliding_every == 0`` (GPT-OSS: 128,
            every other block from the first).
        sliding_every: See ``sliding_window``.
        glu_clamp: The experts' gated activation clamps its gate input above and its linear input
            to +-this (GPT-OSS's ``swiglu_limit``, 7.0); 0: no clamp.
        mtp_layers: Multi-token prediction layers the model's checkpoint has (DeepSeek-V3's
            ``num_nextn_predict_layers``); whether a run trains them is the job's choice
            (``--mtp-layers``), so they are priced only when the job says so.
        unmodelled: What the model's config says that srift does not model (each named in the
            prediction's notes, e.g. an activation timed as another of the same GEMMs).
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
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    dense_layers: int = 0
    moe_every: int = 1
    dense_blocks: frozenset[int] = frozenset()
    router_bias: bool = False
    shared_gate: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    qk_norm: bool = False
    attention_sinks: bool = False
    sliding_window: int = 0
    sliding_every: int = 1
    glu_clamp: float = 0.0
    mtp_layers: int = 0
    unmodelled: tuple[str, ...] = ()

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
        for key in ("experts", "experts_per_token", "expert_intermediate", "shared_intermediate", "dense_layers",
                    "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "sliding_window", "mtp_layers"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _arch_error(self.name, f"'{key}' must be a non-negative integer, got {value!r}")
        if not isinstance(self.dense_blocks, frozenset) or any(
                not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in self.dense_blocks):
            raise _arch_error(self.name, f"'dense_blocks' must be a set of block numbers, got {self.dense_blocks!r}")
        for key in ("moe_every", "sliding_every"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _arch_error(self.name, f"'{key}' must be a positive integer, got {value!r}")
        if self.experts and not (0 < self.experts_per_token <= self.experts and self.expert_intermediate > 0):
            raise _arch_error(self.name, f"a mixture of {self.experts} experts needs 1 to {self.experts} experts per "
                                         f"token and an expert width, got {self.experts_per_token} and {self.expert_intermediate}")
        if not isinstance(self.glu_clamp, (int, float)) or isinstance(self.glu_clamp, bool) or not self.glu_clamp >= 0:
            raise _arch_error(self.name, f"'glu_clamp' must be a non-negative number, got {self.glu_clamp!r}")
        if self.kv_lora_rank and not 0 < self.qk_rope_head_dim < self.head_dim:
            raise _arch_error(self.name, f"MLA needs a rotary width between 0 and head_dim {self.head_dim}, "
                                         f"got {self.qk_rope_head_dim}")
        if self.v_head_dim == 0:
            object.__setattr__(self, "v_head_dim", self.head_dim)

    @property
    def is_moe(self) -> bool:
        """A mixture-of-experts model."""
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    def is_sliding_block(self, i: int) -> bool:
        """Whether block ``i`` (0-based) attends through a sliding window."""
        return self.sliding_window > 0 and i % self.sliding_every == 0

    @property
    def sliding_blocks(self) -> int:
        """How many blocks attend through a sliding window."""
        return sum(1 for i in range(self.n_layers) if self.is_sliding_block(i))

    def is_moe_block(self, i: int) -> bool:
        """Whether block ``i`` (0-based) routes its tokens to experts."""
        return self.experts > 0 and i >= self.dense_layers and (i + 1) % self.moe_every == 0 and i not in self.dense_blocks

    @property
    def moe_blocks(self) -> int:
        """How many blocks are MoE blocks."""
        return sum(1 for i in range(self.n_layers) if self.is_moe_block(i))

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
        published_active_params: A mixture of experts' published active count (0: not given).
    """

    arch: DecoderArch
    hf_repo: str | None
    aliases: tuple[str, ...]
    published_params: int
    published_params_source: str
    published_active_params: int = 0


# ---- parameter counts and model FLOPs ------------------------------------------------------------
def _norm_params(arch: DecoderArch) -> int:
    return arch.hidden * (2 if "norm" in arch.biases else 1)


def _mlp_matrices(arch: DecoderArch) -> int:
    return 3 if arch.mlp in GATED_MLPS else 2


def attention_params(arch: DecoderArch) -> int:
    """Parameters of one block's attention: projections, their biases, and MLA's latent norms.

    MLA (DeepSeek-V3's ``DeepseekV3Attention``): ``q_a_proj`` (hidden x q_lora), its norm,
    ``q_b_proj`` (q_lora x heads x head_dim), ``kv_a_proj_with_mqa`` (hidden x (kv_lora + rope)),
    its norm, ``kv_b_proj`` (kv_lora x heads x (nope + v)) and ``o_proj`` (heads x v x hidden).
    """
    d, b = arch.hidden, arch.biases
    if arch.is_mla:
        qw = arch.heads * arch.head_dim
        q = d * arch.q_lora_rank + arch.q_lora_rank + arch.q_lora_rank * qw if arch.q_lora_rank else d * qw
        nope = arch.head_dim - arch.qk_rope_head_dim
        kv = d * (arch.kv_lora_rank + arch.qk_rope_head_dim) + arch.kv_lora_rank \
            + arch.kv_lora_rank * arch.heads * (nope + arch.v_head_dim)
        return q + kv + arch.heads * arch.v_head_dim * d
    attn = d * (arch.q_width + 2 * arch.kv_width) + arch.q_width * d
    attn += (arch.q_width + 2 * arch.kv_width if "qkv" in b else 0) + (d if "o" in b else 0)
    attn += 2 * arch.head_dim if arch.qk_norm else 0
    return attn + (arch.heads if arch.attention_sinks else 0)


def kv_cache_bytes_per_token(arch: DecoderArch, element_bytes: float = 2.0) -> float:
    """Bytes one token's keys and values take in one block's cache: ``2 x kv_heads x head_dim``
    elements for (grouped-query) attention; for MLA its compressed latent and the shared rotary
    key, ``kv_lora_rank + qk_rope_head_dim`` (DeepSeek-V3: 576 against 128 heads x (192 + 128) =
    40,960 expanded: what makes MLA's cache small)."""
    if arch.is_mla:
        return float(arch.kv_lora_rank + arch.qk_rope_head_dim) * element_bytes
    return 2.0 * arch.kv_width * element_bytes


def dense_mlp_params(arch: DecoderArch, width: int) -> int:
    """Parameters of one MLP (or one expert) of ``width``, with its biases."""
    d, m = arch.hidden, _mlp_matrices(arch)
    return m * d * width + ((m - 1) * width + d if "mlp" in arch.biases else 0)


def moe_mlp_params(arch: DecoderArch, active: bool = False) -> int:
    """Parameters of one MoE block's MLP: router, routed experts (only the ``experts_per_token``
    a token uses when ``active``), shared experts and the shared expert's gate."""
    d = arch.hidden
    router = d * arch.experts + (arch.experts if arch.router_bias else 0)
    routed = (arch.experts_per_token if active else arch.experts) * dense_mlp_params(arch, arch.expert_intermediate)
    shared = dense_mlp_params(arch, arch.shared_intermediate) if arch.shared_intermediate else 0
    return router + routed + shared + (d if arch.shared_gate else 0)


def block_params(arch: DecoderArch, i: int = 0, active: bool = False) -> int:
    """Parameters of decoder block ``i`` (norms, attention, its dense MLP or its MoE layer); with
    ``active``, only those a token multiplies (its top-k routed experts)."""
    mlp = moe_mlp_params(arch, active) if arch.is_moe_block(i) else dense_mlp_params(arch, arch.intermediate)
    return 2 * _norm_params(arch) + attention_params(arch) + mlp


def _blocks_params(arch: DecoderArch, active: bool = False) -> int:
    if not arch.is_moe:
        return arch.n_layers * block_params(arch)
    moe = arch.moe_blocks
    dense = arch.n_layers - moe
    first_moe = next(i for i in range(arch.n_layers) if arch.is_moe_block(i)) if moe else 0
    first_dense = next((i for i in range(arch.n_layers) if not arch.is_moe_block(i)), 0)
    return moe * block_params(arch, first_moe, active) + dense * block_params(arch, first_dense)


def params_count(arch: DecoderArch) -> int:
    """All trainable parameters: token embedding, position table (learned positions), blocks
    (every expert of a MoE block), final norm, and the output head unless it is tied to the
    token embedding."""
    d = arch.hidden
    total = arch.vocab * d + _blocks_params(arch) + _norm_params(arch)
    if arch.position == "learned":
        total += arch.max_seq_len * d
    if not arch.tied_embeddings:
        total += arch.vocab * d
    return total


def active_params_count(arch: DecoderArch) -> int:
    """The parameters one token uses: ``params_count`` with each MoE block's routed experts cut to
    the ``experts_per_token`` it is routed to (the "active" count model cards publish). A dense
    model's is ``params_count``."""
    return params_count(arch) - _blocks_params(arch) + _blocks_params(arch, active=True)


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
    untied model that is torchtitan's ``N`` (all parameters but the token embedding). For a
    mixture of experts ``N`` is the *active* parameters (``active_params_count``: the routed
    experts a token uses, not all of them), so MFU is on active parameters, as Megatron-Core and
    torchtitan report it; MLA's attention term is ``6 L s heads (d_qk + d_v)``.
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
    n -= params_count(arch) - active_params_count(arch)  # a MoE token multiplies its active experts only
    # 12 L H s with H = heads x head_dim; MLA's values are narrower than its queries and keys.
    attention = 6.0 * arch.n_layers * arch.heads * (arch.head_dim + arch.v_head_dim) * seq_len
    return 6.0 * n + attention


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
        out.append(_linear(at(names.qkv), unit, d, qw + 2 * kvw, "qkv" in bias, sh, sh.e_res))
        core_in, vw = t * (qw + 2 * kvw) * sh.e_mm, qw
    else:
        out += [_linear(at(names.q), unit, d, qw, "qkv" in bias, sh, sh.e_res),
                _linear(at(names.k), unit, d, kvw, "qkv" in bias, sh, sh.e_res),
                _linear(at(names.v), unit, d, kvw, "qkv" in bias, sh, sh.e_res)]
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
    out.append(_leaf(at(names.core), "ScaledDotProductAttention", unit, arch.heads if arch.attention_sinks else 0,
                     in_bytes=core_in, out_bytes=t * vw * sh.e_mm,
                     fwd_flops=attn_fwd, bwd_flops=ATTENTION_BWD_OVER_FWD * attn_fwd, seq2=not local,
                     extra_activation_bytes=t * arch.heads * LSE_BYTES))
    out.append(_linear(at(names.o), unit, vw, d, "o" in bias, sh, sh.e_mm))
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
        out += [_linear(at(names.gate), unit, d, f, "mlp" in bias, sh, sh.e_res),
                _leaf(at(names.act), _ACT_LEAF[arch.mlp], unit, 0, act_bytes, act_bytes),
                _linear(at(names.up), unit, d, f, "mlp" in bias, sh, sh.e_res)]
    else:
        out += [_linear(at(names.up), unit, d, f, "mlp" in bias, sh, sh.e_res),
                _leaf(at(names.act), _ACT_LEAF[arch.mlp], unit, 0, act_bytes, act_bytes)]
    out.append(_linear(at(names.down), unit, f, d, "mlp" in bias, sh, sh.e_mm))
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


def default_seq_len(arch: DecoderArch) -> int:
    """The zoo's default sequence length for ``arch``: DEFAULT_SEQ_LEN, or its context if shorter."""
    return min(DEFAULT_SEQ_LEN, arch.max_seq_len)


# ---- the zoo's list (configs/zoo/llm.yaml) --------------------------------------------------------
_ARCH_KEYS = {f.name for f in dataclasses.fields(DecoderArch)} - {"name", "unmodelled"}
_ENTRY_KEYS = {"hf_repo", "aliases", "published_params", "published_params_source", "published_active_params"}


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
    dense_blocks = fields.get("dense_blocks", [])
    if not isinstance(dense_blocks, list):
        raise _catalog_error(path, f"models.{name}.dense_blocks must be a list of block numbers")
    fields["dense_blocks"] = frozenset(dense_blocks)
    if "norm_eps" in fields:
        fields["norm_eps"] = float(fields["norm_eps"])
    published = raw["published_params"]
    if not isinstance(published, int) or isinstance(published, bool) or published <= 0:
        raise _catalog_error(path, f"models.{name}.published_params must be a positive integer")
    active = raw.get("published_active_params", 0)
    if not isinstance(active, int) or isinstance(active, bool) or active < 0:
        raise _catalog_error(path, f"models.{name}.published_active_params must be a non-negative integer")
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
        published_active_params=active,
    )


def _catalog_error(path: Path, what: str) -> SriftError:
    return SriftError(f"the LLM zoo list '{path}' is not valid: {what}.", "reinstall srift-planner, or fix configs/zoo/llm.yaml.")


def _arch_error(name: str, what: str) -> SriftError:
    return SriftError(f"architecture '{name}' is not valid: {what}.", "fix the architecture's numbers.")
