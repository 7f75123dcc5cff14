"""Job lengths people think in: epochs, samples and tokens (more GPUs, fewer steps); steps only with a
fixed global batch; a global batch that does not divide is never changed silently."""

import json

import pytest

from srift.cli import main
from srift.errors import SriftError
from srift.job import JobLength
from srift.search import search
from srift.search.limits import Constraints
from srift.testing import SpeedModel, instance


def test_steps_for_each_unit_by_hand():
    # ImageNet: 1,281,167 images at a global batch of 512 -> ceil(2502.3) = 2503 iterations per epoch (the last
    # partial), 90 epochs -> 225,270.
    assert JobLength(epochs=90, dataset_size=1_281_167).steps_for(512) == 90 * 2503
    assert JobLength(samples=1_000_000).steps_for(300) == 3334  # ceil(3333.3)
    # 1e9 tokens at 4,096 per sample: ceil(244,140.6) = 244,141 samples; at 16 per step: ceil(15,258.8) = 15,259.
    tokens = JobLength(tokens=1_000_000_000).with_seq_len(4096)
    assert tokens.data_samples == 244_141 and tokens.steps_for(16) == 15_259
    assert JobLength(steps=500).steps_for(1024) == 500
    assert JobLength(epochs=2, dataset_size=100).describe() == "2 epochs of 100 samples"
    assert tokens.describe() == "1,000,000,000 tokens (244,141 samples of 4,096)"


def test_a_length_is_given_once_and_tokens_need_a_sequence_model():
    with pytest.raises(SriftError, match="given more than once: as samples and as tokens"):
        JobLength(samples=10, tokens=100)
    with pytest.raises(SriftError, match="has no sequence length"):
        JobLength(tokens=100).with_seq_len(None)
    with pytest.raises(SriftError, match="samples must be at least 1"):
        JobLength(samples=0)


def test_more_gpus_mean_fewer_steps_for_a_fixed_amount_of_data():
    # 10 samples per GPU per step; 1,000 samples: 100 steps on one GPU, 25 on four (a.small x 4).
    model = SpeedModel({"GA": 100.0}, node_penalty=0.0)
    r = search([instance("a.small", "GA", 1, 1.0, None)], model, Constraints(diverse=False, max_gpus=4, top=4), JobLength(samples=1000))
    steps = {c.instance: c.run.steps for c in r.recommendations}
    assert steps == {"a.small:4": 25, "a.small:3": 34, "a.small:2": 50, "a.small:1": 100}  # ceil(1000 / (10 n))
    hours = {c.instance: c.job_hours for c in r.recommendations}
    assert hours["a.small:4"] == pytest.approx(25 * 40 / 400 / 3600)


def test_steps_need_a_fixed_global_batch_in_a_search(capsys):
    catalog = [instance("a.small", "GA", 1, 1.0, None)]
    with pytest.raises(SriftError, match="--steps counts iterations") as info:
        search(catalog, SpeedModel({"GA": 100.0}), Constraints(diverse=False, max_gpus=4), JobLength(steps=100))
    assert "--global-batch-size" in info.value.hint
    assert main(["recommend", "--model", "resnet50", "--steps", "1000", "--budget", "20"]) == 2
    assert "--global-batch-size" in capsys.readouterr().err


def test_counts_that_do_not_divide_the_global_batch_are_left_out():
    # Global batch 12 over 1-GPU a.small (counts 1..8) and 4-GPU b.quad (1..2): 12 divides over 1, 2, 3, 4, 6
    # GPUs and over 4, not over 5, 7, 8 or b.quad x 2 (8 GPUs): 3 + 1 configurations left out.
    catalog = [instance("a.small", "GA", 1, 1.0, None), instance("b.quad", "GB", 4, 3.5, None)]
    r = search(catalog, SpeedModel({"GA": 100.0, "GB": 120.0}), Constraints(diverse=False, max_gpus=8, top=20), global_batch_size=12)
    assert sorted(c.instance for c in r.recommendations) == sorted(
        ["a.small:1", "a.small:2", "a.small:3", "a.small:4", "a.small:6", "b.quad:1"])
    assert r.pruned["batch"] == 4
    # With 2 micro-batches per step, a global batch of 24 is 12 per micro-batch: the same counts.
    accum = search(catalog, SpeedModel({"GA": 100.0, "GB": 120.0}), Constraints(diverse=False, max_gpus=8, top=20), global_batch_size=24,
                   grad_accum=2)
    assert sorted(c.instance for c in accum.recommendations) == sorted(c.instance for c in r.recommendations)


@pytest.mark.slow
def test_the_global_batch_simulated_is_the_one_asked_for(capsys):
    assert main(["recommend", "--model", "resnet50", "--budget", "30", "--global-batch-size", "1024",
                 "--samples", "1.28e7", "--format", "json", "--top", "10"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["job"]["global_batch_size"] == 1024
    for rec in data["recommendations"]:
        assert rec["global_batch_size"] == 1024 and 1024 % rec["gpus"] == 0
        assert sum(b["per_gpu_batch"] * b["gpus"] for b in rec["batch_split"]) == 1024
    assert main(["recommend", "--model", "resnet50", "--budget", "30", "--global-batch-size", "1024", "--samples", "1.28e7"]) == 0
    out = capsys.readouterr().out
    assert "global batch 1,024, 12,800,000 samples" in out and "batch/GPU" in out
