"""`srift recommend --plot`: what is marked is what the search found, and the file is a normal PNG."""

from __future__ import annotations

import os

import pytest

from srift.job import Job
from srift.report.plot import plot_data, plot_recommend
from srift.results import RecommendResult
from srift.search import search
from srift.search.limits import Constraints
from srift.testing import SpeedModel, instance

# GA: 100 samples/s per GPU (1 per node, $1/h), GB: 120 (4 per node, $3.50/h); each node beyond
# the first costs 10 % of the throughput.
CATALOG = [instance("a.small", "GA", 1, 1.0, None), instance("b.quad", "GB", 4, 3.5, None)]


def _result(budget: float) -> RecommendResult:
    c = Constraints(budget_usd_per_hour=budget, max_gpus=8)
    # Every count simulated (the search's bound would leave out counts that cannot win: not what this test is about).
    found = search(CATALOG, SpeedModel({"GA": 100.0, "GB": 120.0}), c, exhaustive=True)
    return RecommendResult(found, c, Job(), "tiny", "fp32", 10, None, "test")


def test_the_plot_marks_the_choice_the_best_one_node_and_the_budget():
    data = plot_data(_result(7.0))
    # Within $7: a.small x 1..7 ($n, 100 n 0.9^(n-1) samples/s), b.quad x 1 ($3.50, 480) and x 2 ($7, 864).
    assert [x for x, _ in data.by_gpu["GA"]] == list(range(1, 8))
    assert [y for _, y in data.by_gpu["GA"]] == pytest.approx([100 * n * 0.9 ** (n - 1) for n in range(1, 8)])
    assert [x for x, _ in data.by_gpu["GB"]] == [3.5, 7.0]
    assert [y for _, y in data.by_gpu["GB"]] == pytest.approx([480.0, 864.0])
    assert data.chosen == ("b.quad:2", pytest.approx((7.0, 864.0)))
    assert data.best_one_node == ("b.quad:1", pytest.approx((3.5, 480.0)))
    assert data.budget_usd_per_hour == 7.0 and data.violating == []
    assert data.frontier[-1] == pytest.approx((7.0, 864.0))  # the choice is on the frontier
    one_node = plot_data(_result(4.0))  # b.quad x 1 wins on one node: no second mark
    assert one_node.chosen == ("b.quad:1", pytest.approx((3.5, 480.0))) and one_node.best_one_node is None


@pytest.mark.slow
def test_the_png_is_written_with_normal_permissions_and_announced(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plots" / "tiny.png"
    assert plot_recommend(_result(7.0), str(path)) == path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    assert capsys.readouterr().err.strip() == f"Wrote plot {path}: 9 configurations, 2 GPU types."
    assert [p.name for p in path.parent.iterdir()] == ["tiny.png"]  # no temporary file left
