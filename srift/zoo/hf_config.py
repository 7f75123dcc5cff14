"""Read a Hugging Face decoder config.json into a DecoderArch, so any such model is predicted
without its weights (``--model-config config.json``).

Understood: dense Llama-style decoders, ``model_type`` llama, mistral or qwen2 (their keys:
num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, head_dim,
intermediate_size, vocab_size, tie_word_embeddings, hidden_act, rms_norm_eps, attention_bias,
mlp_bias, max_position_embeddings). Biases follow each implementation: Llama puts
``attention_bias`` on q, k, v and o and ``mlp_bias`` on the MLP; Qwen2 always has q/k/v biases and
no others; Mistral has none. ``nemotron`` (NemotronForCausalLM: the same keys, ``hidden_act``
``relu2``, a squared-ReLU MLP of up and down projections, LayerNorm with bias, ``norm_eps``) and
``gpt2`` (GPT2LMHeadModel, GPT-2 and GPT-3 shapes: n_layer, n_embd, n_head, n_inner (default
4 x n_embd), vocab_size, n_positions (learned positions), activation_function gelu*, biases
everywhere, LayerNorm, a tied head unless tie_word_embeddings is false).

Mixtures of experts (``_moe_arch``; keys as each transformers model class reads them):
``mixtral`` (num_local_experts, num_experts_per_tok; every block MoE, experts of
intermediate_size; a non-null sliding_window local attention on every block), ``qwen2_moe`` (num_experts, moe_intermediate_size, a shared expert of
shared_expert_intermediate_size with its sigmoid gate, decoder_sparse_step, mlp_only_layers (dense
blocks), Qwen2's q/k/v biases),
``qwen3_moe`` (the same without the shared expert, with per-head q/k norms; sliding_window on
every block under use_sliding_window, which Qwen2-MoE's partial pattern is named under), ``deepseek_v3``
(n_routed_experts, n_shared_experts x moe_intermediate_size shared, first_k_dense_replace dense
blocks of intermediate_size (``moe_layer_freq``, which transformers' DeepseekV3 does not read, is named
in the notes), the router's score-correction bias; multi-head latent attention:
q_lora_rank, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim; num_nextn_predict_layers,
the multi-token prediction layers its checkpoint has), ``llama4_text``
(num_local_experts, one shared expert, both of intermediate_size; interleave_moe_layer_step; dense
blocks of intermediate_size_mlp) and ``gpt_oss`` (num_local_experts with biases, a router with
bias, q/k/v/o biases, one attention-sink logit per head; ``sliding_window`` local attention on the
blocks ``layer_types`` names ``sliding_attention``, which must alternate from the first, as GPT-OSS's do).
Their experts (routed and shared) are gated MLPs of ``hidden_act``: SwiGLU for silu, GeGLU for
a GELU variant; another activation is timed as SwiGLU's and named in the prediction's notes.
``kimi_k2`` (Moonshot's Kimi-K2) is DeepSeek-V3's architecture under another name, with the same
keys (Megatron-Bridge's KimiK2Bridge builds it as DeepSeek-V3's MLA model), so it is read as ``deepseek_v3``. Anything else is refused with
the key that says why. JSON only (``json.loads``: nothing in the file is executed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from srift.bounds import MAX_MTP_LAYERS, MAX_NAME_CHARS, MAX_SEQ_LEN, shown
from srift.errors import SriftError
from srift.files import read_json
from srift.text import inert
from srift.profile import Profile
from srift.zoo.llm import DecoderArch, decoder_profile

DENSE_MODEL_TYPES = ("llama", "mistral", "qwen2", "nemotron", "gpt2")
# DeepSeek-V3's architecture (MLA, shared expert, first dense blocks), under each name its configs use.
DEEPSEEK_V3_MODEL_TYPES = ("deepseek_v3", "kimi_k2")
MOE_MODEL_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", *DEEPSEEK_V3_MODEL_TYPES, "llama4_text", "gpt_oss")
MODEL_TYPES = DENSE_MODEL_TYPES + MOE_MODEL_TYPES
# Keys that mark a mixture-of-experts model (Mixtral, Qwen2-MoE, DeepSeek, ...).
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size", "num_experts_per_tok")
_GATED_ACTIVATIONS = ("silu", "swish")
_GELU_ACTIVATIONS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh")
_HINT = "fix the key in the model's config.json (as published in its Hugging Face repository)."
# What srift models (srift/bounds.py): sizes beyond any published decoder by orders of magnitude.
_MAX_DIM = 1 << 20  # hidden, intermediate and head sizes, head counts
_MAX = {"num_hidden_layers": 10_000, "n_layer": 10_000, "vocab_size": 1 << 24, "max_position_embeddings": MAX_SEQ_LEN,
        "n_positions": MAX_SEQ_LEN, "num_nextn_predict_layers": MAX_MTP_LAYERS}


def arch_from_hf_config(path: str | Path) -> DecoderArch:
    """The architecture a Hugging Face ``config.json`` describes.

    The name is ``_name_or_path`` when the file has one, else the folder of a ``config.json``
    (``models/Llama-3-8B/config.json`` -> ``Llama-3-8B``), else the file name.

    Raises:
        SriftError: for a missing or unreadable file, invalid JSON, a missing or wrong key (named),
            or a model type srift does not model (named, with the reason).
    """
    p = Path(path)
    data = read_json(p, "model config", "pass the config.json of a Hugging Face decoder model.")
    if not isinstance(data, dict):
        raise _bad(p, "the file is not a JSON object of settings")
    model_type = data.get("model_type")
    if not isinstance(model_type, str):
        raise _bad(p, f"'model_type' is missing or not a string ({model_type!r})")
    experts = [k for k in _MOE_KEYS if data.get(k)]
    if experts and model_type not in MOE_MODEL_TYPES:
        raise SriftError(
            f"model config '{p}' is a mixture-of-experts model ('{experts[0]}': {data[experts[0]]!r}) of "
            f"model_type '{model_type}', which srift does not model.",
            f"srift reads mixture-of-experts configs of model_type {', '.join(MOE_MODEL_TYPES)}.")
    if model_type not in MODEL_TYPES:
        raise SriftError(
            f"model config '{p}' has model_type '{model_type}', which srift does not model.",
            f"srift reads decoder configs of model_type {', '.join(MODEL_TYPES)}.")
    if model_type in MOE_MODEL_TYPES:
        return _moe_arch(model_type, data, p)
    if model_type == "gpt2":
        return _gpt2_arch(data, p)
    heads = _positive_int(data, "num_attention_heads", p)
    hidden = _positive_int(data, "hidden_size", p)
    kv_heads = _positive_int(data, "num_key_value_heads", p, default=heads)
    head_dim = _positive_int(data, "head_dim", p, default=0)  # 0: hidden_size / num_attention_heads
    if head_dim == 0 and hidden % heads:
        raise _bad(p, f"'hidden_size' {hidden} is not a multiple of 'num_attention_heads' {heads} and there is no 'head_dim'")
    if heads % kv_heads:
        raise _bad(p, f"'num_attention_heads' {heads} is not a multiple of 'num_key_value_heads' {kv_heads}")
    nemotron = model_type == "nemotron"
    act = data.get("hidden_act", "relu2" if nemotron else "silu")
    if nemotron and act != "relu2":
        raise _bad(p, f"'hidden_act' is {act!r}; srift models Nemotron's squared-ReLU MLP ('relu2')")
    if not nemotron and act not in _GATED_ACTIVATIONS:
        raise _bad(p, f"'hidden_act' is {act!r}; srift models the SwiGLU MLP of these models ('silu')")
    eps = data.get("norm_eps" if nemotron else "rms_norm_eps", 1e-5 if nemotron else 1e-6)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps <= 1.0:  # (an int past any float too)
        raise _bad(p, f"'{'norm_eps' if nemotron else 'rms_norm_eps'}' must be a positive number of at most 1, "
                      f"got {shown(eps)}")
    return DecoderArch(
        name=_name(data, p),
        n_layers=_positive_int(data, "num_hidden_layers", p),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        intermediate=_positive_int(data, "intermediate_size", p),
        vocab=_positive_int(data, "vocab_size", p),
        tied_embeddings=_bool(data, "tie_word_embeddings", p),
        mlp="relu2" if nemotron else "swiglu",
        norm="layernorm" if nemotron else "rmsnorm",
        biases=_biases(model_type, data, p),
        position="rope",
        max_seq_len=_positive_int(data, "max_position_embeddings", p),
        head_dim=head_dim,
        norm_eps=float(eps),
        naming="hf-llama",
        source=f"Hugging Face config {p}",
    )


def hf_config_profile(path: str | Path, batch_size: int = 1, seq_len: int | None = None,
                      precision: str = "fp32") -> Profile:
    """The analytic structural profile of the model a ``config.json`` describes (see srift.zoo.llm)."""
    return decoder_profile(arch_from_hf_config(path), batch_size=batch_size, seq_len=seq_len, precision=precision)


def _gpt2_arch(data: dict[str, Any], path: Path) -> DecoderArch:
    """GPT2Config's keys (GPT-2, and GPT-3 shapes written as a GPT-2 config)."""
    hidden = _positive_int(data, "n_embd", path)
    heads = _positive_int(data, "n_head", path)
    if hidden % heads:
        raise _bad(path, f"'n_embd' {hidden} is not a multiple of 'n_head' {heads}")
    act = data.get("activation_function", "gelu_new")
    if act not in _GELU_ACTIVATIONS:
        raise _bad(path, f"'activation_function' is {act!r}; srift models GPT-2's GeLU MLP ({', '.join(_GELU_ACTIVATIONS)})")
    eps = data.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps <= 1.0:
        raise _bad(path, f"'layer_norm_epsilon' must be a positive number of at most 1, got {shown(eps)}")
    tied = data.get("tie_word_embeddings", True)  # GPT2LMHeadModel ties its head by default
    if not isinstance(tied, bool):
        raise _bad(path, f"'tie_word_embeddings' must be true or false, got {tied!r}")
    return DecoderArch(
        name=_name(data, path), n_layers=_positive_int(data, "n_layer", path), hidden=hidden, heads=heads,
        kv_heads=heads, intermediate=_positive_int(data, "n_inner", path, default=4 * hidden),
        vocab=_positive_int(data, "vocab_size", path), tied_embeddings=tied, mlp="gelu", norm="layernorm",
        biases=frozenset({"qkv", "o", "mlp", "norm"}), position="learned",
        max_seq_len=_positive_int(data, "n_positions", path), norm_eps=float(eps), naming="hf-gpt2",
        source=f"Hugging Face config {path}")


def _moe_arch(model_type: str, data: dict[str, Any], path: Path) -> DecoderArch:
    """A mixture-of-experts config (module docstring: the keys of each model type)."""
    heads = _positive_int(data, "num_attention_heads", path)
    hidden = _positive_int(data, "hidden_size", path)
    mlp, unmodelled = _expert_mlp(data.get("hidden_act", "silu"), path)
    eps = data.get("rms_norm_eps", 1e-6)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps <= 1.0:
        raise _bad(path, f"'rms_norm_eps' must be a positive number of at most 1, got {shown(eps)}")
    fields: dict[str, Any] = {"experts_per_token": _positive_int(data, "num_experts_per_tok", path)}
    head_dim = _positive_int(data, "head_dim", path, default=0)
    kv_heads = _positive_int(data, "num_key_value_heads", path, default=heads)
    intermediate = _positive_int(data, "intermediate_size", path)
    biases: frozenset[str] = frozenset()
    if model_type in ("mixtral", "llama4_text", "gpt_oss"):
        fields["experts"] = _positive_int(data, "num_local_experts", path)
        fields["expert_intermediate"] = intermediate
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        fields["experts"] = _positive_int(data, "num_experts", path)
        fields["expert_intermediate"] = _positive_int(data, "moe_intermediate_size", path)
        fields["moe_every"] = _positive_int(data, "decoder_sparse_step", path, default=1)
        fields["dense_blocks"] = _block_numbers(data, "mlp_only_layers", path)
    if model_type == "qwen2_moe":
        fields["shared_intermediate"] = _positive_int(data, "shared_expert_intermediate_size", path)
        fields["shared_gate"] = True
        biases = frozenset({"qkv"})  # Qwen2MoeAttention: q/k/v with bias, as Qwen2
    elif model_type == "qwen3_moe":
        fields["qk_norm"] = True
        biases = frozenset({"qkv", "o"}) if _bool(data, "attention_bias", path) else frozenset()
    elif model_type == "llama4_text":
        fields["shared_intermediate"] = intermediate  # one shared expert of the experts' width
        fields["moe_every"] = _positive_int(data, "interleave_moe_layer_step", path, default=1)
        intermediate = _positive_int(data, "intermediate_size_mlp", path)
    elif model_type == "gpt_oss":
        fields["router_bias"] = True
        fields["attention_sinks"] = True
        kinds = data.get("layer_types")
        if kinds is not None and data.get("sliding_window"):
            if not isinstance(kinds, list) or any(k != ("sliding_attention" if i % 2 == 0 else "full_attention")
                                                  for i, k in enumerate(kinds)):
                raise _bad(path, "'layer_types' must alternate sliding_attention and full_attention from the first "
                                 "(what srift models of GPT-OSS)")
            fields["sliding_window"] = _positive_int(data, "sliding_window", path)
            fields["sliding_every"] = 2
        biases = frozenset({"qkv", "o", "mlp"})  # q/k/v/o and every expert's projections carry biases
        limit = data.get("swiglu_limit", 0.0)
        if not isinstance(limit, (int, float)) or isinstance(limit, bool) or not 0 <= limit < 1e6:
            raise _bad(path, f"'swiglu_limit' must be a non-negative number, got {shown(limit)}")
        fields["glu_clamp"] = float(limit)
    elif model_type in DEEPSEEK_V3_MODEL_TYPES:
        fields["experts"] = _positive_int(data, "n_routed_experts", path)
        moe_width = _positive_int(data, "moe_intermediate_size", path)
        fields["expert_intermediate"] = moe_width
        fields["shared_intermediate"] = _positive_int(data, "n_shared_experts", path, default=0) * moe_width
        fields["dense_layers"] = _positive_int(data, "first_k_dense_replace", path, default=0) \
            if data.get("first_k_dense_replace") else 0
        blocks = _positive_int(data, "num_hidden_layers", path)
        if fields["dense_layers"] > blocks:
            raise _bad(path, f"'first_k_dense_replace' is {fields['dense_layers']:,}, more than its {blocks:,} blocks "
                             "(num_hidden_layers)")
        fields["router_bias"] = True  # e_score_correction_bias, one per routed expert
        if data.get("moe_layer_freq", 1) != 1:
            # transformers (5.24.0 DeepseekV3DecoderLayer) builds a MoE block at every layer from
            # first_k_dense_replace on and does not read moe_layer_freq: neither does srift.
            unmodelled += (f"'moe_layer_freq' {shown(data['moe_layer_freq'])}: every block after the first_k_dense_replace "
                           "is a MoE block, as transformers' DeepseekV3 builds it (it does not read the key)",)
        # 0 (Kimi-K2's config): no MTP module, which _positive_int would refuse as a value.
        fields["mtp_layers"] = _positive_int(data, "num_nextn_predict_layers", path, default=0) \
            if data.get("num_nextn_predict_layers") else 0
        fields["q_lora_rank"] = _positive_int(data, "q_lora_rank", path, default=0)
        fields["kv_lora_rank"] = _positive_int(data, "kv_lora_rank", path)
        fields["qk_rope_head_dim"] = _positive_int(data, "qk_rope_head_dim", path)
        fields["v_head_dim"] = _positive_int(data, "v_head_dim", path)
        head_dim = _positive_int(data, "qk_nope_head_dim", path) + fields["qk_rope_head_dim"]
        kv_heads = heads  # MLA: every head its own keys and values, from the shared latent
    window, unmodelled = _every_block_window(model_type, data, path, unmodelled)
    if window:
        fields["sliding_window"] = window  # every block (sliding_every 1)
    if head_dim == 0 and hidden % heads:
        raise _bad(path, f"'hidden_size' {hidden} is not a multiple of 'num_attention_heads' {heads} and there is no 'head_dim'")
    if heads % kv_heads:
        raise _bad(path, f"'num_attention_heads' {heads} is not a multiple of 'num_key_value_heads' {kv_heads}")
    if fields["experts_per_token"] > fields["experts"]:
        raise _bad(path, f"'num_experts_per_tok' {fields['experts_per_token']} is more than the {fields['experts']} experts")
    return DecoderArch(
        name=_name(data, path), n_layers=_positive_int(data, "num_hidden_layers", path), hidden=hidden, heads=heads,
        kv_heads=kv_heads, intermediate=intermediate, vocab=_positive_int(data, "vocab_size", path),
        tied_embeddings=_bool(data, "tie_word_embeddings", path), mlp=mlp, norm="rmsnorm", biases=biases,
        position="rope", max_seq_len=_positive_int(data, "max_position_embeddings", path), head_dim=head_dim,
        norm_eps=float(eps), naming="hf-llama", source=f"Hugging Face config {path}", unmodelled=unmodelled, **fields)


def _every_block_window(model_type: str, data: dict[str, Any], path: Path,
                        unmodelled: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
    """The local-attention window every block of a Mixtral or Qwen3-MoE config attends through (0:
    none), and ``unmodelled`` with Qwen2-MoE's sliding blocks named. transformers 5.24.0:
    ``MixtralAttention`` passes ``config.sliding_window`` (default None) to every block's attention;
    ``Qwen3MoeConfig`` keeps ``sliding_window`` only under ``use_sliding_window`` and every block then
    uses it; ``Qwen2MoeConfig`` slides only the ``layer_types`` blocks below ``max_window_layers``."""
    if model_type == "mixtral" and data.get("sliding_window") is not None:
        return _positive_int(data, "sliding_window", path), unmodelled
    if model_type == "qwen3_moe" and _bool(data, "use_sliding_window", path):
        return _positive_int(data, "sliding_window", path, default=4096), unmodelled  # Qwen3MoeConfig's default
    if model_type == "qwen2_moe" and _bool(data, "use_sliding_window", path):
        return 0, unmodelled + ("'use_sliding_window': Qwen2-MoE's local attention on some blocks, timed as full "
                                "attention",)
    return 0, unmodelled


def _block_numbers(data: dict[str, Any], key: str, path: Path) -> frozenset[int]:
    """A list of 0-based block numbers under ``key`` (Qwen-MoE's ``mlp_only_layers``: the blocks
    transformers builds with a dense MLP, ``layer_idx not in config.mlp_only_layers``); empty when absent.

    Raises:
        SriftError: for anything but a list of block numbers of the model.
    """
    value = data.get(key) or []
    blocks = _positive_int(data, "num_hidden_layers", path)
    if not isinstance(value, list) or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < blocks
                                          for i in value):
        raise _bad(path, f"'{key}' must be a list of block numbers from 0 to {blocks - 1}, got {shown(value)}")
    return frozenset(value)


def _expert_mlp(act: Any, path: Path) -> tuple[str, tuple[str, ...]]:
    """The MLP kind of a mixture of experts' ``hidden_act`` and what srift does not model of it.
    Every MoE model class srift reads builds gated experts (gate, up, down: ``act(gate(x)) *
    up(x)``) of ``ACT2FN[hidden_act]``, so SiLU is SwiGLU and a GELU variant GeGLU (Grok-1's
    experts). Another activation is timed as SwiGLU's, the same three GEMMs, and named."""
    if not isinstance(act, str) or not act:
        raise _bad(path, f"'hidden_act' must be an activation name, got {shown(act)}")
    if act in _GATED_ACTIVATIONS:
        return "swiglu", ()
    if act in _GELU_ACTIVATIONS:
        return "geglu", () if act == "gelu" else (f"'hidden_act' {act!r}: timed as exact GELU",)
    return "swiglu", (f"'hidden_act' {shown(act)}: the experts' gated activation timed as SiLU's (the same three GEMMs)",)


def _biases(model_type: str, data: dict[str, Any], path: Path) -> frozenset[str]:
    if model_type == "qwen2":  # Qwen2Attention: q/k/v projections with bias, o_proj without
        return frozenset({"qkv"})
    parts: set[str] = set()
    if model_type == "nemotron":  # NemotronLayerNorm1P carries a bias
        parts.add("norm")
    if model_type in ("llama", "nemotron"):
        if _bool(data, "attention_bias", path):
            parts |= {"qkv", "o"}
        if _bool(data, "mlp_bias", path):
            parts.add("mlp")
    return frozenset(parts)


def _name(data: dict[str, Any], path: Path) -> str:
    named = data.get("_name_or_path")
    if isinstance(named, str) and inert(named):
        return inert(named, MAX_NAME_CHARS)  # shown in tables and PR comments: one bounded line, no escapes
    if path.name == "config.json" and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


def _positive_int(data: dict[str, Any], key: str, path: Path, default: int | None = None) -> int:
    if key not in data or data[key] is None:
        if default is not None:
            return default
        raise _bad(path, f"required key '{key}' is missing")
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise _bad(path, f"'{key}' must be a positive integer, got {shown(value)}")
    high = _MAX.get(key, _MAX_DIM)
    if value > high:
        raise _bad(path, f"'{key}' is {value:,}; srift models at most {high:,}" if value < 10**30 else f"'{key}' is beyond what srift models")
    return value


def _bool(data: dict[str, Any], key: str, path: Path) -> bool:
    value = data.get(key, False)  # False: the default of all three model types' configs
    if not isinstance(value, bool):
        raise _bad(path, f"'{key}' must be true or false, got {value!r}")
    return value


def _bad(path: Path, what: str) -> SriftError:
    return SriftError(f"model config '{path}' is not a decoder config srift can read: {what}.", _HINT)
