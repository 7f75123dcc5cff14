"""GPU specifications and intra-node links, read from configs/gpus.yaml."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from srift.errors import unknown_name_error
from srift.files import configs_dir, read_yaml
from srift.job import AMP, BF16, FP32, FP32_STRICT, TF32, require_precision

CPU = "cpu"  # the pseudo-GPU of a cluster of CPU processes (gloo on one host)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet figures (dense peak rates; see configs/gpus.yaml)."""

    name: str
    architecture: str
    fp32_tflops: float
    tf32_tflops: float
    fp16_tflops: float
    bf16_tflops: float | None
    memory_gib: float
    memory_bandwidth_gb_per_s: float
    sm_count: int
    boost_clock_mhz: float
    aliases: tuple[str, ...] = ()
    source: str = ""
    pcie_p2p: bool = True  # GeForce: no PCIe peer-to-peer; NCCL stages through host memory
    compute_capability: str | None = None  # CUDA "major.minor"; None for a non-CUDA GPU
    board_power_w: float | None = None  # the board's power limit, where the datasheet gives it
    sustained_clock_mhz: float = 0.0  # the clock under a dense training load (``sustained_clock_mhz``)
    fp8_tflops: float | None = None  # dense FP8 tensor-core peak (Hopper and newer); None without FP8 units
    fp4_tflops: float | None = None  # dense NVFP4 tensor-core peak (Blackwell); None without FP4 units

    @property
    def clock_derate(self) -> float:
        """How much longer compute-bound work takes than at the boost clock the peak rates assume
        (boost / sustained clock, >= 1)."""
        return self.boost_clock_mhz / self.sustained_clock_mhz if self.sustained_clock_mhz else 1.0

    def peak_flops(self, precision: str) -> float:
        """Peak dense FLOP/s of a math mode: fp32 / fp32-strict (CUDA cores), tf32, amp (fp16/bf16
        tensor cores, whichever is faster) or bf16 (the bf16 rate; a GPU without bf16 units, e.g.
        V100 or T4, runs bf16 at its fp32 rate: PyTorch emulates it there without tensor cores).
        ``fp32`` here is the FP32 units' rate; which layers of an ``fp32`` job run in TF32 is the
        compute model's business (srift/perf/compute.py)."""
        if precision in (FP32, FP32_STRICT):
            return self.fp32_tflops * 1e12
        if precision == TF32:
            return self.tf32_tflops * 1e12
        if precision == AMP:
            return max(self.fp16_tflops, self.bf16_tflops or 0.0) * 1e12
        if precision == BF16:
            return (self.bf16_tflops if self.bf16_tflops is not None else self.fp32_tflops) * 1e12
        require_precision(precision)  # raises for a name outside the vocabulary
        raise AssertionError(f"no peak rate for precision '{precision}'")

    @property
    def has_bf16(self) -> bool:
        """True when the GPU has bf16 tensor cores (Ampere and newer); V100 and T4 have none."""
        return self.bf16_tflops is not None

    @property
    def has_tf32(self) -> bool:
        """True when the GPU has TF32 tensor cores (Ampere and newer): its TF32 rate exceeds FP32."""
        return self.tf32_tflops > self.fp32_tflops * 1.01

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_per_s * 1e9


@dataclass(frozen=True)
class Link:
    """An intra-node interconnect: per-GPU unidirectional bandwidth usable by a ring."""

    name: str
    bandwidth_gb_per_s: float
    source: str = ""


@functools.lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    data: dict[str, Any] = read_yaml(configs_dir() / "gpus.yaml", "GPU specifications")
    return data


# Dynamic power per SM grows with the clock cubed (P ~ f V^2, V ~ f in the DVFS range).
POWER_CLOCK_EXPONENT = 3.0


def sustained_clock_mhz(boost_clock_mhz: float, sm_count: int, board_power_w: float | None,
                        reference: tuple[float, int, float] | None) -> float:
    """The clock a GPU holds under a dense training load at its board power limit.

    ``min(boost, f_ref x ((P / SMs) / (P_ref / SMs_ref)) ** (1/3))`` with ``reference`` = (boost
    clock MHz, SMs, board power W) of a card of the same architecture that holds its boost clock
    at its limit (configs/gpus.yaml ``power_references``). Without a board power or a reference:
    the boost clock. E.g. a T4 (70 W, 40 SMs) against a TITAN RTX (1770 MHz, 72 SMs, 280 W):
    1770 x (1.75 / 3.889) ** (1/3) = 1356 MHz, against its 1590 MHz boost.
    """
    if board_power_w is None or reference is None:
        return boost_clock_mhz
    f_ref, sm_ref, p_ref = reference
    scale = ((board_power_w / sm_count) / (p_ref / sm_ref)) ** (1.0 / POWER_CLOCK_EXPONENT)
    return min(boost_clock_mhz, f_ref * scale)


@functools.lru_cache(maxsize=1)
def gpus() -> dict[str, GpuSpec]:
    """All GPU specs by canonical name."""
    raw = _raw()["gpus"]
    references = {}
    for arch, ref in (_raw().get("power_references") or {}).items():
        r = raw[ref]
        references[arch] = (float(r["boost_clock_mhz"]), int(r["sm_count"]), float(r["board_power_w"]))
    out = {}
    for name, d in raw.items():
        power = None if d.get("board_power_w") is None else float(d["board_power_w"])
        out[name] = GpuSpec(
            name=name,
            architecture=d["architecture"],
            fp32_tflops=float(d["fp32_tflops"]),
            tf32_tflops=float(d["tf32_tflops"]),
            fp16_tflops=float(d["fp16_tflops"]),
            bf16_tflops=None if d.get("bf16_tflops") is None else float(d["bf16_tflops"]),
            memory_gib=float(d["memory_gib"]),
            memory_bandwidth_gb_per_s=float(d["memory_bandwidth_gb_per_s"]),
            sm_count=int(d["sm_count"]),
            boost_clock_mhz=float(d["boost_clock_mhz"]),
            aliases=tuple(d.get("aliases") or ()),
            source=d.get("source", ""),
            pcie_p2p=bool(d.get("pcie_p2p", True)),
            compute_capability=None if d.get("compute_capability") is None else str(d["compute_capability"]),
            board_power_w=power,
            fp8_tflops=None if d.get("fp8_tflops") is None else float(d["fp8_tflops"]),
            fp4_tflops=None if d.get("fp4_tflops") is None else float(d["fp4_tflops"]),
            sustained_clock_mhz=sustained_clock_mhz(float(d["boost_clock_mhz"]), int(d["sm_count"]), power,
                                                    references.get(d["architecture"])),
        )
    return out


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


@functools.lru_cache(maxsize=1)
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for name, spec in gpus().items():
        for alias in (name, *spec.aliases):
            index.setdefault(_norm(alias), name)
    return index


def find_gpu(name: str) -> str | None:
    """Canonical GPU name for a name, alias or device string (``Tesla V100-SXM2-16GB``), else None."""
    return _alias_index().get(_norm(name))


def gpu(name: str) -> GpuSpec:
    """Look up a GPU by canonical name or alias.

    Raises:
        SriftError: for an unknown GPU, with the closest names.
    """
    key = find_gpu(name)
    if key is None:
        raise unknown_name_error("GPU", name, list(gpus()), "srift catalog list")
    return gpus()[key]


def matching_gpus(query: str) -> set[str]:
    """Canonical names a user's GPU filter means: ``A100`` -> both A100 sizes; an alias -> its GPU.

    Raises:
        SriftError: when nothing matches, with the closest names.
    """
    q = _norm(query)
    hits = {name for name in gpus() if _prefix_of(q, name)}
    return hits or {gpu(query).name}


def _prefix_of(q: str, name: str) -> bool:
    """Whether normalized ``q`` starts ``name`` and ends where a number of it ends (``H20`` is not
    the start of ``H200``; ``A100`` is of ``A100-40GB``)."""
    if not _norm(name).startswith(q) or not q:
        return False
    seen = 0
    for i, ch in enumerate(name):
        if ch.isalnum():
            seen += 1
        if seen == len(q):
            rest = name[i + 1:i + 2]
            return not (ch.isdigit() and rest.isdigit())
    return True


@functools.lru_cache(maxsize=1)
def links() -> dict[str, Link]:
    """Intra-node links by name (pcie3, pcie4, pcie5, nvlink, nvswitch, ...): the vocabulary of
    intra-node links, defined once in configs/gpus.yaml."""
    return {n: Link(n, float(d["bandwidth_gb_per_s"]), d.get("source", "")) for n, d in _raw()["links"].items()}


def link(name: str) -> Link:
    """Look up an intra-node link by name, with a clear error for an unknown one."""
    table = links()
    if name not in table:
        raise unknown_name_error("intra-node link", name, list(table), "configs/gpus.yaml")
    return table[name]


def pytorch_cuda_wheels() -> dict[str, Any]:
    """The ``pytorch_cuda_wheels`` block of configs/gpus.yaml: torch version and CUDA arch list per host."""
    return dict(_raw()["pytorch_cuda_wheels"])
