"""Small, hand-computable stand-ins for srift's tests (and for anyone testing code built on srift).

Nothing in srift imports this module. Every fake is a real srift object (Profile, Cluster,
Instance, LayerTimes, Prediction) with round numbers, so a test can state the expected result by
hand: a profile measured on a GPU returns its own times there, a calibrated cluster's all-reduce
takes exactly ``s_per_byte`` seconds per byte, a toy catalog's throughput follows a speed table.
"""

from __future__ import annotations

import csv
import io
import random
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from srift.catalog.instances import Instance
from srift.cluster import Cluster, NodeGroup, cluster_from_dict
from srift.perf.compute import LayerTimes
from srift.profile import DeviceInfo, LayerProfile, PhaseTimes, Profile
from srift.simulate.breakdown import Breakdown
from srift.simulate.prediction import BatchShare, Prediction
from srift.simulate.spot import spot_expectation

MiB = 2**20
S_PER_BYTE = 1e-8  # calibrated_cluster's default link: 100 MB/s, no latency


def measured_profile(grad_bytes: Sequence[int], fwd: float = 0.01, bwd: float = 0.02, opt: float = 0.005,
                     gpu: str = "T4", batch_size: int = 8) -> Profile:
    """A profile of one Linear layer per entry of ``grad_bytes``, each ``fwd``/``bwd`` seconds,
    measured on ``gpu`` (``"cpu"`` for CPU processes): predictions there reuse these times."""
    layers = [LayerProfile(f"l{i}", "Linear", params=g // 4, grad_bytes=g, fwd_flops=1.0, bwd_flops=2.0,
                           fwd_s=fwd, bwd_s=bwd) for i, g in enumerate(grad_bytes)]
    n = len(layers)
    return Profile(name="toy", batch_size=batch_size, precision="fp32", layers=layers,
                   device=DeviceInfo(f"test {gpu}", "cpu" if gpu == "cpu" else "cuda", None if gpu == "cpu" else gpu),
                   phases=PhaseTimes(data_s=0.0, forward_s=fwd * n, backward_s=bwd * n, optimizer_s=opt,
                                     total_s=(fwd + bwd) * n + opt))


def measured_unit_profile(block_params: Sequence[int], root_params: int = 0, fwd: float = 0.01, bwd: float = 0.02,
                          opt: float = 0.005, gpu: str = "T4", batch_size: int = 8) -> Profile:
    """A profile of FSDP units measured on ``gpu``: a root layer ``embed`` (``root_params``), one
    Linear per entry of ``block_params`` in its own unit ``blocks.{i}``, and a root ``head``
    without parameters; every layer ``fwd``/``bwd`` seconds, fp32."""
    def layer(name: str, params: int, unit: str | None) -> LayerProfile:
        return LayerProfile(name, "Linear", params=params, grad_bytes=4 * params, fwd_flops=1.0, bwd_flops=2.0,
                            fwd_s=fwd, bwd_s=bwd, unit=unit)

    layers = [layer("embed", root_params, None)]
    layers += [layer(f"blocks.{i}.linear", p, f"blocks.{i}") for i, p in enumerate(block_params)]
    layers.append(layer("head", 0, None))
    n = len(layers)
    return Profile(name="toy-units", batch_size=batch_size, precision="fp32", layers=layers,
                   device=DeviceInfo(f"test {gpu}", "cuda", gpu),
                   phases=PhaseTimes(data_s=0.0, forward_s=fwd * n, backward_s=bwd * n, optimizer_s=opt,
                                     total_s=(fwd + bwd) * n + opt))


def calibrated_cluster(workers: int = 2, s_per_byte: float = S_PER_BYTE, gpu: str = "T4", p90_factor: float = 1.0) -> Cluster:
    """One node whose all-reduce was measured: ``s_per_byte`` seconds per byte, no latency, and
    ``p90_factor`` times that at the p90."""
    sizes = [1.0, 1e10]
    return cluster_from_dict({
        "name": "local", "node_groups": [{"count": 1, "gpus_per_node": workers, "gpu": gpu,
                                          "intra_node": "shared-memory" if gpu == "cpu" else "pcie3", "network_gbps": 0}],
        "comm_calibration": {"backend": "gloo", "world_size": workers, "sizes_bytes": sizes,
                             "times_s": [s * s_per_byte for s in sizes], "p90_times_s": [s * s_per_byte * p90_factor for s in sizes]},
    })


def workers(n: int, gpu: str = "T4") -> Cluster:
    """``n`` workers on one node (``gpu="cpu"``: CPU processes sharing memory), unpriced."""
    link = "shared-memory" if gpu == "cpu" else "pcie3"
    return Cluster(f"{n} x {gpu}", (NodeGroup(count=1, gpus_per_node=n, gpu=gpu, intra_node=link, network_gbps=10.0),))


def layer_times(fwd_s: Sequence[float], bwd_s: Sequence[float], anchored: bool = False) -> LayerTimes:
    """Compute times given per layer (no optimizer step or overhead); ``anchored``: as if measured."""
    return LayerTimes(np.asarray(fwd_s, dtype=float), np.asarray(bwd_s, dtype=float), 0.0, 0.0, anchored=anchored)


@dataclass(frozen=True)
class LinearComm:
    """All-reduce and broadcast both take ``alpha + beta * bytes`` seconds, at every quantile."""

    alpha: float
    beta: float

    def allreduce_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        return self.alpha + self.beta * size_bytes

    def broadcast_time_s(self, size_bytes: float | np.ndarray, quantile: float = 0.5) -> float | np.ndarray:
        return self.alpha + self.beta * size_bytes


def instance(name: str, gpu: str, count: int, on_demand: float, spot: float | None, memory_gib: float = 16.0,
             interruption_per_hour: float = 0.0) -> Instance:
    """A catalog row of ``count`` ``gpu``s at these prices (one region, one date)."""
    return Instance(instance_type=name, family=name.split(".")[0], gpu_name=gpu, gpu_count=count, gpu_memory_gib=memory_gib,
                    vcpus=4, memory_gib=16, network_gbps=10, efa=False, intra_node="pcie3", on_demand_usd_per_hour=on_demand,
                    spot_usd_per_hour=spot, spot_estimated=False, spot_interruption_per_hour=interruption_per_hour,
                    region="test", as_of="2026-01-01", source="test")


@dataclass(frozen=True)
class SpeedModel:
    """A predictor for the search: each GPU trains ``speeds[gpu]`` samples/s at ``per_gpu_batch``,
    every node beyond the first costs ``node_penalty`` of the throughput, and spot nodes are
    interrupted at their catalog rate (srift/simulate/spot.py's model, checkpoints of
    ``state_bytes``: 0 bytes take 10 s). ``typical_error_pct`` gives the validation figure by
    cluster shape (``gpu``: one GPU, ``node``: one node of several, ``nodes``: several nodes) and
    ``compute_error_pct`` the compute part; ``bottleneck`` is reported as is."""

    speeds: Mapping[str, float]
    per_gpu_batch: int = 10
    node_penalty: float = 0.1
    state_bytes: float = 0.0
    typical_error_pct: Mapping[str, float] | None = None
    compute_error_pct: float | None = None
    bottleneck: str = "compute"

    def __call__(self, cluster: Cluster) -> Prediction:
        tp = sum(g.gpus * self.speeds[g.gpu] for g in cluster.node_groups) * (1.0 - self.node_penalty) ** (cluster.nodes - 1)
        gb = self.per_gpu_batch * cluster.gpus
        cost = cluster.usd_per_hour
        errors = self.typical_error_pct or {}
        shape = "nodes" if cluster.nodes > 1 else ("node" if cluster.gpus > 1 else "gpu")
        return Prediction(cluster=cluster.name, gpus=cluster.gpus, global_batch_size=gb, iteration_time_s=gb / tp,
                          p90_iteration_time_s=gb / tp, throughput_samples_per_s=tp, cost_per_hour_usd=cost,
                          usd_per_million_samples=None, breakdown=Breakdown(), bottleneck=self.bottleneck, fits_in_memory=True,
                          memory_per_gpu_bytes=0.0, spot=spot_expectation(cluster, self.state_bytes, tp, cost),
                          batch_split=[BatchShare(g.label, g.gpu, self.per_gpu_batch, g.gpus) for g in cluster.node_groups],
                          typical_error_pct=errors.get(shape), compute_error_pct=self.compute_error_pct)


# ---- a port for a torch.distributed rendezvous several launchers agree on ----
_PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000  # above the well-known and registered services most hosts run


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (Linux; elsewhere the IANA range's start)."""
    try:
        return int(_PORT_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port free on this host now, for a torch.distributed rendezvous that several launchers
    must agree on (torchrun's --master_port).

    Picked at random below the ephemeral range: the port stays unbound until rank 0 listens on it
    (seconds, while the workers start), and a port from the ephemeral range may meanwhile be handed
    by the kernel to any process's outgoing connection or ``bind(0)``; one below it only to a
    process asking for that very number. Where a launch can meet through a file or torchrun's
    ``--standalone`` instead, that has no such window at all.
    """
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randrange(LOWEST_PORT, low) if low > LOWEST_PORT + 1 else 0
        if port and _is_free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room below: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- AWS's EC2 price list CSV ---------------------------------------------------------------------
#: Columns of AWS's EC2 price list CSV (``.../current/{region}/index.csv``), in AWS's order, up to
#: those srift reads (srift/catalog/price_list.py) and a few after them.
PRICE_LIST_HEADER = (
    "SKU", "OfferTermCode", "RateCode", "TermType", "PriceDescription", "EffectiveDate", "StartingRange", "EndingRange", "Unit",
    "PricePerUnit", "Currency", "RelatedTo", "LeaseContractLength", "PurchaseOption", "OfferingClass", "Product Family",
    "serviceCode", "Location", "Location Type", "Instance Type", "Current Generation", "Instance Family", "vCPU", "Memory",
    "Network Performance", "Tenancy", "Operating System", "License Model", "usageType", "operation", "CapacityStatus", "GPU",
    "Pre Installed S/W", "Region Code")


def price_list_row(sku: str, itype: str, usd: float | str, region: str = "us-west-2", **columns: str) -> dict[str, str]:
    """One on-demand Linux (shared tenancy, no pre-installed software, capacity ``Used``) hourly row
    of a price list; ``columns`` (by their CSV names) override any of it."""
    code = f"{sku}.JRTCKXETXF"
    price = usd if isinstance(usd, str) else f"{usd:.10f}"
    return {"SKU": sku, "OfferTermCode": "JRTCKXETXF", "RateCode": f"{code}.6YS6EN2CT7", "TermType": "OnDemand",
            "PriceDescription": f"${usd} per On Demand Linux {itype} Instance Hour", "EffectiveDate": "2026-10-01",
            "StartingRange": "0", "EndingRange": "Inf", "Unit": "Hrs", "PricePerUnit": price, "Currency": "USD",
            "Product Family": "Compute Instance", "serviceCode": "AmazonEC2", "Location": "US West (Oregon)",
            "Location Type": "AWS Region", "Instance Type": itype, "Current Generation": "Yes", "Instance Family": "GPU instance",
            "vCPU": "4", "Memory": "16 GiB", "Network Performance": "Up to 10 Gigabit", "Tenancy": "Shared",
            "Operating System": "Linux", "License Model": "No License required", "usageType": f"BoxUsage:{itype}",
            "operation": "RunInstances", "CapacityStatus": "Used", "GPU": "1", "Pre Installed S/W": "NA", "Region Code": region,
            **columns}


def price_list_csv(rows: Sequence[Mapping[str, str]], published: str = "2026-10-30T18:23:01Z") -> bytes:
    """A region's EC2 price list CSV as AWS publishes it: five ``"name","value"`` lines, the header,
    the rows (every field quoted)."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerows([("FormatVersion", "v1.0"),
                      ("Disclaimer", "This pricing list is for informational purposes only. All prices are subject to the "
                                     "additional terms included in the pricing pages on http://aws.amazon.com."),
                      ("Publication Date", published), ("Version", "20261030182301"), ("OfferCode", "AmazonEC2")])
    writer.writerow(PRICE_LIST_HEADER)
    writer.writerows([[r.get(c, "") for c in PRICE_LIST_HEADER] for r in rows])
    return out.getvalue().encode()
