"""The search pinned on a small hand-made catalog and a hand-made speed model."""

import pytest

from srift.errors import SriftError
from srift.job import JobLength
from srift.report.recommend_view import why
from srift.search import search
from srift.search.limits import Constraints
from srift.search.rank import pareto
from srift.testing import SpeedModel, instance

# GA: 100 samples/s per GPU, GB: 120; each node beyond the first costs 10 % of the throughput.
fake_predict = SpeedModel({"GA": 100.0, "GB": 120.0})
CATALOG = [instance("a.small", "GA", 1, 1.0, 0.3), instance("b.quad", "GB", 4, 3.5, None)]


def test_best_throughput_under_budget():
    r = search(CATALOG, fake_predict, Constraints(diverse=False, budget_usd_per_hour=4.0, max_gpus=8))
    # a.small x n: 100 n 0.9^(n-1) for $n (n <= 4 fits the budget: 100, 180, 243, 291.6);
    # b.quad x 1: 480 for $3.50; b.quad x 2 costs $7.
    top = r.recommendations[0]
    assert top.instance == "b.quad:1" and top.expected_throughput_samples_per_s == pytest.approx(480)
    assert [c.instance for c in r.recommendations[:3]] == ["b.quad:1", "a.small:4", "a.small:3"]
    assert r.considered == 8 + 2 and r.evaluated == 5  # a x 1..8, b x 1..2; 5 within budget
    assert r.pruned["budget"] == 5


def useful_by_hand(rate_per_hour: float, checkpoint_s: float = 10.0) -> float:
    """srift/simulate/spot.py's useful fraction, written out: Young's interval T = sqrt(2 C / rate)
    clipped to [300, 7200] s, restart R = 87 + 60 s, useful = (1 - rate (R + T/2)) / (1 + C/T)."""
    rate_s = rate_per_hour / 3600
    t = min(max((2 * checkpoint_s / rate_s) ** 0.5, 300.0), 7200.0) if rate_s > 0 else 7200.0
    return (1 - rate_s * (147.0 + t / 2)) / (1 + checkpoint_s / t)


def test_spot_wins_when_allowed():
    # Budget $2/h. On demand: a.small x 2 ($2) gives 100 * 2 * 0.9 = 180 samples/s; b.quad costs $3.50.
    # On spot ($0.30/h, 0.01 interruptions per node-hour) a.small x 6 fits ($1.80): 600 * 0.9^5 = 354.3
    # samples/s, of which interruptions (0.06/h for the cluster: checkpoint every 1,095 s) leave 97.9 %.
    catalog = [instance("a.small", "GA", 1, 1.0, 0.3, interruption_per_hour=0.01), CATALOG[1]]
    on_demand = search(catalog, fake_predict, Constraints(diverse=False, budget_usd_per_hour=2.0, max_gpus=8))
    assert on_demand.recommendations[0].instance == "a.small:2"
    r = search(catalog, fake_predict, Constraints(diverse=False, budget_usd_per_hour=2.0, max_gpus=8, spot=True))
    top = r.recommendations[0]
    assert (top.instance, top.label, top.spot) == ("a.small:6", "a.small:6 [Spot]", True)
    assert useful_by_hand(0.06) == pytest.approx(0.97948, abs=1e-5)
    assert top.expected_throughput_samples_per_s == pytest.approx(600 * 0.9**5 * useful_by_hand(0.06))
    assert top.cost_per_hour_usd == pytest.approx(1.8)
    assert top.prediction.spot.interruptions_per_hour == pytest.approx(0.06)
    # The cheapest per sample is spot too: a.small x 1 at $0.30/h.
    cheap = search(catalog, fake_predict, Constraints(diverse=False, budget_usd_per_hour=2.0, max_gpus=8, spot=True, objective="cost"))
    assert cheap.recommendations[0].instance == "a.small:1" and cheap.recommendations[0].spot
    assert cheap.recommendations[0].usd_per_million_samples == pytest.approx(0.3 / (100 * useful_by_hand(0.01) * 3600) * 1e6)


def test_cheapest_under_deadline():
    # 360,000 samples. a.small x n: 100 n 0.9^(n-1) samples/s, so 1 / (n 0.9^(n-1)) h for $1 / 0.9^(n-1);
    # b.quad (here $5/h) x 1: 360000 / 480 s = 0.208 h for $1.042, x 2: 360000 / 864 s = 0.116 h for $1.157.
    # Without validation figures (the fake has none) the p90 is the p50, so limits are met at the
    # median here (tests/test_search_confidence.py pins the quantiles).
    catalog = [CATALOG[0], instance("b.quad", "GB", 4, 5.0, None)]
    samples = JobLength(samples=360_000)
    r = search(catalog, fake_predict, Constraints(diverse=False, deadline_hours=1.0, max_gpus=8), samples)
    assert r.objective == "cost"
    top = r.recommendations[0]
    assert top.instance == "a.small:1" and top.job_hours == pytest.approx(1.0) and top.job_cost_usd == pytest.approx(1.0)
    # 0.9 h: a.small x 1 misses it; b.quad x 1 is then the cheapest, before a.small x 2 ($1.111).
    r = search(catalog, fake_predict, Constraints(diverse=False, deadline_hours=0.9, max_gpus=8), samples)
    assert [c.instance for c in r.recommendations[:3]] == ["b.quad:1", "a.small:2", "b.quad:2"]
    assert r.recommendations[0].job_cost_usd == pytest.approx(5.0 * 360000 / 480 / 3600)
    assert r.recommendations[1].job_cost_usd == pytest.approx(2 * 360000 / 180 / 3600)


def test_nothing_fits_names_the_constraint_and_the_closest():
    r = search(CATALOG, fake_predict, Constraints(diverse=False, deadline_hours=0.1, max_gpus=8), JobLength(samples=360_000))
    assert not r.recommendations and r.cut_by == "deadline"
    assert r.closest.instance == "b.quad:2"  # 0.116 h, the fewest
    r = search(CATALOG, fake_predict, Constraints(diverse=False, budget_usd_per_hour=0.1, max_gpus=8))
    assert r.cut_by == "budget" and r.closest.instance == "a.small:1"


def test_pareto_filters_dominated():
    r = search(CATALOG, fake_predict, Constraints(diverse=False, max_gpus=8))
    front = [(c.instance, round(c.cost_per_hour_usd, 2)) for c in r.frontier]
    # a.small x 4 ($4, 291.6) is beaten by b.quad x 1 ($3.5, 480): off the frontier.
    assert ("a.small:4", 4.0) not in front
    assert front[:4] == [("a.small:1", 1.0), ("a.small:2", 2.0), ("a.small:3", 3.0), ("b.quad:1", 3.5)]
    costs = [c.cost_per_hour_usd for c in r.frontier]
    tps = [c.expected_throughput_samples_per_s for c in r.frontier]
    assert costs == sorted(costs) and tps == sorted(tps)
    assert pareto([]) == []


def test_mixed_adds_spot_on_demand_and_two_type_mixes():
    r = search(CATALOG, fake_predict, Constraints(diverse=False, max_gpus=8, spot=True, mixed=True, top=100))
    names = {c.instance for c in r.recommendations}
    assert "a.small:1@on-demand+a.small:3@spot" in names
    mix = next(c for c in r.recommendations if c.instance == "a.small:1@on-demand+a.small:3@spot")
    assert mix.cost_per_hour_usd == pytest.approx(1.0 + 3 * 0.3)
    assert any("+" in n and "b.quad" in n and "a.small" in n for n in names)  # two-type mixes
    assert all(c.gpus <= 8 for c in r.recommendations)


def test_constraint_validation():
    with pytest.raises(SriftError, match="needs the job's length"):
        search(CATALOG, fake_predict, Constraints(diverse=False, deadline_hours=2))
    with pytest.raises(SriftError, match="go together"):
        JobLength(epochs=3)
    with pytest.raises(SriftError, match="given more than once: as steps and as epochs"):
        JobLength(steps=10, epochs=3, dataset_size=100)
    with pytest.raises(SriftError, match="--max-gpus 20,000 is beyond the largest cluster srift searches"):
        Constraints(diverse=False, max_gpus=20_000)
    with pytest.raises(SriftError, match="confidence must be at least 0.5 and below 1"):
        Constraints(diverse=False, confidence=1.0)
    with pytest.raises(SriftError, match="budget must be positive"):
        Constraints(diverse=False, budget_usd_per_hour=-1)
    with pytest.raises(SriftError, match="objective"):
        Constraints(diverse=False, objective="fastest")
    assert JobLength(epochs=2, dataset_size=100).steps_for(30) == 2 * 4  # 100 / 30: 4 iterations, the last partial


def test_a_multi_node_choice_names_the_best_single_node_one():
    # Budget $7: b.quad x 2 (864 samples/s, 2 nodes) beats b.quad x 1 (480, one node).
    r = search(CATALOG, fake_predict, Constraints(diverse=False, budget_usd_per_hour=7.0, max_gpus=8))
    assert r.recommendations[0].instance == "b.quad:2" and r.recommendations[0].nodes == 2
    assert r.best_single_node.instance == "b.quad:1"
    # 480 / 864 - 1 = -44 %
    assert "It spans 2 nodes" in why(r) and "best one-node choice is b.quad:1: -44% throughput at $3.50/h" in why(r)
    # a one-node winner needs no such line
    r = search(CATALOG, fake_predict, Constraints(diverse=False, budget_usd_per_hour=4.0, max_gpus=8))
    assert r.recommendations[0].nodes == 1 and r.best_single_node is None and "one-node" not in why(r)


def test_nodes_of_a_mixed_spot_spec():
    r = search(CATALOG, fake_predict, Constraints(diverse=False, max_gpus=8, spot=True, mixed=True, top=100))
    mix = next(c for c in r.recommendations if c.instance == "a.small:1@on-demand+a.small:6@spot")
    assert (mix.nodes, mix.gpus, mix.label) == (7, 7, "a.small:1@on-demand+a.small:6@spot")
    assert next(c for c in r.recommendations if c.instance == "b.quad:1").nodes == 1


def test_a_runner_up_on_other_gpus_within_the_combined_error_is_called_a_close_call():
    # a.quad (GA x 4) and b.quad (GB x 4) at the same price: one node each, one type, on demand, so
    # neither is simpler; 480 against 472 samples/s is 1.7 % apart.
    catalog = [instance("a.quad", "GA", 4, 3.5, None), CATALOG[1]]
    model = SpeedModel({"GA": 118.0, "GB": 120.0}, typical_error_pct={"node": 15.0}, compute_error_pct=10.0)
    r = search(catalog, model, Constraints(diverse=False, budget_usd_per_hour=4.0, max_gpus=4))
    assert [c.instance for c in r.recommendations] == ["b.quad:1", "a.quad:1"] and r.simpler_choice is None
    # Other GPUs share nothing: sqrt(15^2 + 15^2) = 21.2 %.
    assert r.close_call.error_pct == pytest.approx(21.213, abs=1e-3) and r.close_call.gap == pytest.approx(480 / 472 - 1)
    assert ("The two are 2% apart on other GPUs (GB against GA), less than their combined typical error (±21.2 %)"
            in why(r))
    # Without validation figures there is no call to make.
    assert search(catalog, SpeedModel({"GA": 118.0, "GB": 120.0}), Constraints(diverse=False, budget_usd_per_hour=4.0, max_gpus=4)).close_call is None


def _recommend_result(constraints, length=None):
    from srift.job import Job
    from srift.results import RecommendResult

    found = search(CATALOG, fake_predict, constraints, length)
    return RecommendResult(found, constraints, Job(length=length), "toy", "fp32", 10, None, "test")


def test_the_no_fit_message_names_the_limit_and_the_closest_configuration():
    from srift.api import no_fit_error

    assert no_fit_error(_recommend_result(Constraints(diverse=False, budget_usd_per_hour=4.0, max_gpus=8))) is None
    # Budget: nothing simulated, so the cheapest type that fits is priced: a.small x 1, $1/h.
    err = no_fit_error(_recommend_result(Constraints(diverse=False, budget_usd_per_hour=0.1, max_gpus=8)))
    assert (err.message, err.hint, err.exit_code) == (
        "no configuration meets the budget of $0.10/h. Closest: a.small:1 at $1.00/h.", "relax that limit.", 1)
    # Deadline of 0.1 h for 360,000 samples: b.quad x 2 comes closest, 360000 / 864 s = 0.116 h for $0.81
    # (no validation figures: the 90 % quantile is the median).
    err = no_fit_error(_recommend_result(Constraints(diverse=False, deadline_hours=0.1, max_gpus=8), JobLength(samples=360_000)))
    assert err.message == ("no configuration meets the deadline of 0.1 h. Closest: b.quad:2 at $7.00/h, "
                           "0.1 h and $0.81 at 90% confidence.")


def test_an_input_bound_choice_names_its_vcpus_per_gpu():
    # When the predictor says the input pipeline bounds the iteration (networking's input model), the row and
    # the sentence say how many vCPUs per GPU feed it: the fake catalog's instances have 4 vCPUs.
    from srift.job import Job
    from srift.report.recommend_view import markdown, recommend_json
    from srift.results import RecommendResult

    model = SpeedModel({"GA": 100.0, "GB": 120.0}, bottleneck="input")
    constraints = Constraints(diverse=False, budget_usd_per_hour=4.0, max_gpus=8)
    found = search(CATALOG, model, constraints)
    top = found.recommendations[0]
    assert (top.instance, top.vcpus_per_gpu) == ("b.quad:1", 1.0)  # 4 vCPUs over 4 GPUs
    assert "Its 1 vCPUs per GPU cannot prepare the input as fast as its GPUs train" in why(found)
    result = RecommendResult(found, constraints, Job(), "toy", "fp32", 10, None, "test")
    assert "input (1 vCPUs/GPU)" in markdown(result)
    rec = recommend_json(result)["recommendations"][0]
    assert rec["input_bound"] is True and rec["vcpus_per_gpu"] == 1.0 and rec["host_arch"] == "x86_64"


def test_the_progress_bar_shows_only_on_a_terminal_after_a_second(monkeypatch):
    import io

    from srift.report import progress as prog

    shown = []

    class FakeBar:
        def __init__(self, *a, **k): shown.append("start")
        def start(self): pass
        def add_task(self, *a, **k): return 0
        def update(self, *a, **k): shown.append(k["completed"])
        def stop(self): shown.append("stop")

    monkeypatch.setattr(prog, "Progress", FakeBar)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)  # not a terminal: no bar, a plain line every LINE_EVERY_S
    now = [0.0]
    with prog.SearchProgress(delay_s=1.0, clock=lambda: now[0]) as bar:
        for t, done in ((0.5, 1), (1.0, 2), (3.0, 3), (6.0, 4), (6.5, 5)):
            now[0] = t
            bar(done, 10)
    assert shown == [] and err.getvalue().splitlines() == [
        "Searching: 2 simulations of at most 10, 1 s (--quiet: no progress lines).",
        "Searching: 4 simulations of at most 10, 6 s (--quiet: no progress lines)."]
    with prog.SearchProgress(quiet=True, delay_s=0.0) as bar:  # --quiet: nothing
        bar(5, 10)
    assert len(err.getvalue().splitlines()) == 2
    monkeypatch.setattr(prog.sys.stderr, "isatty", lambda: True, raising=False)
    with prog.SearchProgress(delay_s=3600.0) as bar:  # a terminal, but a quick search: nothing either
        bar(5, 10)
    assert shown == []
    with prog.SearchProgress(delay_s=0.0) as bar:
        bar(5, 10)
        bar(9, 10)
    assert shown == ["start", 5, 9, "stop"]


def test_count_ok_leaves_out_counts_and_the_sweep_simulates_only_those_left():
    # a.small x 1..16 of which only even counts can train the job (as no layout divides the odd
    # ones); throughput a.small x n: 100 n 0.9^(n-1), best at n = 9 or 10 (387.4 each), so the
    # best even count is 10; the odd counts are never simulated.
    seen: list[int] = []

    def predict(cluster):
        seen.append(cluster.gpus)
        return fake_predict(cluster)

    r = search(CATALOG[:1], predict, Constraints(diverse=False, max_gpus=16), count_ok=lambda inst, n: n % 2 == 0)
    assert r.recommendations[0].instance == "a.small:10"
    assert seen and all(n % 2 == 0 for n in seen)
    assert r.pruned["layout"] == 8  # the odd counts


def test_a_search_whose_count_rule_leaves_nothing_says_so():
    r = search(CATALOG[:1], fake_predict, Constraints(diverse=False, max_gpus=4), count_ok=lambda inst, n: False)
    assert not r.recommendations and r.cut_by == "layout" and r.pruned["layout"] == 4
