"""A prediction's breakdown adds up to its iteration, and its exposed communication is part of the
whole communication."""

import math

import pytest

from srift import api
from srift.job import Job
from srift.simulate.prediction import Prediction


def _prediction(breakdown: dict[str, float], iteration_s: float) -> Prediction:
    return Prediction(cluster="c", gpus=1, global_batch_size=1, iteration_time_s=iteration_s, p90_iteration_time_s=iteration_s,
                      throughput_samples_per_s=1.0 / iteration_s, cost_per_hour_usd=None, usd_per_million_samples=None,
                      breakdown=breakdown, bottleneck="compute", fits_in_memory=True, memory_per_gpu_bytes=0.0)


def test_a_breakdown_that_misses_the_iteration_is_refused() -> None:
    assert _prediction({"forward": 1.0, "backward": 2.0}, 3.0).iteration_time_s == 3.0
    with pytest.raises(ValueError, match="adds up to 3.0 s, not the iteration's 3.5 s"):
        _prediction({"forward": 1.0, "backward": 2.0}, 3.5)


@pytest.mark.parametrize(("job", "model", "instance"), [
    (Job(), "resnet50", "p3.16xlarge:2"),
    (Job(optimizer="kfac", kfac_strategy="spd"), "resnet50", "p3.16xlarge:2"),
    (Job(precision="bf16", seq_len=2048, batch_size=1, parallelism="fsdp"), "llama3-8b", "p4d.24xlarge:2"),
    (Job(precision="bf16", seq_len=4096, layout="tp=8,pp=4", micro_batch_size=1, global_batch_size=128), "llama3-70b",
     "p5.48xlarge:4"),
])
def test_each_plan_breakdown_adds_up_and_comm_splits(job: Job, model: str, instance: str) -> None:
    pred = api.predict(job, model=model, instance=instance).prediction
    assert math.isclose(sum(pred.breakdown.values()), pred.iteration_time_s, rel_tol=1e-9)
    assert pred.comm_total_s is not None and pred.comm_total_s > 0
    assert 0 <= pred.exposed_comm_s <= pred.comm_total_s * (1 + 1e-9)  # what was exposed is part of the whole
    assert "comm_total" not in pred.breakdown  # a document's field, not a phase
    assert pred.breakdown_document()["comm_total"] == pred.comm_total_s
