"""Per-leaf-module timing hooks and per-iteration phase times for the script profiler.

How the model is found: during the first iteration a global module forward pre/post hook notes
every *top-level* module call (a module called while no other module is running). At the first
optimizer step the candidate sharing the most parameters with that optimizer is the model; the
global hooks are then removed, so they cost only the first iteration. From then on only the
model's own leaves carry hooks.

What is timed, per leaf module, per iteration (= one optimizer step):
- forward: from the module's forward pre-hook to its forward hook;
- backward: from the moment the gradient of the module's output arrives (a tensor hook on the
  output, which fires right before the module's backward node runs) to the moment the next leaf's
  output gradient arrives, or the last parameter gradient is accumulated. The autograd engine
  runs one node at a time per device, so consecutive marks split backward time without gaps;
  glue operations between leaves (residual adds) count to the leaf before them. Tensor hooks,
  unlike full module backward hooks, keep working when an in-place op (``ReLU(inplace=True)``)
  follows the module.
With gradient accumulation (several forward/backward passes per step) the times of all the
micro-batches of a step are summed.

Activation checkpointing: a leaf whose forward runs inside the autograd engine (backward) is being
recomputed (``torch.utils.checkpoint``, non-reentrant, the default of FSDP's ``checkpoint_wrapper``):
its time is recorded as recomputation (``recomputed`` names the leaves), not as forward, and is cut
out of the backward interval it falls in. ``exclude`` cuts out other intervals the same way (FSDP's
collectives, which block the training thread on CPU workers). With ``pass_end_callback`` the last
leaf of a backward pass ends when the autograd engine finishes the pass rather than at the last
parameter-gradient accumulation (FSDP2 accumulates into unsharded copies of the parameters, whose
hooks srift does not see).

Clocks: on CPU ``time.perf_counter``; on CUDA ``torch.cuda.Event`` marks without any per-layer
synchronisation, resolved after one ``torch.cuda.synchronize()`` per iteration.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from srift.profiling.tensors import first_tensor, tensor_bytes


def _grad_tensor(obj: Any) -> torch.Tensor | None:
    """The first floating tensor in ``obj`` that takes part in autograd."""
    return first_tensor(obj, lambda t: t.requires_grad and t.grad_fn is not None)


class WallClock:
    """CPU clock: marks are perf_counter floats."""

    kind = "cpu"

    def mark(self) -> Any:
        return time.perf_counter()

    def sync(self) -> None:
        pass

    @staticmethod
    def elapsed_s(a: Any, b: Any) -> float:
        return b - a


class CudaClock:
    """CUDA clock: marks are recorded events; ``sync`` once per iteration before reading them."""

    kind = "cuda"

    def mark(self) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def sync(self) -> None:
        torch.cuda.synchronize()

    @staticmethod
    def elapsed_s(a: Any, b: Any) -> float:
        return a.elapsed_time(b) / 1000.0


@dataclass
class IterationTimes:
    """What one measured iteration took."""

    layer_fwd_s: dict[int, float]
    layer_bwd_s: dict[int, float]
    data_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    total_s: float
    micro_batches: int
    recompute_s: float = 0.0


@dataclass
class _Pending:
    """Marks of the iteration in progress (resolved at the step's end)."""

    fwd: list[tuple[int, Any, Any]] = field(default_factory=list)  # (leaf, start, end)
    bwd_events: list[tuple[int, Any]] = field(default_factory=list)  # (leaf or -1 for param-ready, mark)
    bwd_passes: list[int] = field(default_factory=list)  # index into bwd_events where a pass starts
    recompute: list[tuple[Any, Any]] = field(default_factory=list)  # (start, end) of leaf recomputations
    root_fwd: list[tuple[Any, Any]] = field(default_factory=list)
    first_fwd_wall: float | None = None
    opt_start: Any = None
    opt_end: Any = None


class ModelFinder:
    """Notes top-level module calls until the first optimizer step (see module docstring), and
    counts them and the backward passes that reach their outputs (what a profiler timeout reports)."""

    def __init__(self) -> None:
        self.candidates: list[nn.Module] = []
        self.forward_calls = 0
        self.backward_passes = 0
        self._depth = 0
        self._handles = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
            torch.nn.modules.module.register_module_forward_hook(self._post),
        ]

    def _pre(self, module: nn.Module, args: Any) -> None:
        if self._depth == 0:
            self.forward_calls += 1
            if not any(module is c for c in self.candidates):
                self.candidates.append(module)
        self._depth += 1

    def _post(self, module: nn.Module, args: Any, out: Any) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth == 0:
            t = _grad_tensor(out)
            if t is not None:
                t.register_hook(self._backward)

    def _backward(self, grad: torch.Tensor) -> None:
        self.backward_passes += 1

    def choose(self, optimizer: torch.optim.Optimizer) -> nn.Module | None:
        """The candidate owning the most of ``optimizer``'s parameters (None if none does)."""
        wanted = {id(p) for g in optimizer.param_groups for p in g["params"]}
        best, best_n = None, 0
        for c in self.candidates:
            n = sum(1 for p in c.parameters() if id(p) in wanted)
            if n > best_n:
                best, best_n = c, n
        return best

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


class LayerTimer:
    """Timing hooks on one model's leaf modules and its root forward.

    Args:
        root: The module the script calls (a DDP wrapper included): its forward is timed as a whole
            and its first input gives the batch size.
        model: The module whose leaves are timed (``root.module`` for DDP, else ``root``).
        clock: WallClock or CudaClock.
    """

    def __init__(self, root: nn.Module, model: nn.Module, clock: WallClock | CudaClock) -> None:
        self.root = root
        self.model = model
        self.clock = clock
        self.leaves: list[tuple[str, nn.Module]] = [(n, m) for n, m in model.named_modules() if not list(m.children())]
        self.index = {id(m): i for i, (_, m) in enumerate(self.leaves)}
        self.pending = _Pending()
        self.capture: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self.want_capture = False
        self.autocast: tuple[str, torch.dtype] | None = None
        self.first_input: torch.Tensor | None = None
        self.input_bytes = 0.0
        self._starts: dict[int, list[Any]] = defaultdict(list)
        self._rec_starts: dict[int, list[Any]] = defaultdict(list)
        self.recomputed: set[int] = set()  # leaves seen recomputed in backward (activation checkpointing)
        self.pass_end_callback = False
        self._in_backward = False
        self._handles: list[Any] = []
        for _, m in self.leaves:
            self._handles.append(m.register_forward_pre_hook(self._leaf_pre))
            # always_call: non-reentrant checkpointing stops a recomputation by raising inside a leaf.
            self._handles.append(m.register_forward_hook(self._leaf_post, always_call=True))
        # prepend: the model's forward starts before wrappers' own pre-hooks (FSDP2's root all-gather).
        self._handles.append(root.register_forward_pre_hook(self._root_pre, with_kwargs=True, prepend=True))
        self._handles.append(root.register_forward_hook(self._root_post))
        for p in model.parameters():
            if p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(self._param_ready))

    # ---- hooks --------------------------------------------------------------------------------
    def _active(self) -> bool:
        # Evaluation passes inside the training loop (no_grad / eval mode) are not training work.
        return torch.is_grad_enabled() and self.model.training

    def _root_pre(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if not self._active():
            return
        if self.pending.first_fwd_wall is None:
            self.pending.first_fwd_wall = time.perf_counter()
        self._in_backward = False
        self._starts[-1].append(self.clock.mark())
        if self.first_input is None:
            self.first_input = first_tensor((args, kwargs))
            self.input_bytes = tensor_bytes((args, kwargs))
            for dev in ("cuda", "cpu"):
                if torch.is_autocast_enabled(dev):
                    self.autocast = (dev, torch.get_autocast_dtype(dev))
                    break
        if self.want_capture and self.capture is None:
            self.capture = (_detached_clone(args), _detached_clone(kwargs))

    def _root_post(self, module: nn.Module, args: Any, out: Any) -> None:
        if self._starts[-1]:
            self.pending.root_fwd.append((self._starts[-1].pop(), self.clock.mark()))

    def _leaf_pre(self, module: nn.Module, args: Any) -> None:
        if not self._active():
            return
        if _in_autograd_engine():  # a recomputation (activation checkpointing)
            mark = self.clock.mark()
            self._rec_starts[id(module)].append(mark)
            if self._in_backward:
                self.pending.bwd_events.append((_PAUSE, mark))
            return
        self._starts[id(module)].append(self.clock.mark())

    def _leaf_post(self, module: nn.Module, args: Any, out: Any) -> None:
        rec = self._rec_starts.get(id(module))
        if rec:
            mark = self.clock.mark()
            self.pending.recompute.append((rec.pop(), mark))
            self.recomputed.add(self.index[id(module)])
            if self._in_backward:
                self.pending.bwd_events.append((_RESUME, mark))
            return
        starts = self._starts.get(id(module))
        if not starts:
            return
        i = self.index[id(module)]
        self.pending.fwd.append((i, starts.pop(), self.clock.mark()))
        t = _grad_tensor(out)
        if t is not None:
            t.register_hook(lambda g, i=i: self._bwd_mark(i))

    def _bwd_mark(self, i: int) -> None:
        if not self._in_backward:
            self._in_backward = True
            self.pending.bwd_passes.append(len(self.pending.bwd_events))
            if self.pass_end_callback:
                torch.autograd.Variable._execution_engine.queue_callback(self._pass_end)
        self.pending.bwd_events.append((i, self.clock.mark()))

    def _pass_end(self) -> None:
        if self._in_backward:
            self.pending.bwd_events.append((-1, self.clock.mark()))

    def exclude(self, start: Any, end: Any) -> None:
        """Cut ``[start, end]`` (clock marks, just measured) out of the backward leaf interval it
        falls in: time the training thread spent on something else (a blocking collective)."""
        if self._in_backward:
            self.pending.bwd_events += [(_PAUSE, start), (_RESUME, end)]

    def _param_ready(self, p: torch.Tensor) -> None:
        if self._in_backward:
            self.pending.bwd_events.append((-1, self.clock.mark()))

    def optimizer_start(self) -> None:
        self._in_backward = False
        self.pending.opt_start = self.clock.mark()

    def optimizer_end(self) -> None:
        self.pending.opt_end = self.clock.mark()

    # ---- per iteration ----------------------------------------------------------------------
    def finish_iteration(self, prev_end_wall: float | None, end_wall: float, measured: bool) -> IterationTimes | None:
        """Close the iteration that just stepped; return its times if ``measured``."""
        pend, self.pending = self.pending, _Pending()
        self._starts.clear()
        self._rec_starts.clear()
        self._in_backward = False
        if not measured:
            return None
        fwd: dict[int, float] = defaultdict(float)
        for i, a, b in pend.fwd:
            fwd[i] += self.clock.elapsed_s(a, b)
        bwd: dict[int, float] = defaultdict(float)
        backward_s = 0.0
        bounds = pend.bwd_passes + [len(pend.bwd_events)]
        for k in range(len(pend.bwd_passes)):
            events = pend.bwd_events[bounds[k]:bounds[k + 1]]
            if not events:
                continue
            # The pass ends at its last mark (a parameter becoming ready, or the last leaf). A leaf's
            # backward runs from its mark to the next leaf's (the last: to the pass's end), less
            # the paused stretches (recomputation, blocking collectives) in between.
            backward_s += self.clock.elapsed_s(events[0][1], events[-1][1])
            cur, since = -1, None
            for i, mark in events:
                if i >= 0 or i == _PAUSE:
                    if cur >= 0 and since is not None:
                        bwd[cur] += self.clock.elapsed_s(since, mark)
                    since = None if i == _PAUSE else mark
                    if i >= 0:
                        cur = i
                elif i == _RESUME:
                    since = mark
            if cur >= 0 and since is not None:
                bwd[cur] += self.clock.elapsed_s(since, events[-1][1])
        forward_s = sum(self.clock.elapsed_s(a, b) for a, b in pend.root_fwd)
        opt_s = self.clock.elapsed_s(pend.opt_start, pend.opt_end) if pend.opt_start is not None else 0.0
        data_s = (pend.first_fwd_wall - prev_end_wall) if (prev_end_wall is not None and pend.first_fwd_wall) else 0.0
        total_s = end_wall - prev_end_wall if prev_end_wall is not None else 0.0
        recompute_s = sum(self.clock.elapsed_s(a, b) for a, b in pend.recompute)
        return IterationTimes(dict(fwd), dict(bwd), max(data_s, 0.0), forward_s, backward_s, opt_s, total_s,
                              len(pend.root_fwd), recompute_s)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


# Marks in a backward pass's event list besides leaves (>= 0) and parameter-ready marks (-1).
_PAUSE, _RESUME = -2, -3


def _in_autograd_engine() -> bool:
    """True while the autograd engine runs a backward pass (in this thread)."""
    return torch._C._current_graph_task_id() != -1


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and (sample) standard deviation; std 0 for a single value."""
    if not values:
        return 0.0, 0.0
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _detached_clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, tuple):
        return tuple(_detached_clone(o) for o in obj)
    if isinstance(obj, list):
        return [_detached_clone(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _detached_clone(v) for k, v in obj.items()}
    return obj
