"""Instance: one EC2 GPU instance type in one region, with prices (bundled catalog or user cache)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Instance:
    """One row of the catalog.

    Attributes:
        instance_type: ``p4d.24xlarge``.
        family: ``p4d``.
        gpu_name: Canonical GPU name from configs/gpus.yaml (``A100-40GB``).
        gpu_count: GPUs per instance.
        gpu_memory_gib: Memory per GPU, GiB.
        vcpus: vCPUs.
        memory_gib: Host memory, GiB.
        network_gbps: Network bandwidth, Gbit/s.
        efa: True when the type has an Elastic Fabric Adapter.
        intra_node: Link between its GPUs (``pcie3``, ``nvlink``, ``nvswitch``...).
        on_demand_usd_per_hour: On-demand Linux price, None when not priced in this region.
        spot_usd_per_hour: Spot price (median over zones), or an estimate (see spot_estimated).
        spot_estimated: True when the spot price is estimated from a spot/on-demand ratio.
        spot_interruption_per_hour: Expected spot interruptions per instance-hour.
        region: AWS region.
        as_of: Date of the prices (ISO).
        source: Where the row came from.
    """

    instance_type: str
    family: str
    gpu_name: str
    gpu_count: int
    gpu_memory_gib: float
    vcpus: int
    memory_gib: float
    network_gbps: float
    efa: bool
    intra_node: str
    on_demand_usd_per_hour: float | None
    spot_usd_per_hour: float | None
    spot_estimated: bool
    spot_interruption_per_hour: float
    region: str
    as_of: str
    source: str

    def usd_per_hour(self, spot: bool) -> float | None:
        """The hourly price on spot or on demand (None when not priced)."""
        return self.spot_usd_per_hour if spot else self.on_demand_usd_per_hour
