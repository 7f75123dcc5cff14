"""Packed sequences whose samples attend only within themselves (``--varlen-attention``).

Pure arithmetic (no torch). A pack of ``S`` tokens holds samples of lengths ``l_1 .. l_n``. Where
the library masks attention at the samples' boundaries, causal attention visits

    sum_i l_i (l_i + 1) / 2  ~  S * lam / 2,   lam = E[l^2] / E[l]

(query, key) pairs instead of the whole pack's ``S^2 / 2``: linear in the pack length, as a
sliding window is. It runs in the same fused attention kernel (flash-attention's varlen entry,
cuDNN's ``thd`` layout), priced at the fused kernel's rate; under context parallelism each rank
computes ``1/c`` of it (its ``S/c`` tokens' samples). ``lam`` is the attention-equivalent sample length (``sample_attention_len``):
the mean length for equal samples, more for a spread of lengths (E[l^2] >= E[l]^2). With a
``--lengths-file`` srift takes it from the lengths; with ``--mean-seq-len`` alone the samples are
taken as equal (the least attention that mean allows). Only the attention core's quadratic work
changes; every other layer computes every token of the pack as before, and tokens/s counts them.

Libraries that attend per sample in a pack (read in each package's source on PyPI):

- XTuner 0.2.0 ``use_varlen_attn=True`` (``xtuner/dataset/utils.py`` ``Packer`` records each
  sample's ``cumulative_len``; the model's attention runs ``flash_attn_varlen_func`` on it);
- NeMo 2.1.0 packed sequences (``PackedSequenceSpecs``): ``nemo/collections/llm/gpt/model/base.py``
  ``get_packed_seq_params`` passes the samples' ``cu_seqlens`` to Transformer Engine with
  ``qkv_format='thd'``.

A pack without that mask (XTuner's default ``use_varlen_attn=False``, TRL's ``packing=True``
without padding-free) attends over the whole pack: srift's default.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from srift.job import Job
from srift.profile import Profile
from srift.simulate.sequences import Sequences, sequences_of
from srift.zoo.decoder_arch import DecoderArch


def sample_attention_len(sequences: Sequences) -> float:
    """``lam = E[l^2] / E[l]`` of the samples (module docstring), at most the pack's length."""
    if sequences.lengths is not None:
        lengths = np.asarray(sequences.lengths, dtype=float)
        lam = float(np.dot(lengths, lengths) / lengths.sum())
    else:
        lam = sequences.mean
    return min(float(sequences.cap), lam)


def arch_with_sample_attention(arch: DecoderArch, lam: float) -> DecoderArch:
    """``arch`` whose blocks attend within samples of attention-equivalent length ``lam``
    (srift/zoo/decoder_layers.py prices the pairs)."""
    return dataclasses.replace(arch, sample_attention_len=float(lam))


def arch_for_job(arch: DecoderArch, job: Job, seq_len: int) -> DecoderArch:
    """``arch`` as ``job`` runs it: its samples' attention under ``--varlen-attention`` (``seq_len``
    the pack), else unchanged."""
    samples = sequences_of(seq_len, job.mean_seq_len, job.lengths_file, job.packed) if job.varlen_attention else None
    return arch if samples is None else arch_with_sample_attention(arch, sample_attention_len(samples))


def profile_with_sample_attention(profile: Profile, lam: float) -> Profile:
    """``profile`` (at its ``seq_len``, the pack) with each attention core's quadratic work cut to
    the samples' (``lam / seq_len`` of it); a measured time scales with its layer's FLOPs."""
    seq = profile.seq_len
    if not seq or lam >= seq:
        return profile
    keep = lam / seq
    layers = []
    for layer in profile.layers:
        if layer.fwd_flops_seq2 <= 0 and layer.bwd_flops_seq2 <= 0:
            layers.append(layer)
            continue
        fwd = layer.fwd_flops - layer.fwd_flops_seq2 * (1.0 - keep)
        bwd = layer.bwd_flops - layer.bwd_flops_seq2 * (1.0 - keep)

        def timed(t: float | None, new: float, old: float) -> float | None:
            return None if t is None else (t * new / old if old > 0 else t)
        # Still flagged as the attention core's work (``*_seq2``: the fused kernel's, which the
        # compute model prices as such): a profile priced at this pack length, not rescaled.
        layers.append(dataclasses.replace(layer, fwd_flops=fwd, bwd_flops=bwd, fwd_flops_seq2=layer.fwd_flops_seq2 * keep,
                                          bwd_flops_seq2=layer.bwd_flops_seq2 * keep,
                                          fwd_s=timed(layer.fwd_s, fwd, layer.fwd_flops),
                                          bwd_s=timed(layer.bwd_s, bwd, layer.bwd_flops)))
    return dataclasses.replace(profile, layers=layers)
