"""The EC2 GPU instance catalog: bundled CSVs (configs/aws/) and a boto3 refresh into a user cache."""

from srift.catalog.instances import Instance, get_instance, load_catalog

__all__ = ["Instance", "get_instance", "load_catalog"]
