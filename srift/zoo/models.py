"""Build zoo models and make their structural profiles (torch)."""

from __future__ import annotations

import platform
from collections.abc import Callable

import torch
from torch import nn

import srift
from srift.errors import SriftError
from srift.job import HALF_PRECISIONS, require_precision
from srift.profile import DeviceInfo, OptimizerInfo, Profile
from srift.zoo import MODELS, OPTIMIZER_STATE_BYTES_PER_PARAM, canonical_name
from srift.profiling.flops import analyze_layers
from srift.profiling.saved import SAVED_SCHEMA, SavedScaling, measure_saved_bytes, per_sample_bytes
from srift.zoo import text, vision

BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "resnet50": vision.resnet50,
    "resnet152": vision.resnet152,
    "vgg16": vision.vgg16,
    "densenet201": vision.densenet201,
    "inception-v4": vision.inception_v4,
    "vit-b16": vision.vit_b16,
    "bert-base": text.bert_base,
    "bert-large": text.bert_large,
    "bert-base-squad": text.bert_base_squad,
    "bert-large-squad": text.bert_large_squad,
    "gpt2": text.gpt2,
    "gpt2-medium": text.gpt2_medium,
}


def build_model(name: str, device: str | torch.device = "cpu") -> nn.Module:
    """Instantiate a zoo model (random weights; ``device="meta"`` allocates nothing)."""
    key = canonical_name(name)
    with torch.device(device):
        return BUILDERS[key]()


def example_batch(name: str, batch_size: int, seq_len: int | None = None, device: str | torch.device = "cpu") -> torch.Tensor:
    """An input batch of the right shape: images [B, 3, H, W] or token ids [B, T]."""
    info = MODELS[canonical_name(name)]
    if info.kind == "image":
        assert info.image_size is not None  # every image model has one
        return torch.randn(batch_size, 3, info.image_size, info.image_size, device=device)
    tokens = seq_len or info.seq_len
    assert tokens is not None  # every sequence model has one
    return torch.randint(0, 1000, (batch_size, tokens), device=device)


def forward_loss(name: str, model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """The model's training loss on a batch (sequence models return their loss themselves)."""
    out = model(batch)
    if MODELS[canonical_name(name)].kind == "sequence":
        return out
    return nn.functional.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long, device=out.device))


# Autocast (CUDA, fp16/bf16) runs these in 16 bits, and these in fp32 whatever their input; every
# other layer (BatchNorm, activations, dropout, pooling) keeps the dtype of its input.
_AUTOCAST_16BIT = frozenset({"Conv2d", "Linear", "AttentionCore"})
_AUTOCAST_FP32 = frozenset({"LayerNorm", "GroupNorm", "Embedding", "Softmax", "LogSoftmax"})


def _apply_autocast_dtypes(layers: list) -> None:
    """Rescale the byte estimates of a fp32 structural analysis to what autocast would move and keep.

    The output dtype of a layer that autocast does not touch is taken from the layer that ran just
    before it (its input, in these sequential-in-practice models). An attention core's softmax runs
    in fp32 and its probabilities are cast to 16 bits for the value matmul: autograd keeps both
    (6 bytes per score instead of 4).
    """
    half = False
    for layer in layers:
        if layer.type == "Parameters":
            continue
        if layer.type in _AUTOCAST_16BIT:
            half = True
        elif layer.type in _AUTOCAST_FP32:
            half = False
        if not half:
            continue
        seq2 = layer.activation_bytes_seq2
        layer.activation_bytes = (layer.activation_bytes - seq2) / 2 + seq2 * 1.5
        layer.activation_bytes_seq2 = seq2 * 1.5
        layer.fwd_bytes /= 2
        layer.bwd_bytes /= 2


# Sequence length of the small CPU runs that count saved bytes (and twice it): shapes, not sizes, matter.
SAVED_PROBE_SEQ_LEN = 64


def saved_scalings(name: str, autocast_dtype: torch.dtype | None = None) -> list[SavedScaling]:
    """Per leaf of a zoo model, the bytes autograd saves per sample (and token), counted on small CPU
    runs (srift.profiling.saved; ``autocast_dtype``: under CPU autocast, which saves in 16 bits what
    CUDA autocast does: convolution and matmul inputs; BatchNorm in its input's dtype)."""
    key = canonical_name(name)
    model = build_model(key, "cpu")
    seq = SAVED_PROBE_SEQ_LEN if MODELS[key].kind == "sequence" else None

    def measure(batch: int, seq_len: int | None) -> dict[str, float]:
        x = example_batch(key, batch, seq_len)
        return measure_saved_bytes(model, lambda: forward_loss(key, model, x), autocast_dtype)

    return per_sample_bytes(measure, seq)


def _set_saved(layers: list, scalings: list[SavedScaling], batch: int, seq_len: int | None, half: bool) -> None:
    """Write each leaf's saved bytes at the profile's size into its layer (what was saved before any
    leaf ran, into the first one)."""
    at = {s.name: s.at(batch, seq_len) for s in scalings}
    first: tuple[float, float] | None = at.pop("", (0.0, 0.0))
    for i, layer in enumerate(layers):
        if layer.type == "Parameters":
            continue
        total, quad = at.get(layer.name, (0.0, 0.0))
        if first is not None:
            total, quad, first = total + first[0], quad + first[1], None
        if half:
            layer.saved_half_bytes, layer.saved_half_bytes_seq2 = total, quad
        else:
            layer.saved_bytes, layer.saved_bytes_seq2 = total, quad


def structural_profile(name: str, batch_size: int | None = None, seq_len: int | None = None,
                       precision: str = "fp32", saved: bool = False) -> Profile:
    """Analyze one training step of a zoo model on the meta device (no memory, no time).

    ``saved``: also count the bytes autograd saves, fp32 and under autocast (``saved_scalings``:
    small CPU runs, seconds to minutes).

    AMP: FLOPs and gradient bytes (DDP all-reduces fp32 gradients) are unchanged; activation and
    moved bytes follow the dtype autocast gives each layer's output (see _apply_autocast_dtypes).
    """
    key = canonical_name(name)
    info = MODELS[key]
    require_precision(precision)
    if seq_len is not None and info.kind != "sequence":
        raise SriftError(f"'{key}' is an image model: --seq-len does not apply.", "drop --seq-len.")
    b = batch_size or info.batch_size
    t = seq_len or info.seq_len
    model = build_model(key, "meta")
    batch = example_batch(key, b, t, "meta")
    layers = analyze_layers(model, lambda: forward_loss(key, model, batch))
    if precision in HALF_PRECISIONS:  # bf16 autocast keeps the same dtypes as fp16 autocast
        _apply_autocast_dtypes(layers)
    if saved:
        _set_saved(layers, saved_scalings(key), b, t if info.kind == "sequence" else None, half=False)
        _set_saved(layers, saved_scalings(key, torch.float16), b, t if info.kind == "sequence" else None, half=True)
    return Profile(
        name=key,
        batch_size=b,
        precision=precision,
        layers=layers,
        seq_len=t if info.kind == "sequence" else None,
        device=DeviceInfo("none (structural)"),
        framework={"torch": torch.__version__.split("+")[0], "python": platform.python_version(), "srift": srift.__version__},
        optimizer=OptimizerInfo(info.optimizer, OPTIMIZER_STATE_BYTES_PER_PARAM[info.optimizer]),
        input_bytes_per_sample=float(batch[0].numel() * batch.element_size()),
        notes=[f"structural profile of the zoo model {key} ({info.reference}); no timings"],
        saved_tensors=SAVED_SCHEMA if saved else None,
    )
