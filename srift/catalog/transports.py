"""The network.yaml file and its transports (TCP sockets, EFA, InfiniBand, RoCE, GPUDirect-TCPX):
the one table that says which cluster-file ``network`` class each transport is simulated as."""

from __future__ import annotations

import functools
from typing import Any

from srift.cluster import Network, network_of
from srift.errors import SriftError, unknown_name_error
from srift.files import configs_dir, read_yaml


@functools.lru_cache(maxsize=1)
def network_config() -> dict[str, Any]:
    """The parsed configs/network.yaml (read once)."""
    data = read_yaml(configs_dir() / "network.yaml", "network facts file")
    if not isinstance(data, dict) or data.get("schema") != "srift.network/v1":
        raise SriftError("configs/network.yaml is not a srift.network/v1 file.", "restore it from the repository.")
    return data


def transports() -> dict[str, dict[str, Any]]:
    """The transports of configs/network.yaml by name."""
    return dict(network_config()["transports"])


def cluster_network(transport: str) -> Network:
    """The cluster-file network class (``ethernet``, ``efa``, ``infiniband``, ``roce``) a transport is simulated as.

    Raises:
        SriftError: for a transport configs/network.yaml does not define.
    """
    table = transports()
    if transport not in table:
        raise unknown_name_error("transport", transport, list(table), "configs/network.yaml")
    return network_of(table[transport]["cluster_network"])
