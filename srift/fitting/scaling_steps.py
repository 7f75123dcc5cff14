"""The steps of a data-parallel job's scaling, measured and predicted: its iteration time on one
GPU, on one full node and on each number of nodes, and the time each step adds (one node over one
GPU; the network: N nodes over one node). ``scripts/scaling_steps.py`` prints them for the
multi-node sources; a miss in the 1-GPU time is the compute model's, one in the steps the
all-reduce's, its overlap's or the network's."""

from __future__ import annotations

import pandas as pd


def job_keys(rows: pd.DataFrame) -> pd.Series:
    """The job each row belongs to: the loader's ``job`` column, or the model (ddl-benchmarks
    runs one job per model)."""
    return rows["job"] if "job" in rows else rows["model"]


def steps_table(rows: pd.DataFrame, pred: pd.Series) -> pd.DataFrame:
    """One line per job and node count above one: measured / predicted ms on 1 GPU, one node and
    that many nodes, and the two steps (one node - 1 GPU, N nodes - one node)."""
    rows = rows.assign(job_key=job_keys(rows).to_numpy(), pred=pred.to_numpy())
    out = []
    for job, g in rows.groupby("job_key", sort=False):
        one = g[g["n_gpus"] == 1]
        node = g[(g["nodes"] == 1) & (g["n_gpus"] == g["gpus_per_node"].max())]
        if one.empty or node.empty or node["n_gpus"].iloc[0] == 1:
            continue
        m1, p1 = one["iteration_time_s"].iloc[0] * 1e3, one["pred"].iloc[0] * 1e3
        mn, pn = node["iteration_time_s"].iloc[0] * 1e3, node["pred"].iloc[0] * 1e3
        for r in g[g["nodes"] > 1].itertuples():
            mk, pk = r.iteration_time_s * 1e3, r.pred * 1e3
            out.append({"job": job, "network": getattr(r, "network_label", "") or "", "nodes": r.nodes, "gpus": r.n_gpus, "1 GPU meas": m1, "1 GPU pred": p1,
                        "node meas": mn, "node pred": pn, "N nodes meas": mk, "N nodes pred": pk,
                        "+node meas": mn - m1, "+node pred": pn - p1, "+network meas": mk - mn, "+network pred": pk - pn})
    return pd.DataFrame(out)
