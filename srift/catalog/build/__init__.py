"""Build the bundled catalog (configs/catalog/<cloud>.csv) from the source catalogs copied under data/.

``build_all(data)`` returns, per cloud, the CSV text and a short report of what was left out or
flagged; scripts/build_catalog.py writes the files. The build is deterministic: the same data
gives byte-identical CSVs (a test checks the bundled files against it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from srift.catalog.build import aws, azure, gcp, lambda_cloud
from srift.catalog.build.common import Row, sort_rows
from srift.catalog.instances import rows_to_csv


@dataclass
class CloudBuild:
    """One cloud's built catalog."""

    cloud: str
    rows: list[Row]
    report: dict[str, object] = field(default_factory=dict)

    @property
    def csv(self) -> str:
        return rows_to_csv(self.rows)


def build_all(data: Path) -> list[CloudBuild]:
    """Every cloud's rows, sorted, from ``data`` (the repository's data/ folder)."""
    gcp_rows, gcp_report = gcp.build(data)
    azure_rows, azure_report = azure.build(data)
    return [
        CloudBuild("aws", sort_rows(aws.build(data))),
        CloudBuild("gcp", sort_rows(gcp_rows), gcp_report),
        CloudBuild("lambda", sort_rows(lambda_cloud.build(data))),
        CloudBuild("azure", sort_rows(azure_rows), azure_report),
    ]
