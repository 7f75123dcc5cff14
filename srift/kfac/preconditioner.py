"""KFACPreconditioner: distributed K-FAC for Linear and Conv2d layers, three strategies in one code
base (see shared/KFAC.md):

* ``naive`` (D-KFAC): factors computed and all-reduced (one per factor, full matrices) after
  backward; every worker inverts every factor.
* ``mpd`` (MPD-KFAC): as naive, but factor ``i`` is inverted by worker ``i mod P`` and the
  inverses are broadcast after the inversion phase.
* ``spd`` (SPD-KFAC): factors computed in the forward/backward hooks and their all-reduce
  started at once (asynchronous), fused by ``schedule.plan_fusion`` and sent packed (upper
  triangle); inversions placed by ``schedule.place_inversions`` (load balance, "invert locally
  when cheaper than broadcasting"); broadcasts asynchronous, overlapped with the next inversions.

Usage (with or without DDP)::

    pre = KFACPreconditioner(model, lr=0.1)
    loss.backward(); pre.step(); optimizer.step()
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, Union

import torch
from torch import nn

from srift.job import KFAC_STRATEGIES as STRATEGIES
from srift.kfac import schedule
from srift.kfac.distributed import Comm, FusedAllReducer, pack_upper, unpack_upper
from srift.kfac.layers import KFACLayer, damped_inverse, make_layer, supported

Hyper = Union[float, Callable[[int], float]]
PHASES = ("factor_compute", "factor_comm", "inversion", "inverse_broadcast", "preconditioning")


def _check_hyper(name: str, value: Any, low: float, low_inclusive: bool, high: float | None = None) -> None:
    if callable(value):
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number or a callable of the step, got {value!r}")
    if value < low or (value == low and not low_inclusive) or (high is not None and value >= high):
        bound = f"{'>=' if low_inclusive else '>'} {low}" + (f" and < {high}" if high is not None else "")
        raise ValueError(f"{name} must be {bound}, got {value!r}")


class KFACPreconditioner:
    """K-FAC preconditioner; call ``step()`` between ``loss.backward()`` and ``optimizer.step()``.

    Args:
        model: The model (plain or DDP-wrapped). Its Linear and Conv2d (groups=1) layers are
            preconditioned; other parameters keep their gradients.
        strategy: ``naive``, ``mpd`` or ``spd``.
        damping: Tikhonov damping lambda (pi-damping splits it between A and G).
        factor_decay: Running-average decay of the factors, in [0, 1).
        factor_update_steps: Recompute the factors every this many steps.
        inv_update_steps: Recompute the inverses every this many steps (a multiple of
            ``factor_update_steps``).
        kl_clip: KL clipping bound (None: no clipping).
        lr: Learning rate used by the KL clip (give the optimizer's).
        skip_layers: Module names (or prefixes), class names, or module types not to precondition.
        fusion_profile_steps: SPD: factor steps timed before the fusion groups are planned.
        comm_alpha_s: All-reduce/broadcast latency for the SPD planner (None: measured).
        comm_beta_s_per_byte: Seconds per byte for the SPD planner (None: measured).
        inv_flops_per_s: Inversion speed for the SPD placement, d^3 per second (None: measured).
        grad_scaler: The ``torch.amp.GradScaler`` in use with mixed precision (its loss scale is
            divided out of factor G; call ``scaler.unscale_(optimizer)`` before ``step()``).
        inverse_method: ``cholesky`` (damped inverses, pi-damping; what srift predicts) or
            ``eigen`` (eigendecompositions, ``P = Q_G (Q_G^T dW Q_A / (d_G d_A^T + damping)) Q_A^T``).

    Damping, factor_decay, kl_clip and lr may be callables of the step number.

    Raises:
        ValueError: for an invalid argument or a model without supported layers.
    """

    def __init__(
        self,
        model: nn.Module,
        strategy: str = "spd",
        damping: Hyper = 0.003,
        factor_decay: Hyper = 0.95,
        factor_update_steps: int = 1,
        inv_update_steps: int = 1,
        kl_clip: Hyper | None = 0.001,
        lr: Hyper = 0.1,
        skip_layers: Iterable[Any] = (),
        fusion_profile_steps: int = 3,
        comm_alpha_s: float | None = None,
        comm_beta_s_per_byte: float | None = None,
        inv_flops_per_s: float | None = None,
        grad_scaler: Any = None,
        inverse_method: str = "cholesky",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        _check_hyper("damping", damping, 0.0, False)
        _check_hyper("factor_decay", factor_decay, 0.0, True, 1.0)
        _check_hyper("lr", lr, 0.0, False)
        if kl_clip is not None:
            _check_hyper("kl_clip", kl_clip, 0.0, False)
        for name, v in (("factor_update_steps", factor_update_steps), ("inv_update_steps", inv_update_steps),
                        ("fusion_profile_steps", fusion_profile_steps)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if inv_update_steps % factor_update_steps:
            raise ValueError(f"inv_update_steps ({inv_update_steps}) must be a multiple of factor_update_steps ({factor_update_steps})")
        for name, cost in (("comm_alpha_s", comm_alpha_s), ("comm_beta_s_per_byte", comm_beta_s_per_byte)):
            if cost is not None and (not isinstance(cost, (int, float)) or cost < 0):
                raise ValueError(f"{name} must be a non-negative number or None, got {cost!r}")
        if inv_flops_per_s is not None and (not isinstance(inv_flops_per_s, (int, float)) or inv_flops_per_s <= 0):
            raise ValueError(f"inv_flops_per_s must be a positive number or None, got {inv_flops_per_s!r}")
        if inverse_method not in ("cholesky", "eigen"):
            raise ValueError(f"inverse_method must be 'cholesky' or 'eigen', got {inverse_method!r}")
        self.inverse_method = inverse_method
        if grad_scaler is not None and not callable(getattr(grad_scaler, "get_scale", None)):
            raise ValueError("grad_scaler must be a torch.amp.GradScaler (with get_scale())")
        self.grad_scaler = grad_scaler
        if isinstance(skip_layers, (str, type)):
            skip_layers = (skip_layers,)
        skip = tuple(skip_layers)

        self.strategy = strategy
        self.damping, self.factor_decay, self.kl_clip, self.lr = damping, factor_decay, kl_clip, lr
        self.factor_update_steps = factor_update_steps
        self.inv_update_steps = inv_update_steps
        self.fusion_profile_steps = fusion_profile_steps

        self.layers: list[KFACLayer] = []
        for name, module in model.named_modules():
            clean = name[len("module."):] if name.startswith("module.") else name
            if not supported(module) or _skipped(clean, module, skip):
                continue
            if not any(p.requires_grad for p in module.parameters(recurse=False)):
                continue
            self.layers.append(make_layer(clean, module))
        if not self.layers:
            raise ValueError("the model has no Linear or Conv2d layer to precondition (check skip_layers)")

        self.steps = 0
        self._factor_updates = 0
        self.A: dict[str, torch.Tensor] = {}
        self.G: dict[str, torch.Tensor] = {}
        self.A_inv: dict[str, torch.Tensor] = {}
        self.G_inv: dict[str, torch.Tensor] = {}
        self._saved_a: dict[str, torch.Tensor] = {}
        self._saved_g: dict[str, torch.Tensor] = {}
        self.timings: dict[str, float] = defaultdict(float)  # seconds per phase, summed over steps

        self.comm = Comm()
        self._reducer_a = FusedAllReducer(self.comm)
        self._reducer_g = FusedAllReducer(self.comm)
        self._added: set[str] = set()
        self._ready_log: dict[str, list[float]] = {"A": [], "G": []}
        self._gap_samples: dict[str, list[list[float]]] = {"A": [], "G": []}
        self._key_order: dict[str, list[str]] = {"A": [], "G": []}
        self._fusion_planned = False
        self._order_recorded = False

        # Costs for the SPD planner and placement: given, or measured on rank 0 and broadcast so
        # every rank takes the same decisions.
        self.comm_alpha_s, self.comm_beta_s_per_byte = comm_alpha_s, comm_beta_s_per_byte
        self.inv_flops_per_s = inv_flops_per_s
        if strategy == "spd" and self.comm.distributed:
            if comm_alpha_s is None or comm_beta_s_per_byte is None:
                a, b = self.comm.calibrate_allreduce()
                self.comm_alpha_s = a if comm_alpha_s is None else comm_alpha_s
                self.comm_beta_s_per_byte = b if comm_beta_s_per_byte is None else comm_beta_s_per_byte
            if inv_flops_per_s is None:
                self.inv_flops_per_s = self.comm.broadcast_floats([_measure_inv_flops()])[0]
        self.owners = self._placement()

        self._handles = []
        for layer in self.layers:
            self._handles.append(layer.module.register_forward_hook(self._forward_hook(layer)))

    # ---- placement -------------------------------------------------------------------------
    def _factor_dims(self) -> list[int]:
        dims = []
        for layer in self.layers:
            dims += [layer.a_dim, layer.g_dim]
        return dims

    def _placement(self) -> list[int]:
        """Owner per factor (A_0, G_0, A_1, G_1, ...)."""
        n, p = 2 * len(self.layers), self.comm.world_size
        if self.strategy == "naive" or p == 1:
            return schedule.place_local(n)
        if self.strategy == "mpd":
            return schedule.place_round_robin(n, p)
        rate, alpha, beta = self.inv_flops_per_s, self.comm_alpha_s or 0.0, self.comm_beta_s_per_byte or 0.0
        assert rate is not None  # measured at construction when not given
        return schedule.place_inversions(
            self._factor_dims(), p,
            invert_time_s=lambda d: d**3 / rate,
            # What is sent: the packed inverse, or eigenvectors plus eigenvalues.
            broadcast_time_s=lambda d: alpha + beta * 4 * (d * (d + 1) if self.inverse_method == "eigen" else schedule.packed_elements(d)),
        )

    # ---- hooks -----------------------------------------------------------------------------
    def _is_factor_step(self) -> bool:
        return self.steps % self.factor_update_steps == 0

    def _forward_hook(self, layer: KFACLayer) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if not (module.training and torch.is_grad_enabled() and self._is_factor_step()):
                return
            if not isinstance(output, torch.Tensor) or not output.requires_grad:
                return
            x = inputs[0]
            if self.strategy == "spd":
                self._spd_add("A", layer, lambda: layer.factor_a(x))
            else:
                self._saved_a[layer.name] = x.detach()

            def grad_hook(grad: torch.Tensor) -> None:
                if self.strategy == "spd":
                    self._spd_add("G", layer, lambda: layer.factor_g(grad, self._loss_scale()))
                else:
                    self._saved_g[layer.name] = grad.detach()

            output.register_hook(grad_hook)

        return hook

    def _spd_add(self, kind: str, layer: KFACLayer, compute: Callable[[], torch.Tensor]) -> None:
        key = f"{kind}:{layer.name}"
        if key in self._added:  # a second forward before step(): the first one's factor counts
            return
        t0 = time.perf_counter()
        factor = compute()
        flat = pack_upper(factor)
        t1 = time.perf_counter()
        self.timings["factor_compute"] += t1 - t0
        self._added.add(key)
        self._ready_log[kind].append(t1)
        if not self._order_recorded:  # the ready order, recorded on the first factor step
            self._key_order[kind].append(key)
        (self._reducer_a if kind == "A" else self._reducer_g).add(key, flat)

    def _loss_scale(self) -> float:
        if self.grad_scaler is None or not getattr(self.grad_scaler, "is_enabled", lambda: True)():
            return 1.0
        return float(self.grad_scaler.get_scale())

    # ---- the step --------------------------------------------------------------------------
    def _value(self, h: Hyper) -> float:
        return float(h(self.steps)) if callable(h) else float(h)

    @torch.no_grad()
    def step(self) -> None:
        """Precondition the gradients in place (call after backward, before optimizer.step())."""
        if self._is_factor_step():
            self._update_factors()
        if not self.A:
            raise RuntimeError("K-FAC step() was called before any forward/backward pass computed its factors")
        if self.steps % self.inv_update_steps == 0 or not self.A_inv:
            self._update_inverses()
        t0 = time.perf_counter()
        self._precondition()
        self.timings["preconditioning"] += time.perf_counter() - t0
        self.steps += 1

    def _update_factors(self) -> None:
        new: dict[str, torch.Tensor] = {}
        if self.strategy == "spd":
            t0 = time.perf_counter()
            flat = {**self._reducer_a.synchronize(), **self._reducer_g.synchronize()}
            self.timings["factor_comm"] += time.perf_counter() - t0
            for layer in self.layers:
                for kind, dim in (("A", layer.a_dim), ("G", layer.g_dim)):
                    key = f"{kind}:{layer.name}"
                    if key not in flat:
                        raise RuntimeError(f"K-FAC factor {key} was not computed: was the layer used in the forward pass?")
                    new[key] = unpack_upper(flat[key], dim)
            self._record_gaps()
            self._added.clear()
        else:
            t0 = time.perf_counter()
            for layer in self.layers:
                if layer.name not in self._saved_a or layer.name not in self._saved_g:
                    raise RuntimeError(f"K-FAC layer {layer.name} saw no forward/backward pass this step")
                new[f"A:{layer.name}"] = layer.factor_a(self._saved_a.pop(layer.name))
                new[f"G:{layer.name}"] = layer.factor_g(self._saved_g.pop(layer.name), self._loss_scale())
            t1 = time.perf_counter()
            self.timings["factor_compute"] += t1 - t0
            for layer in self.layers:  # after backward, one full matrix at a time (D-KFAC)
                self.comm.allreduce_mean(new[f"A:{layer.name}"])
                self.comm.allreduce_mean(new[f"G:{layer.name}"])
            self.timings["factor_comm"] += time.perf_counter() - t1
        decay = self._value(self.factor_decay)
        first = self._factor_updates == 0
        for layer in self.layers:
            for store, kind in ((self.A, "A"), (self.G, "G")):
                f = new[f"{kind}:{layer.name}"]
                store[layer.name] = f.clone() if first else store[layer.name].mul_(decay).add_(f, alpha=1 - decay)
        self._factor_updates += 1

    def _record_gaps(self) -> None:
        """SPD: time the factor pipeline for a few steps, then plan the fusion groups once."""
        log, self._ready_log = self._ready_log, {"A": [], "G": []}
        first, self._order_recorded = not self._order_recorded, True
        if self._fusion_planned or not self.comm.distributed:
            return
        if not first:  # the first step warms up and is not timed
            for kind in ("A", "G"):
                ts = log[kind]
                self._gap_samples[kind].append([0.0] + [b - a for a, b in zip(ts, ts[1:])])
        if len(self._gap_samples["A"]) < self.fusion_profile_steps:
            return
        dims = {f"A:{l.name}": l.a_dim for l in self.layers}
        dims.update({f"G:{l.name}": l.g_dim for l in self.layers})
        for kind, reducer in (("A", self._reducer_a), ("G", self._reducer_g)):
            samples = self._gap_samples[kind]
            keys = self._key_order[kind]
            gaps = [sum(s[i] for s in samples) / len(samples) for i in range(len(keys))]
            gaps = self.comm.broadcast_floats(gaps)  # rank 0's timings: identical groups everywhere
            sizes = [4.0 * schedule.packed_elements(dims[k]) for k in keys]
            groups = schedule.plan_fusion(sizes, gaps, self.comm_alpha_s or 0.0, self.comm_beta_s_per_byte or 0.0)
            reducer.set_groups([[keys[i] for i in g] for g in groups])
        self._fusion_planned = True

    @property
    def fusion_groups(self) -> dict[str, list[list[str]]]:
        """SPD fusion groups of the A (forward) and G (backward) factor all-reduces."""
        return {"A": self._reducer_a.groups, "G": self._reducer_g.groups}

    def _second_order(self, f: torch.Tensor, damp: float) -> torch.Tensor:
        """Cholesky: the damped inverse ``(F + damp I)^-1`` (symmetric, d x d). Eigen: the
        eigenvectors with the eigenvalues as an extra last row ((d+1) x d); damping is applied
        when preconditioning."""
        if self.inverse_method == "eigen":
            evals, evecs = torch.linalg.eigh(f)
            return torch.cat([evecs, evals.clamp_min(0.0)[None, :]], dim=0)
        return damped_inverse(f, damp)

    def _pi_damping(self, layer: KFACLayer) -> tuple[float, float]:
        lam = self._value(self.damping)
        a, g = self.A[layer.name], self.G[layer.name]
        ta = float(torch.trace(a)) / layer.a_dim
        tg = float(torch.trace(g)) / layer.g_dim
        pi = math.sqrt(ta / tg) if ta > 0 and tg > 0 else 1.0
        return math.sqrt(lam) * pi, math.sqrt(lam) / pi

    def _update_inverses(self) -> None:
        rank = self.comm.rank
        eigen = self.inverse_method == "eigen"
        pending = []  # SPD: async broadcasts issued while the next inversions run
        deferred = []  # MPD: broadcasts after the whole inversion phase
        inv_s = 0.0
        for i, layer in enumerate(self.layers):
            damp_a, damp_g = self._pi_damping(layer)
            for j, (factors, results, damp, dim) in enumerate((
                (self.A, self.A_inv, damp_a, layer.a_dim),
                (self.G, self.G_inv, damp_g, layer.g_dim),
            )):
                owner = self.owners[2 * i + j]
                if owner in (schedule.LOCAL, rank):
                    t0 = time.perf_counter()
                    results[layer.name] = self._second_order(factors[layer.name], damp)
                    inv_s += time.perf_counter() - t0
                if owner == schedule.LOCAL:
                    continue
                shape = (dim + 1, dim) if eigen else (dim, dim)
                if owner != rank:
                    results[layer.name] = factors[layer.name].new_empty(shape)
                if self.strategy == "spd":
                    # Inverses are symmetric: send the upper triangle (eigenvectors are not).
                    packed = not eigen
                    buf = (pack_upper(results[layer.name]) if owner == rank else factors[layer.name].new_empty(schedule.packed_elements(dim))) if packed else results[layer.name]
                    pending.append((results, layer.name, dim, owner, packed, buf, self.comm.broadcast(buf, owner, async_op=True)))
                else:
                    deferred.append((results[layer.name], owner))
        self.timings["inversion"] += inv_s
        t0 = time.perf_counter()
        for results, name, dim, owner, packed, buf, handle in pending:
            if handle is not None:
                handle.wait()
            if owner != rank and packed:
                results[name] = unpack_upper(buf, dim)
        for tensor, owner in deferred:
            self.comm.broadcast(tensor, owner)
        # SPD broadcasts run during the inversions: only the wait after them is exposed.
        self.timings["inverse_broadcast"] += time.perf_counter() - t0

    def _precondition(self) -> None:
        lr = self._value(self.lr)
        updates = []
        vg_sum = 0.0
        for layer in self.layers:
            grad = layer.grad_matrix()
            if grad is None:
                continue
            a_inv, g_inv = self.A_inv[layer.name], self.G_inv[layer.name]
            grad = grad.to(a_inv.dtype)  # low-precision parameters: precondition in fp32
            if self.inverse_method == "eigen":
                qa, da, qg, dg = a_inv[:-1], a_inv[-1], g_inv[:-1], g_inv[-1]
                v = qg.t() @ grad @ qa
                p = qg @ (v / (torch.outer(dg, da) + self._value(self.damping))) @ qa.t()
            else:
                p = g_inv @ grad @ a_inv
            vg_sum += float((p * grad).sum()) * lr * lr
            updates.append((layer, p))
        nu = 1.0
        if self.kl_clip is not None and vg_sum != 0.0:
            nu = min(1.0, math.sqrt(self._value(self.kl_clip) / abs(vg_sum)))
        for layer, p in updates:
            layer.set_grad(p.mul_(nu))

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Steps, running factors and current inverses (tensors cloned)."""
        clone = lambda d: {k: v.detach().clone() for k, v in d.items()}  # noqa: E731
        return {
            "inverse_method": self.inverse_method,
            "steps": self.steps,
            "factor_updates": self._factor_updates,
            "A": clone(self.A), "G": clone(self.G),
            "A_inv": clone(self.A_inv), "G_inv": clone(self.G_inv),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s output.

        Raises:
            ValueError: when the state does not match this model's layers.
        """
        if not isinstance(state, dict) or "steps" not in state:
            raise ValueError("not a KFACPreconditioner state_dict (no 'steps')")
        method = state.get("inverse_method", "cholesky")
        if method != self.inverse_method:
            raise ValueError(f"state_dict was saved with inverse_method={method!r}, this preconditioner uses {self.inverse_method!r}")
        dims = {l.name: (l.a_dim, l.g_dim) for l in self.layers}
        for key in ("A", "G", "A_inv", "G_inv"):
            part = state.get(key, {})
            for name, t in part.items():
                if name not in dims:
                    raise ValueError(f"state_dict has layer '{name}' that this model does not have")
                d = dims[name][0 if key.startswith("A") else 1]
                want = (d + 1, d) if key.endswith("_inv") and self.inverse_method == "eigen" else (d, d)
                if tuple(t.shape) != want:
                    raise ValueError(f"state_dict {key}['{name}'] has shape {tuple(t.shape)}, expected {want}")
        self.steps = int(state["steps"])
        self._factor_updates = int(state.get("factor_updates", 0))
        for key in ("A", "G", "A_inv", "G_inv"):
            setattr(self, key, {k: v.detach().clone() for k, v in state.get(key, {}).items()})

    def remove_hooks(self) -> None:
        """Detach from the model."""
        for h in self._handles:
            h.remove()
        self._handles = []


def _skipped(name: str, module: nn.Module, skip: tuple[Any, ...]) -> bool:
    for s in skip:
        if isinstance(s, type) and isinstance(module, s):
            return True
        if isinstance(s, str) and (s == type(module).__name__ or name == s or name.startswith(s + ".")):
            return True
    return False


def _measure_inv_flops(dim: int = 256, repeats: int = 3) -> float:
    """d^3 per second of a damped Cholesky inverse on this process's device."""
    m = torch.randn(dim, dim)
    m = m @ m.t() / dim + torch.eye(dim)
    best = float("inf")
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        torch.cholesky_inverse(torch.linalg.cholesky(m))
        best = min(best, time.perf_counter() - t0)
    return dim**3 / max(best, 1e-9)
