"""Pipeline parallelism: the bubble, and which blocks each stage holds.

Part of the layout simulator (srift/simulate/layouts.py: the model as a whole)."""

from __future__ import annotations

import functools
import re

from srift.zoo.llm import DecoderArch


def bubble_fraction(pp: int, micro_batches: int, vp: int = 1) -> float:
    """Share of the pipeline's time its stages idle: ``(p - 1) / V`` slots of ``M + (p - 1) / V``
    (1F1B: ``V = 1``, ``(p - 1) / (M + p - 1)``)."""
    idle = (pp - 1) / vp
    return idle / (micro_batches + idle)


def pipeline_blocks(arch: DecoderArch, mtp_layers: int = 0) -> int:
    """Blocks the pipeline holds: the model's and ``mtp_layers`` multi-token prediction layers
    (Megatron-Core's ``mtp_num_layers``; DeepSeek-V3's ``num_nextn_predict_layers``, which
    Megatron-Bridge's DeepSeek-V3 bridge maps to it).

    An MTP layer (megatron-core 0.16.1 ``transformer/multi_token_prediction.py``) runs, on the
    last stage beside the loss, one more block of the model's last kind (a MoE block for
    DeepSeek-V3) on the hidden states and the embeddings of the tokens shifted by one, then the
    final norm, the shared output head and its own cross-entropy: srift counts it as one more
    block of the pipeline (stages as ``stage_layers`` splits them, which stands for the layouts
    that give the last stage fewer decoder blocks) and runs the last stage's head and loss once more
    per MTP layer, keeping its logits for backward. Its input norms and the ``2 x hidden ->
    hidden`` projection of the concatenated inputs (``eh_proj``) are not timed: about a fifth of a
    DeepSeek-V3 MoE block's active FLOPs.
    """
    return arch.n_layers + mtp_layers


# Megatron-Core's pipeline layout strings (``pipeline_model_parallel_layout``, megatron-core 0.16.1
# ``transformer/pipeline_parallel_layer_layout.py``): a virtual stage per ``|``-separated part, of
# ``E`` (embedding), ``t`` (a decoder block), ``m`` (a multi-token prediction layer), ``L`` (the
# loss); ``x*N`` and ``(...)*N`` repeat.
_LAYOUT_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_LAYOUT_REPEAT = re.compile(r"([EtmL])\*(\d+)")


def megatron_stage_blocks(layout: str, pp: int, vp: int = 1) -> tuple[int, ...]:
    """Blocks (decoder and multi-token prediction layers) each of ``pp`` pipeline stages holds
    under Megatron-Core's pipeline ``layout`` of ``pp x vp`` virtual stages (rank ``r`` runs the
    virtual stages ``r``, ``r + pp``, ``r + 2 pp``, ...: the interleaved schedule's placement).

    Raises:
        ValueError: for a string that is not such a layout, or one of another number of stages.
    """
    text = layout.replace(" ", "")
    while _LAYOUT_GROUP.search(text):
        text = _LAYOUT_GROUP.sub(lambda g: g.group(1) * int(g.group(2)), text)
    text = _LAYOUT_REPEAT.sub(lambda g: g.group(1) * int(g.group(2)), text)
    parts = text.split("|")
    if set(text) - set("EtmL|") or len(parts) != pp * vp:
        raise ValueError(f"pipeline layout {layout!r} is not {pp * vp} virtual stages of E, t, m and L")
    return tuple(sum(parts[c * pp + r].count("t") + parts[c * pp + r].count("m") for c in range(vp)) for r in range(pp))


@functools.lru_cache(maxsize=4096)
def stage_layers(n_layers: int, pp: int, megatron: bool = False) -> tuple[int, ...]:
    """Blocks per stage: as even as possible, with the embedding and the head counted as a block
    each, so the first and last stages get the fewer blocks (Megatron's ``account_for_embedding``
    and ``account_for_loss``, NeMo's 405B recipe; torchtitan's default split, which weighs the
    embedding and the output as a layer each).

    ``megatron``: Megatron-Core's rule where it differs. It accepts those two flags only when
    ``n_layers + 2`` divides by ``pp`` (megatron-core 0.16 ``TransformerConfig``: "must be
    divisible by pipeline_model_parallel_size"); otherwise a recipe without a pipeline layout or
    first/last-stage counts runs ``n_layers / pp`` blocks on every stage (Megatron-Bridge's
    GPT-OSS-120B recipe: 36 blocks over PP 4, ``account_for_*_in_pipeline_split = False``)."""
    if pp == 1:
        return (n_layers,)
    if megatron and (n_layers + 2) % pp and n_layers % pp == 0:
        return (n_layers // pp,) * pp
    total = n_layers + 2
    base, extra = divmod(total, pp)
    slots = [base + (1 if i < extra else 0) for i in range(pp)]
    # Give the extra slots to the middle stages: the ends carry the embedding and the head.
    slots.sort()
    slots = [slots[0]] + sorted(slots[1:-1], reverse=True) + [slots[-1]] if pp > 2 else slots
    out = list(slots)
    out[0] -= 1
    out[-1] -= 1
    # A stage never holds fewer than zero blocks (very deep pipelines of shallow models).
    while min(out) < 0:
        i = out.index(min(out))
        j = out.index(max(out))
        out[i] += 1
        out[j] -= 1
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def stage_moe_blocks(arch: DecoderArch, layers: tuple[int, ...], vp: int = 1, mtp_layers: int = 0) -> tuple[int, ...]:
    """MoE blocks among the ``layers[r]`` blocks of each pipeline rank ``r``.

    The pipeline's blocks in order are the model's (``DecoderArch.is_moe_block``), then its
    ``mtp_layers``, each of the last block's kind (``pipeline_blocks``). With ``vp`` virtual stages
    a rank's blocks are split into ``vp`` chunks as evenly as possible (the first the larger), and
    chunk ``c`` of rank ``r`` is virtual stage ``c x pp + r`` (the interleaved schedule's
    placement): DeepSeek-V3's 3 dense blocks then lie on the first virtual stages.
    """
    kinds = [arch.is_moe_block(i) for i in range(arch.n_layers)] + [arch.is_moe_block(arch.n_layers - 1)] * mtp_layers
    if sum(layers) != len(kinds):
        raise ValueError(f"stages of {layers} blocks do not place the {len(kinds)} blocks of {arch.name}")
    counts = [0] * len(layers)
    start = 0
    for c in range(vp):
        for r, n in enumerate(layers):
            size = n // vp + (1 if c < n % vp else 0)
            counts[r] += sum(kinds[start:start + size])
            start += size
    return tuple(counts)
