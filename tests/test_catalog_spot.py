"""Spot interruption bands -> rates per instance-hour, checked by hand."""

import pytest

from srift.catalog import load_catalog
from srift.catalog.spot import band_rate, capacity_warning, default_band


@pytest.mark.parametrize("band, monthly", [("<5%", 0.025), ("5-10%", 0.075), ("10-15%", 0.125), ("15-20%", 0.175), (">20%", 0.25)])
def test_band_midpoint_over_730_hours(band, monthly):
    assert band_rate(band) == pytest.approx(monthly / 730)


def test_hand_values():
    assert band_rate("10-15%") == pytest.approx(0.000171233, rel=1e-5)  # 12.5 % a month / 730 h
    assert band_rate(">20%") * 730 == pytest.approx(0.25)  # the stated assumption for the open band
    with pytest.raises(ValueError, match="unknown interruption band"):
        band_rate("20-25%")


def test_default_bands_by_gpu_class_not_by_price():
    """H100 (3,350 GB/s HBM) is a scarce training GPU: the open band, 25 % a month; T4 (320 GB/s):
    10-15 %, 12.5 % a month."""
    assert default_band("H100") == (">20%", pytest.approx(0.25 / 730))
    assert default_band("A100-40GB")[0] == ">20%"  # 1,555 GB/s
    assert default_band("T4") == ("10-15%", pytest.approx(0.125 / 730))
    assert default_band("no-such-gpu")[0] == ">20%"  # unknown: the conservative side


def test_bundled_interruption_rates_never_fall_as_discounts_grow():
    """Within one GPU class the rate is one figure whatever the discount: a deeper discount never
    means rarer interruptions (the bundled catalog has no Spot Advisor data)."""
    rows = [r for r in load_catalog("aws,gcp,azure") if r.spot_usd_per_hour and r.on_demand_usd_per_hour]
    by_gpu: dict[str, set[float]] = {}
    for r in rows:
        by_gpu.setdefault(r.gpu_name, set()).add(r.spot_interruption_per_hour)
    assert all(len(rates) == 1 for rates in by_gpu.values()), by_gpu
    assert by_gpu["H100"] == {round(0.25 / 730, 10)}


def test_spot_capacity_is_not_promised_above_the_stated_count():
    assert capacity_warning("p5.48xlarge", 4) is None
    line = capacity_warning("p5.48xlarge", 5)
    assert line is not None and line.startswith("Spot capacity for 5 nodes of p5.48xlarge is not guaranteed")
