"""Spot interruptions: the ONE place a monthly interruption band becomes a rate per instance-hour.

AWS's Spot Advisor publishes, per region and instance type, the band of the frequency of
interruption over the last month: ``<5%``, ``5-10%``, ``10-15%``, ``15-20%``, ``>20%`` (the share of
spot instances of that type AWS reclaimed in a month). srift turns a band into expected
interruptions per instance-hour as the band's midpoint / 730 hours (the mean hours in a month):

    <5%  -> 2.5 % / 730     5-10% -> 7.5 % / 730    10-15% -> 12.5 % / 730    15-20% -> 17.5 % / 730
    >20% -> 25 % / 730      (an assumption: the band is open-ended; 25 % keeps its width at 5 points)

Where no Advisor band is known (the bundled catalog: the Advisor file is not in the shared data;
GCP and Azure publish no such figure), the band is assumed from the spot/on-demand price ratio
(``band_for_ratio``): scarce capacity is both dearer on spot and reclaimed more often.

A user overrides every spot rate with the environment variable ``SRIFT_SPOT_INTERRUPTIONS_PER_HOUR``
(expected interruptions per instance-hour, e.g. ``0.0005``); ``load_catalog`` applies it.
"""

from __future__ import annotations

import os

from srift.bounds import MAX_INTERRUPTIONS_PER_HOUR

HOURS_PER_MONTH = 730.0
OVERRIDE_ENV = "SRIFT_SPOT_INTERRUPTIONS_PER_HOUR"

# Band label -> assumed monthly interruption frequency (the band's midpoint; see the module docstring).
BAND_MONTHLY_FREQUENCY = {"<5%": 0.025, "5-10%": 0.075, "10-15%": 0.125, "15-20%": 0.175, ">20%": 0.25}

# Spot/on-demand ratio upper bounds -> band, when no Advisor band is known (an assumption).
_RATIO_BANDS = ((0.25, "5-10%"), (0.40, "10-15%"), (0.55, "15-20%"), (float("inf"), ">20%"))


def band_rate(band: str) -> float:
    """Expected interruptions per instance-hour of a Spot Advisor band (``"10-15%"`` -> 0.125 / 730).

    Raises:
        ValueError: for a label that is not one of the Advisor's five bands.
    """
    if band not in BAND_MONTHLY_FREQUENCY:
        raise ValueError(f"unknown interruption band {band!r}; expected one of {', '.join(BAND_MONTHLY_FREQUENCY)}")
    return BAND_MONTHLY_FREQUENCY[band] / HOURS_PER_MONTH


def band_for_ratio(spot_to_on_demand: float) -> tuple[str, float]:
    """Assumed band and rate per instance-hour for a spot/on-demand price ratio (no Advisor data)."""
    for upper, band in _RATIO_BANDS:
        if spot_to_on_demand < upper:
            return band, band_rate(band)
    raise AssertionError("unreachable")


def rate_override() -> float | None:
    """The user's interruption rate from ``SRIFT_SPOT_INTERRUPTIONS_PER_HOUR``, or None when unset.

    Raises:
        SriftError: when the variable is not a non-negative number.
    """
    text = os.environ.get(OVERRIDE_ENV, "").strip()
    if not text:
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= MAX_INTERRUPTIONS_PER_HOUR:  # NaN fails the comparison
        from srift.errors import SriftError

        raise SriftError(f"{OVERRIDE_ENV}={text[:40]!r} is not a rate from 0 to {MAX_INTERRUPTIONS_PER_HOUR:g} per hour.",
                         f"set {OVERRIDE_ENV} to expected interruptions per instance-hour, e.g. 0.0002 (about 15 % a month), or unset it.")
    return rate
