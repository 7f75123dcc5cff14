"""The optimizer step's dispatches by PyTorch version (srift/perf/optimizer_step.py), and the
measured rows' stated PyTorch reaching the compute model (srift/fitting/datasets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from srift.fitting import datasets
from srift.perf.optimizer_step import OptimizerStep, step_dispatches, step_kind
from srift.zoo import load_builtin_profile

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("version, kind", [
    ("1.4", OptimizerStep.PER_TENSOR), ("1.11.0+cu115", OptimizerStep.PER_TENSOR), ("1", OptimizerStep.PER_TENSOR),
    ("2.0.0+cu117", OptimizerStep.FOREACH), ("2.13.0", OptimizerStep.FOREACH), ("10.1", OptimizerStep.FOREACH),
    (None, OptimizerStep.FOREACH), ("", OptimizerStep.FOREACH), ("nightly", OptimizerStep.FOREACH),
])
def test_step_kind_from_the_stated_version(version, kind):
    assert step_kind(version) is kind


def test_dispatches_by_hand():
    # PyTorch 1.x loops: one per tensor; foreach: one per list of 48 (MultiTensorApply.cuh, depth 3)
    assert step_dispatches(OptimizerStep.PER_TENSOR, 161) == 161
    assert step_dispatches(OptimizerStep.FOREACH, 161) == 4  # 48 + 48 + 48 + 17
    assert step_dispatches(OptimizerStep.FOREACH, 48) == 1
    assert step_dispatches(OptimizerStep.FOREACH, 49) == 2
    assert step_dispatches(OptimizerStep.FOREACH, 0) == 0


def test_csc_rows_carry_their_pytorch_build_to_the_profile():
    rows = datasets.load_csc(DATA)
    assert set(rows["torch_version"]) >= {"1.11.0+cu115", "2.0.0+cu117"}
    profiles = datasets.ProfileSource(lambda m, b, s: load_builtin_profile(m, b, s))
    old = rows[rows["torch_version"] == "1.11.0+cu115"].iloc[0]
    new = rows[rows["torch_version"] == "2.0.0+cu117"].iloc[0]
    p_old, p_new = profiles.for_row(old), profiles.for_row(new)
    assert step_kind(p_old.framework["torch"]) is OptimizerStep.PER_TENSOR
    assert step_kind(p_new.framework["torch"]) is OptimizerStep.FOREACH
    assert profiles.for_row(old) is p_old  # cached: callers cache by identity


def test_every_compute_fit_row_states_its_pytorch():
    rows = datasets.load_rows(DATA)
    single = rows[rows["n_gpus"] == 1]
    assert single["torch_version"].notna().all()
    assert {step_kind(v) for v in single["torch_version"]} == {OptimizerStep.PER_TENSOR}  # NGC 21.11 / 22.09: PyTorch 1.x
