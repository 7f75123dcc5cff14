"""Layouts the stack can run: the rules a searched layout must meet beyond dividing the GPUs
(srift/simulate/layouts.py's ``_degrees``), so that `srift recommend` never proposes a layout the
framework refuses or a published recipe would not use.

**Megatron-Core's pipeline split** (the ``zero1``/``ddp`` stack; megatron-core 0.16.1 from PyPI,
``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build`` and
``megatron/core/transformer/transformer_config.py`` ``TransformerConfig.__post_init__``). Without a
``pipeline_model_parallel_layout`` string (srift prints none), the decoder blocks are split one of
three ways, the ways ``stage_layers(..., megatron=True)`` simulates:

- ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``:
  ``num_layers + 2`` must divide by PP ("num_layers should be divisible by
  pipeline_model_parallel_size") and, under the interleaved schedule, the ``(num_layers + 2) / PP``
  per rank by VP ("num_layers_per_pipeline_rank ... should be divisible by vp_size");
- the plain split: ``num_layers / PP`` per rank, divisible by VP;
- ``num_layers_in_first_pipeline_stage`` / ``..._last_...``: the middle ranks' layers must be
  equal ("the left over layers must be divisible by left over stages") and the first, last and
  middle counts each divisible by VP.

So Llama 3 70B's 80 blocks run PP 2 as 41 a rank (with the embedding and loss) or 40: neither
divides by VP 12, and ``tp2 pp2 vp12`` cannot run; Mixtral's 32 blocks over PP 4 run VP 8 (8 a rank).
PyTorch's stack (``fsdp``/``hsdp``, torchtitan) splits the blocks over PP x VP stages as evenly as
possible whatever the counts, so only the first rule set applies there.

**Context parallelism only where the sequence per rank stays efficient.** No published run in
data/llm-parallel-layouts splits fewer than MIN_CP_TOKENS_PER_RANK tokens per CP rank: the DGX
Cloud recipes run CP 2 at 8,192 tokens (Llama 3.1 8B, 70B, 405B; dgxc-benchmarking-h100-dense.csv)
and NeMo's long-context recipes turn CP on from 32K tokens (16K a rank; nemo-long-context-cp.csv,
CP 1 at 4K-16K). Below it the ring's key/value exchange grows against shrinking attention blocks,
beyond what srift's validation covers (tests/test_layout_rules.py recomputes the figure from the data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from srift.zoo.llm import DecoderArch

#: srift's split of blocks over pipeline stages (``layouts.stage_layers(n_layers, pp, megatron)``),
#: passed in: layouts.py imports this module, not the other way round.
StageSplit = Callable[[int, int, bool], tuple[int, ...]]

#: The fewest tokens per context-parallel rank of any published run (module docstring; data/llm-parallel-layouts).
MIN_CP_TOKENS_PER_RANK = 4096

Degrees = tuple[int, int, int, int, int, int, int, int]  # (tp, pp, cp, dp, micro_batch, grad_accum, vp, ep)


def cp_efficient(seq_len: int, cp: int) -> bool:
    """True when ``cp`` ranks each keep at least MIN_CP_TOKENS_PER_RANK tokens (always for cp 1)."""
    return cp == 1 or seq_len // cp >= MIN_CP_TOKENS_PER_RANK


def megatron_split(n_layers: int, pp: int, stage_layers: StageSplit) -> tuple[int, ...] | None:
    """Megatron-Core's blocks per pipeline rank ``(first, middle, ..., last)`` as it counts them for
    the VP check (the embedding and loss counted under the account-for split), or None when no
    split of its arguments matches srift's (``stage_layers(n_layers, pp, True)``)."""
    if pp == 1:
        return (n_layers,)
    if (n_layers + 2) % pp == 0:
        return ((n_layers + 2) // pp,) * pp
    if n_layers % pp == 0:
        return (n_layers // pp,) * pp
    counts = stage_layers(n_layers, pp, True)
    middle = counts[1:-1]
    if len(set(middle)) > 1 or min(counts[0], counts[-1]) <= 0:
        return None
    return counts


def megatron_runs(n_layers: int, pp: int, vp: int, stage_layers: StageSplit) -> bool:
    """True when Megatron-Core runs ``n_layers`` blocks over ``pp`` ranks of ``vp`` virtual stages
    without a custom pipeline layout (module docstring)."""
    split = megatron_split(n_layers, pp, stage_layers)
    return split is not None and (vp == 1 or all(n % vp == 0 for n in split))


def why_not_runnable(arch: DecoderArch, seq_len: int, pp: int, vp: int, cp: int, pytorch: bool,
                     stage_layers: StageSplit) -> str | None:
    """Why a searched layout is not one the stack runs efficiently, or None."""
    if not cp_efficient(seq_len, cp):
        return (f"cp={cp} leaves {seq_len // cp:,} tokens a rank, fewer than any published run "
                f"({MIN_CP_TOKENS_PER_RANK:,}; data/llm-parallel-layouts)")
    if not pytorch and not megatron_runs(arch.n_layers, pp, vp, stage_layers):
        return (f"Megatron-Core cannot split {arch.n_layers} blocks over pp={pp} x vp={vp} without a custom "
                "pipeline layout (megatron-core 0.16.1 transformer_block.get_num_layers_to_build)")
    return None


def runnable(arch: DecoderArch, degrees: Sequence[Degrees], seq_len: int, pytorch: bool,
             stage_layers: StageSplit) -> list[Degrees]:
    """The searched ``degrees`` the stack runs (``why_not_runnable`` None, asked once per (PP, VP,
    CP): a search has thousands of degrees and a few of those)."""
    runs: dict[tuple[int, int, int], bool] = {}
    out = []
    for d in degrees:
        key = (d[1], d[6], d[2])
        if key not in runs:
            runs[key] = why_not_runnable(arch, seq_len, d[1], d[6], d[2], pytorch, stage_layers) is None
        if runs[key]:
            out.append(d)
    return out
