"""Read one region's EC2 price list as AWS publishes it in CSV
(``https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/{region}/index.csv``),
row by row with the standard library's csv module (each line read with a bound), so memory stays
at one row whatever the size.

The file is five ``"name","value"`` lines (``FormatVersion``, ``Disclaimer``, ``Publication Date``,
``Version``, ``OfferCode``), a header, then one row per SKU, term and price dimension. The columns
read here are the ones SkyPilot's price fetcher reads from the same file
(sky/catalog/data_fetchers/fetch_aws.py of skypilot 0.14.1: ``skiprows=5``, ``TermType``,
``Operating System``, ``Pre Installed S/W``, ``CapacityStatus``, ``Tenancy``, ``Instance Type``,
``PricePerUnit``), with ``Unit`` and ``Currency``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

PREAMBLE_LINES = 5
# An on-demand Linux, shared-tenancy, no-preinstalled-software instance hour (capacity ``Used``:
# not an unused capacity reservation).
ON_DEMAND_LINUX = {"TermType": "OnDemand", "Operating System": "Linux", "Tenancy": "Shared", "Pre Installed S/W": "NA",
                   "CapacityStatus": "Used"}
MAX_LINE_BYTES = 1 << 20  # a real row is about 2 KB
COLUMNS = (*ON_DEMAND_LINUX, "Instance Type", "PricePerUnit", "Unit", "Currency")


def _lines(stream: IO[bytes]) -> Iterator[str]:
    """The file's lines, each read with a bound: an endless line is refused, never held whole."""
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            raise ValueError(f"price list: a line is longer than {MAX_LINE_BYTES:,} bytes")
        yield line.decode("utf-8")


@dataclass
class OfferPrices:
    """What a region's price list says about the wanted types."""

    on_demand_usd_per_hour: dict[str, float]
    publication_date: str  # ISO date of the price list ("" when absent)


def on_demand_prices(stream: IO[bytes], instance_types: set[str]) -> OfferPrices:
    """On-demand Linux hourly USD prices of the wanted types (the lowest when several rows match).

    Raises:
        ValueError: for a file that is not an EC2 price list CSV (no header with these columns, a
            row of another length, a price that is not a number, a field over csv's size limit).
    """
    reader = csv.reader(_lines(stream))
    try:
        published = ""
        for _ in range(PREAMBLE_LINES):
            line = next(reader, None)
            if line is None:
                raise ValueError("price list: it ends before its header")
            if len(line) == 2 and line[0] == "Publication Date":
                published = line[1][:10]
        header = next(reader, [])
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise ValueError(f"price list: no column {missing[0]!r} in its header")
        at = {c: header.index(c) for c in COLUMNS}
        prices: dict[str, float] = {}
        for row in reader:
            if len(row) != len(header):
                raise ValueError(f"price list: line {reader.line_num} has {len(row)} fields, the header {len(header)}")
            itype = row[at["Instance Type"]]
            if itype not in instance_types or any(row[at[k]] != v for k, v in ON_DEMAND_LINUX.items()):
                continue
            if not row[at["Unit"]].lower().startswith("hr") or row[at["Currency"]] != "USD":
                continue
            price = float(row[at["PricePerUnit"]])
            if 0 < price < math.inf:  # NaN fails too
                prices[itype] = min(price, prices.get(itype, price))
    except csv.Error as exc:  # a field over csv.field_size_limit() (128 KiB), a NUL byte
        raise ValueError(f"price list: {exc}") from None
    return OfferPrices(prices, published)
