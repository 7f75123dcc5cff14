"""Profiling (torch): the script profiler (runner, hooks, assemble, buckets), the structural
analysis of a model (flops), K-FAC's kernel timings (kfac_timing) and the communication
calibration (calibrate). This package's own init is torch-free."""

from __future__ import annotations
