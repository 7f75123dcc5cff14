"""Spot interruption bands -> rates per instance-hour, checked by hand."""

import pytest

from srift.catalog.spot import band_for_ratio, band_rate


@pytest.mark.parametrize("band, monthly", [("<5%", 0.025), ("5-10%", 0.075), ("10-15%", 0.125), ("15-20%", 0.175), (">20%", 0.25)])
def test_band_midpoint_over_730_hours(band, monthly):
    assert band_rate(band) == pytest.approx(monthly / 730)


def test_hand_values():
    assert band_rate("10-15%") == pytest.approx(0.000171233, rel=1e-5)  # 12.5 % a month / 730 h
    assert band_rate(">20%") * 730 == pytest.approx(0.25)  # the stated assumption for the open band
    with pytest.raises(ValueError, match="unknown interruption band"):
        band_rate("20-25%")


def test_bands_assumed_from_the_price_ratio():
    assert band_for_ratio(0.12) == ("5-10%", pytest.approx(0.075 / 730))
    assert band_for_ratio(0.39)[0] == "10-15%"
    assert band_for_ratio(0.5)[0] == "15-20%"
    assert band_for_ratio(0.9) == (">20%", pytest.approx(0.25 / 730))
