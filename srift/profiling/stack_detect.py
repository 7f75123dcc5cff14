"""Which training stack a profiled script runs: read from the Python frames that call
``optimizer.step()`` (the stack is whatever drives the step: Lightning's training loop, the
Transformers Trainer, accelerate's wrapped optimizer, DeepSpeed's engine, a torchtune recipe...),
and, for the stacks that wrap the model rather than the loop, from the modules the script
imported.

``detect_stack(frame)`` is called once, at the first optimizer step (srift/profiling/session.py);
the profile records its answer (``Profile.stack``) and predictions from the profile are priced
under it (srift/stacks.py). A script none of these drive is plain PyTorch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata
from types import FrameType

from srift.job import (DEEPSPEED, HF_TRAINER, LIGHTNING, MEGATRON_CORE, MEGATRON_DEEPSPEED, NEMO, NEMO_AUTOMODEL,
                       PYTORCH_STACK, TORCHTITAN, TORCHTUNE, Stack)
from srift.stacks import DetectedStack


@dataclass(frozen=True)
class _Sign:
    """Frames of a module under ``prefix`` mean ``stack``; its version is distribution ``dist``'s."""

    stack: Stack
    prefix: str
    dist: str


# Most specific first: NeMo drives Megatron-Core through Lightning, Megatron-DeepSpeed drives
# DeepSpeed, the Trainer drives accelerate.
_SIGNS: tuple[_Sign, ...] = (
    _Sign(NEMO_AUTOMODEL, "nemo.automodel", "nemo_toolkit"),
    _Sign(NEMO_AUTOMODEL, "nemo_automodel", "nemo_automodel"),
    _Sign(NEMO, "nemo", "nemo_toolkit"),
    _Sign(MEGATRON_DEEPSPEED, "megatron.training", "megatron-deepspeed"),
    _Sign(MEGATRON_DEEPSPEED, "megatron.model", "megatron-deepspeed"),
    _Sign(MEGATRON_CORE, "megatron.core", "megatron-core"),
    _Sign(TORCHTITAN, "torchtitan", "torchtitan"),
    _Sign(TORCHTUNE, "torchtune", "torchtune"),
    _Sign(DEEPSPEED, "deepspeed", "deepspeed"),
    _Sign(HF_TRAINER, "transformers.trainer", "transformers"),
    _Sign(HF_TRAINER, "trl", "trl"),
    _Sign(HF_TRAINER, "accelerate", "accelerate"),
    _Sign(LIGHTNING, "lightning", "lightning"),
    _Sign(LIGHTNING, "pytorch_lightning", "pytorch-lightning"),
)
_MAX_FRAMES = 200  # how far up the stack to look


def _modules(frame: FrameType | None) -> list[str]:
    names: list[str] = []
    while frame is not None and len(names) < _MAX_FRAMES:
        names.append(str(frame.f_globals.get("__name__", "")))
        frame = frame.f_back
    return names


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# Import names (not stack names) whose presence together marks Megatron-DeepSpeed.
_MEGATRON_MODULE, _DEEPSPEED_MODULE = "megatron", "deepspeed"


def detect_stack(frame: FrameType | None) -> DetectedStack:
    """The stack whose modules call the optimizer step from ``frame`` (the step's caller) up; a
    Megatron-DeepSpeed script is one that imported both ``megatron`` and ``deepspeed``; none of
    them: plain PyTorch, with torch's version."""
    names = _modules(frame)
    for sign in _SIGNS:
        hit = next((n for n in names if _matches(n, sign.prefix)), None)
        if hit is None:
            continue
        if sign.stack in (DEEPSPEED, MEGATRON_CORE) and _MEGATRON_MODULE in sys.modules and _DEEPSPEED_MODULE in sys.modules:
            # Megatron's model under DeepSpeed's engine
            return DetectedStack(MEGATRON_DEEPSPEED, _version(_DEEPSPEED_MODULE), f"{hit} (megatron and deepspeed imported)")
        return DetectedStack(sign.stack, _version(sign.dist), f"optimizer step called from {hit}")
    return DetectedStack(PYTORCH_STACK, _version("torch"), "no training library around optimizer.step()")
