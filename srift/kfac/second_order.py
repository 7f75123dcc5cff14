"""The preconditioner's second-order work (srift.kfac.preconditioner): pi-damping, the inversion
phase (each factor's damped inverse or eigendecomposition on its owner, the broadcasts ``spd``
overlaps with the next inversions or ``mpd`` sends after them) and preconditioning the gradients
with the KL-clip scale."""

from __future__ import annotations

import math
import time

import torch

from srift.job import EIGEN, SPD
from srift.kfac import schedule
from srift.kfac.distributed import pack_upper, unpack_upper
from srift.kfac.layers import KFACLayer, damped_inverse_ex, eigen_decomposition
from srift.kfac.state import PreconditionerState


def second_order(pre: PreconditionerState, f: torch.Tensor, damp: torch.Tensor, infos: list[tuple[str, torch.Tensor]],
                 name: str) -> torch.Tensor:
    """``inverse``: ``(F + damp I)^-1`` (d x d), its Cholesky ``info`` appended to ``infos``
    (checked once per step). ``eigen``: eigenvectors with the eigenvalues as an extra last row
    ((d+1) x d); damping is applied when preconditioning."""
    if pre.inverse_method == EIGEN:
        return eigen_decomposition(f)
    inv, info = damped_inverse_ex(f, damp)
    infos.append((name, info))
    return inv


def pi_damping(pre: PreconditionerState, layer: KFACLayer, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Tikhonov damping split between A and G by pi = sqrt(mean eigenvalue of A / of G), as
    device tensors (P1: no host sync per layer)."""
    a, g = pre.A[layer.name], pre.G[layer.name]
    ta = torch.trace(a) / layer.a_dim
    tg = torch.trace(g) / layer.g_dim
    pi = torch.where((ta > 0) & (tg > 0), torch.sqrt(ta.clamp_min(1e-30) / tg.clamp_min(1e-30)), torch.ones_like(ta))
    return math.sqrt(lam) * pi, math.sqrt(lam) / pi


def update_inverses(pre: PreconditionerState) -> None:
    rank = pre.comm.rank
    eigen = pre.inverse_method == EIGEN
    lam = pre._value("damping")
    pending = []  # spd: async broadcasts issued while the next inversions run
    deferred = []  # mpd: broadcasts after the whole inversion phase
    t_loop = time.perf_counter()  # the phase: pi-damping, inversions, packing, issuing the broadcasts
    infos: list[tuple[str, torch.Tensor]] = []
    for i, layer in enumerate(pre.layers):
        damp_a, damp_g = pi_damping(pre, layer, lam)
        for j, (factors, results, damp, dim) in enumerate((
            (pre.A, pre.A_inv, damp_a, layer.a_dim),
            (pre.G, pre.G_inv, damp_g, layer.g_dim),
        )):
            owner = pre.owners[2 * i + j]
            if owner in (schedule.LOCAL, rank):
                results[layer.name] = second_order(pre, factors[layer.name], damp, infos, layer.name)
            if owner == schedule.LOCAL:
                continue
            # What is sent (schedule.inverse_message_bytes): the packed upper triangle of a
            # (symmetric) inverse, or the whole eigenbasis with its eigenvalues.
            if owner == rank:
                buf = results[layer.name] if eigen else pack_upper(results[layer.name])
            else:
                shape = (dim + 1, dim) if eigen else (schedule.packed_elements(dim),)
                buf = factors[layer.name].new_empty(shape)
            item = (results, layer.name, dim, owner, buf)
            if pre.strategy == SPD:
                pending.append((item, pre.comm.broadcast(buf, owner, async_op=True)))
            else:
                deferred.append(item)
    failed = torch.stack([info for _, info in infos]).ne(0).tolist() if infos else []  # one host sync
    if any(failed):
        bad = [name for (name, _), f in zip(infos, failed) if f]
        raise torch.linalg.LinAlgError(f"a damped K-FAC factor is not positive definite (layers {', '.join(bad[:5])}"
                                       f"{', ...' if len(bad) > 5 else ''}); raise the damping")
    t0 = time.perf_counter()
    pre.timings["inversion"] += t0 - t_loop
    for item, handle in pending:
        if handle is not None:
            handle.wait()
    for item in deferred:
        pre.comm.broadcast(item[4], item[3])
    for results, name, dim, owner, buf in [it for it, _ in pending] + deferred:
        if owner != rank:
            results[name] = buf if eigen else unpack_upper(buf, dim)
    # spd broadcasts run during the inversions: only the wait after them is exposed.
    pre.timings["inverse_broadcast"] += time.perf_counter() - t0


def precondition(pre: PreconditionerState) -> None:
    lr = pre._value("lr")
    damping = pre._value("damping") if pre.inverse_method == EIGEN else 0.0
    updates = []
    vg_terms = []  # device scalars (P1: no host sync per layer)
    for layer in pre.layers:
        grad = layer.grad_matrix()
        if grad is None:
            continue
        a_inv, g_inv = pre.A_inv[layer.name], pre.G_inv[layer.name]
        grad = grad.to(a_inv.dtype)  # low-precision parameters: precondition in fp32
        if pre.inverse_method == EIGEN:
            qa, da, qg, dg = a_inv[:-1], a_inv[-1], g_inv[:-1], g_inv[-1]
            v = qg.t() @ grad @ qa
            p = qg @ (v / (torch.outer(dg, da) + damping)) @ qa.t()
        else:
            p = g_inv @ grad @ a_inv
        vg_terms.append((p * grad).sum())
        updates.append((layer, p))
    nu: float | torch.Tensor = 1.0
    if pre.kl_clip is not None and vg_terms:
        vg_sum = (torch.stack(vg_terms).sum() * (lr * lr)).abs()
        nu = torch.where(vg_sum > 0, torch.sqrt(pre._value("kl_clip") / vg_sum.clamp_min(1e-30)).clamp(max=1.0),
                         torch.ones_like(vg_sum))
    for layer, p in updates:
        layer.set_grad(p.mul_(nu))
