"""The same job on 2-8 servers of 4 GPUs over the three ddl-benchmarks networks (data/ddl-benchmarks):
the predictions order the networks as the measurements do, and 10 GbE BERT-large on two servers
is slower than on one."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from srift.cluster import Cluster, NodeGroup
from srift.job import Job
from srift.simulate import Predictor
from srift.zoo import load_builtin_profile

DATA = Path(__file__).resolve().parents[1] / "data" / "ddl-benchmarks" / "mgwfbp-throughput.csv"
# The source's networks as srift runs them: NCCL over TCP at 10 and 100 Gb/s, InfiniBand RDMA.
NETWORKS = {"ethernet-10g-tcp": ("ethernet", 10.0), "infiniband": ("infiniband", 100.0),
            "ethernet-100g-tcp (IPoIB, NCCL_IB_DISABLE=1)": ("ethernet", 100.0)}


def _measured() -> dict[tuple[str, int, str], float]:
    """Samples/s by (model, servers, network label); one-server rows under label ''."""
    out = {}
    with DATA.open() as f:
        for r in csv.DictReader(f):
            if r["gpus_per_node"] == "4":
                out[(r["model"], int(r["nodes"]), r["network"])] = float(r["throughput_samples_per_s_total"])
    return out


def _predictor(model: str) -> tuple[Predictor, int]:
    batch = {"resnet50": 64, "bert-base": 64, "bert-large": 8}[model]
    seq = None if model == "resnet50" else 64
    return Predictor(load_builtin_profile(model), Job(batch_size=batch, seq_len=seq, precision="fp32",
                                                      data_loading="synthetic")), batch


def _throughput(pred: Predictor, nodes: int, label: str) -> float:
    network, gbps = NETWORKS.get(label, ("ethernet", 10.0))
    cluster = Cluster("ddl", (NodeGroup(nodes, 4, "RTX-2080-Ti", "pcie3", gbps, network),))
    return pred.predict(cluster).throughput_samples_per_s


@pytest.mark.parametrize("model", ["resnet50", "bert-base", "bert-large"])
@pytest.mark.slow
def test_the_three_networks_rank_as_measured(model):
    measured = _measured()
    pred, _ = _predictor(model)
    for nodes in (2, 4, 8):
        by_measured = sorted(NETWORKS, key=lambda n: measured[(model, nodes, n)])
        by_predicted = sorted(NETWORKS, key=lambda n: _throughput(pred, nodes, n))
        assert by_predicted == by_measured, (model, nodes)


@pytest.mark.slow
def test_ten_gbe_bert_large_is_slower_on_two_servers_than_on_one():
    measured = _measured()
    pred, _ = _predictor("bert-large")
    one, two = _throughput(pred, 1, ""), _throughput(pred, 2, "ethernet-10g-tcp")
    assert measured[("bert-large", 2, "ethernet-10g-tcp")] < measured[("bert-large", 1, "")]
    assert two < one
    # ... while InfiniBand and 100 Gb/s TCP still gain from the second server, as measured.
    for label in ("infiniband", "ethernet-100g-tcp (IPoIB, NCCL_IB_DISABLE=1)"):
        assert measured[("bert-large", 2, label)] > measured[("bert-large", 1, "")]
        assert _throughput(pred, 2, label) > one
    # ResNet-50's small gradients: 10 GbE still nearly doubles it.
    rn, _ = _predictor("resnet50")
    assert _throughput(rn, 2, "ethernet-10g-tcp") > 1.8 * _throughput(rn, 1, "")
