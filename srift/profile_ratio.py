"""Is a profile's backward work plausible for its forward work?

Backward of a layer runs at most two products per forward product (the gradient of its input and
of its weights: ``2x``; ``1x`` for a frozen layer or one whose input takes no gradient), except
fused attention, whose backward recomputes the scores: five matmuls against the forward's two,
``2.5x`` (``ATTENTION_BWD_OVER_FWD``, FlashAttention-2's backward). A layer whose backward FLOPs
exceed that, or that has backward FLOPs and no forward ones, was charged with other layers' work:
profiles written before srift counted backward at the ops (issue 41: every backward op after a
``Dropout(p=0)`` or ``Identity``, which return their input, charged to it; nanoGPT's backward came
to 10-19x its forward, the shipped inception-v4 to 4.7x). Such a profile predicts the wrong job,
so it is refused, naming the layers.

Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from srift.errors import SriftError

ATTENTION_BWD_OVER_FWD = 2.5  # flash attention's backward: 5 s^2-matmuls against the forward's 2
TOLERANCE = 0.10  # FLOP formulas of other ops (norms counted by some counters) stay well within it
# A layer's excess backward FLOPs smaller than this share of the profile's backward is rounding.
NEGLIGIBLE_SHARE = 0.01
MAX_BWD_OVER_FWD = ATTENTION_BWD_OVER_FWD * (1.0 + TOLERANCE)
SHOWN = 5  # layers named in the error


class _Layer(Protocol):
    name: str
    type: str
    fwd_flops: float
    bwd_flops: float


def implausible_layers(layers: Sequence[_Layer]) -> list[tuple[str, str, float, float]]:
    """(name, type, forward FLOPs, backward FLOPs) of each layer whose backward exceeds
    ``MAX_BWD_OVER_FWD`` times its forward by more than ``NEGLIGIBLE_SHARE`` of all the backward
    FLOPs, largest excess first."""
    total_bwd = sum(l.bwd_flops for l in layers)
    floor = NEGLIGIBLE_SHARE * total_bwd
    bad = [(l.bwd_flops - MAX_BWD_OVER_FWD * l.fwd_flops, l) for l in layers]
    bad = [(x, l) for x, l in bad if x > floor and x > 0]
    bad.sort(key=lambda xl: -xl[0])
    return [(l.name, l.type, l.fwd_flops, l.bwd_flops) for _, l in bad]


def check_backward_ratio(layers: Sequence[_Layer], source: str) -> None:
    """Raise when the profile's backward FLOPs are implausible for its forward FLOPs (see the
    module docstring): the whole profile's, or a layer's.

    Raises:
        SriftError: naming the ratio and the layers to blame.
    """
    fwd = sum(l.fwd_flops for l in layers)
    bwd = sum(l.bwd_flops for l in layers)
    bad = implausible_layers(layers)
    whole = bwd > MAX_BWD_OVER_FWD * fwd and bwd > 0
    if not bad and not whole:
        return
    ratio = f"{bwd / fwd:.2f}x" if fwd > 0 else "with no forward FLOPs"
    shown = "; ".join(f"{name} ({kind}): forward {f / 1e9:.3g}, backward {b / 1e9:.3g} GFLOP"
                      for name, kind, f, b in bad[:SHOWN])
    more = f" and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
    raise SriftError(
        f"profile {source}: its backward FLOPs are {ratio} its forward FLOPs, more than the "
        f"{MAX_BWD_OVER_FWD:.2f}x any layer's backward does"
        + (f"; charged with other layers' backward work: {shown}{more}" if bad else ""),
        "re-run `srift profile` with this srift (it counts backward work at the ops, for the layer "
        "that ran them in forward); for a zoo model, reinstall srift-planner.",
    )
