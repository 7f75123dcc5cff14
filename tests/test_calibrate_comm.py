"""`srift calibrate comm` with 2 gloo processes: a cluster file --cluster accepts as it is."""

import pytest

from srift.cli import main
from srift.cluster import load_cluster
from srift.perf.comm import CommModel


@pytest.mark.distributed
def test_calibrate_gloo_two_processes(tmp_path, capsys):
    out = tmp_path / "local.yaml"
    assert main(["calibrate", "comm", "--backend", "gloo", "--nproc", "2", "-o", str(out),
                 "--sizes", "4096,262144,1048576", "--reps", "3"]) == 0
    cluster = load_cluster(out)
    assert cluster.gpus == 2 and cluster.node_groups[0].gpu == "cpu"
    calib = cluster.comm_calibration
    assert calib["sizes_bytes"] == [4096, 262144, 1048576] and all(t > 0 for t in calib["times_s"])
    assert all(p90 >= p50 for p50, p90 in zip(calib["times_s"], calib["p90_times_s"]))
    model = CommModel(cluster)
    # The model reproduces the measured points, all-reduce and broadcast alike.
    assert model.allreduce_time_s(262144) == pytest.approx(calib["times_s"][1], rel=1e-6)
    assert len(calib["broadcast_times_s"]) == 3 and all(t > 0 for t in calib["broadcast_times_s"])
    assert model.broadcast_time_s(262144) == pytest.approx(calib["broadcast_times_s"][1], rel=1e-6)
    assert "Wrote" in capsys.readouterr().out


def test_calibrate_rejects_bad_arguments(tmp_path, capsys):
    assert main(["calibrate", "comm", "--nproc", "1", "-o", str(tmp_path / "x.yaml")]) == 2
    assert "--nproc must be at least 2" in capsys.readouterr().err
    assert main(["calibrate", "comm", "--backend", "mpi", "-o", str(tmp_path / "x.yaml")]) == 2
    assert main(["calibrate", "comm", "--sizes", "a,b", "-o", str(tmp_path / "x.yaml")]) == 2
    assert not (tmp_path / "x.yaml").exists()
