"""Finding the model a script trains: during the first iteration a global module forward pre/post
hook notes every *top-level* module call (a module called while no other module is running); at
the first optimizer step the candidate sharing the most parameters with that optimizer is the model
(``ModelFinder``), below DDP's and ``torch.compile``'s wrappers (``unwrap``). The global hooks are
then removed, so they cost only the first iteration. ``HandUpdates`` sees a script that updates its
parameters itself, without an optimizer step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from srift.profiling.tensors import grad_tensor
from srift.profiling.torch_state import hooks_off


class ModelFinder:
    """Notes top-level module calls until the first optimizer step (see module docstring), and
    counts them and the backward passes that reach their outputs (what a profiler timeout reports)."""

    def __init__(self) -> None:
        self.candidates: list[nn.Module] = []
        self.forward_calls = 0
        self.backward_passes = 0
        self._depth = 0
        # A hand-written update (parameters changed between a backward pass and the next forward,
        # without an optimizer step: pytorch/examples' word_language_model): ``HandUpdates``.
        self.hand_updates = HandUpdates()
        self._handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
            torch.nn.modules.module.register_module_forward_hook(self._post),
        ]

    def _pre(self, module: nn.Module, args: Any) -> None:
        if hooks_off():
            return
        if self._depth == 0:
            self.forward_calls += 1
            if not any(module is c for c in self.candidates):
                self.candidates.append(module)
            self.hand_updates.forward()
        self._depth += 1

    def _post(self, module: nn.Module, args: Any, out: Any) -> None:
        if hooks_off():
            return
        self._depth = max(self._depth - 1, 0)
        if self._depth == 0:
            t = grad_tensor(out)
            if t is not None:
                t.register_hook(self._backward)

    def _backward(self, grad: torch.Tensor) -> None:
        self.backward_passes += 1
        self.hand_updates.backward_started(self.candidates)

    def choose(self, optimizer: torch.optim.Optimizer) -> nn.Module | None:
        """The candidate owning the most of ``optimizer``'s parameters (None if none does)."""
        return _most_params(self.candidates, optimizer)

    def fallback(self, optimizer: torch.optim.Optimizer) -> nn.Module | None:
        """The outermost live module owning the most of ``optimizer``'s parameters, when no
        top-level call was seen but its parameters have gradients (a model compiled in place runs
        the global hooks inside the compiled call, where they stay silent)."""
        import gc

        if not any(p.grad is not None for g in optimizer.param_groups for p in g["params"]):
            return None  # no model ran a backward pass: nothing to time
        # type(), not isinstance(): some objects compute their __class__ (lazy proxies, deprecations).
        modules = [o for o in gc.get_objects() if issubclass(type(o), nn.Module)]
        children = {id(c) for m in modules for c in m.children()}
        outer = [m for m in modules if id(m) not in children]
        return _most_params(outer, optimizer)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


class HandUpdates:
    """Counts updates of the parameters that no optimizer step made: at the end of a backward pass
    a few values of a parameter with a gradient are kept; changed at the next top-level forward,
    with no optimizer step in between (the finder is removed at the first one), the script updated
    them itself (``p.data.add_(p.grad, alpha=-lr)`` under ``no_grad``). Gradient accumulation
    leaves the parameters as they were between its backward passes. ``on_update(count)`` is called
    at each one seen."""

    PROBE = 16  # values of one parameter compared

    def __init__(self) -> None:
        self.count = 0
        self.on_update: Any = None
        self._candidates: list[nn.Module] = []
        self._queued = False
        self._probe: tuple[torch.Tensor, torch.Tensor] | None = None

    def backward_started(self, candidates: list[nn.Module]) -> None:
        if not self._queued:
            self._queued = True
            self._candidates = candidates
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_ended)

    def _backward_ended(self) -> None:
        self._queued = False
        for module in self._candidates:
            for p in module.parameters():
                if p.grad is not None:
                    self._probe = (p, p.detach().reshape(-1)[:self.PROBE].clone())
                    return

    def forward(self) -> None:
        if self._probe is None:
            return
        p, before = self._probe
        self._probe = None
        if not torch.equal(p.detach().reshape(-1)[:self.PROBE], before):
            self.count += 1
            if self.on_update is not None:
                self.on_update(self.count)


def _most_params(candidates: list[nn.Module], optimizer: torch.optim.Optimizer) -> nn.Module | None:
    wanted = {id(p) for g in optimizer.param_groups for p in g["params"]}
    best, best_n = None, 0
    for c in candidates:
        n = sum(1 for p in c.parameters() if id(p) in wanted)
        if n > best_n:
            best, best_n = c, n
    return best


def unwrap(root: nn.Module) -> nn.Module:
    """The module whose leaves are timed: below DDP and ``torch.compile``'s wrappers."""
    from srift.profiling.buckets import is_ddp

    while True:
        if is_ddp(root):
            root = root.module  # type: ignore[assignment]
        elif isinstance(getattr(root, "_orig_mod", None), nn.Module):  # torch.compile(model)
            root = root._orig_mod  # type: ignore[assignment]
        else:
            return root
