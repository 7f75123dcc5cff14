"""The normal quantile srift reports spreads at: the p90 (one copy for the comm model, the
simulator's compute spread and the search's confidence)."""

from __future__ import annotations

from statistics import NormalDist

Z90 = NormalDist().inv_cdf(0.9)  # 1.2816: the 90th percentile of a standard normal
