"""Activation memory as autograd keeps it: the bytes of the tensors saved for backward, per layer.

``torch.autograd.graph.saved_tensors_hooks`` sees every tensor an operation saves for its backward
(a convolution's input, BatchNorm's input and statistics, ReLU's output, log-softmax's output...).
What the GPU holds between forward and backward is the *storages* of those tensors: a view, an
in-place result and a tensor saved by two operations share one storage, counted once here. The
parameters (and, under autocast, their 16-bit copies, which do not grow with the batch) are the
weights' memory, not activations: they are left out.

A saved tensor is charged to the leaf module running when it was saved; one saved outside every
leaf (the functional loss, a residual's ``out + identity``) to the leaf that ran last, whose output
it consumes. Recorded in the profile as ``LayerProfile.saved_bytes`` (fp32) and
``saved_half_bytes`` (under autocast), schema ``SAVED_SCHEMA`` (docs/profile-schema.md).

Shapes grow with the batch and the sequence, so a few small runs on the CPU give every size:
``per_sample_bytes`` runs batch 1 and 2 (the difference is one sample's bytes; what does not grow
is left out) and, for sequence models, a sequence twice as long (what grows with its square:
attention probabilities of an unfused attention).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from srift.profile import SAVED_SCHEMAS, LayerProfile

SAVED_SCHEMA = SAVED_SCHEMAS[0]


class _SavedRecorder:
    """Hooks that charge each saved storage, once, to the leaf module running (or last run)."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {m: n for n, m in model.named_modules()}
        self.excluded = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.excluded |= {b.untyped_storage().data_ptr() for b in model.buffers()}
        self.seen: set[int] = set()
        self.bytes: dict[str, float] = {}
        self.order: list[str] = []
        self.stack: list[str] = []
        self.last: str | None = None

    def pre(self, mod: nn.Module, args: Any) -> None:
        name = self.names[mod]
        self.stack.append(name)
        if name not in self.bytes:
            self.bytes[name] = 0.0
            self.order.append(name)

    def post(self, mod: nn.Module, args: Any, out: Any) -> None:
        if self.stack:
            self.last = self.stack.pop()

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if storage.nbytes() and ptr not in self.excluded and ptr not in self.seen and not _cast_of_leaf(t):
            self.seen.add(ptr)
            owner = self.stack[-1] if self.stack else self.last
            if owner is None:  # saved before any leaf ran (an input's preprocessing)
                owner = ""
                self.bytes.setdefault("", 0.0)
            self.bytes[owner] += float(storage.nbytes())
        # Detached: a saved output packed with its own grad_fn would tie the graph into a
        # reference cycle autograd cannot break (the model would never be freed).
        return t.detach()


def _cast_of_leaf(t: torch.Tensor) -> bool:
    """Whether ``t`` is a dtype copy of a parameter (autocast's 16-bit weight): weights' memory."""
    fn = t.grad_fn
    if fn is None or type(fn).__name__ != "ToCopyBackward0":
        return False
    return any(nxt is not None and type(nxt).__name__ == "AccumulateGrad" for nxt, _ in fn.next_functions)


def record_saved_bytes(model: nn.Module, forward_fn: Callable[[], Any], layers: list[LayerProfile], half: bool) -> None:
    """Count what one forward of ``model`` saves (``measure_saved_bytes``, under the autocast
    ``forward_fn`` itself sets) and write it into ``layers`` by name: ``saved_half_bytes`` when the
    run is in half precision (``half``), else ``saved_bytes`` (what was saved before any leaf ran
    goes to the first layer; a layer absent from the count saved nothing)."""
    counted = measure_saved_bytes(model, forward_fn)
    first = counted.pop("", 0.0)  # before any leaf (or a root that is itself the only leaf)
    for i, layer in enumerate(layers):
        total = counted.get(layer.name, 0.0) + (first if i == 0 else 0.0)
        if half:
            layer.saved_half_bytes = total
        else:
            layer.saved_bytes = total


def measure_saved_bytes(model: nn.Module, forward_fn: Callable[[], Any], autocast_dtype: torch.dtype | None = None,
                        ) -> dict[str, float]:
    """Bytes of the storages autograd saves during one forward of ``model``, per leaf module.

    Args:
        model: The model (on the CPU: saved storages are told apart by their addresses).
        forward_fn: Runs the forward and the loss; its result (the graph) is dropped unrun.
        autocast_dtype: Run under CPU autocast to this dtype (``torch.float16``, ``torch.bfloat16``);
            None: in the model's dtype.

    Returns:
        ``{leaf module name: bytes}`` in execution order; ``""`` for what was saved before any leaf ran.
    """
    rec = _SavedRecorder(model)
    handles = []
    for m in model.modules():
        if not list(m.children()):
            handles += [m.register_forward_pre_hook(rec.pre), m.register_forward_hook(rec.post, always_call=True)]
    cast = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype is not None else contextlib.nullcontext()
    was_training = model.training
    model.train()
    try:
        with cast, torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            out = forward_fn()
        del out
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return {name: rec.bytes[name] for name in ([""] if "" in rec.bytes else []) + rec.order}


@dataclass(frozen=True)
class SavedScaling:
    """One leaf's saved bytes as functions of the size: ``batch * (linear * seq + quad * seq**2)``
    for a sequence model (``linear``, ``quad`` per sample, per token and per token squared), or
    ``batch * linear`` for another (``quad`` 0).

    Attributes:
        name: The leaf module's name.
        linear: Bytes per sample (per sample and token for a sequence model).
        quad: Bytes per sample and squared token (sequence models; 0 otherwise).
    """

    name: str
    linear: float
    quad: float = 0.0

    def at(self, batch: int, seq_len: int | None) -> tuple[float, float]:
        """(total bytes, the part that grows with seq_len squared) at a batch and sequence length."""
        if seq_len is None:
            return batch * self.linear, 0.0
        quad = batch * self.quad * seq_len * seq_len
        return batch * self.linear * seq_len + quad, quad


def per_sample_bytes(measure: Callable[[int, int | None], dict[str, float]], seq_len: int | None = None,
                     ) -> list[SavedScaling]:
    """Each leaf's saved bytes per sample (and per token, token squared) from three small runs.

    Args:
        measure: ``measure(batch, seq_len) -> {leaf: bytes}`` (``measure_saved_bytes`` on a model
            built for that size).
        seq_len: The short sequence length to measure at (sequence models); None for others.

    Returns:
        One SavedScaling per leaf, in execution order (what does not grow with the batch, such as
        autocast's weight copies, is left out).
    """
    one, two = measure(1, seq_len), measure(2, seq_len)
    per = {k: max(two.get(k, 0.0) - one.get(k, 0.0), 0.0) for k in two}
    if seq_len is None:
        return [SavedScaling(k, v) for k, v in per.items()]
    fixed = {k: one.get(k, 0.0) - per[k] for k in per}
    longer = measure(1, 2 * seq_len)
    out = []
    for k, p in per.items():
        # P(s) = a s + b s^2 per sample; P(2s) - 2 P(s) = 2 b s^2.
        p2 = longer.get(k, 0.0) - fixed.get(k, 0.0)
        quad_s2 = max((p2 - 2.0 * p) / 2.0, 0.0)
        out.append(SavedScaling(k, max(p - quad_s2, 0.0) / seq_len, quad_s2 / (seq_len * seq_len)))
    return out
