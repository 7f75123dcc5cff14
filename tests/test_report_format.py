"""Small renderers every command shares."""

from __future__ import annotations

from srift.report.format import signed_pct


def test_a_relative_change_never_reads_minus_zero():
    # 3,451 against 3,457 samples/s: -0.17 %, which whole percents would print as "-0%"
    assert signed_pct(3451 / 3457 - 1) == "-0.2%"
    assert signed_pct(19.99 / 17.02 - 1) == "+17%"
    assert signed_pct(0.0) == "0%"
    assert signed_pct(0.004) == "+0.4%"
    assert signed_pct(-0.17) == "-17%"
