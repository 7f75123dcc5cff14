"""Interconnect and network facts (configs/network.yaml) as the simulator and its basis see them."""

import csv
from pathlib import Path

import pytest

from srift.catalog import facts_for, get_instance, load_catalog
from srift.catalog.network import cluster_network, family_entry, resolve
from srift.catalog.spec import node_group
from srift.errors import SriftError

ROOT = Path(__file__).resolve().parents[1]


def test_up_to_sizes_sustain_their_baseline_not_the_burst():
    g5 = facts_for(get_instance("g5.xlarge"))
    assert (g5.network_gbps, g5.network_burst_gbps, g5.burstable) == (2.5, 10.0, True)
    assert g5.simulated_network_gbps == 2.5 and g5.transport == "tcp" and g5.unknowns == ()
    assert "bursts to 10 Gb/s" in g5.basis() and "5 Gb/s outside a cluster placement group (10 Gb/s inside)" in g5.basis()
    fixed = facts_for(get_instance("g5.12xlarge"))
    assert (fixed.network_gbps, fixed.burstable) == (40.0, False)


def test_documented_fixed_figures_equal_the_karpenter_baselines():
    # Every fixed figure written in configs/network.yaml agrees with the EC2 data; "up to" sizes have a lower baseline.
    baselines = {r["instance_type"]: float(r["network_bandwidth_mbps"]) / 1000
                 for r in csv.DictReader(open(ROOT / "data" / "karpenter-aws" / "instance_types_gpu.csv")) if r["network_bandwidth_mbps"]}
    checked = 0
    for inst in load_catalog("us-east-1"):
        doc = (family_entry("aws", inst.family) or {}).get("documented", {}).get(inst.instance_type)
        if doc in (None, "unknown") or inst.instance_type not in baselines:
            continue
        if isinstance(doc, str):
            assert baselines[inst.instance_type] < float(doc.split()[-1]), inst.instance_type
        else:
            assert baselines[inst.instance_type] == doc, inst.instance_type
        checked += 1
    assert checked >= 50


def test_efa_generations_and_gpudirect():
    assert facts_for(get_instance("p4d.24xlarge")).efa_generation == 1
    p5 = facts_for(get_instance("p5.48xlarge"))
    assert (p5.transport, p5.efa_generation, p5.gpudirect_rdma, p5.network_gbps) == ("efa", 2, True, 3200.0)
    assert facts_for(get_instance("p5en.48xlarge")).efa_generation == 3
    assert facts_for(get_instance("p6-b200.48xlarge")).efa_generation == 4
    g5 = facts_for(get_instance("g5.12xlarge"))  # EFA, generation not documented
    assert g5.transport == "efa" and "efa_generation" in g5.unknowns and g5.efa_generation is None


def test_other_clouds_transports():
    assert facts_for(get_instance("a3-highgpu-8g", "gcp/us-central1")).transport == "gpudirect-tcpx"
    ultra = facts_for(get_instance("a3-ultragpu-8g", "gcp/us-central1"))
    assert (ultra.transport, ultra.network_gbps, ultra.cluster_network) == ("roce", 3200.0, "roce")
    nd = facts_for(get_instance("Standard_ND96asr_v4", "azure/eastus"))
    assert (nd.transport, nd.network_gbps, nd.intra_node) == ("infiniband", 1600.0, "nvswitch")


def test_unknown_facts_are_named_with_the_assumption():
    lam = facts_for(get_instance("gpu_8x_h100_sxm5", "lambda/us-east-1"))
    assert lam.network_gbps is None and lam.transport == "unknown" and lam.intra_node == "nvswitch4"
    assert {"transport", "network_gbps"} <= set(lam.unknowns)
    assert lam.simulated_network_gbps == 10.0 and lam.simulated_transport == "tcp"
    assert "unknown: transport, network_gbps" in lam.basis()
    v100 = facts_for(get_instance("n1-highmem-8-v100x1", "gcp/us-central1"))
    assert v100.intra_node == "unknown" and v100.simulated_intra_node == "pcie3"
    row = get_instance("gpu_8x_h100_sxm5", "lambda/us-east-1")
    assert "network-assumed" in row.flags and row.network_gbps == 10.0


def test_every_catalog_row_agrees_with_its_facts():
    for inst in load_catalog(["aws", "gcp", "lambda", "azure"]):
        f = facts_for(inst)
        assert (f.simulated_intra_node, f.simulated_network_gbps, f.simulated_transport) == \
            (inst.intra_node, inst.network_gbps, inst.transport), inst.instance_type


def test_node_groups_carry_the_transport_class():
    assert node_group(get_instance("p4d.24xlarge"), 2, False).network == "efa"
    assert node_group(get_instance("g5.xlarge"), 2, False).network == "ethernet"
    assert node_group(get_instance("Standard_ND96isr_H100_v5", "azure/eastus"), 2, False).network == "infiniband"
    assert cluster_network("gpudirect-tcpxo") == "ethernet"
    with pytest.raises(SriftError, match="unknown transport"):
        cluster_network("carrier-pigeon")


def test_a_family_without_facts_stops_the_build():
    with pytest.raises(SriftError, match="no facts for aws family 'x9'"):
        resolve("aws", "x9", "x9.large")
