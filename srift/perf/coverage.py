"""What the validation measured, and how a typical error widens outside it.

Each validation group states the range its measurements covered (configs/perf/coverage.yaml:
model size, GPU count, GPU types, framework). A prediction outside a numeric range keeps its
group's figure widened by sqrt(value / largest validated) per range exceeded (sqrt(smallest /
value) below it), the rule the multi-node group already applies to node counts
(srift/perf/accuracy.py), and says what it is beyond: ``beyond validated: 405B > 70B``. A GPU
outside the validated ones is named, not widened: the figures are leave-one-GPU-out, so an unseen
GPU is exactly what they measure.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from srift.files import configs_dir, read_yaml


@functools.lru_cache(maxsize=1)
def coverage_config() -> dict[str, Any]:
    """configs/perf/coverage.yaml (empty groups when the file is missing)."""
    path = configs_dir() / "perf" / "coverage.yaml"
    if not path.is_file():
        return {"groups": {}}
    return dict(read_yaml(path, "validation coverage file"))


def size_text(params: float) -> str:
    """``405B``, ``70B``, ``124M``: a parameter count as people write it."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if params >= scale:
            value = params / scale
            return f"{value:.0f}{unit}" if value >= 10 or value == round(value) else f"{value:.1f}{unit}"
    return f"{params:,.0f}"


@dataclass(frozen=True)
class Coverage:
    """Where a prediction falls against its group's validated ranges.

    Attributes:
        factor: What its typical error is multiplied by (1 inside every range).
        beyond: What it is beyond, one phrase each (``405B > 70B``, ``1,480 GPUs > 512``).
    """

    factor: float = 1.0
    beyond: tuple[str, ...] = ()

    def basis(self) -> str:
        """``; widened x2.41 beyond the validated ranges (...)`` or "" (``beyond`` says which)."""
        if self.factor == 1.0:
            return ""
        return (f"; widened x{self.factor:.2f} beyond the validated ranges (sqrt of each ratio to the validated limit, "
                "srift/perf/coverage.py)")


def _range(value: float, bounds: list[float], name: str, text: Any) -> tuple[float, str | None]:
    low, high = float(bounds[0]), float(bounds[1])
    if value > high:
        return math.sqrt(value / high), f"{text(value)}{name} > {text(high)}"
    if value < low:
        return math.sqrt(low / value), f"{text(value)}{name} < {text(low)}"
    return 1.0, None


def sharded_coverage(params: float, gpus: int, gpu_names: Iterable[str]) -> Coverage:
    """A sharded prediction against the sharded group's model sizes, GPU counts and GPU types."""
    g = coverage_config().get("groups", {}).get("sharded")
    if not g:
        return Coverage()
    factor, beyond = 1.0, []
    for value, key, name, text in ((params, "params", "", size_text), (gpus, "gpus", " GPUs", lambda v: f"{v:,.0f}")):
        f, said = _range(float(value), g[key], name, text)
        factor *= f
        if said:
            beyond.append(said)
    others = sorted(set(gpu_names) - set(g.get("gpu_types", [])))
    if others:
        beyond.append(f"{', '.join(others)} not among {', '.join(g['gpu_types'])}")
    return Coverage(factor, tuple(beyond))
