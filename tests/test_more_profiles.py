"""The same job measured on several GPUs: each node group uses the profile of its own GPU."""

from __future__ import annotations

import dataclasses
import json

import pytest

from srift.cli import main
from srift.catalog.spec import cluster_from_spec
from srift.errors import SriftError
from srift.job import Job
from srift.perf import compute as C
from srift.profile import DeviceInfo, PhaseTimes, Profile
from srift.simulate import Predictor, predict
from srift.zoo import load_builtin_profile

JOB = Job(batch_size=32, precision="fp32")


def measured_on(gpu: str, slowdown: float, model: str = "resnet50") -> Profile:
    """A profile of ``model`` as if measured on ``gpu``: the compute model's layer times x ``slowdown``."""
    base = load_builtin_profile(model, batch_size=32)
    lt = C.layer_times(base, gpu, "fp32")
    layers = [dataclasses.replace(l, fwd_s=float(f) * slowdown, bwd_s=float(b) * slowdown)
              for l, f, b in zip(base.layers, lt.fwd_s, lt.bwd_s)]
    fwd, bwd = float(lt.fwd_s.sum()) * slowdown, float(lt.bwd_s.sum()) * slowdown
    return dataclasses.replace(base, layers=layers, precision="fp32", iterations=20,
                               device=DeviceInfo(gpu, "cuda", gpu),
                               phases=PhaseTimes(data_s=0.0, forward_s=fwd, backward_s=bwd, optimizer_s=lt.optimizer_s,
                                                 total_s=fwd + bwd + lt.optimizer_s))


@pytest.mark.slow
def test_each_gpu_uses_the_profile_measured_on_it():
    a10g, l4 = measured_on("A10G", 1.3), measured_on("L4", 0.8)
    both = Predictor(a10g, JOB, [l4])
    for spec, alone in (("g6.xlarge", l4), ("g5.xlarge", a10g), ("g6.12xlarge", l4)):
        got, want = both.predict(cluster_from_spec(spec)), predict(alone, cluster_from_spec(spec), JOB)
        assert got.iteration_time_s == pytest.approx(want.iteration_time_s, rel=1e-12), spec
        assert got.typical_error_basis == want.typical_error_basis
        assert ("same system's 1-GPU run" if got.gpus > 1 else "other systems with that GPU") in got.typical_error_basis
    # The L4 measurement is 0.8x the model, the A10G one 1.3x: on g6 the second profile decides.
    only_a10g = predict(a10g, cluster_from_spec("g6.xlarge"), JOB)
    assert both.predict(cluster_from_spec("g6.xlarge")).iteration_time_s < only_a10g.iteration_time_s
    # A GPU neither was measured on scales from the first profile.
    p3 = both.predict(cluster_from_spec("p3.2xlarge"))
    assert p3.iteration_time_s == pytest.approx(predict(a10g, cluster_from_spec("p3.2xlarge"), JOB).iteration_time_s, rel=1e-12)


@pytest.mark.slow
def test_a_mixed_cluster_takes_each_groups_own_profile():
    a10g, l4 = measured_on("A10G", 1.3), measured_on("L4", 0.8)
    both = Predictor(a10g, JOB, [l4])
    mixed = cluster_from_spec("g5.xlarge:1+g6.xlarge:1")
    # Per-GPU speed is batch / compute time of each group's own measurement.
    speed_a10g = 32 / C.layer_times(a10g, "A10G", "fp32").total_s
    speed_l4 = 32 / C.layer_times(l4, "L4", "fp32").total_s
    assert both.compute("A10G", 32).speed == pytest.approx(speed_a10g) and both.compute("L4", 32).speed == pytest.approx(speed_l4)
    # The faster GPU takes the job's batch, the other keeps pace in proportion to its own profile.
    split = {s.gpu: s.per_gpu_batch for s in both.predict(mixed).batch_split}
    fast, slow = sorted(("A10G", "L4"), key=lambda g: -{"A10G": speed_a10g, "L4": speed_l4}[g])
    assert split[fast] == 32 and split[slow] == round(32 * min(speed_a10g, speed_l4) / max(speed_a10g, speed_l4))
    assert split[slow] < 32


@pytest.mark.slow
def test_more_profiles_must_be_measured_of_the_same_job_and_not_repeat_a_gpu():
    a10g = measured_on("A10G", 1.0)
    with pytest.raises(SriftError, match="is structural .no measured times., so it adds nothing"):
        Predictor(a10g, JOB, [load_builtin_profile("resnet50", batch_size=32)])
    unknown = dataclasses.replace(measured_on("L4", 1.0), device=DeviceInfo("Mystery X1", "cuda"))
    with pytest.raises(SriftError, match="measured on a device srift does not know"):
        Predictor(a10g, JOB, [unknown])
    with pytest.raises(SriftError, match="not of the same job as 'resnet50': .*layers against"):
        Predictor(a10g, JOB, [measured_on("L4", 1.0, model="resnet152")])
    with pytest.raises(SriftError, match="two profiles were measured on A10G at fp32"):
        Predictor(a10g, JOB, [measured_on("A10G", 1.1)])
    # A structural first profile with measured ones after it is fine: it covers the other GPUs.
    Predictor(load_builtin_profile("resnet50", batch_size=32), JOB, [a10g])


@pytest.mark.slow
def test_predict_and_recommend_take_the_profile_flag_more_than_once(tmp_path, capsys):
    a, b = tmp_path / "a10g.yaml", tmp_path / "l4.yaml"
    measured_on("A10G", 1.3).save(a)
    measured_on("L4", 0.8).save(b)
    assert main(["predict", "--profile", str(a), "--profile", str(b), "--instance", "g6.xlarge", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert main(["predict", "--profile", str(b), "--instance", "g6.xlarge", "--format", "json"]) == 0
    assert got == pytest.approx(json.loads(capsys.readouterr().out)["iteration_time_s"])
    assert main(["recommend", "--profile", str(a), "--profile", str(b), "--budget", "3", "--format", "json"]) == 0
    recs = json.loads(capsys.readouterr().out)["recommendations"]
    assert recs
    # --model and --profile still exclude each other.
    assert main(["predict", "--model", "resnet50", "--profile", str(a), "--instance", "g6.xlarge"]) == 2
    assert "exactly one of --model and --profile" in capsys.readouterr().err


@pytest.mark.slow
def test_check_takes_a_list_of_profiles_relative_to_the_job_file(tmp_path, capsys):
    (tmp_path / "p").mkdir()
    measured_on("A10G", 1.3).save(tmp_path / "p" / "a10g.yaml")
    measured_on("L4", 0.8).save(tmp_path / "p" / "l4.yaml")
    job = tmp_path / "srift.yaml"
    job.write_text("profile: [p/a10g.yaml, p/l4.yaml]\nbatch_size: 32\nprecision: fp32\nsteps: 1000\n"
                   "instance: g6.xlarge\nlimits: {max_cost_usd: 100}\n")
    assert main(["check", str(job), "--format", "json"]) == 0
    both = json.loads(capsys.readouterr().out)
    job.write_text(job.read_text().replace("[p/a10g.yaml, p/l4.yaml]", "p/l4.yaml"))
    assert main(["check", str(job), "--format", "json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert both["predicted_cost_usd"] == pytest.approx(alone["predicted_cost_usd"])
    job.write_text(job.read_text().replace("p/l4.yaml", "[]"))
    assert main(["check", str(job)]) == 2
    assert "'profile' must be a profile file path, or a list of them" in capsys.readouterr().err
