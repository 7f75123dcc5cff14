"""Stream-parse AWS Price List offer files (``.../AmazonEC2/current/{region}/index.json``) in bounded memory.

A region's EC2 offer file is hundreds of MB to GB of JSON: ``products`` (SKU -> attributes), then
``terms`` (``OnDemand`` and ``Reserved``: SKU -> term code -> price dimensions). Only the members
srift needs are decoded, one at a time (a product or one SKU's terms: a few KB); everything else
is skipped member by member, so memory stays around the read buffer (a few MB) whatever the size.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

_CHUNK_CHARS = 1 << 20
# The longest single value decoded whole (a product or one SKU's terms are a few KB): a hostile
# file's endless string or array is refused at this size instead of filling memory.
MAX_VALUE_CHARS = 16 << 20
_WS = " \t\n\r"
_DECODER = json.JSONDecoder()

# Product attributes of an on-demand Linux, shared-tenancy, no-preinstalled-software instance hour.
ON_DEMAND_LINUX = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}


class _Reader:
    """A JSON text stream read token by token, with a buffer that drops what was consumed."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.eof = False

    def _fill(self) -> bool:
        if self.eof:
            return False
        if self.pos > _CHUNK_CHARS:  # keep memory bounded: drop the consumed prefix
            self.buf, self.pos = self.buf[self.pos:], 0
        if len(self.buf) - self.pos > MAX_VALUE_CHARS:  # one value (a product, a SKU's terms) beyond any real one
            raise ValueError(f"offer file: a value at offset {self.pos} is longer than {MAX_VALUE_CHARS:,} characters")
        data = self._stream.read(_CHUNK_CHARS)
        if not data:
            self.eof = True
            self.buf += self._utf8.decode(b"", final=True)
            return False
        self.buf += self._utf8.decode(data)
        return True

    def peek(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                raise ValueError("unexpected end of the offer file")

    def take(self, char: str) -> None:
        if self.peek() != char:
            raise ValueError(f"offer file: expected {char!r} at offset {self.pos}, found {self.buf[self.pos]!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next JSON value whole (used for small values only)."""
        self.peek()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self._fill():
                    continue
                raise ValueError(f"offer file: malformed JSON at offset {self.pos}") from None
            if end == len(self.buf) and not self.eof and self._fill():
                continue  # a number may go on in the next chunk
            self.pos = end
            return obj

    def members(self) -> Iterator[str]:
        """Keys of the object that starts here; the caller consumes each value before the next key."""
        self.take("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise ValueError("offer file: an object key is not a string")
            self.take(":")
            yield key
            sep = self.peek()
            self.pos += 1
            if sep == "}":
                return
            if sep != ",":
                raise ValueError(f"offer file: expected ',' or '}}' at offset {self.pos - 1}")

    def skip(self, depth: int = 0) -> None:
        """Skip the next value; containers near the top are walked member by member (never decoded whole)."""
        first = self.peek()
        if depth >= 2 or first not in "{[":
            self.value()
        elif first == "{":
            for _ in self.members():
                self.skip(depth + 1)
        else:
            self.pos += 1
            if self.peek() == "]":
                self.pos += 1
                return
            while True:
                self.skip(depth + 1)
                sep = self.peek()
                self.pos += 1
                if sep == "]":
                    return
                if sep != ",":
                    raise ValueError("offer file: expected ',' or ']'")


@dataclass
class OfferPrices:
    """What a region's offer file says about the wanted types."""

    on_demand_usd_per_hour: dict[str, float]
    publication_date: str  # ISO date of the offer file ("" when absent)


def _hourly_usd(term_set: Any) -> float | None:
    """The first positive, finite hourly USD price of one SKU's terms; None when there is none.

    Raises:
        ValueError: for terms that are not in the offer file's structure.
    """
    try:
        for term in term_set.values():
            for dim in term.get("priceDimensions", {}).values():
                usd = dim.get("pricePerUnit", {}).get("USD")
                if str(dim.get("unit", "Hrs")).lower().startswith("hr") and usd not in (None, ""):
                    price = float(usd)
                    if 0 < price < math.inf:  # NaN fails too
                        return price
    except (AttributeError, TypeError) as exc:
        raise ValueError(f"offer file: terms not in the expected structure ({type(exc).__name__})") from None
    return None


def on_demand_prices(stream: IO[bytes], instance_types: set[str]) -> OfferPrices:
    """On-demand Linux prices (shared tenancy, no pre-installed software, capacity ``Used``) of the wanted types.

    Raises:
        ValueError: for a file that is not an offer file.
    """
    reader = _Reader(stream)
    sku_type: dict[str, str] = {}
    early_terms: dict[str, float] = {}  # OnDemand terms seen before products (not AWS's order, handled anyway)
    prices: dict[str, float] = {}
    published = ""
    seen_products = False
    for key in reader.members():
        if key == "products":
            seen_products = True
            for sku in reader.members():
                product = reader.value()
                attrs = product.get("attributes", {}) if isinstance(product, dict) else None
                if not isinstance(attrs, dict):
                    raise ValueError(f"offer file: product {sku[:40]!r} is not an object with 'attributes'")
                if attrs.get("instanceType") in instance_types and all(attrs.get(k) == v for k, v in ON_DEMAND_LINUX.items()):
                    sku_type[sku] = attrs["instanceType"]
        elif key == "terms":
            for term_type in reader.members():
                if term_type != "OnDemand":
                    reader.skip(depth=1)
                    continue
                for sku in reader.members():
                    if seen_products and sku not in sku_type:
                        reader.skip(depth=2)
                        continue
                    price = _hourly_usd(reader.value())
                    if price is not None:
                        early_terms[sku] = price
        elif key == "publicationDate":
            published = str(reader.value())[:10]
        else:
            reader.skip()
    for sku, price in early_terms.items():
        itype = sku_type.get(sku)
        if itype is not None:
            prices[itype] = min(price, prices.get(itype, price))  # one SKU per type in practice
    if not seen_products:
        raise ValueError("offer file: no 'products'")
    return OfferPrices(prices, published)
