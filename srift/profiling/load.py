"""Was the machine busy while srift profiled? (issue 41: profiles taken on a busy machine came out
2.6-6.5x slow, and nothing said so.)

Pure Python (the waits come from srift.profiling.clocks.RunQueue).
"""

from __future__ import annotations

import statistics

# A profile whose training thread waited for a core longer than this share of its measured step
# ran under load: the clock leaves the wait out, but not what the other processes did to the
# caches, memory bandwidth and turbo clock (docs/profiling.md).
LOADED_WAIT_SHARE = 0.5


def under_load(run_queue_s: list[float], step_s: float | None) -> str | None:
    """A warning when the measured steps waited for a core more than ``LOADED_WAIT_SHARE`` of their
    time (the mean per step of ``run_queue_s``, against the step ``step_s``), else None."""
    if not run_queue_s or not step_s:
        return None
    wait = statistics.fmean(run_queue_s)
    if wait <= LOADED_WAIT_SHARE * step_s:
        return None
    return (f"the machine was busy: the training thread waited {wait * 1e3:.4g} ms per step for a core, "
            f"{wait / step_s:.1f}x its {step_s * 1e3:.4g} ms step; srift left the wait out, not the other processes' "
            "use of the caches and memory; profile again on a quieter machine (see `uptime`) for times to trust")
