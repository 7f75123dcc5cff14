"""Per-leaf-module timing hooks for the script profiler (``LayerTimer``), and the overview of how a
step is timed. The parts: the model found (srift/profiling/model_finder.py), the clocks
(clocks.py), an iteration's marks read into times (iteration_times.py), where hooks stay silent
(torch_state.py).

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

from collections import defaultdict
from typing import Any

import torch
from torch import nn

from srift.profiling.clocks import MARK_READ_S, MARK_TRIES, CudaClock, RunQueue, WallClock
from srift.profiling.iteration_times import (
    MEASURED, PAIRED, PAUSE, RESUME, UNHOOKED, IterationTimes, Pending, interquartile_mean, iteration_times, middle_half,
    steady_steps,
)
from srift.profiling.layout import SequenceLayout
from srift.profiling.model_finder import HandUpdates, ModelFinder, unwrap
from srift.profiling.tensors import detached_clone, first_tensor, grad_tensor, tensor_bytes
from srift.profiling.torch_state import autocast_state, hooks_off, in_autograd_engine

# Names of the parts, importable from here as before.
__all__ = [
    "MARK_READ_S", "MARK_TRIES", "MEASURED", "PAIRED", "UNHOOKED", "CudaClock", "HandUpdates", "IterationTimes",
    "LayerTimer", "ModelFinder", "RunQueue", "WallClock", "autocast_state", "hooks_off", "interquartile_mean",
    "middle_half", "steady_steps", "unwrap",
]


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
        self.pending = Pending()
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
            self.capture = (detached_clone(args), detached_clone(kwargs))

    def _root_post(self, module: nn.Module, args: Any, out: Any) -> None:
        if hooks_off() or not self._starts[-1]:
            return
        self.pending.root_fwd.append((self._starts[-1].pop(), self.clock.mark()))
        t = grad_tensor(out)
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
        if in_autograd_engine():  # a recomputation (activation checkpointing)
            mark = self.clock.mark()
            self._rec_starts[id(module)].append(mark)
            if self._in_backward:
                self.pending.bwd_events.append((PAUSE, mark))
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
                self.pending.bwd_events.append((RESUME, mark))
            return
        starts = self._starts.get(id(module))
        if not starts:
            return
        i = self.index[id(module)]
        self.pending.fwd.append((i, starts.pop(), self.clock.mark()))
        t = grad_tensor(out)
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
            self.pending.bwd_events += [(PAUSE, start), (RESUME, end)]

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
    def close_iteration(self, start: Any, end: Any, measured: bool) -> Pending:
        """Close the iteration that just stepped (``start``/``end``: its clock marks); its marks,
        to ``resolve`` now or, on CUDA, once its end has run."""
        pend, self.pending = self.pending, Pending()
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

    def resolve(self, pend: Pending) -> IterationTimes | None:
        """The times of a closed iteration (None when not measured); its events go back to the pool."""
        try:
            return iteration_times(pend, self.clock) if pend.measured and pend.start is not None else None
        finally:
            self.clock.release(pend.events)

    def remove(self) -> None:
        self.remove_leaf_hooks()
        self.layout.remove()
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._unpatch is not None:
            self._unpatch()
            self._unpatch = None
