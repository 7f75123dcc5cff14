"""The srift profile of a measured row's model (``ProfileSource``): the zoo's structural profile at
the row's batch and sequence length, without the pre-training head the measured runs did not have
(``without_pretraining_head``), with a masked-LM head on the masked positions only
(``masked_head``), on the row's stated PyTorch. srift/fitting/datasets.py re-exports every name here.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import pandas as pd

from srift.fitting.multinode_data import MLM_HEAD_LAYERS
from srift.profile import Profile

# SuperBench puts a small classifier on the bare GPT-2 decoder; the zoo's GPT-2 carries its LM head
# (a 50257-way projection), which is dropped for the comparison (the classifier is < 0.01% of the
# FLOPs and is left out). SuperBench's BERTs map to the zoo's bert-*-squad (encoder, 2-way head).
PRETRAINING_HEADS: dict[str, tuple[str, ...]] = {"gpt2": ("lm_head",)}


def without_pretraining_head(profile: Profile, model: str) -> Profile:
    """The profile minus its pre-training/LM head layers (see PRETRAINING_HEADS)."""
    prefixes = PRETRAINING_HEADS.get(model)
    if not prefixes:
        return profile
    keep = [l for l in profile.layers if not l.name.split(".")[-1].startswith(prefixes) and not l.name.startswith(prefixes)]
    if len(keep) == len(profile.layers):
        return profile
    return dataclasses.replace(profile, layers=keep, notes=profile.notes + [f"dropped pre-training head layers {prefixes}"])


def masked_head(profile: Profile, model: str, share: float) -> Profile:
    """``profile`` with the masked-LM head's layers (``MLM_HEAD_LAYERS``) doing ``share`` of their
    per-token work: FLOPs, moved and activation bytes; the weights' gradients stay whole."""
    names = MLM_HEAD_LAYERS.get(model, ())
    if not names or share >= 1.0:
        return profile

    def part(total: float, fixed: float) -> float:
        keep = min(total, fixed)
        return (total - keep) * share + keep

    layers = [dataclasses.replace(l, fwd_flops=l.fwd_flops * share, bwd_flops=l.bwd_flops * share,
                                  fwd_bytes=part(l.fwd_bytes, l.grad_bytes), bwd_bytes=part(l.bwd_bytes, 2.0 * l.grad_bytes),
                                  activation_bytes=l.activation_bytes * share)
              if l.name.split(".")[-1] in names else l for l in profile.layers]
    return dataclasses.replace(profile, layers=layers, notes=profile.notes + [f"masked-LM head on {share:.0%} of positions"])


class ProfileSource:
    """Structural profiles of the mapped models at any (batch, seq_len), cached; the measured
    runs' models have no pre-training head, so it is dropped (``without_pretraining_head``)."""

    def __init__(self, loader: Callable[[str, int, int | None], Profile]) -> None:
        self._loader = loader
        self._cache: dict[tuple[str, int, int | None, bool], Profile] = {}
        self._masked: dict[tuple[str, int, int, float, str | None], Profile] = {}
        self._torch: dict[tuple[int, str], Profile] = {}

    def get(self, model: str, batch: int, seq_len: int | None, keep_head: bool = False) -> Profile:
        key = (model, batch, seq_len, keep_head)
        if key not in self._cache:
            p = self._loader(model, batch, seq_len)
            self._cache[key] = p if keep_head else without_pretraining_head(p, model)
        return self._cache[key]

    def _with_torch(self, profile: Profile, version: object) -> Profile:
        """The profile as run on the row's stated PyTorch (``torch_version``; unstated: as it is)."""
        if not isinstance(version, str) or not version:
            return profile
        key = (id(profile), version)
        if key not in self._torch:
            self._torch[key] = dataclasses.replace(profile, framework={**profile.framework, "torch": version})
        return self._torch[key]

    def for_row(self, r) -> Profile:
        """The profile of a measured row (its model, micro-batch, sequence length, head; a row's
        ``head_positions`` runs the masked-LM head on that many positions per sequence only)."""
        seq = getattr(r, "seq_len", None)
        head = getattr(r, "head", None)
        seq_len = None if seq is None or pd.isna(seq) else int(seq)
        profile = self.get(r.model, int(r.batch_per_gpu), seq_len, keep_head=isinstance(head, str) and head == "pretraining")
        profile = self._with_torch(profile, getattr(r, "torch_version", None))
        positions = getattr(r, "head_positions", None)
        if positions is None or pd.isna(positions) or not seq_len:
            return profile
        key = (r.model, int(r.batch_per_gpu), seq_len, float(positions), profile.framework.get("torch"))  # one object per case
        if key not in self._masked:
            self._masked[key] = masked_head(profile, r.model, float(positions) / seq_len)
        return self._masked[key]
