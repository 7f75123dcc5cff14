"""Profiling (torch): the script profiler (runner, hooks, assemble, buckets), the structural
analysis of a model (flops), K-FAC's kernel timings (kfac_timing) and the communication
calibration (calibrate). This package's own init is torch-free."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000  # above the well-known and registered services most hosts run


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (Linux; elsewhere the IANA range's start)."""
    try:
        return int(_PORT_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port free on this host now, for a torch.distributed rendezvous that several launchers
    must agree on (torchrun's --master_port).

    Picked at random below the ephemeral range: the port stays unbound until rank 0 listens on it
    (seconds, while the workers start), and a port from the ephemeral range may meanwhile be handed
    by the kernel to any process's outgoing connection or ``bind(0)``; one below it only to a
    process asking for that very number. Where a launch can meet through a file or torchrun's
    ``--standalone`` instead, that has no such window at all.
    """
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randrange(LOWEST_PORT, low) if low > LOWEST_PORT + 1 else 0
        if port and _is_free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room below: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
