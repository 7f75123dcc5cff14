"""`srift profile` and `srift calibrate comm`: what was written, in a line or a small table."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from srift.log import LOGGER
from srift.profile import Profile

if TYPE_CHECKING:  # the runner imports torch; only its result type is needed here
    from srift.profiling.runner import ProfileResult


def show_model_profile(prof: Profile, path: Path) -> None:
    """A structural profile of a zoo model was written."""
    print(f"Wrote {path}: {prof.name}, {len(prof.layers)} layers, {prof.params:,} parameters, "
          f"{(prof.fwd_flops + prof.bwd_flops) / 1e9:.1f} GFLOP per iteration at batch {prof.batch_size}.")


def show_script_profile(result: "ProfileResult") -> None:
    """The profiler's warnings (stderr), and what it measured (rank 0 only)."""
    for w in result.warnings:
        LOGGER.warning(f"Warning: {w}")
    prof = result.profile
    if prof is None:  # a DDP rank other than 0: rank 0 writes
        return
    ph = prof.phases
    ms = {k: 1e3 * (getattr(ph, k) or 0.0) for k in ("total_s", "data_s", "forward_s", "backward_s", "optimizer_s")}
    print(f"Wrote {result.path}: {prof.name}, {len(prof.layers)} layers, batch {prof.batch_size}, {prof.precision}, "
          f"{prof.iterations} iterations, {ms['total_s']:.1f} ms/iteration "
          f"(data {ms['data_s']:.1f}, forward {ms['forward_s']:.1f}, backward {ms['backward_s']:.1f}, "
          f"optimizer {ms['optimizer_s']:.1f} ms).")


def show_calibration(doc: dict[str, Any] | None, output: str) -> None:
    """The measured all-reduce curve (with the all-gather and reduce-scatter times when measured)
    and the cluster file written (nothing on torchrun ranks other than 0)."""
    if doc is None:
        return
    c = doc["comm_calibration"]
    ag, rs = c.get("all_gather_times_s"), c.get("reduce_scatter_times_s")
    if ag and rs:
        print(f"  {'size':>14s}  {'all-reduce':>22s}  {'all-gather':>10s}  {'reduce-scatter':>14s}")
    for i, (s, t) in enumerate(zip(c["sizes_bytes"], c["times_s"])):
        more = f"  {ag[i] * 1e3:7.3f} ms  {rs[i] * 1e3:11.3f} ms" if ag and rs else ""
        print(f"  {s:>12,d} B  {t * 1e3:9.3f} ms  {s / t / 1e9:7.3f} GB/s{more}")
    print(f"Wrote {output}: use it with `srift predict --cluster {output}`.")
