"""A profile's layers and phase times at another per-GPU batch size or sequence length
(``Profile.rescale`` in srift/profile.py; the rule is in its docstring).

FLOPs, bytes and activations scale linearly with the batch; with the sequence length linearly,
except the ``*_seq2`` parts, which scale with its square, and the weights' share of the bytes,
which does not scale. A measured time keeps its fixed share (``batch_fixed_fraction``: per-call
costs) and scales the rest like the layer's FLOPs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from srift.profile_records import LayerProfile, PhaseTimes


def batch_fixed_fraction(phases: PhaseTimes) -> float:
    """Share of a measured time that does not grow with the batch (see ``Profile.batch_fixed_fraction``)."""
    full, half = phases.analysed_s, phases.analysed_half_s
    if not full or half is None:
        return 0.0
    return min(max(2.0 * half / full - 1.0, 0.0), 1.0)


@dataclass(frozen=True)
class Scaling:
    """From a profile's batch and sequence length to new ones.

    Attributes:
        rb: New batch over old.
        rs: New sequence length over old (1 without one).
        s_old: The old sequence length (None: no sequence).
        s_new: The new one.
        fixed_share: ``batch_fixed_fraction`` of the profile: the share of a measured time that stays.
    """

    rb: float
    rs: float
    s_old: int | None
    s_new: int | None
    fixed_share: float

    def work(self, total: float, quad: float) -> float:
        """A FLOP or byte count whose part ``quad`` grows with the sequence length squared."""
        return (total - quad) * self.rb * self.rs + quad * self.rb * self.rs * self.rs

    def quadratic(self, quad: float) -> float:
        return quad * self.rb * self.rs * self.rs

    def moved_bytes(self, total: float, weights: float) -> float:
        """Bytes moved, of which the weights' (at most ``total``) do not scale."""
        fixed = min(total, weights)
        return (total - fixed) * self.rb * self.rs + fixed

    def timed(self, work_ratio: float) -> float:
        """Measured-time ratio for a work ratio (the fixed share kept)."""
        return self.fixed_share + (1.0 - self.fixed_share) * work_ratio


def rescaled_layer(layer: LayerProfile, sc: Scaling) -> LayerProfile:
    rb, rs = sc.rb, sc.rs
    fwd = sc.work(layer.fwd_flops, layer.fwd_flops_seq2)
    bwd = sc.work(layer.bwd_flops, layer.bwd_flops_seq2)
    fr = sc.timed(fwd / layer.fwd_flops if layer.fwd_flops else rb * rs)
    br = sc.timed(bwd / layer.bwd_flops if layer.bwd_flops else rb * rs)
    return dataclasses.replace(
        layer,
        fwd_flops=fwd,
        bwd_flops=bwd,
        fwd_flops_seq2=sc.quadratic(layer.fwd_flops_seq2),
        bwd_flops_seq2=sc.quadratic(layer.bwd_flops_seq2),
        fwd_bytes=sc.moved_bytes(layer.fwd_bytes, layer.grad_bytes + layer.frozen_bytes),
        bwd_bytes=sc.moved_bytes(layer.bwd_bytes, 2.0 * (layer.grad_bytes + layer.frozen_bytes)),
        activation_bytes=sc.work(layer.activation_bytes, layer.activation_bytes_seq2),
        activation_bytes_seq2=sc.quadratic(layer.activation_bytes_seq2),
        saved_bytes=None if layer.saved_bytes is None else sc.work(layer.saved_bytes, layer.saved_bytes_seq2),
        saved_bytes_seq2=sc.quadratic(layer.saved_bytes_seq2),
        saved_half_bytes=None if layer.saved_half_bytes is None
        else sc.work(layer.saved_half_bytes, layer.saved_half_bytes_seq2),
        saved_half_bytes_seq2=sc.quadratic(layer.saved_half_bytes_seq2),
        fwd_s=None if layer.fwd_s is None else layer.fwd_s * fr,
        fwd_s_std=None if layer.fwd_s_std is None else layer.fwd_s_std * fr,
        bwd_s=None if layer.bwd_s is None else layer.bwd_s * br,
        bwd_s_std=None if layer.bwd_s_std is None else layer.bwd_s_std * br,
        # Factor rows grow with the batch and the sequence; inverses and
        # preconditioning depend on the factor dimensions only.
        kfac_factor_a_s=None if layer.kfac_factor_a_s is None else layer.kfac_factor_a_s * rb * rs,
        kfac_factor_g_s=None if layer.kfac_factor_g_s is None else layer.kfac_factor_g_s * rb * rs,
        # A Linear applied to every token has the sequence as its factor rows per sample.
        kfac_spatial=sc.s_new if (layer.kfac_spatial is not None and layer.kfac_spatial == sc.s_old)
        else layer.kfac_spatial,
    )


def _layer_sum(ls: list[LayerProfile]) -> float:
    return sum((l.fwd_s or 0.0) + (l.bwd_s or 0.0) for l in ls)


def rescaled_phases(ph: PhaseTimes, old: list[LayerProfile], new: list[LayerProfile], sc: Scaling,
                    work_ratio: float) -> PhaseTimes:
    """The phase times of the rescaled profile: ``old`` and ``new`` its layers before and after,
    ``work_ratio`` the ratio of the whole step's FLOPs."""
    data_s = None if ph.data_s is None else ph.data_s * sc.rb
    total_s = None
    if ph.total_s is not None:
        # The measured time no layer accounts for (loss, functional ops, launch gaps) scales with
        # the work, like the compute model's cross-GPU path scales it; collectives and the
        # optimizer do not change with the batch.
        # Nor do zero_grad (the parameters') and the host's own Python (srift.profiling.host).
        fixed = ((ph.optimizer_s or 0.0) + (ph.collectives_s or 0.0) + (ph.comm_wait_s or 0.0)
                 + (ph.zero_grad_s or 0.0) + (ph.host_s or 0.0))
        rest = max(ph.total_s - (ph.data_s or 0.0) - _layer_sum(old) - fixed, 0.0)
        total_s = (data_s or 0.0) + _layer_sum(new) + fixed + rest * sc.timed(work_ratio)
    return dataclasses.replace(
        ph,
        data_s=data_s,
        forward_s=None if ph.forward_s is None else ph.forward_s * sc.timed(work_ratio),
        backward_s=None if ph.backward_s is None else ph.backward_s * sc.timed(work_ratio),
        total_s=total_s,
        total_s_std=None if ph.total_s_std is None or ph.total_s is None or total_s is None
        else ph.total_s_std * total_s / max(ph.total_s, 1e-30),
        total_s_unhooked=None if ph.total_s_unhooked is None or ph.total_s is None or total_s is None
        else ph.total_s_unhooked * total_s / max(ph.total_s, 1e-30),
        # The same fixed seconds are a smaller (larger) share of a larger (smaller) batch's time.
        **_rescaled_analysed(ph, sc.timed(work_ratio)),
    )


def _rescaled_analysed(ph: PhaseTimes, time_ratio: float) -> dict[str, float | None]:
    """``analysed_s`` and ``analysed_half_s`` at a batch whose time is ``time_ratio`` times this
    one's, keeping the fixed seconds ``a`` (``t(B/2) = (t(B) + a) / 2``)."""
    if not ph.analysed_s or ph.analysed_half_s is None:
        return {}
    fixed_s = batch_fixed_fraction(ph) * ph.analysed_s
    full = ph.analysed_s * time_ratio
    return {"analysed_s": full, "analysed_half_s": (full + fixed_s) / 2.0}
