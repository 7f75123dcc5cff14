"""A job in fp32 on GPUs where mixed precision is much faster says so, with the speed-up the
simulator itself predicts on that cluster (srift/simulate/hints.py)."""

from __future__ import annotations

import re

from srift import api
from srift.job import Job


def _hint(result: api.PredictResult) -> str | None:
    return next((n for n in result.prediction.notes if n.startswith("--precision amp")), None)


def test_fp32_on_tensor_core_gpus_names_amp_and_its_speedup():
    fp32 = api.predict(Job(precision="fp32"), model="resnet50", instance="g5.12xlarge:3")
    amp = api.predict(Job(precision="amp"), model="resnet50", instance="g5.12xlarge:3")
    hint = _hint(fp32)
    assert hint is not None
    ratio = amp.prediction.throughput_samples_per_s / fp32.prediction.throughput_samples_per_s
    assert ratio > 1.2
    assert re.search(rf"{ratio:.1f}x the throughput", hint)
    assert f"{amp.prediction.throughput_samples_per_s:,.0f} against {fp32.prediction.throughput_samples_per_s:,.0f}" in hint
    assert _hint(amp) is None  # already mixed precision: nothing to say


def test_no_hint_where_mixed_precision_buys_little():
    # A K80 (p2.xlarge) has no fp16 units worth the name: amp is not 1.2x there.
    assert _hint(api.predict(Job(precision="fp32"), model="resnet50", instance="p2.xlarge")) is None
