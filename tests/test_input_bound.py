"""The input pipeline in the predictor: the loader runs beside the GPUs, so the iteration is
bounded below by its time on the vCPUs each GPU has (srift/perf/input.py's figures)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from srift.cli import main
from srift.cluster import Cluster, NodeGroup
from srift.job import Job
from srift.perf import input as I
from srift.profile import PhaseTimes
from srift.simulate import Predictor
from srift.simulate.predictor import image_side_px
from srift.testing import measured_profile

MiB = 2**20
IMAGE_BYTES = 3 * 224 * 224 * 4


def _image_job(batch: int = 64):
    """A job measured on one T4 at 0.1 s per iteration (no data time recorded), 224-px images."""
    prof = measured_profile([MiB, MiB], fwd=0.02, bwd=0.025, opt=0.01, gpu="T4", batch_size=batch)
    prof = dataclasses.replace(prof, input_bytes_per_sample=float(IMAGE_BYTES),
                               phases=dataclasses.replace(prof.phases, data_s=None))
    return prof


def _one_t4(vcpus: int | None) -> Cluster:
    return Cluster("t", (NodeGroup(1, 1, "T4", "pcie3", 10.0, vcpus_per_node=vcpus),))


def test_the_loader_bounds_the_iteration_from_below():
    prof = _image_job()
    gpu_s = 2 * 0.02 + 2 * 0.025 + 0.01  # 0.1 s measured
    rate = I.load_params().images_per_s_per_vcpu  # images/s per vCPU at 224 px
    # 2 vCPUs for one GPU: 1 for the training process, 1 for the loader: 64 / rate s > 0.1 s.
    p = Predictor(prof, Job()).predict(_one_t4(2))
    loader = 64 / (rate * 1)
    assert p.input_time_s == pytest.approx(loader)
    assert p.iteration_time_s == pytest.approx(loader)
    assert p.breakdown["data"] == pytest.approx(loader - gpu_s)
    assert p.bottleneck == "input" and p.data_loading == "images"
    # 16 vCPUs: 64 / (rate x 15) s, hidden behind the 0.1 s GPU step.
    p16 = Predictor(prof, Job()).predict(_one_t4(16))
    assert p16.input_time_s == pytest.approx(64 / (rate * 15))
    assert p16.iteration_time_s == pytest.approx(gpu_s) and p16.breakdown["data"] == 0.0
    assert p16.bottleneck == "compute" and "hidden behind" in " ".join(p16.notes)
    # Synthetic data: no loader; unknown vCPUs: no bound, and the note says so.
    assert Predictor(prof, Job(data_loading="synthetic")).predict(_one_t4(2)).iteration_time_s == pytest.approx(gpu_s)
    unknown = Predictor(prof, Job()).predict(_one_t4(None))
    assert unknown.iteration_time_s == pytest.approx(gpu_s) and unknown.input_time_s is None
    assert any("vCPUs are unknown" in n for n in unknown.notes)


def test_a_measured_data_time_is_kept_as_measured():
    prof = measured_profile([MiB], fwd=0.02, bwd=0.03, opt=0.0, batch_size=32)
    prof = dataclasses.replace(prof, phases=dataclasses.replace(prof.phases, data_s=0.007))
    p = Predictor(prof, Job()).predict(_one_t4(4))
    assert p.breakdown["data"] == pytest.approx(0.007) and p.data_loading == "measured"
    assert Predictor(prof, Job(data_loading="synthetic")).predict(_one_t4(4)).breakdown["data"] == 0.0


def test_socket_threads_take_vcpus_from_the_loader():
    # 2 nodes of 1 T4 over TCP: NCCL's generic 1 helper thread per connection, a send and a
    # receive connection -> 2 vCPUs per node busy, taken from the loader (here 10 -> 8 vCPUs).
    prof = _image_job()
    rate = I.load_params().images_per_s_per_vcpu
    c = Cluster("t", (NodeGroup(2, 1, "T4", "pcie3", 10.0, "ethernet", vcpus_per_node=10),))
    assert Predictor(prof, Job()).predict(c).input_time_s == pytest.approx(64 / (rate * (10 - 2 - 1)))


def test_the_image_side_comes_from_the_profile_input():
    assert image_side_px(3 * 224 * 224 * 4) == 224 and image_side_px(3 * 299 * 299 * 4) == 299
    assert image_side_px(1024.0) == 224  # token ids: not an image


@pytest.mark.slow
def test_g5_xlarge_and_2xlarge_differ_only_when_the_images_outrun_the_gpu(capsys):
    def run(*args: str) -> dict:
        assert main(["predict", "--model", "resnet50", "--format", "json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    # ResNet-50 at batch 256 in amp: the A10G outpaces g5.xlarge's 3 loader vCPUs (4 less the training
    # process) but not g5.2xlarge's 7.
    fast = ("--precision", "amp", "--batch-size", "256")
    x1, x2 = run("--instance", "g5.xlarge:1", *fast), run("--instance", "g5.2xlarge:1", *fast)
    assert x1["bottleneck"] == "input" and x2["bottleneck"] == "compute"
    assert x1["iteration_time_s"] > x2["iteration_time_s"]
    assert x1["input_time_s"] == pytest.approx(x2["input_time_s"] * 7 / 3)
    s1 = run("--instance", "g5.xlarge:1", *fast, "--data-loading", "synthetic")
    s2 = run("--instance", "g5.2xlarge:1", *fast, "--data-loading", "synthetic")
    assert s1["iteration_time_s"] == pytest.approx(s2["iteration_time_s"]) == pytest.approx(x2["iteration_time_s"])
    assert s1["input_time_s"] == 0.0
    # At the zoo's fp32 batch of 64 the A10G is the slower side on both: the same iteration.
    d1, d2 = run("--instance", "g5.xlarge:1"), run("--instance", "g5.2xlarge:1")
    assert d1["iteration_time_s"] == pytest.approx(d2["iteration_time_s"]) and d1["input_time_s"] > d2["input_time_s"]


def test_bad_data_loading_is_a_usage_error(capsys):
    assert main(["predict", "--model", "resnet50", "--instance", "g5.xlarge", "--data-loading", "tape"]) == 2
    err = capsys.readouterr().err
    assert "unknown data loading 'tape'" in err and "To fix:" in err


def test_the_job_file_takes_data_loading(tmp_path):
    from srift.errors import SriftError
    from srift.jobfile import load_jobfile

    path = tmp_path / "srift.yaml"
    path.write_text("model: resnet50\nsteps: 10\ndata_loading: synthetic\nlimits: {max_cost_usd: 10}\n")
    assert load_jobfile(str(path), env={}).job.data_loading == "synthetic"
    assert load_jobfile(str(path), {"data_loading": "images"}, env={}).job.data_loading == "images"
    path.write_text("model: resnet50\nsteps: 10\ndata_loading: tape\nlimits: {max_cost_usd: 10}\n")
    with pytest.raises(SriftError, match="unknown data loading 'tape'"):
        load_jobfile(str(path), env={})
