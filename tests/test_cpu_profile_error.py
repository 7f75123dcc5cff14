"""A GPU prediction from a profile measured on a CPU quotes the CPU-profile validation's figure
(scripts/validate_profiles.py -> configs/perf/profile_accuracy.json), not the zoo's (issue 41)."""

from __future__ import annotations

import json

from srift.cluster import Cluster, NodeGroup
from srift.job import Job
from srift.perf.accuracy import PROFILE_ACCURACY_SCHEMA, cpu_profile_typical_error, profile_accuracy_path, typical_error
from srift.simulate import predict
from srift.testing import measured_profile


def _shipped() -> dict:
    data = json.loads(profile_accuracy_path().read_text())
    assert data["schema"] == PROFILE_ACCURACY_SCHEMA
    return data["groups"]["cpu_profile"]


def test_the_figure_is_the_largest_held_out_one_validate_profiles_wrote() -> None:
    g = _shipped()
    pct, basis = cpu_profile_typical_error()
    assert pct == max(g["lomo"], g["loso"])
    assert basis.startswith("CPU-profile validation") and f"over {g['held_out_rows']} single-GPU runs" in basis


def test_a_cpu_profile_predicted_on_a_gpu_quotes_the_cpu_profile_figure() -> None:
    cpu_prof = measured_profile([4_000_000, 4_000_000], gpu="cpu")
    one_a100 = Cluster("a100", (NodeGroup(1, 1, "A100-40GB", "pcie4", 100.0),))
    pred = predict(cpu_prof, one_a100, Job(batch_size=8))
    cpu_pct, _ = cpu_profile_typical_error()
    group_pct, _ = typical_error(1, 1)
    assert pred.typical_error_pct == max(cpu_pct, group_pct)
    assert "CPU-profile validation" in pred.typical_error_basis


def test_a_gpu_profile_and_cpu_workers_keep_their_own_figures() -> None:
    one_a100 = Cluster("a100", (NodeGroup(1, 1, "A100-40GB", "pcie4", 100.0),))
    pred = predict(measured_profile([4_000_000], gpu="A100-40GB"), one_a100, Job(batch_size=8))
    assert "CPU-profile validation" not in pred.typical_error_basis
    cpu_workers = Cluster("here", (NodeGroup(1, 2, "cpu", "pcie4", 100.0),))
    pred = predict(measured_profile([4_000_000], gpu="cpu"), cpu_workers, Job(batch_size=8))
    assert pred.typical_error_pct is None and "CPU-profile validation" not in pred.typical_error_basis
