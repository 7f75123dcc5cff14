"""KFACPreconditioner: distributed K-FAC for Linear and Conv2d layers, three strategies in one code
base that compute the same mathematics and differ only in what they send when (docs/kfac.md):

* ``naive`` (D-KFAC as the SPD-KFAC paper ran it): after backward, one asynchronous all-reduce
  per factor, fused into fixed-size buffers (Horovod's 64 MiB fusion buffer,
  ``schedule.plan_fixed_fusion``); every worker inverts every factor.
* ``mpd`` (MPD-KFAC): the factor all-reduce of ``naive``; factor ``i`` is inverted by worker
  ``i mod P`` and the results are broadcast after the inversion phase.
* ``spd`` (SPD-KFAC): factors all-reduced from the forward/backward hooks as soon as they are
  computed (asynchronous), fused by ``schedule.plan_fusion``; inversions placed by
  ``schedule.place_inversions``; broadcasts asynchronous, overlapped with the next inversions.

Every strategy sends factors and symmetric inverses packed (upper triangle,
``schedule.factor_message_bytes``). Factors are computed in the hooks from every micro-batch and
averaged (gradient accumulation), in kfac-pytorch's scaling (``srift.kfac.layers``).

Usage (with or without DDP)::

    pre = KFACPreconditioner(model, lr=0.1)
    loss.backward(); pre.step(); optimizer.step()
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Callable, Iterable

import torch
from torch import nn

from srift.job import MPD, NAIVE, SPD, KFAC_STRATEGIES as STRATEGIES, KfacStrategy
from srift.kfac import schedule
from srift.kfac.arguments import BOUNDS, Hyper, Interval, check_hyper, check_interval, skip_entries, skip_match
from srift.kfac.checkpoint import STATE_VERSION, load_state, state_of
from srift.kfac.distributed import Comm, FusedAllReducer, pack_upper, unpack_upper
from srift.kfac.layers import KFACLayer, ieee_fp32, make_layers, supported
from srift.kfac.second_order import precondition, update_inverses
from srift.kfac.strategy import KFACStrategy
from srift.kfac.timing import measure_inv_flops, ready_gaps_s, ready_mark

__all__ = ["KFACPreconditioner", "KFACStrategy", "PHASES", "STATE_VERSION", "STRATEGIES", "ready_gaps_s", "ready_mark"]
PHASES = ("factor_compute", "factor_comm", "inversion", "inverse_broadcast", "preconditioning")


class KFACPreconditioner:
    """K-FAC preconditioner; call ``step()`` between ``loss.backward()`` and ``optimizer.step()``.

    Args:
        model: The model (plain or DDP-wrapped). Its Linear and Conv2d layers (grouped included)
            are preconditioned; other parameters keep their gradients (listed in ``unsupported``).
        strategy: ``naive``, ``mpd`` or ``spd``, or a ``KFACStrategy`` (srift/kfac/strategy.py)
            naming one with its communication planner's settings: the fixed fusion buffer of
            ``naive``/``mpd``; the fusion profiling steps, the all-reduce and inversion costs and
            the fixed local-inversion threshold of ``spd``.
        damping: Tikhonov damping lambda (``inverse``: pi-damping splits it between A and G;
            ``eigen``: added to the Kronecker eigenvalues, as kfac-pytorch does).
        factor_decay: Running-average decay of the factors, in [0, 1). The average starts from the
            first factor update's factors.
        factor_update_steps: Recompute the factors every this many steps.
        inv_update_steps: Recompute the inverses (or eigendecompositions) every this many steps.
        kl_clip: KL clipping bound (None: no clipping).
        lr: Learning rate used by the KL clip (give the optimizer's).
        skip_layers: Module names (or prefixes), class names, or module types not to precondition.
        accumulation_steps: Forward/backward passes per ``step()`` (gradient accumulation). Factors
            are averaged over every pass whatever this is; ``spd`` starts a factor's all-reduce at
            this pass, so it must not be smaller than the passes actually run.
        inverse_method: ``inverse`` (damped inverses by Cholesky, pi-damping; the SPD-KFAC code's
            method and what srift predicts) or ``eigen`` (``torch.linalg.eigh``, kfac-pytorch's
            default: ``P = Q_G [(Q_G^T dW Q_A) / (l_G l_A^T + damping)] Q_A^T``).
        grad_scaler: The ``torch.amp.GradScaler`` in use with mixed precision. Its loss scale is
            divided out of factor G, and a factor update with non-finite factors (an overflow
            step, which the scaler skips) is dropped. Call ``scaler.unscale_(optimizer)`` before
            ``step()``.

    ``damping``, ``factor_decay``, ``kl_clip``, ``lr``, ``factor_update_steps`` and
    ``inv_update_steps`` may be callables of the step number (``pre.steps``).

    Raises:
        ValueError: for an invalid argument, a ``skip_layers`` entry that matches no module, or a
            model without supported layers.
    """

    def __init__(
        self,
        model: nn.Module,
        strategy: KfacStrategy | KFACStrategy = "spd",
        damping: Hyper = 0.003,
        factor_decay: Hyper = 0.95,
        factor_update_steps: Interval = 1,
        inv_update_steps: Interval = 1,
        kl_clip: Hyper | None = 0.001,
        lr: Hyper = 0.1,
        skip_layers: Iterable[Any] = (),
        accumulation_steps: int = 1,
        inverse_method: str = "inverse",
        grad_scaler: Any = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        plan = KFACStrategy.of(strategy)  # checks the name and the planner's settings
        fusion_profile_steps, local_below = plan.fusion_profile_steps, plan.local_below
        comm_alpha_s, comm_beta_s_per_byte, inv_flops_per_s = plan.comm_alpha_s, plan.comm_beta_s_per_byte, plan.inv_flops_per_s
        for name, value in (("damping", damping), ("factor_decay", factor_decay), ("lr", lr), ("kl_clip", kl_clip)):
            if not callable(value) and not (name == "kl_clip" and value is None):
                check_hyper(name, value, *BOUNDS[name])
        for name, value in (("factor_update_steps", factor_update_steps), ("inv_update_steps", inv_update_steps)):
            if not callable(value):
                check_interval(name, value)
        if isinstance(factor_update_steps, int) and isinstance(inv_update_steps, int) and inv_update_steps % factor_update_steps:
            raise ValueError(f"inv_update_steps ({inv_update_steps}) must be a multiple of factor_update_steps ({factor_update_steps})")
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int) or accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be an integer >= 1, got {accumulation_steps!r}")
        if inverse_method not in schedule.INVERSE_METHODS:
            raise ValueError(f"inverse_method must be one of {', '.join(schedule.INVERSE_METHODS)}, got {inverse_method!r}")
        if grad_scaler is not None and not callable(getattr(grad_scaler, "get_scale", None)):
            raise ValueError("grad_scaler must be a torch.amp.GradScaler (with get_scale())")
        skip = skip_entries(skip_layers)

        self.strategy = plan.name
        self.inverse_method = inverse_method
        self.grad_scaler = grad_scaler
        self.damping, self.factor_decay, self.kl_clip, self.lr = damping, factor_decay, kl_clip, lr
        self.factor_update_steps, self.inv_update_steps = factor_update_steps, inv_update_steps
        self.accumulation_steps = accumulation_steps
        self.fusion_profile_steps = fusion_profile_steps

        self.layers: list[KFACLayer] = []
        self.unsupported: list[str] = []  # modules with trainable parameters K-FAC leaves alone
        by_module: dict[nn.Module, list[KFACLayer]] = {}
        matched: set[int] = set()
        for name, module in model.named_modules():
            clean = name[len("module."):] if name.startswith("module.") else name
            hit = skip_match(clean, module, skip)
            if hit is not None:
                matched.add(hit)
                continue
            if not any(p.requires_grad for p in module.parameters(recurse=False)):
                continue
            if not supported(module):
                self.unsupported.append(clean or type(module).__name__)
                continue
            by_module[module] = make_layers(clean, module)
            self.layers += by_module[module]
        unmatched = [s for i, s in enumerate(skip) if i not in matched]
        if unmatched:
            raise ValueError(f"skip_layers entries match no module of the model: {', '.join(map(str, unmatched))}")
        if not self.layers:
            raise ValueError("the model has no Linear or Conv2d layer with trainable weights to precondition (check skip_layers)")

        self.steps = 0
        self._factor_updates = 0
        self.skipped_factor_updates = 0  # overflow steps under a GradScaler
        self.skipped_steps = 0  # steps not preconditioned: every factor update so far overflowed
        self.A: dict[str, torch.Tensor] = {}
        self.G: dict[str, torch.Tensor] = {}
        self.A_inv: dict[str, torch.Tensor] = {}  # damped inverse, or eigenvectors + eigenvalues row
        self.G_inv: dict[str, torch.Tensor] = {}
        # Sum and count of this step's per-pass factors, by key "A:name" / "G:name".
        self._acc: dict[str, tuple[torch.Tensor, int]] = {}
        # Host seconds per phase, summed over steps (scripts/bench_kfac.py, on CPU). On CUDA they are
        # launch times around asynchronous kernels, not kernel times (review M15, left: no GPU to check
        # events per phase against); srift's predictions do not read them.
        self.timings: dict[str, float] = defaultdict(float)

        # The gradients' device: NCCL takes no CPU tensors (its collectives there fail).
        self.device = next((p.device for m in by_module for p in m.parameters(recurse=False) if p.requires_grad),
                           torch.device("cpu"))
        self.comm = Comm(self.device)
        self._reducer_a = FusedAllReducer(self.comm)  # spd: forward (A) factors
        self._reducer_g = FusedAllReducer(self.comm)  # spd: backward (G) factors; naive/mpd: all
        self._launched: set[str] = set()
        self._ready_log: dict[str, list[Any]] = {"A": [], "G": []}  # ready_mark()s of this step's factors
        self._gap_samples: dict[str, list[list[float]]] = {"A": [], "G": []}
        self._key_order: dict[str, list[str]] = {"A": [], "G": []}
        self._fusion_planned = False
        self._order_recorded = False
        self._fixed_keys = [f"{kind}:{l.name}" for l in self.layers for kind in ("A", "G")]
        if plan.name != SPD:
            sizes = [schedule.factor_message_bytes(d) for d in self._factor_dims()]
            self._reducer_g.set_groups([[self._fixed_keys[i] for i in g]
                                        for g in schedule.plan_fixed_fusion(sizes, plan.fusion_buffer_bytes)])

        # Costs for the SPD planner and placement: given, or measured on rank 0 and broadcast so
        # every rank takes the same decisions.
        self.comm_alpha_s, self.comm_beta_s_per_byte = comm_alpha_s, comm_beta_s_per_byte
        self.inv_flops_per_s = inv_flops_per_s
        self.local_below = local_below
        if plan.name == SPD and self.comm.distributed:
            if comm_alpha_s is None or comm_beta_s_per_byte is None:
                a, b = self.comm.calibrate_allreduce()
                self.comm_alpha_s = a if comm_alpha_s is None else comm_alpha_s
                self.comm_beta_s_per_byte = b if comm_beta_s_per_byte is None else comm_beta_s_per_byte
            if inv_flops_per_s is None:
                self.inv_flops_per_s = self.comm.broadcast_floats([measure_inv_flops(inverse_method, self.device)])[0]
        self.owners = self._placement()

        self._handles = [m.register_forward_hook(self._forward_hook(blocks)) for m, blocks in by_module.items()]

    # ---- hyperparameters -------------------------------------------------------------------
    def _value(self, name: str) -> float:
        h = getattr(self, name)
        if not callable(h):
            return float(h)
        v = h(self.steps)
        check_hyper(f"{name}({self.steps})", v, *BOUNDS[name])
        return float(v)

    def _interval(self, name: str) -> int:
        h = getattr(self, name)
        if not callable(h):
            return int(h)
        v = h(self.steps)
        check_interval(f"{name}({self.steps})", v)
        return int(v)

    # ---- placement -------------------------------------------------------------------------
    def _factor_dims(self) -> list[int]:
        return [d for layer in self.layers for d in (layer.a_dim, layer.g_dim)]

    def _placement(self) -> list[int]:
        """Owner per factor (A_0, G_0, A_1, G_1, ...)."""
        n, p = 2 * len(self.layers), self.comm.world_size
        if self.strategy == NAIVE or p == 1:
            return schedule.place_local(n)
        if self.strategy == MPD:
            return schedule.place_round_robin(n, p)
        rate, alpha, beta = self.inv_flops_per_s, self.comm_alpha_s or 0.0, self.comm_beta_s_per_byte or 0.0
        return schedule.place_inversions(
            self._factor_dims(), p,
            invert_time_s=lambda d: d**3 / rate,  # type: ignore[operator]
            broadcast_time_s=lambda d: alpha + beta * schedule.inverse_message_bytes(d, self.inverse_method),
            local_below=self.local_below,
        )

    # ---- hooks -----------------------------------------------------------------------------
    def _is_factor_step(self) -> bool:
        return self.steps % self._interval("factor_update_steps") == 0

    def _forward_hook(self, blocks: list[KFACLayer]) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if not (module.training and torch.is_grad_enabled() and self._is_factor_step()):
                return
            if not isinstance(output, torch.Tensor) or not output.requires_grad:
                return
            x = inputs[0]
            for layer in blocks:
                self._add("A", layer, lambda layer=layer: layer.factor_a(x))  # type: ignore[misc]

            def grad_hook(grad: torch.Tensor) -> None:
                # The gradient of the loss the optimizer sees: DDP averages over the workers, so
                # each worker's output gradient is world_size times that of the global-batch loss.
                scale = self._loss_scale() * self.comm.world_size
                for layer in blocks:
                    self._add("G", layer, lambda layer=layer: layer.factor_g(grad, scale))  # type: ignore[misc]

            output.register_hook(grad_hook)

        return hook

    def _add(self, kind: str, layer: KFACLayer, compute: Callable[[], torch.Tensor]) -> None:
        """Add one pass's factor to this step's sum; ``spd`` starts its all-reduce at the last pass."""
        key = f"{kind}:{layer.name}"
        if key in self._launched:
            raise RuntimeError(
                f"K-FAC layer {layer.name} ran more forward/backward passes before step() than accumulation_steps="
                f"{self.accumulation_steps}: with strategy 'spd' its factor all-reduce had already started. Set "
                "accumulation_steps to the number of passes per step (a layer called twice in one forward counts twice)."
            )
        t0 = time.perf_counter()
        factor = compute()
        total, count = self._acc.get(key, (None, 0))
        self._acc[key] = (factor if total is None else total.add_(factor), count + 1)
        self.timings["factor_compute"] += time.perf_counter() - t0
        if self.strategy == SPD and count + 1 == self.accumulation_steps:
            self._spd_launch(kind, key)

    def _spd_launch(self, kind: str, key: str) -> None:
        t0 = time.perf_counter()
        total, count = self._acc.pop(key)
        flat = pack_upper(total.div_(count) if count > 1 else total)
        self._launched.add(key)
        self._ready_log[kind].append(ready_mark(self.device))
        if not self._order_recorded:  # the ready order, recorded on the first factor step
            self._key_order[kind].append(key)
        (self._reducer_a if kind == "A" else self._reducer_g).add(key, flat)
        self.timings["factor_compute"] += time.perf_counter() - t0

    def _loss_scale(self) -> float:
        if self.grad_scaler is None or not getattr(self.grad_scaler, "is_enabled", lambda: True)():
            return 1.0
        return float(self.grad_scaler.get_scale())

    # ---- the step --------------------------------------------------------------------------
    @torch.no_grad()
    def step(self) -> None:
        """Precondition the gradients in place (call after backward, before optimizer.step())."""
        with ieee_fp32():  # P3: factors, inverses and preconditioning in IEEE fp32, whatever TF32 allows
            self._step()

    def _step(self) -> None:
        if self._is_factor_step():
            self._update_factors()
        if not self.A:
            if self.skipped_factor_updates:
                # The first factor steps overflowed (fp16's usual start): nothing to precondition
                # with yet, and the scaler skips this optimizer step; the next step tries again.
                self.skipped_steps += 1
                return
            raise RuntimeError("K-FAC step() was called before any forward/backward pass computed its factors")
        if self.steps % self._interval("inv_update_steps") == 0 or not self.A_inv:
            self._update_inverses()
        t0 = time.perf_counter()
        self._precondition()
        self.timings["preconditioning"] += time.perf_counter() - t0
        self.steps += 1

    def _mean_factor(self, key: str) -> torch.Tensor:
        if key not in self._acc:
            name = key.split(":", 1)[1]
            raise RuntimeError(f"K-FAC layer {name} saw no forward/backward pass this step: "
                               "add it to skip_layers if the model does not use it")
        total, count = self._acc.pop(key)
        return total.div_(count) if count > 1 else total

    def _update_factors(self) -> None:
        dims = dict(zip(self._fixed_keys, self._factor_dims()))
        t0 = time.perf_counter()
        if self.strategy == SPD:
            # Passes fewer than accumulation_steps: start what the hooks did not.
            for key in self._fixed_keys:
                if key not in self._launched and key in self._acc:
                    self._spd_launch(key[0], key)
            missing = [k for k in self._fixed_keys if k not in self._launched]
            if missing:
                self._mean_factor(missing[0])  # raises the error that names the layer
            t1 = time.perf_counter()
            flat = {**self._reducer_a.synchronize(), **self._reducer_g.synchronize()}
            self._record_gaps()
            self._launched.clear()
        else:
            # D-KFAC: every factor enqueued at once, in model order, fused by the fixed buffer
            # (copying into the buffer is factor work; the all-reduce starts as it fills).
            for key in self._fixed_keys:
                self._reducer_g.add(key, pack_upper(self._mean_factor(key)))
            t1 = time.perf_counter()
            flat = self._reducer_g.synchronize()
        self.timings["factor_compute"] += t1 - t0
        t2 = time.perf_counter()
        self.timings["factor_comm"] += t2 - t1
        # Averaging over the workers, unpacking and the running average are factor work too
        # (every part of step() is timed).
        world = self.comm.world_size
        new = {key: unpack_upper(flat[key].div(world) if world > 1 else flat[key], dims[key]) for key in self._fixed_keys}
        if self.grad_scaler is not None and not bool(torch.stack([torch.isfinite(f).all() for f in new.values()]).all()):
            # An overflow step (the scaler skips the optimizer step): keep the running factors.
            # The reduced factors are the same on every rank, so every rank decides alike.
            self.skipped_factor_updates += 1
            self.timings["factor_compute"] += time.perf_counter() - t2
            return
        decay = self._value("factor_decay")
        first = self._factor_updates == 0
        for layer in self.layers:
            for store, kind in ((self.A, "A"), (self.G, "G")):
                f = new[f"{kind}:{layer.name}"]
                store[layer.name] = f if first else store[layer.name].mul_(decay).add_(f, alpha=1 - decay)
        self._factor_updates += 1
        self.timings["factor_compute"] += time.perf_counter() - t2

    def _record_gaps(self) -> None:
        """SPD: time the factor pipeline for a few steps, then plan the fusion groups once."""
        log, self._ready_log = self._ready_log, {"A": [], "G": []}
        first, self._order_recorded = not self._order_recorded, True
        if self._fusion_planned or not self.comm.distributed:
            return
        if not first:  # the first step warms up and is not timed
            for kind in ("A", "G"):
                self._gap_samples[kind].append(ready_gaps_s(log[kind]))
        if len(self._gap_samples["A"]) < self.fusion_profile_steps:
            return
        dims = dict(zip(self._fixed_keys, self._factor_dims()))
        for kind, reducer in (("A", self._reducer_a), ("G", self._reducer_g)):
            samples = self._gap_samples[kind]
            keys = self._key_order[kind]
            gaps = [sum(s[i] for s in samples) / len(samples) for i in range(len(keys))]
            gaps = self.comm.broadcast_floats(gaps)  # rank 0's timings: identical groups everywhere
            sizes = [float(schedule.factor_message_bytes(dims[k])) for k in keys]
            groups = schedule.plan_fusion(sizes, gaps, self.comm_alpha_s or 0.0, self.comm_beta_s_per_byte or 0.0)
            reducer.set_groups([[keys[i] for i in g] for g in groups])
        self._fusion_planned = True

    @property
    def fusion_groups(self) -> dict[str, list[list[str]]]:
        """Fused all-reduce groups of the factors: ``spd``'s A (forward) and G (backward) groups, or
        ``naive``/``mpd``'s fixed-buffer groups (under "G", A and G factors together)."""
        return {"A": self._reducer_a.groups, "G": self._reducer_g.groups}

    def _update_inverses(self) -> None:
        update_inverses(self)

    def _precondition(self) -> None:
        precondition(self)

    # ---- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What resuming needs to take the same steps: the step counters, the running factors and
        the current inverses (or eigendecompositions). Tensors are cloned; the result saves with
        ``torch.save`` and loads with ``torch.load(..., weights_only=True)``. Factors of a step in
        progress (passes before ``step()``) are not included: checkpoint after ``step()``."""
        return state_of(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``'s output (onto this preconditioner's device).

        Raises:
            ValueError: when the state is not a K-FAC state, does not match this model's layers or
                inverse method, holds a negative or non-integer count, or a NaN or infinite factor
                or inverse (checked before anything changes).
        """
        load_state(self, state)

    def remove_hooks(self) -> None:
        """Detach from the model."""
        for h in self._handles:
            h.remove()
        self._handles = []


