"""Profiling (torch): the script profiler (runner, hooks, assemble, buckets), the structural
analysis of a model (flops), K-FAC's kernel timings (kfac_timing) and the communication
calibration (calibrate). This package's own init is torch-free."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on this host now (for a local torch.distributed rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
