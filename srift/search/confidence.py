"""Uncertainty of a prediction, and limits met at a stated confidence: the ONE place the quantile
math lives (recommend's deadline and maximum cost, check's limits).

A job's hours H are modelled as log-normal around the prediction H50 (its median)::

    ln(H / H50) ~ Normal(0, sigma^2),  sigma^2 = sigma_model^2 + sigma_spread^2 + sigma_spot^2
    H_q = H50 * exp(z_q * sigma),      z_q = Phi^-1(q)   (z_0.9 = 1.2816)

The three sources are taken as independent (variances of logs add); the cost at confidence q is
H_q times the price per hour, which is exact (a budget in $/h needs no confidence).

1. **Model error** (``sigma_model``): the prediction's typical error is a MAPE m, the mean of
   |predicted - measured| / measured over its validation group (srift/perf/accuracy.py). If
   ln(measured / predicted) ~ N(0, s^2), that mean is E|e^(sZ) - 1| = e^(s^2/2) (2 Phi(s) - 1)
   (closed form; about s * sqrt(2/pi) for small s), so ``sigma_model`` is the s at which it equals
   m (``sigma_from_mape``): ±9.5 % -> 0.118, ±18.2 % -> 0.224, ±33.6 % -> 0.399.
2. **Run-to-run spread** (``sigma_spread``): the predictor's p90 iteration time (the
   communication model's p90, whose spread was fitted to repeated cloud runs, and the compute
   spread): ``ln(p90 / p50) / z_0.9``. It overlaps the model error where the validation runs
   already varied, so the sum errs on the safe side.
3. **Spot interruptions** (``sigma_spot``): interruptions over a job of H hours on a cluster
   reclaimed at rate L per hour are Poisson with mean L*H; each costs the restart R plus the work
   since the last checkpoint, uniform on [0, T] (T the checkpoint interval; srift/simulate/spot.py).
   The expected loss is already in H50 (through the useful fraction); its spread, a compound
   Poisson sum with variance L*H*(R^2 + R*T + T^2/3) seconds^2, relative to the job's seconds
   (c = sd / mean), becomes the log-normal of that mean and spread: sigma^2 = ln(1 + c^2), which
   is c for a long job and grows only logarithmically for a job far shorter than the restarts
   (where c alone would overflow the quantile). It shrinks as the job grows (sqrt(L*H) / H).

Every function takes numpy arrays as well as floats, so the search prices thousands of
configurations in one pass.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, TypeVar

import numpy as np

from srift.cache import CACHE_ENTRIES
from srift.job import require_confidence
from srift.perf.quantiles import Z90
from srift.simulate.prediction import Prediction

_NORMAL = NormalDist()

Num = TypeVar("Num", float, np.ndarray)


def z_of(confidence: float) -> float:
    """The standard normal quantile of ``confidence`` (0.9 -> 1.2816; 0.5 -> 0)."""
    return _NORMAL.inv_cdf(require_confidence(confidence))


def label(confidence: float) -> str:
    """The suffix JSON fields carry: ``p90`` for 0.9, ``p97.5`` for 0.975."""
    return f"p{round(confidence * 100, 6):g}"


def mape_from_sigma(sigma: float) -> float:
    """Mean absolute percentage error (as a fraction) of a log-normal error of log-sigma ``sigma``:
    E|e^(sigma Z) - 1| = e^(sigma^2/2) (2 Phi(sigma) - 1)."""
    return math.exp(sigma * sigma / 2.0) * math.erf(sigma / math.sqrt(2.0))  # 2 Phi(s) - 1 = erf(s / sqrt 2)


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def sigma_from_mape(mape_pct: float | None) -> float:
    """The log-normal sigma whose MAPE is ``mape_pct`` percent (0 for None or 0: no figure).

    Raises:
        ValueError: for a negative figure.
    """
    if mape_pct is None or mape_pct == 0:
        return 0.0
    if mape_pct < 0:
        raise ValueError(f"a typical error cannot be negative, got {mape_pct}")
    m = mape_pct / 100.0
    lo, hi = 0.0, 1.0
    while mape_from_sigma(hi) < m:  # MAPE grows without bound with sigma
        hi *= 2.0
    for _ in range(60):  # bisection to float precision
        mid = 0.5 * (lo + hi)
        if mape_from_sigma(mid) < m:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def spread_sigma(p50_s: Num, p90_s: Num) -> Num:
    """Log-sigma of the run-to-run spread from a p50 and a p90 (0 when the p90 is not above the p50)."""
    ratio = np.maximum(np.asarray(p90_s, dtype=float) / np.asarray(p50_s, dtype=float), 1.0)
    out = np.log(ratio) / Z90
    return out if isinstance(p50_s, np.ndarray) or isinstance(p90_s, np.ndarray) else float(out)


def spot_sigma(interruptions_per_hour: Num, job_hours: Num, restart_s: Num, interval_s: Num) -> Num:
    """Relative spread of a job's hours from spot interruptions (module docstring, item 3);
    0 without interruptions."""
    rate = np.asarray(interruptions_per_hour, dtype=float)
    hours = np.maximum(np.asarray(job_hours, dtype=float), 1e-12)
    r, t = np.asarray(restart_s, dtype=float), np.asarray(interval_s, dtype=float)
    var_s2 = rate * hours * (r * r + r * t + t * t / 3.0)
    c = np.sqrt(var_s2) / (hours * 3600.0)
    out = np.sqrt(np.log1p(c * c))  # the log-normal with this relative spread
    arrays = any(isinstance(x, np.ndarray) for x in (interruptions_per_hour, job_hours, restart_s, interval_s))
    return out if arrays else float(out)  # type: ignore[return-value]


def combine(*sigmas: Any) -> Any:
    """Root of the sum of squares: independent log-normal sources."""
    total = sum(np.square(s) for s in sigmas)
    return np.sqrt(total)


def quantile(p50: Num, sigma: Num, confidence: float) -> Num:
    """The value at ``confidence`` of a log-normal with median ``p50`` and log-sigma ``sigma``."""
    out = np.asarray(p50, dtype=float) * np.exp(z_of(confidence) * np.asarray(sigma, dtype=float))
    return out if isinstance(p50, np.ndarray) or isinstance(sigma, np.ndarray) else float(out)


@dataclass(frozen=True)
class Uncertainty:
    """The spread of one prediction's job hours (log-sigmas; see the module docstring).

    Attributes:
        model: From the validation group's typical error.
        spread: From the p90 iteration time (network and compute run-to-run spread).
        spot: From spot interruptions over the job (0 on demand).
    """

    model: float
    spread: float
    spot: float = 0.0

    @property
    def sigma(self) -> float:
        """The combined log-sigma."""
        return float(combine(self.model, self.spread, self.spot))

    def to_dict(self) -> dict[str, float]:
        return {"sigma": self.sigma, "model": self.model, "spread": self.spread, "spot": self.spot}


@dataclass(frozen=True)
class AtConfidence:
    """A job's hours and cost at a confidence, beside the median (what a limit is checked against).

    Attributes:
        confidence: The quantile (0.9).
        hours: Hours at that quantile.
        cost_usd: Cost at that quantile (None when unpriced).
        uncertainty: The sigmas it rests on.
    """

    confidence: float
    hours: float
    cost_usd: float | None
    uncertainty: Uncertainty

    @property
    def label(self) -> str:
        return label(self.confidence)


def uncertainty_of(prediction: Prediction, job_hours: float | None) -> Uncertainty:
    """The three sigmas of one prediction for a job of ``job_hours`` (median; None: no length, so
    no spot part, which depends on how long the job runs)."""
    spot = prediction.spot
    spot_s = (spot_sigma(spot.interruptions_per_hour, job_hours, spot.restart_s, spot.checkpoint_interval_s)
              if spot is not None and spot.interruptions_per_hour > 0 and job_hours is not None else 0.0)
    return Uncertainty(sigma_from_mape(prediction.typical_error_pct),
                       spread_sigma(prediction.iteration_time_s, prediction.p90_iteration_time_s), spot_s)


def at_confidence(hours_p50: float, usd_per_hour: float | None, uncertainty: Uncertainty, confidence: float) -> AtConfidence:
    """Hours and cost at ``confidence`` of a job predicted to take ``hours_p50`` at its median."""
    hours = quantile(hours_p50, uncertainty.sigma, confidence)
    return AtConfidence(confidence, hours, None if usd_per_hour is None else hours * usd_per_hour, uncertainty)
