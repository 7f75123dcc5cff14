"""Expected throughput and cost of a job on spot (preemptible) nodes.

Assumptions (also in docs/simulator.md):
- Interruptions arrive as a Poisson process; each spot node is reclaimed at its catalog rate
  (``NodeGroup.interruption_per_hour``), so the cluster's rate is the sum over its spot nodes.
  On-demand nodes are never reclaimed.
- DDP runs with a fixed world size: any interruption stops every rank. The job restarts from its
  last checkpoint once a replacement node is up: a restart costs the node's start-up time
  (87 s, the median provisioning + staging + booting of preemptible GPU VMs measured by CM-DARE,
  its repository's data/processed_data/startup_time, not copied to data/) plus 60 s to restart the
  job (process launch, NCCL set-up, loading the checkpoint), an assumption.
- The job checkpoints model and optimizer state every T seconds, T from Young's rule
  T = sqrt(2 C / rate), clipped to [5 min, 2 h]; a checkpoint takes C = 10 s + state bytes / 1 GB/s
  (an assumed write rate to local NVMe or S3). On average half an interval of work is lost per
  interruption. A job with on-demand nodes in the mix checkpoints the same way (the on-demand node
  keeps the data and the rendezvous alive, but DDP still restarts the whole group).
- Useful fraction of wall time: (1 - rate * (R + T/2)) / (1 + C/T), floored at 0. The bill runs
  the whole time (replacement minutes are billed too, a small overestimate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from srift.cluster import Cluster
from srift.job import usd_per_million_samples

VM_STARTUP_S = 87.0
JOB_RESTART_S = 60.0
CHECKPOINT_FIXED_S = 10.0
CHECKPOINT_BYTES_PER_S = 1e9
MIN_INTERVAL_S, MAX_INTERVAL_S = 300.0, 7200.0
RESTART_S = VM_STARTUP_S + JOB_RESTART_S
ASSUMPTIONS = ("Poisson interruptions at the catalog rate; any interruption restarts the whole DDP job "
               "from its last checkpoint (Young's interval); see srift/simulate/spot.py")


@dataclass(frozen=True)
class SpotExpectation:
    """Expected values of a job on a cluster with spot nodes (see module docstring).

    Attributes:
        interruptions_per_hour: Expected interruptions of the whole cluster per hour.
        useful_fraction: Share of wall time that trains (restarts, lost work and checkpoints aside).
        expected_throughput_samples_per_s: Throughput x useful fraction.
        expected_cost_per_hour_usd: What the cluster bills per hour (None when unpriced).
        expected_usd_per_million_samples: Cost of a million samples at the expected throughput.
        checkpoint_interval_s: Seconds between checkpoints (Young's rule, clipped).
        checkpoint_s: Seconds one checkpoint takes.
        restart_s: Seconds from an interruption to training again.
        assumptions: What the figures rest on.
    """

    interruptions_per_hour: float
    useful_fraction: float
    expected_throughput_samples_per_s: float
    expected_cost_per_hour_usd: float | None
    expected_usd_per_million_samples: float | None
    checkpoint_interval_s: float
    checkpoint_s: float
    restart_s: float
    assumptions: str = ASSUMPTIONS


def checkpoint_interval_s(interruptions_per_hour: Any, checkpoint_s: Any) -> Any:
    """Seconds between checkpoints: Young's rule sqrt(2 C / rate), clipped to [5 min, 2 h]
    (the longest without interruptions). Takes arrays of rates too."""
    rate_per_s = np.asarray(interruptions_per_hour, dtype=float) / 3600.0
    with np.errstate(divide="ignore"):
        young = np.where(rate_per_s > 0, np.sqrt(2.0 * checkpoint_s / np.maximum(rate_per_s, 1e-300)), MAX_INTERVAL_S)
    out = np.clip(young, MIN_INTERVAL_S, MAX_INTERVAL_S)
    return out if isinstance(interruptions_per_hour, np.ndarray) else float(out)


def useful_fraction(interruptions_per_hour: Any, checkpoint_s: Any) -> Any:
    """Share of wall time that trains: (1 - rate (R + T/2)) / (1 + C/T), floored at 0, for a cluster
    interrupted ``interruptions_per_hour`` times per hour whose checkpoint takes ``checkpoint_s``
    (module docstring). Takes arrays of rates too, so a search prices every region's rate at once."""
    interval = checkpoint_interval_s(interruptions_per_hour, checkpoint_s)
    rate_per_s = np.asarray(interruptions_per_hour, dtype=float) / 3600.0
    out = np.maximum(0.0, 1.0 - rate_per_s * (RESTART_S + interval / 2.0)) / (1.0 + checkpoint_s / interval)
    return out if isinstance(interruptions_per_hour, np.ndarray) else float(out)


def checkpoint_s_for(state_bytes: float) -> float:
    """Seconds one checkpoint of ``state_bytes`` takes."""
    return CHECKPOINT_FIXED_S + state_bytes / CHECKPOINT_BYTES_PER_S


def expectation(interruptions_per_hour: float, checkpoint_s: float, throughput: float,
                cost_per_hour: float | None) -> SpotExpectation:
    """Expected values of a cluster interrupted ``interruptions_per_hour`` times per hour (all its
    spot nodes together) whose checkpoint takes ``checkpoint_s``."""
    useful = useful_fraction(interruptions_per_hour, checkpoint_s)
    exp_tp = throughput * useful
    return SpotExpectation(
        interruptions_per_hour=interruptions_per_hour,
        useful_fraction=useful,
        expected_throughput_samples_per_s=exp_tp,
        expected_cost_per_hour_usd=cost_per_hour,  # the bill runs the whole time
        expected_usd_per_million_samples=usd_per_million_samples(cost_per_hour, exp_tp),
        checkpoint_interval_s=checkpoint_interval_s(interruptions_per_hour, checkpoint_s),
        checkpoint_s=checkpoint_s,
        restart_s=RESTART_S,
    )


def spot_expectation(cluster: Cluster, state_bytes: float, throughput: float, cost_per_hour: float | None) -> SpotExpectation | None:
    """Expected values under interruptions, or None when the cluster has no spot node.

    Args:
        cluster: The cluster (node groups with ``spot`` and ``interruption_per_hour``).
        state_bytes: Bytes a checkpoint writes (weights + optimizer state).
        throughput: Samples per second without interruptions.
        cost_per_hour: Cluster price per hour (None when unpriced).
    """
    spot_nodes = sum(g.count for g in cluster.node_groups if g.spot)
    if spot_nodes == 0:
        return None
    rate_per_hour = sum(g.count * g.interruption_per_hour for g in cluster.node_groups if g.spot)
    return expectation(rate_per_hour, checkpoint_s_for(state_bytes), throughput, cost_per_hour)
