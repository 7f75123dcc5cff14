"""All-reduce time against message size, as rows (offline: pandas): nccl-tests-aws and SuperBench
nccl-bw (``load_nccl``), and the p3dn figures quoted in nccl-tests-aws' README (``p3dn_issue_rows``):
what the communication fit (srift/fitting/comm_fit.py) reads. srift/fitting/datasets.py re-exports
every name here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from srift.catalog import get_instance

NCCL_COLUMNS = ["source", "nodes", "gpus_per_node", "intra_node", "network_gbps", "network", "size_bytes", "time_s"]


def load_nccl(data_dir: Path) -> pd.DataFrame:
    """All-reduce (size, time) rows: nccl-tests-aws (p4de, p5; EFA) and SuperBench nccl-bw
    (Azure NDv4 A100 8 GPUs over NVSwitch; the 2-GPU V100 box, whose 11.7 GB/s peak bus bandwidth
    is a PCIe 3 figure). Rows under 1 KiB are dropped (latency-only, noisy)."""
    out = []
    df = pd.read_csv(Path(data_dir) / "nccl-tests-aws" / "allreduce_awsome_distributed_training.csv")
    for _, r in df.iterrows():
        if str(r["nranks"]) == "?" or str(r["nodes"]) == "?":
            continue
        inst = get_instance(str(r["instance_type"]), "us-east-1")
        nodes, ranks = int(r["nodes"]), int(r["nranks"])
        size = float(r["size_bytes"])
        if size < 1024:
            continue
        out.append({"source": f"nccl-tests-aws/{r['instance_type']}/block{r['block']}", "nodes": nodes,
                    "gpus_per_node": ranks // nodes, "intra_node": inst.intra_node,
                    "network_gbps": inst.network_gbps, "network": "efa" if inst.efa else "ethernet",
                    "size_bytes": size, "time_s": float(r["oop_time_us"]) * 1e-6})
    sb = pd.read_csv(Path(data_dir) / "superbench-results" / "all_metrics_flat.csv")
    sb = sb[sb["benchmark"] == "nccl-bw"]
    pat = re.compile(r"nccl-bw/allreduce_(\d+)_time")
    setups = {"Azure-NDv4-A100": (8, "nvswitch"), "Azure-NDmv4-A100": (8, "nvswitch"), "V100": (2, "pcie3")}
    for _, r in sb.iterrows():
        m = pat.match(str(r["metric"]))
        plat = str(r["platform"])
        if not m or plat not in setups:
            continue
        size = float(m.group(1))
        if size < 1024:
            continue
        g, link = setups[plat]
        out.append({"source": f"superbench/{r['superbench_version']}/{plat}", "nodes": 1, "gpus_per_node": g,
                    "intra_node": link, "network_gbps": 0.0, "network": "ethernet", "size_bytes": size,
                    "time_s": float(r["value"]) * 1e-6})
    return pd.DataFrame(out, columns=NCCL_COLUMNS)


def p3dn_issue_rows() -> pd.DataFrame:
    """The 2x p3dn.24xlarge (100 Gb/s, early EFA) all-reduce figures quoted in the nccl-tests-aws
    README (aws-ofi-nccl #33: bus bandwidth at 1/2/4 MiB; nccl-tests #22: 1 GB ring in 268 ms),
    converted to times with busbw = algbw * 2(n-1)/n, n = 16. Used for the plain-ethernet class
    (the slowest AWS multi-node figures on record; srift has no TCP-only NCCL measurement)."""
    n = 16
    factor = 2 * (n - 1) / n
    rows = [(2**20, 1.90), (2**21, 5.86), (2**22, 6.90)]
    out = [{"source": "nccl-tests-aws README (p3dn issues)", "nodes": 2, "gpus_per_node": 8, "intra_node": "nvlink",
            "network_gbps": 100.0, "network": "ethernet", "size_bytes": float(s), "time_s": s * factor / (bw * 1e9)}
           for s, bw in rows]
    out.append({"source": "nccl-tests-aws README (p3dn issues)", "nodes": 2, "gpus_per_node": 8, "intra_node": "nvlink",
                "network_gbps": 100.0, "network": "ethernet", "size_bytes": 1e9, "time_s": 0.268})
    return pd.DataFrame(out, columns=NCCL_COLUMNS)
