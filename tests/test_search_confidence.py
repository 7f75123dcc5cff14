"""Limits met at a stated confidence: the quantile math of srift/search/confidence.py by hand, the
search's deadline and `srift check`'s limits at the 90 % quantile."""

import math

import numpy as np
import pytest

from srift.job import JobLength, JobRun
from srift.jobfile import JobLimits
from srift.search import confidence as conf
from srift.search import search
from srift.search.limits import Constraints, check_limits
from srift.testing import SpeedModel, instance


def test_mape_and_sigma_by_hand():
    # Small errors: E|e^(sZ) - 1| ~ s sqrt(2/pi), so a 1 % MAPE is s = 0.01 / 0.7979 = 0.012533.
    assert conf.sigma_from_mape(1.0) == pytest.approx(0.01 * math.sqrt(math.pi / 2), rel=1e-3)
    # s = 0.4: e^(0.08) (2 Phi(0.4) - 1) = 1.083287 x 0.310843 = 0.336732.
    assert conf.mape_from_sigma(0.4) == pytest.approx(1.083287 * 0.310843, rel=1e-5)
    assert conf.sigma_from_mape(33.6732) == pytest.approx(0.4, abs=1e-5)
    # The closed form against a direct average over the normal (midpoint rule on [-8, 8]).
    z = np.linspace(-8, 8, 200_001)
    pdf = np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    assert float(np.sum(np.abs(np.exp(0.25 * z) - 1) * pdf) * (z[1] - z[0])) == pytest.approx(conf.mape_from_sigma(0.25), rel=1e-6)
    assert conf.sigma_from_mape(None) == 0.0 and conf.sigma_from_mape(0.0) == 0.0


def test_quantiles_by_hand():
    assert conf.z_of(0.9) == pytest.approx(1.281552, abs=1e-6) and conf.z_of(0.5) == 0.0
    assert conf.quantile(10.0, 0.2, 0.9) == pytest.approx(10.0 * math.exp(0.2 * 1.281552), rel=1e-6)  # 12.92 h
    assert conf.quantile(10.0, 0.2, 0.5) == 10.0
    assert conf.spread_sigma(0.100, 0.120) == pytest.approx(math.log(1.2) / 1.281552, rel=1e-6)
    assert conf.spread_sigma(0.1, 0.09) == 0.0
    # Spot: 0.1 interruptions/h over 100 h, restart 147 s, checkpoint interval 1,000 s: the time lost has
    # variance 0.1 x 100 x (147² + 147 x 1000 + 1000²/3) = 5,019,423 s², a standard deviation of 2,240 s,
    # 0.62 % of the 360,000 s job.
    c = math.sqrt(5_019_423.3) / 360_000  # sd over the job's seconds
    assert conf.spot_sigma(0.1, 100.0, 147.0, 1000.0) == pytest.approx(math.sqrt(math.log1p(c * c)), rel=1e-6)
    assert conf.spot_sigma(0.1, 100.0, 147.0, 1000.0) == pytest.approx(c, rel=1e-4)  # ~c for a long job
    # A job far shorter than one restart: the spread grows only logarithmically, the quantile stays finite.
    # (hours are floored at 1e-12: c = sqrt(0.1e-12 x 501,942) / 3.6e-9 = 62,233; sqrt(ln(1 + c^2)) = 4.70)
    tiny = conf.spot_sigma(0.1, 1e-300, 147.0, 1000.0)
    assert tiny == pytest.approx(4.699, abs=1e-3) and math.isfinite(conf.quantile(1e-300, tiny, 0.9))
    assert conf.spot_sigma(0.0, 100.0, 147.0, 1000.0) == 0.0
    assert conf.combine(0.3, 0.4) == pytest.approx(0.5)
    assert conf.label(0.9) == "p90" and conf.label(0.975) == "p97.5"


SIGMA = 0.2
ERR = 100 * conf.mape_from_sigma(SIGMA)  # a typical error of 16.17 % is a log-normal sigma of 0.2


def test_a_deadline_is_met_at_the_confidence_not_at_the_median():
    # 360,000 samples on a.small x 1 (100 samples/s): 1.0 h at the median, 1.0 x e^(0.2 x 1.2816) = 1.292 h at
    # the 90 % quantile. A 1.2 h deadline is met at the median only, so at 90 % the search takes two nodes:
    # 180 samples/s, 0.556 h (p90 0.718 h) for $1.11 instead of $1.00.
    model = SpeedModel({"GA": 100.0}, typical_error_pct={"gpu": ERR, "nodes": ERR})
    catalog = [instance("a.small", "GA", 1, 1.0, None)]
    length = JobLength(samples=360_000)
    at_median = search(catalog, model, Constraints(diverse=False, deadline_hours=1.2, max_gpus=8, confidence=0.5), length)
    assert at_median.recommendations[0].instance == "a.small:1"
    r = search(catalog, model, Constraints(diverse=False, deadline_hours=1.2, max_gpus=8), length)
    top = r.recommendations[0]
    assert top.instance == "a.small:2" and r.confidence == 0.9
    assert top.job_hours == pytest.approx(1 / 1.8)
    assert top.at_confidence.hours == pytest.approx(math.exp(SIGMA * conf.z_of(0.9)) / 1.8)
    assert top.at_confidence.cost_usd == pytest.approx(2 * math.exp(SIGMA * conf.z_of(0.9)) / 1.8)
    assert top.at_confidence.uncertainty.model == pytest.approx(SIGMA)
    # The same quantile makes a maximum cost: n nodes cost $1 / 0.9^(n-1) at the median, so $1.20 admits one
    # or two at the median; at 90 % even one costs $1.29 and nothing is left.
    limit = Constraints(diverse=False, max_cost_usd=1.2, max_gpus=8, objective="throughput", confidence=0.5)
    assert [c.instance for c in search(catalog, model, limit, length).recommendations] == ["a.small:2", "a.small:1"]
    r = search(catalog, model, Constraints(diverse=False, max_cost_usd=1.2, max_gpus=8, objective="throughput"), length)
    assert not r.recommendations and r.cut_by == "max-cost" and r.closest.instance == "a.small:1"
    assert r.closest.at_confidence.cost_usd == pytest.approx(math.exp(SIGMA * conf.z_of(0.9)))


def test_spot_interruptions_widen_the_quantile():
    # b.quad x 1 on spot at 0.1 interruptions/h: the job's spot sigma joins the model's.
    model = SpeedModel({"GB": 100.0}, typical_error_pct={"node": ERR})
    catalog = [instance("b.quad", "GB", 4, 3.0, 1.0, interruption_per_hour=0.1)]
    r = search(catalog, model, Constraints(diverse=False, max_gpus=4, spot=True, top=5), JobLength(samples=14_400_000))
    spot = next(c for c in r.recommendations if c.spot)
    on_demand = next(c for c in r.recommendations if not c.spot)
    s = spot.prediction.spot
    expected = conf.spot_sigma(0.1, spot.job_hours, s.restart_s, s.checkpoint_interval_s)
    assert spot.at_confidence.uncertainty.spot == pytest.approx(expected) and expected > 0
    assert spot.at_confidence.uncertainty.sigma == pytest.approx(math.hypot(SIGMA, expected))
    assert on_demand.at_confidence.uncertainty.spot == 0.0


def test_check_limits_use_the_quantile_for_hours_and_cost_and_the_price_exactly():
    run = JobRun(steps=1000.0, hours=10.0, cost_usd=200.0)
    at = conf.at_confidence(10.0, 20.0, conf.Uncertainty(model=SIGMA, spread=0.0), 0.9)
    q = math.exp(SIGMA * conf.z_of(0.9))  # 1.292
    rows = {r.limit: r for r in check_limits(JobLimits(max_hours=12.0, max_cost_usd=300.0, max_usd_per_hour=20.0), run, at, 20.0, True)}
    # 10 h passes a 12 h limit at the median but not at 90 % (12.92 h).
    assert rows["max_hours"].predicted == pytest.approx(10 * q) and rows["max_hours"].predicted_p50 == 10.0
    assert not rows["max_hours"].passed and rows["max_hours"].confidence == 0.9
    assert rows["max_cost_usd"].predicted == pytest.approx(200 * q) and rows["max_cost_usd"].passed  # $258 <= $300
    assert rows["max_cost_usd"].margin == pytest.approx(300 - 200 * q)
    assert rows["max_usd_per_hour"].predicted == 20.0 and rows["max_usd_per_hour"].passed and rows["max_usd_per_hour"].confidence is None
