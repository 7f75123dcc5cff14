"""The communication model's fitted parameters (configs/perf/comm.json, schema ``srift.perf.comm/v1``):
each intra-node link class's latency and efficiency curve (``LinkClass``), each network transport's
(``NetworkClass``), NCCL's socket defaults per platform (``SocketDefaults``), TCP's share of an
Ethernet link (``tcp_goodput_share``), and the document that holds them all (``CommParams``).

srift/perf/comm.py loads them (``load_params``) and re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from srift.bounds import MAX_NETWORK_GBPS, MIN_NETWORK_GBPS, require
from srift.errors import SriftError

PARAMS_SCHEMA = "srift.perf.comm/v1"
# What each fitted link parameter may be (beyond these the efficiency curve underflows or the
# latency dwarfs any real collective).
_CLASS_BOUNDS = {"alpha_s": (0.0, 1.0), "eff_max": (1e-3, 10.0), "s_half_bytes": (0.0, 1e12), "shape": (0.01, 4.0),
                 "p90_ratio": (1.0, 100.0)}
_NETWORK_BOUNDS = {"alpha_s": (0.0, 1.0), "efficiency": (1e-3, 1.0), "t_half_s": (0.0, 10.0), "shape": (0.01, 4.0),
                   "p90_ratio": (1.0, 100.0)}
ALGORITHMS = ("ring", "hierarchical")
SOCKETS = "ethernet"  # the cluster-file network class NCCL runs over TCP sockets


@dataclass(frozen=True)
class LinkClass:
    """Fitted behaviour of one kind of intra-node link.

    Attributes:
        alpha_s: Latency per algorithm step (seconds).
        eff_max: Large-message fraction of the nominal bandwidth reached (bus bandwidth).
        s_half_bytes: Message size where the efficiency is half of ``eff_max`` (shape 1).
        shape: Steepness of the efficiency-vs-size curve.
        p90_ratio: p90 / p50 of the communication time (run-to-run variation).
    """

    alpha_s: float
    eff_max: float
    s_half_bytes: float
    shape: float
    p90_ratio: float

    def efficiency(self, size_bytes: np.ndarray) -> np.ndarray:
        s = np.maximum(size_bytes, 1.0)
        return self.eff_max / (1.0 + (self.s_half_bytes / s) ** self.shape)


@dataclass(frozen=True)
class NetworkClass:
    """How NCCL moves data between nodes over one transport (see the module docstring).

    Attributes:
        alpha_s: Latency of one inter-node step of a collective (seconds).
        efficiency: Share of the link's nominal rate large messages reach (framing and protocol);
            for sockets the TCP share at the generic 1500-byte MTU (the platform's MTU is used).
        t_half_s: Start-up time: a message of ``rate x t_half_s`` bytes gets half the rate.
        shape: Steepness of the efficiency-vs-size curve.
        p90_ratio: p90 / p50 of the communication time (run-to-run and tenant variation).
        algorithm: ``ring`` or ``hierarchical``.
        per_thread_gbps: Sockets only: what one NCCL socket helper thread moves, Gbit/s (None: no
            CPU limit, RDMA).
    """

    alpha_s: float
    efficiency: float
    t_half_s: float
    shape: float
    p90_ratio: float
    algorithm: str = "ring"
    per_thread_gbps: float | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise SriftError(f"unknown collective algorithm '{self.algorithm}' in the communication parameters.",
                             f"use one of {', '.join(ALGORITHMS)}; re-run scripts/fit_models.py.")
        if not (0.0 < self.efficiency <= 1.0 and self.t_half_s >= 0.0 and self.shape > 0 and self.alpha_s >= 0
                and self.p90_ratio >= 1.0 and (self.per_thread_gbps is None or self.per_thread_gbps > 0)):
            raise SriftError("a network class of the communication parameters is out of range.", "re-run scripts/fit_models.py.")

    def efficiency_at(self, size_bytes: np.ndarray, rate_bytes_per_s: float) -> np.ndarray:
        """Share of ``rate_bytes_per_s`` messages of ``size_bytes`` reach (the start-up curve)."""
        s = np.maximum(size_bytes, 1.0)
        return 1.0 / (1.0 + (rate_bytes_per_s * self.t_half_s / s) ** self.shape)


# TCP/IPv4 with timestamps carries MTU - 52 bytes of payload per frame; Ethernet adds 38 bytes on
# the wire around each IP packet (preamble + start delimiter 8, header 14, FCS 4, inter-frame gap 12).
TCP_IP_HEADER_BYTES = 52
ETHERNET_FRAMING_BYTES = 38


def tcp_goodput_share(mtu_bytes: int) -> float:
    """Share of an Ethernet link's line rate TCP payload gets at this MTU (1500 -> 0.941, 9001 -> 0.990)."""
    return (mtu_bytes - TCP_IP_HEADER_BYTES) / (mtu_bytes + ETHERNET_FRAMING_BYTES)


@dataclass(frozen=True)
class SocketDefaults:
    """NCCL's socket-transport defaults on one platform (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD)
    and the MTU TCP runs at there."""

    threads: int
    sockets_per_thread: int
    mtu_bytes: int = 1500


@dataclass(frozen=True)
class CommParams:
    """Per-class link and network parameters (configs/perf/comm.json).

    Attributes:
        classes: Fitted behaviour per intra-node link class.
        meta: Provenance, carried but unused by the model.
        overlap_interference: Seconds added to a GPU iteration per second of all-reduce that runs
            behind backward: NCCL kernels share the SMs and memory bandwidth with the backward
            kernels, so hiding communication is not free. Fitted to measured DDP scaling
            (scripts/fit_models.py); 0 is the ideal-overlap model.
        networks: Behaviour per network transport class (``ethernet``, ``efa``, ``infiniband``, ``roce``).
        socket_defaults: NCCL's socket defaults by platform (``generic``, ``aws``, ``gcp``).
    """

    classes: dict[str, LinkClass]
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    overlap_interference: float = 0.0
    networks: dict[str, NetworkClass] = field(default_factory=dict)
    socket_defaults: dict[str, SocketDefaults] = field(default_factory=lambda: {"generic": SocketDefaults(1, 1)})

    def get(self, name: str) -> LinkClass:
        if name not in self.classes:
            raise SriftError(f"the communication model has no parameters for '{name}'.", "re-run scripts/fit_models.py.")
        return self.classes[name]

    def network(self, name: str) -> NetworkClass:
        if name not in self.networks:
            raise SriftError(f"the communication model has no parameters for the '{name}' network.", "re-run scripts/fit_models.py.")
        return self.networks[name]

    def sockets_on(self, cloud: str | None) -> tuple[SocketDefaults, str]:
        """NCCL's socket defaults where the nodes run, and which platform's they are."""
        key = cloud if cloud in self.socket_defaults else "generic"
        return self.socket_defaults[key], key

    def to_dict(self) -> dict[str, Any]:
        return {"schema": PARAMS_SCHEMA, "classes": {k: vars(v) for k, v in self.classes.items()},
                "networks": {k: vars(v) for k, v in self.networks.items()},
                "nccl_socket_defaults": {k: vars(v) for k, v in self.socket_defaults.items()},
                "overlap_interference": self.overlap_interference, **self.meta}

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "comm params") -> "CommParams":
        """Read a ``srift.perf.comm/v1`` document, every parameter within _CLASS_BOUNDS, _NETWORK_BOUNDS.

        Raises:
            SriftError: for another document, a missing class field, or a value out of its range.
        """
        hint = "re-run scripts/fit_models.py, or reinstall srift-planner."
        if not isinstance(d, dict) or d.get("schema") != PARAMS_SCHEMA:
            raise SriftError(f"{source} is not a '{PARAMS_SCHEMA}' file.", hint)

        def mapping(value: Any, where: str) -> dict[str, Any]:
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items()):
                raise SriftError(f"{source}: '{where}' must map names to mappings of parameters.", hint)
            return value

        def numbers(v: dict[str, Any], where: str, bounds: dict[str, tuple[float, float]]) -> dict[str, float]:
            return {f: float(require(v.get(f), f"{source}: {where}.{f}", lo, hi, hint=hint)) for f, (lo, hi) in bounds.items()}

        raw = d.get("classes")
        if not raw:
            raise SriftError(f"{source} has no 'classes' of link parameters.", hint)
        classes = {k: LinkClass(**numbers(v, f"classes.{k}", _CLASS_BOUNDS)) for k, v in mapping(raw, "classes").items()}
        networks = {}
        for k, v in mapping(d.get("networks", {}), "networks").items():
            per_thread = v.get("per_thread_gbps")
            if per_thread is not None:
                require(per_thread, f"{source}: networks.{k}.per_thread_gbps", MIN_NETWORK_GBPS, MAX_NETWORK_GBPS, hint=hint)
            networks[k] = NetworkClass(**numbers(v, f"networks.{k}", _NETWORK_BOUNDS), algorithm=str(v.get("algorithm", "ring")),
                                       per_thread_gbps=None if per_thread is None else float(per_thread))
        sockets = {}
        for k, v in mapping(d.get("nccl_socket_defaults", {"generic": {"threads": 1, "sockets_per_thread": 1}}),
                            "nccl_socket_defaults").items():
            where = f"{source}: nccl_socket_defaults.{k}"
            sockets[k] = SocketDefaults(require(v.get("threads"), f"{where}.threads", 1, 16, integer=True, hint=hint),
                                        require(v.get("sockets_per_thread"), f"{where}.sockets_per_thread", 1, 64, integer=True,
                                                hint=hint),
                                        require(v.get("mtu_bytes", 1500), f"{where}.mtu_bytes", 576, 65536, integer=True, hint=hint))
        if "generic" not in sockets:
            raise SriftError(f"{source}: nccl_socket_defaults has no 'generic' entry.", hint)
        interference = float(require(d.get("overlap_interference", 0.0), f"{source}: overlap_interference", 0.0, 10.0, hint=hint))
        known = ("schema", "classes", "networks", "nccl_socket_defaults", "overlap_interference")
        return cls(classes, {k2: v for k2, v in d.items() if k2 not in known}, interference, networks, sockets)
