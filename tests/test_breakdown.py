"""A prediction's breakdown adds up to its iteration, its phases are the ones its plan declares
(srift/simulate/breakdown.py), its exposed communication is part of the whole communication, and
its JSON is what the documents have always shown."""

import dataclasses
import math

import pytest

from srift import api
from srift.job import Job
from srift.report.predict_view import PHASE_LABELS
from srift.simulate import breakdown as bd
from srift.simulate.breakdown import Breakdown
from srift.simulate.kfac import KfacPhases
from srift.simulate.prediction import Prediction


def _prediction(breakdown: Breakdown, iteration_s: float) -> Prediction:
    return Prediction(cluster="c", gpus=1, global_batch_size=1, iteration_time_s=iteration_s, p90_iteration_time_s=iteration_s,
                      throughput_samples_per_s=1.0 / iteration_s, cost_per_hour_usd=None, usd_per_million_samples=None,
                      breakdown=breakdown, bottleneck="compute", fits_in_memory=True, memory_per_gpu_bytes=0.0)


def test_a_breakdown_that_misses_the_iteration_is_refused() -> None:
    b = Breakdown(((bd.FORWARD, 1.0), (bd.BACKWARD, 2.0)))
    assert b.total_s == 3.0 and _prediction(b, 3.0).iteration_time_s == 3.0
    with pytest.raises(ValueError, match="adds up to 3.0 s, not the iteration's 3.5 s"):
        _prediction(b, 3.5)
    assert _prediction(Breakdown(), 3.5).breakdown.to_json() == {}  # a speed model without phases


def test_unknown_repeated_or_undeclared_phases_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown breakdown phase"):
        Breakdown((("comm_total", 1.0),))  # type: ignore[arg-type]  # a document's field, not a phase
    with pytest.raises(ValueError, match="given twice"):
        Breakdown(((bd.FORWARD, 1.0), (bd.FORWARD, 2.0)))
    with pytest.raises(ValueError, match="declares the phases"):
        Breakdown.of(bd.DDP_PHASES, {bd.FORWARD: 1.0})  # the others missing
    with pytest.raises(ValueError, match="declares the phases"):
        Breakdown.of((bd.FORWARD,), {bd.FORWARD: 1.0, bd.BUBBLE: 1.0})  # a phase the plan does not have


def test_exposed_and_hidden_communication_by_hand() -> None:
    # 0.2 s of a 1.0 s all-reduce sticks out of backward (0.05 s more of the hidden part costs
    # interference, not communication); K-FAC's factor all-reduce is its own phase, not in the total.
    b = Breakdown.of(bd.ddp_phases(recompute=False, kfac=True),
                     {bd.DATA: 0.0, bd.FORWARD: 1.0, bd.BACKWARD: 2.0, bd.EXPOSED_COMM: 0.2, bd.COMM_INTERFERENCE: 0.05,
                      bd.OPTIMIZER: 0.1, bd.OVERHEAD: 0.0, bd.FACTOR_COMPUTE: 0.3, bd.EXPOSED_FACTOR_COMM: 0.4,
                      bd.INVERSION: 0.0, bd.INVERSE_BROADCAST: 0.0, bd.KFAC_COMM_INTERFERENCE: 0.0, bd.PRECONDITIONING: 0.0},
                     comm_total_s=1.0)
    assert b.exposed_comm_s == pytest.approx(0.2)
    assert b.hidden_comm_s == pytest.approx(0.8)
    assert b.total_s == pytest.approx(4.05)
    assert list(b)[-6:] == list(bd.KFAC_PHASES)


def test_each_plan_declares_its_phases_once() -> None:
    assert bd.ddp_phases(False, False) == ("data", "forward", "backward", "exposed_comm", "comm_interference",
                                           "optimizer", "overhead")
    assert bd.ddp_phases(True, False)[-1] == "recompute"  # after the others, where it has always been
    assert bd.SHARDED_PHASES == ("data", "forward", "backward", "recompute", "exposed_all_gather",
                                 "exposed_reduce_scatter", "comm_interference", "optimizer", "overhead")
    assert set(bd.HSDP_PHASES) - set(bd.SHARDED_PHASES) == {"exposed_cross_node_allreduce"}
    assert bd.LAYOUT_PHASES == ("forward", "backward", "recompute", "exposed_tp", "exposed_cp", "exposed_ep", "exposed_pp",
                                "bubble", "exposed_dp", "comm_interference", "optimizer", "overhead")
    # K-FAC's phases are KfacPhases' fields, in order.
    assert tuple(f.name for f in dataclasses.fields(KfacPhases)) == bd.KFAC_PHASES
    assert tuple(KfacPhases(1, 2, 3, 4, 5, 6).as_dict().values()) == (1, 2, 3, 4, 5, 6)
    # Every phase some plan has is a Phase, and every Phase belongs to some plan.
    plans = (bd.ddp_phases(True, True), bd.SHARDED_PHASES, bd.HSDP_PHASES, bd.LAYOUT_PHASES)
    assert set().union(*plans) == set(bd.PHASES)
    assert set(PHASE_LABELS) == set(bd.PHASES)  # `srift predict` names every phase in words


@pytest.mark.parametrize(("job", "model", "instance", "declared"), [
    (Job(), "resnet50", "p3.16xlarge:2", bd.ddp_phases(False, False)),
    (Job(optimizer="kfac", kfac_strategy="spd"), "resnet50", "p3.16xlarge:2", bd.ddp_phases(False, True)),
    (Job(precision="bf16", seq_len=2048, batch_size=1, parallelism="fsdp"), "llama3-8b", "p4d.24xlarge:2", bd.SHARDED_PHASES),
    (Job(precision="bf16", seq_len=2048, batch_size=1, parallelism="hsdp"), "llama3-8b", "p4d.24xlarge:2", bd.HSDP_PHASES),
    (Job(precision="bf16", seq_len=4096, layout="tp=8,pp=4", micro_batch_size=1, global_batch_size=128), "llama3-70b",
     "p5.48xlarge:4", bd.LAYOUT_PHASES),
])
def test_each_plan_breakdown_adds_up_and_comm_splits(job: Job, model: str, instance: str, declared: tuple[str, ...]) -> None:
    pred = api.predict(job, model=model, instance=instance).prediction
    b = pred.breakdown
    assert tuple(b) == declared
    assert math.isclose(b.total_s, pred.iteration_time_s, rel_tol=1e-9)
    assert b.comm_total_s is not None and b.comm_total_s > 0
    assert 0 <= b.exposed_comm_s <= b.comm_total_s * (1 + 1e-9)  # what was exposed is part of the whole
    assert b.exposed_comm_s + b.hidden_comm_s == pytest.approx(b.comm_total_s)
    assert "comm_total" not in b  # a document's field, not a phase
    doc = pred.to_dict()["breakdown"]
    # The document: the phases in order, then comm_total; and back again.
    assert list(doc) == [*declared, "comm_total"] and doc["comm_total"] == b.comm_total_s
    assert Breakdown.from_json(doc) == b
