"""Per-leaf-module timing hooks and per-iteration phase times for the script profiler.

How the model is found: during the first iteration a global module forward pre/post hook notes
every *top-level* module call (a module called while no other module is running). At the first
optimizer step the candidate sharing the most parameters with that optimizer is the model; the
global hooks are then removed, so they cost only the first iteration. From then on only the
model's own leaves carry hooks (taken out and put back for srift's pairs of steps after the
measured ones: what the hooks cost a step, srift/profiling/runner.py).

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
collectives, which block the training thread on CPU workers). The last leaf of a backward pass
ends when the autograd engine finishes the pass (one end-of-pass callback, not a mark per
parameter: cheaper, and right for FSDP2, which accumulates into unsharded copies of the
parameters).

Clocks: on CPU ``time.perf_counter`` less the training thread's wait for a core (``WallClock``:
other processes' load left out, docs/profiling.md); on CUDA ``torch.cuda.Event`` marks on the model's device
(from a pool, reused), without any per-layer synchronisation. An iteration runs from the mark
srift takes when it hands control back to the script after the previous step (its own
bookkeeping is outside every iteration) to the mark after the optimizer step; on CUDA its events
are resolved one step later, without stopping the GPU (see srift/profiling/runner.py).

Where hooks stay silent: while dynamo traces (``torch.compile``: a hook compiled into the graph
would time nothing and break the graph) and while a CUDA graph is captured (nothing of the host
is replayed). A compiled model is then timed as a whole step (root forward, backward from its
output's gradient to the end of the autograd pass, optimizer), its leaves are left untimed
(``None``), and the profile says so (``timing: step``).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from srift.profile import CUDA_EVENTS, WALL, WALL_LESS_RUN_QUEUE, Clock
from srift.profiling.host import host_times
from srift.profiling.layout import SequenceLayout
from srift.profiling.tensors import first_tensor, tensor_bytes


# What a step is for (``_Pending.role``): a measured step; after the measured ones, srift's pairs of
# one step without the leaf hooks and one with them (what the hooks cost, docs/profiling.md).
MEASURED, UNHOOKED, PAIRED = "measured", "unhooked", "paired"


def _takes_part(t: torch.Tensor) -> bool:
    return t.requires_grad and t.grad_fn is not None


def _grad_tensor(obj: Any) -> torch.Tensor | None:
    """The first floating tensor in ``obj`` that takes part in autograd."""
    if isinstance(obj, torch.Tensor):  # the common case, without walking (this runs per leaf call)
        return obj if _takes_part(obj) else None
    return first_tensor(obj, _takes_part)


def hooks_off() -> bool:
    """True where a srift hook must do nothing: inside dynamo's tracing (torch.compile) or a
    CUDA-graph capture (see module docstring)."""
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


class RunQueue:
    """Seconds one thread has spent runnable but waiting for a core (Linux's per-task schedstat,
    its second field, in ns): the time other processes took from it. Read through a file kept
    open (``pread``, about 1 us). Where the file cannot be read (not Linux, no schedstats) the
    wait reads 0 and ``available`` is False.

    Args:
        tid: The thread's native id (default: the calling thread).
    """

    available = False

    def __init__(self, tid: int | None = None) -> None:
        tid = threading.get_native_id() if tid is None else tid
        self._fd: int | None = None
        self._last_s = 0.0
        try:
            self._fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        except OSError:
            return
        weakref.finalize(self, os.close, self._fd)
        self._last_s = self._read()
        self.available = True

    def _read(self) -> float:
        assert self._fd is not None
        try:
            return int(os.pread(self._fd, 96, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):  # the thread ended, or an unexpected format
            return self._last_s  # keep the last value: later intervals stay consistent

    def waited_s(self) -> float:
        """The thread's run-queue wait so far (never decreasing)."""
        if self._fd is not None:
            self._last_s = self._read()
        return self._last_s


MARK_READ_S = 20e-6  # a mark's two reads take about 1 us; a slower read may hold a preemption
MARK_TRIES = 4


class WallClock:
    """CPU clock: marks are ``perf_counter`` seconds less the training thread's run-queue wait
    (``RunQueue``): the wall time the step would take without other processes competing for the
    cores. Sleeps and blocking waits (a DataLoader queue, a gloo collective) stay in, as they
    would be on an idle machine. Marks taken on other threads (gloo's callbacks) subtract the same
    training thread's wait, so every interval is on one time line. ``correct=False``: plain wall
    time."""

    kind = "cpu"
    device: torch.device = torch.device("cpu")

    def __init__(self, correct: bool = True) -> None:
        self.run_queue = RunQueue() if correct else None

    @property
    def name(self) -> Clock:
        """The clock as the profile records it (a srift.profile Clock)."""
        return WALL_LESS_RUN_QUEUE if self.run_queue is not None and self.run_queue.available else WALL

    def waited_s(self) -> float:
        """The training thread's run-queue wait so far (0 when not read)."""
        return self.run_queue.waited_s() if self.run_queue is not None else 0.0

    def mark(self) -> Any:
        queue = self.run_queue
        if queue is None:
            return time.perf_counter()
        # A wait booked between reading the clock and reading the wait (the thread preempted in
        # between) would come off an interval it did not fall in, which can then read below 0: a
        # read slower than MARK_READ_S may hold one and is taken again (the error stays below it).
        for _ in range(MARK_TRIES):
            start = time.perf_counter()
            waited = queue.waited_s()
            if time.perf_counter() - start <= MARK_READ_S:
                break
        return start - waited

    def sync(self) -> None:
        pass

    def wait(self, mark: Any) -> None:
        pass

    def take_issued(self) -> list[Any]:
        return []

    def release(self, marks: list[Any]) -> None:
        pass

    @staticmethod
    def elapsed_s(a: Any, b: Any) -> float:
        return b - a


class CudaClock:
    """CUDA clock on one device: marks are events recorded on that device's current stream
    (in backward: the stream autograd runs the node on), taken from a pool and given back once
    read (``take_issued`` / ``release``)."""

    kind = "cuda"
    name: Clock = CUDA_EVENTS

    def __init__(self, device: torch.device | int | None = None) -> None:
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None else
                                   (device if isinstance(device, int) else (device.index or 0)))
        self._free: list[Any] = []
        self._issued: list[Any] = []

    def mark(self) -> Any:
        ev = self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)
        ev.record(torch.cuda.current_stream(self.device))
        self._issued.append(ev)
        return ev

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def wait(self, mark: Any) -> None:
        """Block until ``mark`` (and so everything queued before it on its stream) has run."""
        mark.synchronize()

    def take_issued(self) -> list[Any]:
        """The events marked since the last call (to give back once they are read)."""
        issued, self._issued = self._issued, []
        return issued

    def release(self, marks: list[Any]) -> None:
        self._free += marks

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
    hooked: bool = True  # False: a whole-step time (no leaf timed: compiled, or srift's unhooked steps)
    after_backward_s: float = 0.0  # end of the last backward pass to the optimizer step (DDP: its wait for comm)
    # Timed intervals per leaf: forward calls, and backward stretches (from its output's gradient
    # mark): what srift's hooks cost the step is taken out of the layers per interval.
    layer_fwd_calls: dict[int, int] = field(default_factory=dict)
    layer_bwd_calls: dict[int, int] = field(default_factory=dict)
    # Host time (srift/profiling/host.py): ``data_s`` is the data iterator's next() calls;
    # ``zero_grad_s`` the zero_grad calls; ``host_s`` the rest of the time before the first forward.
    zero_grad_s: float = 0.0
    host_s: float = 0.0


@dataclass
class _Pending:
    """Marks of the iteration in progress (resolved at the step's end, or one step later on CUDA)."""

    fwd: list[tuple[int, Any, Any]] = field(default_factory=list)  # (leaf, start, end)
    bwd_events: list[tuple[int, Any]] = field(default_factory=list)  # (leaf or -1 for param-ready, mark)
    bwd_passes: list[int] = field(default_factory=list)  # index into bwd_events where a pass starts
    recompute: list[tuple[Any, Any]] = field(default_factory=list)  # (start, end) of leaf recomputations
    root_fwd: list[tuple[Any, Any]] = field(default_factory=list)
    root_bwd: list[tuple[Any, Any]] = field(default_factory=list)  # (root output's gradient, pass end)
    opt_start: Any = None
    opt_end: Any = None
    other_opt: list[tuple[Any, Any]] = field(default_factory=list)  # (start, end) of the script's other optimizers
    other_start: Any = None
    host_calls: list[tuple[str, Any, Any]] = field(default_factory=list)  # (kind, start, end): srift.profiling.host
    start: Any = None  # the iteration's start and end marks (set by the runner)
    end: Any = None
    measured: bool = False
    # MEASURED; after the measured steps, srift's pairs: UNHOOKED (leaf hooks out), then PAIRED (in).
    role: str = MEASURED
    events: list[Any] = field(default_factory=list)  # CUDA events to give back to the pool


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
            t = _grad_tensor(out)
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


class LayerTimer:
    """Timing hooks on one model's leaf modules and its root forward.

    Args:
        root: The module the script calls (a DDP or torch.compile wrapper included): its forward is
            timed as a whole and its first input gives the batch size.
        model: The module whose leaves are timed (``unwrap(root)``).
        clock: WallClock or CudaClock.
        leaf_hooks: Install the per-leaf hooks now (else ``install_leaf_hooks`` later: the steps
            before it are timed as whole steps; ``remove_leaf_hooks`` takes them out again).
    """

    def __init__(self, root: nn.Module, model: nn.Module, clock: WallClock | CudaClock, leaf_hooks: bool = True) -> None:
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
        self.layout = SequenceLayout(model)  # which input dimension is the batch (srift/profiling/layout.py)
        self.input_bytes = 0.0
        self._starts: dict[int, list[Any]] = defaultdict(list)
        self._rec_starts: dict[int, list[Any]] = defaultdict(list)
        self.recomputed: set[int] = set()  # leaves seen recomputed in backward (activation checkpointing)
        self._in_backward = False
        self._pass_queued = False
        self._probe_autocast = True  # until the first iteration whose leaves were timed
        self._handles: list[Any] = []
        self._leaf_handles: list[Any] = []
        # One backward-mark hook per leaf, made once (not a closure per forward call).
        self._bwd_hooks = [self._bwd_hook(i) for i in range(len(self.leaves))]
        self._unpatch: Any = None
        self.leaf_hooks = False
        # prepend: the model's forward starts before wrappers' own pre-hooks (FSDP2's root all-gather).
        self._handles.append(root.register_forward_pre_hook(self._root_pre, with_kwargs=True, prepend=True))
        self._handles.append(root.register_forward_hook(self._root_post))
        self._patch_compiled(root)
        if leaf_hooks:
            self.install_leaf_hooks()

    def install_leaf_hooks(self) -> None:
        """Hook every leaf (forward pre/post; backward through a tensor hook on its output)."""
        if self.leaf_hooks:
            return
        self.leaf_hooks = True
        for _, m in self.leaves:
            self._leaf_handles.append(m.register_forward_pre_hook(self._leaf_pre))
            # always_call: non-reentrant checkpointing stops a recomputation by raising inside a leaf.
            self._leaf_handles.append(m.register_forward_hook(self._leaf_post, always_call=True))

    def remove_leaf_hooks(self) -> None:
        """Take the per-leaf hooks out (the root's stay): the next steps are timed whole, without
        the hooks' own cost (srift's unhooked steps)."""
        for h in self._leaf_handles:
            h.remove()
        self._leaf_handles = []
        self.leaf_hooks = False

    def _bwd_hook(self, i: int) -> Any:
        def hook(grad: torch.Tensor) -> None:
            self._bwd_mark(i)
        return hook

    def _patch_compiled(self, root: nn.Module) -> None:
        """``model.compile()`` (in place) runs the module's hooks inside the compiled call, where they
        are silent: time the compiled call itself from outside."""
        inner = getattr(root, "_compiled_call_impl", None)
        if inner is None:
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            self._root_pre(root, args, kwargs)
            out = inner(*args, **kwargs)
            self._root_post(root, args, out)
            return out

        root._compiled_call_impl = timed

        def restore() -> None:
            root._compiled_call_impl = inner

        self._unpatch = restore

    # ---- hooks --------------------------------------------------------------------------------
    def _active(self) -> bool:
        # Evaluation passes inside the training loop (no_grad / eval mode) are not training work.
        return not hooks_off() and torch.is_grad_enabled() and self.model.training

    def _root_pre(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if not self._active():
            return
        self._in_backward = False
        self._starts[-1].append(self.clock.mark())
        if self.first_input is None:
            self.first_input = first_tensor((args, kwargs))
            self.input_bytes = tensor_bytes((args, kwargs))
            self.autocast = autocast_state()
        if self.want_capture and self.capture is None:
            self.capture = (_detached_clone(args), _detached_clone(kwargs))

    def _root_post(self, module: nn.Module, args: Any, out: Any) -> None:
        if hooks_off() or not self._starts[-1]:
            return
        self.pending.root_fwd.append((self._starts[-1].pop(), self.clock.mark()))
        t = _grad_tensor(out)
        if t is not None:
            t.register_hook(lambda g: self._root_bwd())

    def _root_bwd(self) -> None:
        # The root output's gradient arrives first in the pass: its start when no leaf is timed.
        if hooks_off():
            return
        self.pending.root_bwd.append((self.clock.mark(), None))
        self._queue_pass_end()

    def _queue_pass_end(self) -> None:
        if not self._pass_queued:
            self._pass_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._pass_end)

    def _leaf_pre(self, module: nn.Module, args: Any) -> None:
        if not self._active():
            return
        if _in_autograd_engine():  # a recomputation (activation checkpointing)
            mark = self.clock.mark()
            self._rec_starts[id(module)].append(mark)
            if self._in_backward:
                self.pending.bwd_events.append((_PAUSE, mark))
            return
        if self.autocast is None and self._probe_autocast:  # autocast entered inside forward (accelerate, decorators)
            self.autocast = autocast_state()
        self._starts[id(module)].append(self.clock.mark())

    def _leaf_post(self, module: nn.Module, args: Any, out: Any) -> None:
        if hooks_off():
            return
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
            t.register_hook(self._bwd_hooks[i])

    def _bwd_mark(self, i: int) -> None:
        if hooks_off():
            return
        if not self._in_backward:
            self._in_backward = True
            self.pending.bwd_passes.append(len(self.pending.bwd_events))
            self._queue_pass_end()
        self.pending.bwd_events.append((i, self.clock.mark()))

    def _pass_end(self) -> None:
        # One mark per backward pass (not one per parameter): the engine's end-of-pass callback,
        # queued before DDP's, so DDP's wait for its last buckets is not backward time.
        self._pass_queued = False
        mark = self.clock.mark()
        if self._in_backward:
            self.pending.bwd_events.append((-1, mark))
        if self.pending.root_bwd and self.pending.root_bwd[-1][1] is None:
            self.pending.root_bwd[-1] = (self.pending.root_bwd[-1][0], mark)

    def exclude(self, start: Any, end: Any) -> None:
        """Cut ``[start, end]`` (clock marks, just measured) out of the backward leaf interval it
        falls in: time the training thread spent on something else (a blocking collective)."""
        if self._in_backward:
            self.pending.bwd_events += [(_PAUSE, start), (_RESUME, end)]

    def optimizer_start(self) -> None:
        self._in_backward = False
        self.pending.opt_start = self.clock.mark()

    def optimizer_end(self) -> None:
        self.pending.opt_end = self.clock.mark()

    def other_optimizer_start(self) -> None:
        """Another optimizer of the script steps (M10: Muon + AdamW, a GAN's two): its time is
        optimizer time of the iteration it falls in."""
        self.pending.other_start = self.clock.mark()

    def host_call(self, kind: str) -> Any:
        """A data iterator's next() or a zero_grad call starts (srift.profiling.host): its mark."""
        return self.clock.mark()

    def host_call_end(self, kind: str, start: Any) -> None:
        self.pending.host_calls.append((kind, start, self.clock.mark()))

    def other_optimizer_end(self) -> None:
        if self.pending.other_start is not None:
            self.pending.other_opt.append((self.pending.other_start, self.clock.mark()))
            self.pending.other_start = None

    # ---- per iteration ----------------------------------------------------------------------
    def close_iteration(self, start: Any, end: Any, measured: bool) -> _Pending:
        """Close the iteration that just stepped (``start``/``end``: its clock marks); its marks,
        to ``resolve`` now or, on CUDA, once its end has run."""
        pend, self.pending = self.pending, _Pending()
        self._starts.clear()
        self._rec_starts.clear()
        self._in_backward = False
        self._pass_queued = False
        pend.start, pend.end, pend.measured = start, end, measured
        if pend.fwd:
            self._probe_autocast = False
        pend.events = self.clock.take_issued()
        return pend

    def finish_iteration(self, prev_end_wall: float | None, end_wall: float, measured: bool) -> IterationTimes | None:
        """Close and resolve the iteration that just stepped, at once (the API before
        ``close_iteration``/``resolve``; the team's GPU check, gpu-check's ``events`` probe, calls it).

        Args:
            prev_end_wall: Unused (the iteration starts at its first root forward's mark).
            end_wall: Unused (the iteration ends at a mark taken now).
            measured: Return the iteration's times; else None.

        Returns:
            The times of the iteration, or None when not measured or nothing ran.
        """
        del prev_end_wall, end_wall  # wall-clock floats: the clock's own marks time the iteration
        start = self.pending.root_fwd[0][0] if self.pending.root_fwd else None
        return self.resolve(self.close_iteration(start, self.clock.mark(), measured))

    def resolve(self, pend: _Pending) -> IterationTimes | None:
        """The times of a closed iteration (None when not measured); its events go back to the pool."""
        try:
            return self._times(pend) if pend.measured and pend.start is not None else None
        finally:
            self.clock.release(pend.events)

    def _times(self, pend: _Pending) -> IterationTimes:
        el = self.clock.elapsed_s
        self.clock.wait(pend.end)
        fwd: dict[int, float] = defaultdict(float)
        fwd_calls: dict[int, int] = defaultdict(int)
        for i, a, b in pend.fwd:
            fwd[i] += max(el(a, b), 0.0)  # a CPU mark may be up to MARK_READ_S early (WallClock.mark)
            fwd_calls[i] += 1
        bwd: dict[int, float] = defaultdict(float)
        bwd_calls: dict[int, int] = defaultdict(int)
        for i, _ in pend.bwd_events:
            if i >= 0:
                bwd_calls[i] += 1
        backward_s = 0.0
        bounds = pend.bwd_passes + [len(pend.bwd_events)]
        for k in range(len(pend.bwd_passes)):
            events = pend.bwd_events[bounds[k]:bounds[k + 1]]
            if not events:
                continue
            # The pass ends at its last mark (the engine's end-of-pass callback). A leaf's backward
            # runs from its mark to the next leaf's (the last: to the pass's end), less the paused
            # stretches (recomputation, blocking collectives) in between.
            backward_s += el(events[0][1], events[-1][1])
            cur, since = -1, None
            for i, mark in events:
                if i >= 0 or i == _PAUSE:
                    if cur >= 0 and since is not None:
                        bwd[cur] += max(el(since, mark), 0.0)
                    since = None if i == _PAUSE else mark
                    if i >= 0:
                        cur = i
                elif i == _RESUME:
                    since = mark
            if cur >= 0 and since is not None:
                bwd[cur] += max(el(since, events[-1][1]), 0.0)
        if not pend.bwd_passes:  # no leaf timed (compiled, or the unhooked steps): the root's passes
            backward_s = sum(el(a, b) for a, b in pend.root_bwd if b is not None)
        ends = [b for _, b in pend.root_bwd if b is not None]
        last_end = pend.bwd_events[-1][1] if pend.bwd_events else (ends[-1] if ends else None)
        after_s = el(last_end, pend.opt_start) if last_end is not None and pend.opt_start is not None else 0.0
        forward_s = sum(el(a, b) for a, b in pend.root_fwd)
        opt_s = el(pend.opt_start, pend.opt_end) if pend.opt_start is not None and pend.opt_end is not None else 0.0
        opt_s += sum(el(a, b) for a, b in pend.other_opt)
        data_s, zero_grad_s, host_s = host_times(pend.host_calls, pend.start, pend.root_fwd[0][0] if pend.root_fwd else None, el)
        total_s = el(pend.start, pend.end)
        recompute_s = sum(el(a, b) for a, b in pend.recompute)
        return IterationTimes(dict(fwd), dict(bwd), data_s, forward_s, backward_s, opt_s, total_s,
                              len(pend.root_fwd), recompute_s, hooked=bool(pend.fwd), after_backward_s=max(after_s, 0.0),
                              layer_fwd_calls=dict(fwd_calls), layer_bwd_calls=dict(bwd_calls),
                              zero_grad_s=zero_grad_s, host_s=host_s)

    def remove(self) -> None:
        self.remove_leaf_hooks()
        self.layout.remove()
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._unpatch is not None:
            self._unpatch()
            self._unpatch = None


def autocast_state() -> tuple[str, torch.dtype] | None:
    """(device type, dtype) of the autocast the caller runs under, if any (torch 2.1-2.3 lack the
    per-device API: their CUDA/CPU functions are used)."""
    get_dtype = getattr(torch, "get_autocast_dtype", None)
    for dev in ("cuda", "cpu"):
        try:
            on = torch.is_autocast_enabled(dev)
        except TypeError:  # torch < 2.4
            on = torch.is_autocast_enabled() if dev == "cuda" else torch.is_autocast_cpu_enabled()
        if on:
            if get_dtype is not None:
                return dev, get_dtype(dev)
            return dev, (torch.get_autocast_gpu_dtype() if dev == "cuda" else torch.get_autocast_cpu_dtype())
    return None


# Marks in a backward pass's event list besides leaves (>= 0) and parameter-ready marks (-1).
_PAUSE, _RESUME = -2, -3


def _in_autograd_engine() -> bool:
    """True while the autograd engine runs a backward pass (in this thread)."""
    return torch._C._current_graph_task_id() != -1


def middle_half(values: list[float]) -> list[int]:
    """Indices (ascending) of the middle half of ``values`` by value: the lowest and highest
    ``floor(n / 4)`` left out; below 4 values, all of them."""
    cut = len(values) // 4
    order = sorted(range(len(values)), key=lambda k: values[k])
    return sorted(order[cut:len(values) - cut])


def interquartile_mean(values: list[float]) -> float:
    """The mean of ``middle_half(values)`` (0 for none)."""
    keep = middle_half(values)
    return statistics.fmean(values[k] for k in keep) if keep else 0.0


def steady_steps(records: list[IterationTimes]) -> list[int]:
    """Indices of the middle half of the measured steps by their total time (the fastest and
    slowest ``floor(n / 4)`` left out; below 4 steps, all of them: ``middle_half``). Other work on the machine only
    ever lengthens a step, in bursts: the trimmed mean leaves those steps out (and the odd step that
    runs early because the previous one overran) while averaging the rest, steadier than a median
    over a few dozen steps. Every layer and phase is averaged over these same steps, so the layers'
    times still add up within their phase's, which trimming each quantity on its own would not keep."""
    return middle_half([r.total_s for r in records])


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
