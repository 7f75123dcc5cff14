"""Which dimension of the model's input is the batch: read from the model's own flags.

PyTorch's sequence modules (``nn.RNN``/``nn.LSTM``/``nn.GRU``, ``nn.MultiheadAttention``,
``nn.Transformer`` and its encoder/decoder layers) take ``(sequence, batch, ...)`` unless built
with ``batch_first=True`` (torch/nn/modules/rnn.py, activation.py, transformer.py: the default is
False). A word-language model feeding token ids of shape ``(35, 20)`` to such an LSTM has a batch of
20 and sequences of 35, not the other way round.

``SequenceLayout`` puts a one-shot forward pre-hook on every module of the model that has a
``batch_first`` attribute; the first one called tells the batch and sequence sizes it received
(from its flag). The model's first input is then read against them: when its first two dimensions
are (sequence, batch) the batch is its dimension 1. A model that transposes its input itself before
the sequence module (its input batch-first) is read right too, since the sizes, not the flag alone,
decide. Without such a module (or when the sizes match neither way) the batch is dimension 0 and
token ids give the sequence length from dimension 1, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from srift.profiling.tensors import first_tensor


@dataclass(frozen=True)
class InputShape:
    """The model's micro-batch, sequence length (None: not a sequence model) and batch dimension."""

    micro_batch: int
    seq_len: int | None
    batch_dim: int = 0


class SequenceLayout:
    """One-shot hooks on the model's modules that carry a ``batch_first`` flag (see module
    docstring). ``seen`` is (batch, sequence, batch_first) of the first such call, or None."""

    def __init__(self, model: nn.Module) -> None:
        self.seen: tuple[int, int, bool] | None = None
        self._handles = [m.register_forward_pre_hook(self._pre, with_kwargs=True)
                         for m in model.modules() if isinstance(getattr(m, "batch_first", None), bool)]

    def _pre(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if self.seen is not None or torch.compiler.is_compiling():
            return
        x = first_tensor((args, kwargs))
        if x is None or x.dim() < 2:  # unbatched input (sequence only): says nothing about a batch
            return
        first = bool(module.batch_first)
        batch, seq = (int(x.shape[0]), int(x.shape[1])) if first else (int(x.shape[1]), int(x.shape[0]))
        self.seen = (batch, seq, first)
        self.remove()

    def remove(self) -> None:
        """Take the hooks out (once one has fired, or when the timer is removed)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def input_shape(self, x: torch.Tensor | None) -> InputShape:
        """The micro-batch, sequence length and batch dimension of the model's first input ``x``."""
        if x is None or x.dim() == 0:
            return InputShape(1, None)
        tokens = not x.is_floating_point()
        if self.seen is not None and x.dim() >= 2:
            batch, seq, _ = self.seen
            dims = (int(x.shape[0]), int(x.shape[1]))
            if dims == (seq, batch) and seq != batch:  # sequence-first input
                return InputShape(batch, seq, batch_dim=1)
            if dims == (batch, seq):
                return InputShape(batch, seq if tokens or x.dim() >= 3 else None)
        return InputShape(int(x.shape[0]), int(x.shape[1]) if x.dim() >= 2 and tokens else None)
