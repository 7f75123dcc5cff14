"""Cluster specs and cluster files: parsing and validation."""

import pytest

from srift.catalog.spec import parse_spec
from srift.cluster import cluster_from_dict
from srift.errors import SriftError


def test_parse_spec_counts_and_mixes():
    assert parse_spec("p3.16xlarge:2") == [("p3.16xlarge", 2)]
    assert parse_spec("g5.xlarge:4+p3.2xlarge") == [("g5.xlarge", 4), ("p3.2xlarge", 1)]


@pytest.mark.parametrize("spec", ["", "p3.16xlarge:0", "p3.16xlarge:x", "+", "p3.16xlarge::2"])
def test_parse_spec_rejects_malformed(spec):
    with pytest.raises(SriftError):
        parse_spec(spec)


GOOD = {
    "name": "ib-64",
    "node_groups": [
        {"count": 16, "gpus_per_node": 4, "gpu": "RTX 2080 Ti", "intra_node": "pcie3",
         "network_gbps": 100, "network": "infiniband", "usd_per_hour": 2.5},
    ],
}


def test_cluster_file_builds_cluster():
    c = cluster_from_dict(GOOD)
    assert c.gpus == 64 and c.nodes == 16
    assert c.node_groups[0].gpu == "RTX-2080-Ti"  # alias resolved to the canonical name
    assert c.usd_per_hour == pytest.approx(40.0)
    assert not c.heterogeneous


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"gpu": "RTX 9999"}, "is not a GPU"),
        ({"intra_node": "carrier-pigeon"}, "intra_node"),
        ({"network": "wifi"}, "network"),
        ({"count": 0}, "count"),
        ({"colour": "red"}, "unknown key"),
    ],
)
def test_cluster_file_errors_name_the_field(patch, message):
    data = {"name": "x", "node_groups": [dict(GOOD["node_groups"][0], **patch)]}
    with pytest.raises(SriftError, match=message):
        cluster_from_dict(data)


def test_cpu_cluster_and_unpriced_cost():
    c = cluster_from_dict({"node_groups": [{"count": 1, "gpus_per_node": 2, "gpu": "cpu",
                                            "intra_node": "shared-memory", "network_gbps": 0}]}, source="local.yaml")
    assert c.name == "local" and c.gpus == 2 and c.usd_per_hour is None


def test_a_workstation_with_an_nvlink_bridge():
    c = cluster_from_dict({"node_groups": [{"count": 1, "gpus_per_node": 2, "gpu": "Quadro RTX 8000",
                                            "intra_node": "nvlink-bridge", "network_gbps": 10}]})
    assert c.node_groups[0].intra_node == "nvlink-bridge" and c.node_groups[0].gpu == "Quadro-RTX-8000"
