"""Profiling (needs torch): the script profiler (runner, hooks, ddp) and structural analysis (flops)."""
