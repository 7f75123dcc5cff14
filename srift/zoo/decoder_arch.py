"""Decoder-only LLM architectures as data (``DecoderArch``, the zoo's ``ZooLlm``), their
parameter counts and model FLOPs: torch-free and weight-free.

The analytic structural profile an architecture becomes is srift/zoo/decoder_layers.py; the zoo's
list (configs/zoo/llm.yaml) and the public names of both are srift/zoo/llm.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final, Literal, get_args

from srift.errors import SriftError

SCHEMA = "srift.zoo.llm/v1"
MLP_KINDS = ("swiglu", "geglu", "gelu", "relu", "relu2")
GATED_MLPS = ("swiglu", "geglu")  # gate, up, down: three matrices; the others up, down: two
_ACT_LEAF = {"swiglu": "SiLU", "geglu": "GELU", "gelu": "GELU", "relu": "ReLU", "relu2": "SquaredReLU"}
NORM_KINDS = ("rmsnorm", "layernorm")
POSITION_KINDS = ("rope", "alibi", "learned")
BiasPart = Literal["qkv", "o", "mlp", "norm"]
BIAS_PARTS: tuple[BiasPart, ...] = get_args(BiasPart)
MLP_BIAS: Final = "mlp"  # the bias part of the MLP (the experts' down projection in a mixture)
QKV_BIAS: Final = "qkv"  # the bias part of the query, key and value projections
O_BIAS: Final = "o"  # the bias part of the attention's output projection
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
        sample_attention_len: Packed sequences whose samples attend only within themselves
            (``--varlen-attention``, srift/simulate/varlen.py): the samples' ``E[l^2] / E[l]``
            (0: attention over the whole sequence). A job setting, not the model's.
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
    sample_attention_len: float = 0.0
    glu_clamp: float = 0.0
    mtp_layers: int = 0
    unmodelled: tuple[str, ...] = ()

    def __hash__(self) -> int:
        """The fields' hash (what the dataclass would compute), computed once: the layout search's
        caches key on the architecture, thousands of times a catalog search."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", cached)
        return int(cached)

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}  # str hashes differ between processes

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


def default_seq_len(arch: DecoderArch) -> int:
    """The zoo's default sequence length for ``arch``: DEFAULT_SEQ_LEN, or its context if shorter."""
    return min(DEFAULT_SEQ_LEN, arch.max_seq_len)


def _arch_error(name: str, what: str) -> SriftError:
    return SriftError(f"architecture '{name}' is not valid: {what}.", "fix the architecture's numbers.")
