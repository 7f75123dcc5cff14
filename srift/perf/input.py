"""Input pipeline: the seconds one GPU's data loader needs to prepare one iteration's samples.

The loader runs beside the GPU (DataLoader worker processes prefetch the next batches), so the
simulator bounds the iteration from below by this time: it is the iteration time only when the CPU
side is the slower one. Kinds (``--data-loading``):

- ``synthetic``: tensors made on the GPU or already in memory: 0 s.
- ``images``: JPEGs decoded and augmented on the instance's vCPUs with torchvision's ImageNet
  training transform (decode, RandomResizedCrop, flip, ToTensor, Normalize):
  ``samples / (rate per vCPU at the image size x usable vCPUs per GPU)``. The rate was measured by
  ``scripts/measure_input_pipeline.py`` and ships in ``configs/perf/input.json`` with the
  assumptions it rests on: a cloud vCPU is a hyperthread (the measured per-core rate times a stated
  factor), and each GPU's training process keeps ``reserved_vcpus_per_gpu`` (1) vCPU for itself.
  The crop size matters only partly: decoding and RandomResizedCrop's resize read the source image
  whatever the output size, while flip, ToTensor, Normalize and collation grow with the output's
  pixels, so the per-image cost is ``t_ref x (s + (1 - s) x (size / ref)^2)`` with the measured
  source share ``s``.
- ``tokens``: token ids sliced from a memory-mapped array (pre-tokenized text), a measured cost per
  token that comes to microseconds per sample: near zero next to any GPU step.
- A profile measured with its own data loader carries its data time (``phases.data_s``, the time
  the training loop waited for batches); when given, that is used instead of the model (except for
  ``synthetic``, which says there is no loading to wait for).

Pure: no torch; reads only configs/perf/input.json.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srift.bounds import shown
from srift.errors import SriftError
from srift.files import configs_dir, read_json
from srift.job import DATA_LOADING, IMAGES, SYNTHETIC

DATA_LOADING_KINDS = DATA_LOADING  # the vocabulary lives in srift/job_vocabulary.py
SCHEMA = "srift.perf.input/v1"


@dataclass(frozen=True)
class InputParams:
    """Measured input-pipeline figures and the assumptions that turn them into vCPU rates.

    Attributes:
        images_per_s_per_vcpu: Images per second one cloud vCPU prepares at the reference size (mean).
        images_per_s_per_vcpu_slow: The same from the slowest measured trial (for a slow bound).
        reference_image_size: Output side (px) the rate was measured at (224).
        source_share: Share of the per-image cost at the reference size that does not depend on the
            output size (decode, crop and resize), in [0, 1].
        reserved_vcpus_per_gpu: vCPUs each GPU's training process keeps for itself.
        token_s_per_token: Seconds of one vCPU per token of pre-tokenized text.
        source: Where the figures came from (file path).
    """

    images_per_s_per_vcpu: float
    images_per_s_per_vcpu_slow: float
    reference_image_size: int
    source_share: float
    reserved_vcpus_per_gpu: float
    token_s_per_token: float
    source: str = "configs/perf/input.json"

    def __post_init__(self) -> None:
        checks = (
            (1e-6 <= self.images_per_s_per_vcpu <= 1e9, "images_per_s_per_vcpu"),
            (1e-6 <= self.images_per_s_per_vcpu_slow <= self.images_per_s_per_vcpu, "images_per_s_per_vcpu (min)"),
            (0 < self.reference_image_size <= 100_000, "reference_image_size"),
            (0.0 <= self.source_share <= 1.0, "source_share_at_reference"),
            (0 <= self.reserved_vcpus_per_gpu <= 1024, "reserved_vcpus_per_gpu"),
            (0 <= self.token_s_per_token <= 1.0, "tokens.s_per_token"),
        )
        for ok, name in checks:
            if not ok:
                raise SriftError(f"{self.source}: {name} is out of range",
                                 "re-run scripts/measure_input_pipeline.py, or reinstall srift-planner.")

    @classmethod
    def from_dict(cls, d: Any, source: str = "configs/perf/input.json") -> "InputParams":
        """Read the ``srift.perf.input/v1`` document written by scripts/measure_input_pipeline.py."""
        hint = "re-run scripts/measure_input_pipeline.py, or reinstall srift-planner."
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise SriftError(f"{source} is not an input-pipeline file (schema {SCHEMA})", hint)
        try:
            images, assume = d["images"], d["assumptions"]
            rate = images["images_per_s_per_vcpu"]
            return cls(
                images_per_s_per_vcpu=float(rate["mean"]),
                images_per_s_per_vcpu_slow=float(rate["min"]),
                reference_image_size=int(images["reference_image_size"]),
                source_share=float(images["source_share_at_reference"]),
                reserved_vcpus_per_gpu=float(assume["reserved_vcpus_per_gpu"]),
                token_s_per_token=float(d["tokens"]["s_per_token"]),
                source=source,
            )
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise SriftError(f"{source} lacks an input-pipeline figure ({shown(str(e))})", hint) from None

    def image_rate_per_vcpu(self, image_size: int, slow: bool = False) -> float:
        """Images per second one vCPU prepares at output side ``image_size`` px."""
        _check_positive(image_size, "image size")
        rate = self.images_per_s_per_vcpu_slow if slow else self.images_per_s_per_vcpu
        rel = self.source_share + (1.0 - self.source_share) * (image_size / self.reference_image_size) ** 2
        return rate / rel

    def usable_vcpus(self, vcpus_per_gpu: float) -> float:
        """vCPUs per GPU left to the data loader after the training process's own."""
        _check_positive(vcpus_per_gpu, "vCPUs per GPU")
        usable = vcpus_per_gpu - self.reserved_vcpus_per_gpu
        if usable <= 0:
            raise SriftError(
                f"{vcpus_per_gpu:g} vCPU(s) per GPU leave none for data loading "
                f"(each GPU's training process keeps {self.reserved_vcpus_per_gpu:g})",
                "use --data-loading synthetic (or tokens), or an instance with more vCPUs per GPU.")
        return usable


@dataclass(frozen=True)
class InputTime:
    """One GPU's data-loading seconds per iteration.

    Attributes:
        kind: ``synthetic``, ``images``, ``tokens`` or ``measured``.
        time_s: Seconds at the mean measured rate.
        slow_time_s: Seconds at the slowest measured trial's rate (a pessimistic bound).
        basis: How the figure was obtained, for a prediction's basis line.
    """

    kind: str
    time_s: float
    slow_time_s: float
    basis: str


def params_path() -> Path:
    return configs_dir() / "perf" / "input.json"


@functools.lru_cache(maxsize=4)
def load_params(path: str | None = None) -> InputParams:
    """The shipped input-pipeline figures, or those in ``path``."""
    p = Path(path) if path else params_path()
    data = read_json(p, "input-pipeline figures", "reinstall srift-planner, or re-run scripts/measure_input_pipeline.py.")
    return InputParams.from_dict(data, str(p))


def _check_positive(value: float, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
        raise SriftError(f"the {what} must be a positive number, not {value!r}", f"give a positive {what}.")


def input_time(kind: str, samples_per_gpu: float, vcpus_per_gpu: float, image_size: int = 224,
               seq_len: int | None = None, measured_data_s: float | None = None,
               params: InputParams | None = None) -> InputTime:
    """Seconds one GPU's loader needs to prepare ``samples_per_gpu`` samples.

    Args:
        kind: ``synthetic``, ``images`` or ``tokens`` (see the module docstring).
        samples_per_gpu: Samples per GPU per iteration (the per-GPU batch).
        vcpus_per_gpu: The instance's vCPUs divided by its GPUs.
        image_size: Output side of the crop in pixels (``images``).
        seq_len: Tokens per sample (``tokens``; required there).
        measured_data_s: A measured profile's own data time per iteration, used when given.
        params: Figures to use (default: the shipped configs/perf/input.json).

    Returns:
        The time at the mean measured rate, at the slowest trial's rate, and its basis.

    Raises:
        SriftError: An unknown kind, a non-positive count or size, a negative measured time, or an
            instance with no vCPU left for loading.
    """
    if kind not in DATA_LOADING_KINDS:
        raise SriftError(f"unknown data loading {kind!r}", f"choose one of {', '.join(DATA_LOADING_KINDS)}.")
    _check_positive(samples_per_gpu, "samples per GPU")
    if kind == SYNTHETIC:
        return InputTime("synthetic", 0.0, 0.0, "synthetic data: no loading")
    if measured_data_s is not None:
        if isinstance(measured_data_s, bool) or not (measured_data_s >= 0 and math.isfinite(measured_data_s)):
            raise SriftError(f"a measured data time must be >= 0 s, not {measured_data_s!r}",
                             "re-run `srift profile`, or drop the profile's phases.data_s.")
        return InputTime("measured", float(measured_data_s), float(measured_data_s),
                         f"the profile's measured data time, {measured_data_s * 1e3:.3g} ms per iteration")
    p = params or load_params()
    usable = p.usable_vcpus(vcpus_per_gpu)
    if kind == IMAGES:
        rate, slow = p.image_rate_per_vcpu(image_size), p.image_rate_per_vcpu(image_size, slow=True)
        return InputTime("images", samples_per_gpu / (rate * usable), samples_per_gpu / (slow * usable),
                         f"{samples_per_gpu:g} images / ({rate:.0f} images/s per vCPU at {image_size} px x "
                         f"{usable:g} vCPUs per GPU)")
    if seq_len is None:
        raise SriftError("token data loading needs the sequence length", "give --seq-len.")
    _check_positive(seq_len, "sequence length")
    t = samples_per_gpu * seq_len * p.token_s_per_token / usable
    return InputTime("tokens", t, t, f"{samples_per_gpu:g} x {seq_len} tokens at {p.token_s_per_token * 1e9:.3g} ns "
                                     f"per token over {usable:g} vCPUs per GPU")


def input_time_s(kind: str, samples_per_gpu: float, vcpus_per_gpu: float, image_size: int = 224,
                 seq_len: int | None = None, measured_data_s: float | None = None,
                 params: InputParams | None = None) -> float:
    """``input_time(...).time_s``: the mean-rate seconds (see :func:`input_time`)."""
    return input_time(kind, samples_per_gpu, vcpus_per_gpu, image_size, seq_len, measured_data_s, params).time_s
