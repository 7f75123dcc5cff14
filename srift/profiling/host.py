"""Where the host's time before the forward goes: the data iterator, ``zero_grad``, the rest.

A training loop spends the time from one optimizer step to the next forward on its data iterator
(``next()`` on a DataLoader, with its wait for the workers), on ``zero_grad`` and on its own Python
(logging, the learning-rate schedule, bookkeeping). Only the first is data loading; the three are
carried to another machine by what they depend on (docs/profiling.md): the iterator's time grows
with the batch, ``zero_grad`` with the parameters, the rest with neither. Issue 41: nanoGPT's
``zero_grad`` and logging, read as data loading, grew with the batch to 61 % of a predicted A100
step.

While profiling, ``HostCalls`` wraps ``_BaseDataLoaderIter.__next__`` (every DataLoader iterator,
single- and multi-process), ``Optimizer.zero_grad`` and ``Module.zero_grad`` on their classes and
reports each call's start and end marks to the session's timer (nested calls once); the classes
get their own functions back when it exits.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Literal, Protocol

import torch
from torch.utils.data import dataloader

HostKind = Literal["data", "zero_grad"]
DATA: HostKind = "data"
ZERO_GRAD: HostKind = "zero_grad"


class _Sink(Protocol):
    def host_call(self, kind: HostKind) -> Any: ...

    def host_call_end(self, kind: HostKind, start: Any) -> None: ...


class HostCalls:
    """Times the data iterator's ``next()`` and ``zero_grad`` calls (see module docstring).

    Args:
        sink: Called for the timer in charge now (None: not timing, the call runs untouched).
    """

    def __init__(self, sink: Callable[[], _Sink | None]) -> None:
        self._sink = sink
        self._depth = 0
        self._saved: list[tuple[type, str, Any]] = []

    def __enter__(self) -> "HostCalls":
        patched: tuple[tuple[type, str, HostKind], ...] = (
            (dataloader._BaseDataLoaderIter, "__next__", DATA), (torch.optim.Optimizer, "zero_grad", ZERO_GRAD),
            (torch.nn.Module, "zero_grad", ZERO_GRAD))
        for cls, name, kind in patched:
            original = cls.__dict__[name]
            self._saved.append((cls, name, original))
            setattr(cls, name, self._wrap(original, kind))
        return self

    def __exit__(self, *exc: Any) -> None:
        for cls, name, original in reversed(self._saved):
            setattr(cls, name, original)
        self._saved = []

    def _wrap(self, fn: Callable[..., Any], kind: HostKind) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            sink = self._sink() if self._depth == 0 else None
            if sink is None:
                return fn(*args, **kwargs)
            self._depth += 1
            start = sink.host_call(kind)
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                sink.host_call_end(kind, start)
        return timed


def host_times(calls: list[tuple[str, Any, Any]], start: Any, first_forward: Any,
               elapsed_s: Callable[[Any, Any], float]) -> tuple[float, float, float]:
    """(data iterator, zero_grad, other host) seconds of an iteration from its ``calls`` ((kind,
    start, end) marks): the first two summed over their calls anywhere in it; the third, the time
    from the iteration's ``start`` to the model's ``first_forward`` (None: no forward) that neither
    took (logging, the learning-rate schedule, the script's own Python)."""
    data_s = sum(max(elapsed_s(a, b), 0.0) for kind, a, b in calls if kind == DATA)
    zero_grad_s = sum(max(elapsed_s(a, b), 0.0) for kind, a, b in calls if kind == ZERO_GRAD)
    if first_forward is None or start is None:
        return data_s, zero_grad_s, 0.0
    before = sum(max(elapsed_s(a, b), 0.0) for _, a, b in calls if elapsed_s(b, first_forward) >= 0.0)
    return data_s, zero_grad_s, max(elapsed_s(start, first_forward) - before, 0.0)
