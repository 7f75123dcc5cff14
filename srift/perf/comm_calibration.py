"""A measured collective-time curve (``srift calibrate comm``, a cluster file's ``comm_calibration``)
as the communication model reads it: interpolated log-log, scaled to another worker count.
Private to srift/perf/comm.py (``CommModel`` reads a calibrated cluster's collectives off it).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from srift.cluster import Calibration, CommCurve
from srift.errors import SriftError
from srift.perf.quantiles import Z90


@dataclass(frozen=True)
class _Calibration:
    """A measured all-reduce curve, interpolated log-log."""

    log_sizes: np.ndarray
    log_p50: np.ndarray
    log_p90: np.ndarray
    scale: float

    @classmethod
    def of(cls, calib: Calibration | None, name: str, workers: int) -> "_Calibration | None":
        """The measured curve of collective ``name`` (``broadcast``, ``all_gather``,
        ``reduce_scatter``), or None when the calibration has none."""
        curve = getattr(calib, name) if calib is not None else None
        if calib is None or curve is None:
            return None
        # A ring all-gather or reduce-scatter moves (n-1)/n of the bytes over each link, so a curve
        # measured on other worker counts scales like the all-reduce's; a pipelined broadcast moves
        # each byte once whatever the count.
        return cls.of_curve(curve, None if name == "broadcast" else calib.world_size, workers)

    @classmethod
    def of_curve(cls, curve: CommCurve, world_size: int | None, workers: int) -> "_Calibration":
        """A curve measured on ``world_size`` workers (None: ``workers``), for ``workers``."""
        sizes = np.asarray(curve.sizes_bytes, dtype=float)
        p50 = np.asarray(curve.times_s, dtype=float)
        p90 = np.asarray(curve.p90_times_s or curve.times_s, dtype=float)
        if sizes.shape != p50.shape or p90.shape != p50.shape or sizes.size < 2 or np.any(sizes <= 0) or np.any(p50 <= 0):
            raise SriftError("comm_calibration sizes and times must be positive lists of equal length (2 or more).",
                             "re-run `srift calibrate comm` to write a valid cluster file.")
        order = np.argsort(sizes)
        # Measured on ``world_size`` workers; the bandwidth term scales with 2(n-1)/n for another n.
        w = int(world_size or workers)
        scale = 1.0
        if w > 1 and workers > 1 and w != workers:
            scale = ((workers - 1) / workers) / ((w - 1) / w)
        return cls(np.log(sizes[order]), np.log(p50[order]), np.log(np.maximum(p90[order], p50[order])), scale)

    def time_s(self, s: np.ndarray, quantile: float) -> np.ndarray:
        x = np.log(np.maximum(s, 1.0))
        hi = self.log_sizes[-1]
        p50 = np.interp(x, self.log_sizes, self.log_p50)
        p90 = np.interp(x, self.log_sizes, self.log_p90)
        # Above the largest measured size, time grows linearly with size (bandwidth-bound);
        # below the smallest, the latency floor holds.
        over = np.maximum(x - hi, 0.0)
        p50 = p50 + over
        p90 = p90 + over
        if quantile == 0.5:
            log_t = p50
        else:
            if not 0.0 < quantile < 1.0:
                raise SriftError(f"quantile must be between 0 and 1, got {quantile}.", "use e.g. 0.5 or 0.9.")
            log_t = p50 + (p90 - p50) * NormalDist().inv_cdf(quantile) / Z90
        return np.exp(log_t) * self.scale
