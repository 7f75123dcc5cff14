"""The GPU instance catalog of AWS (every region), GCP, Lambda and Azure.

Selection and prices (``srift.catalog.load``):
    load_catalog(infra="aws")          rows of ``--infra`` (``aws``, ``aws/us-west-2``, ``gcp,lambda``;
                                       a bare AWS region as before); ``Instance.hardware_key``
                                       groups rows that predict alike
    get_instance(type, infra)          one row (the cheapest region when several are selected)
    regions(cloud)                     regions with prices
    catalog_as_of(cloud, region=None)  age and source (bundled or refreshed) of the prices
Facts about an instance:
    facts_for(instance)                links, network, transport, EFA, unknowns (srift.catalog.network)
    supported(instance)                does a current PyTorch CUDA wheel run on it (srift.catalog.support)
Refresh: ``srift.catalog.aws.refresh`` (AWS public price list and Spot Advisor; spot history with
credentials). Build: scripts/build_catalog.py (``srift.catalog.build``).
"""

from srift.catalog.infra import InfraTarget, parse_infra
from srift.catalog.instances import Instance
from srift.catalog.load import CatalogAsOf, catalog_as_of, clear_cache, get_instance, load_catalog, regions
from srift.catalog.network import NetworkFacts, facts_for
from srift.catalog.support import supported

__all__ = [
    "CatalogAsOf", "InfraTarget", "Instance", "NetworkFacts", "catalog_as_of", "clear_cache", "facts_for",
    "get_instance", "load_catalog", "parse_infra", "regions", "supported",
]
