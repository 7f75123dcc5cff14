"""Spot interruptions: the ONE place a monthly interruption band becomes a rate per instance-hour.

AWS's Spot Advisor publishes, per region and instance type, the band of the frequency of
interruption over the last month: ``<5%``, ``5-10%``, ``10-15%``, ``15-20%``, ``>20%`` (the share of
spot instances of that type AWS reclaimed in a month). srift turns a band into expected
interruptions per instance-hour as the band's midpoint / 730 hours (the mean hours in a month):

    <5%  -> 2.5 % / 730     5-10% -> 7.5 % / 730    10-15% -> 12.5 % / 730    15-20% -> 17.5 % / 730
    >20% -> 25 % / 730      (an assumption: the band is open-ended; 25 % keeps its width at 5 points)

Where no Advisor band is known (the bundled catalog: the Advisor file is not in the shared data;
GCP and Azure publish no such figure), the band is a stated conservative default per GPU class
(``default_band``), never read from the price: a discount says what the market charges, not how
often it reclaims. Scarce training GPUs (HBM of at least 1.5 TB/s: A100, H100, H200, B200, GH200)
get the open band ``>20%``, every other GPU ``10-15%``; both sit at or above the bands AWS's Spot
Advisor commonly shows for such types, so an estimate errs towards more interruptions.

A user overrides every spot rate with the environment variable ``SRIFT_SPOT_INTERRUPTIONS_PER_HOUR``
(expected interruptions per instance-hour, e.g. ``0.0005``); ``load_catalog`` applies it.
"""

from __future__ import annotations

import os

from srift.bounds import MAX_INTERRUPTIONS_PER_HOUR, parse_number

HOURS_PER_MONTH = 730.0
# srift has no spot capacity data (AWS's placement scores need credentials and change by the hour):
# above this many spot nodes of one type an answer says the capacity is not guaranteed.
SPOT_CAPACITY_NODES = 4
OVERRIDE_ENV = "SRIFT_SPOT_INTERRUPTIONS_PER_HOUR"

# Band label -> assumed monthly interruption frequency (the band's midpoint; see the module docstring).
BAND_MONTHLY_FREQUENCY = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}

# Conservative default bands when no Advisor band is known (module docstring).
SCARCE_GPU_MIN_BANDWIDTH_GB_PER_S = 1500.0
SCARCE_GPU_BAND = ">20%"
OTHER_GPU_BAND = "10-15%"


def band_rate(band: str) -> float:
    """Expected interruptions per instance-hour of a Spot Advisor band (``"10-15%"`` -> 0.125 / 730).

    Raises:
        ValueError: for a label that is not one of the Advisor's five bands.
    """
    if band not in BAND_MONTHLY_FREQUENCY:
        raise ValueError(f"unknown interruption band {band!r}; expected one of {', '.join(BAND_MONTHLY_FREQUENCY)}")
    return BAND_MONTHLY_FREQUENCY[band] / HOURS_PER_MONTH


def default_band(gpu_name: str) -> tuple[str, float]:
    """The stated conservative band and rate per instance-hour of a GPU without Advisor data:
    ``>20%`` for a scarce training GPU (HBM bandwidth at least 1.5 TB/s), else ``10-15%``. A GPU
    without a spec counts as scarce (the conservative side)."""
    from srift.hardware import gpus

    spec = gpus().get(gpu_name)
    scarce = spec is None or spec.memory_bandwidth_gb_per_s >= SCARCE_GPU_MIN_BANDWIDTH_GB_PER_S
    band = SCARCE_GPU_BAND if scarce else OTHER_GPU_BAND
    return band, band_rate(band)


def capacity_warning(instance_type: str, nodes: int) -> str | None:
    """``Spot capacity for 38 nodes of g4dn.xlarge is not guaranteed ...`` above
    ``SPOT_CAPACITY_NODES`` spot nodes of a type, else None."""
    if nodes <= SPOT_CAPACITY_NODES:
        return None
    return (f"Spot capacity for {nodes} nodes of {instance_type} is not guaranteed (srift has no capacity data and says so "
            f"above {SPOT_CAPACITY_NODES} spot nodes): a request may get fewer nodes or wait; keep an on-demand fallback.")


def rate_override() -> float | None:
    """The user's interruption rate from ``SRIFT_SPOT_INTERRUPTIONS_PER_HOUR``, or None when unset.

    Raises:
        SriftError: when the variable is not a non-negative number.
    """
    text = os.environ.get(OVERRIDE_ENV, "").strip()
    if not text:
        return None
    from srift.errors import SriftError

    fix = f"set {OVERRIDE_ENV} to expected interruptions per instance-hour, e.g. 0.0002 (about 15 % a month), or unset it."
    bad = SriftError(f"{OVERRIDE_ENV}={text[:40]!r} is not a rate from 0 to {MAX_INTERRUPTIONS_PER_HOUR:g} per hour.", fix)
    try:
        rate = float(parse_number(text, OVERRIDE_ENV, hint=fix))  # ASCII digits only (the one parser of typed numbers)
    except SriftError:
        raise bad from None
    if not 0.0 <= rate <= MAX_INTERRUPTIONS_PER_HOUR:  # NaN fails the comparison
        raise bad
    return rate
