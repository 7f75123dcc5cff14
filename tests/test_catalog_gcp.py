"""GCP prices: host row + accelerator row per zone, checked by hand on a small hand-made catalog."""

import pytest

from srift.catalog import get_instance
from srift.catalog.build.gcp import build_rows

HEADER = ["InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount", "GpuInfo", "Region",
          "AvailabilityZone", "Price", "SpotPrice"]
L4_INFO = "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 24576}}]}"
T4_INFO = "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]}"
H100_INFO = "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]}"


def host(machine, vcpus, mem, zone, price, spot):
    return dict(zip(HEADER, [machine, str(vcpus), str(mem), "", "", "", zone[:-2], zone, str(price), str(spot)]))


def accel(name, count, info, zone, price, spot):
    return dict(zip(HEADER, ["", "", "", name, str(count), info, zone[:-2], zone, str(price), str(spot)]))


def by_type(rows):
    return {(r["instance_type"], r["region"]): r for r in rows}


def test_built_in_gpu_vm_is_host_plus_accelerator_per_zone():
    rows, report = build_rows([
        host("g2-standard-24", 24, 96, "us-central1-a", 1.00, 0.40),
        host("g2-standard-24", 24, 96, "us-central1-b", 1.00, 0.40),
        host("g2-standard-24", 24, 96, "us-central1-c", 1.00, 0.40),  # no L4 x2 row in zone c: no VM there
        accel("L4", 2, L4_INFO, "us-central1-a", 1.20, 0.50),
        accel("L4", 2, L4_INFO, "us-central1-b", 1.20, 0.30),
        accel("L4", 1, L4_INFO, "us-central1-a", 0.60, 0.25),  # the count must match: not g2-standard-24's
    ], [])
    g2 = by_type(rows)[("g2-standard-24", "us-central1")]
    assert g2["on_demand_usd_per_hour"] == pytest.approx(1.00 + 1.20)
    # zone a: 0.40 + 0.50 = 0.90, zone b: 0.40 + 0.30 = 0.70; the median of the two zones
    assert g2["spot_usd_per_hour"] == pytest.approx((0.90 + 0.70) / 2)
    assert (g2["gpu_name"], g2["gpu_count"], g2["gpu_memory_gib"], g2["vcpus"], g2["zones"]) == ("L4", 2, 24.0, 24, 2)
    assert (g2["accelerators"], g2["vm_type"], g2["family"]) == ("L4:2", "g2-standard-24", "g2-standard")
    assert report["unpriced_accelerators"] == ["L4:1"]  # no g2 host with one L4 in this catalog


def test_attachable_gpus_go_on_the_n1_host_of_their_count():
    rows, _ = build_rows([accel("T4", 1, T4_INFO, "us-east1-b", 0.35, 0.14), accel("T4", 4, T4_INFO, "us-east1-b", 1.40, 0.56)],
                         [host("n1-highmem-8", 8, 52, "us-east1-b", 0.47, 0.10), host("n1-highmem-32", 32, 208, "us-east1-b", 1.89, 0.40),
                          host("n1-standard-8", 8, 30, "us-east1-b", 0.38, 0.08)])
    got = by_type(rows)
    one, four = got[("n1-highmem-8-t4x1", "us-east1")], got[("n1-highmem-32-t4x4", "us-east1")]
    assert one["on_demand_usd_per_hour"] == pytest.approx(0.47 + 0.35) and one["spot_usd_per_hour"] == pytest.approx(0.10 + 0.14)
    assert four["on_demand_usd_per_hour"] == pytest.approx(1.89 + 1.40) and four["vcpus"] == 32
    assert (one["vm_type"], one["accelerators"], one["family"]) == ("n1-highmem-8", "T4:1", "n1-t4")
    assert len(rows) == 2  # n1-standard-8 is not a pairing


def test_spot_above_on_demand_is_dropped_for_that_zone():
    rows, _ = build_rows([
        host("a3-highgpu-1g", 26, 234, "asia-northeast1-a", 1.50, 0.30),
        host("a3-highgpu-1g", 26, 234, "asia-northeast1-b", 1.50, 0.30),
        accel("H100", 1, H100_INFO, "asia-northeast1-a", 10.00, 2.00),
        accel("H100", 1, H100_INFO, "asia-northeast1-b", 10.00, 12.00),  # spot above on-demand: a catalog error
    ], [])
    a3 = by_type(rows)[("a3-highgpu-1g", "asia-northeast1")]
    assert a3["on_demand_usd_per_hour"] == pytest.approx(11.50)
    assert a3["spot_usd_per_hour"] == pytest.approx(0.30 + 2.00)  # zone b's spot left out
    assert "spot-above-on-demand-dropped" in a3["flags"]


def test_a_gpu_whose_price_spans_more_than_2x_across_regions_is_flagged_not_dropped():
    rows, report = build_rows([
        host("g2-standard-8", 8, 32, "us-central1-a", 0.30, 0.12), host("g2-standard-8", 8, 32, "europe-west4-a", 0.31, 0.12),
        accel("L4", 1, L4_INFO, "us-central1-a", 0.56, 0.22), accel("L4", 1, L4_INFO, "europe-west4-a", 0.59, 0.21),
        host("a3-highgpu-1g", 26, 234, "us-central1-a", 1.50, 0.30), host("a3-highgpu-1g", 26, 234, "us-east4-a", 1.50, 0.30),
        accel("H100", 1, H100_INFO, "us-central1-a", 4.20, 2.25), accel("H100", 1, H100_INFO, "us-east4-a", 9.80, 1.76),
    ], [])
    got = by_type(rows)
    assert report["suspect_accelerators"] == {"H100": (4.20, 9.80)}
    assert "suspect-price" in got[("a3-highgpu-1g", "us-central1")]["flags"]
    assert "suspect-price" in got[("a3-highgpu-1g", "us-east4")]["flags"]
    assert "suspect-price" not in got[("g2-standard-8", "us-central1")]["flags"]  # 0.56 vs 0.59: ordinary


def test_a_gpu_without_a_host_row_is_left_out():
    rows, report = build_rows([accel("B200", 8, "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 184320}}]}", "us-east4-b", 90.216, 64.44)], [])
    assert rows == [] and report["unpriced_accelerators"] == ["B200:8"]


def test_the_readme_worked_examples_in_the_bundled_catalog():
    # data/skypilot-catalog-multicloud/README.md: g2-standard-8 0.29358 + 0.56004; a2-highgpu-1g 0.73948 + 2.93391
    assert get_instance("g2-standard-8", "gcp/us-central1").on_demand_usd_per_hour == pytest.approx(0.85362)
    a2 = get_instance("a2-highgpu-1g", "gcp/us-central1")
    assert a2.on_demand_usd_per_hour == pytest.approx(3.67339)
    assert a2.gpu_name == "A100-40GB" and a2.price_suspect  # A100 spans 1.61-3.44 $/GPU-h across regions
    mega = get_instance("a3-megagpu-8g", "gcp/us-central1")
    assert (mega.gpu_name, mega.accelerators, mega.transport, mega.network_gbps) == ("H100", "H100-MEGA:8", "gpudirect-tcpxo", 1600.0)
