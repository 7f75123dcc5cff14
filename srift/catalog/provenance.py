"""Where a price comes from: its source, its date, and whether it is estimated or suspect.

Every price srift shows carries a ``PriceProvenance``. A price is **estimated** when srift derived
it rather than read it (an on-demand price rebased to a newer list price, a spot price from the
Spot Advisor's average savings) and **suspect** when the catalog flags it (GCP prices that span more
than 2x across regions). Tables mark either with ``~`` before the price and a legend; JSON rows
carry ``price_source`` and ``price_estimated``; the sentence on why a row wins says so.

A price's date: a list price's ``as_of`` (Karpenter's us-east-1 list, or a refresh's price-list
publication date); bundled spot prices come from SkyPilot snapshots that record no date
(``undated snapshot``); a refreshed spot price is as of the refresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from srift.catalog.instances import FLAG_ON_DEMAND_REBASED, FLAG_SUSPECT_PRICE, Instance
from srift.catalog.load import REFRESH_SOURCE_PREFIX

ESTIMATE_MARK = "~"


@dataclass(frozen=True)
class PriceProvenance:
    """Source, date and trust of one price (or of a configuration's prices together).

    Attributes:
        source: ``list price 2026-07-20 (karpenter-aws@1d927085)``, ``undated spot snapshot (...)``.
        estimated: srift derived the price (see ``reasons``).
        suspect: The catalog flags the price as doubtful.
        reasons: Why it is estimated or suspect, one short phrase each ("" when neither).
    """

    source: str
    estimated: bool = False
    suspect: bool = False
    reasons: tuple[str, ...] = ()

    @property
    def marked(self) -> bool:
        """True when the price must carry the ``~`` mark."""
        return self.estimated or self.suspect

    def to_dict(self) -> dict[str, object]:
        return {"price_source": self.source, "price_estimated": self.estimated, "price_suspect": self.suspect,
                "price_notes": list(self.reasons)}


def _origin(source: str, spot: bool = False) -> str:
    """What the price was read from: the source column without the rebase note; for a spot price,
    the part that names the spot source where the column names several."""
    parts = source.split("; on-demand rebased")[0].split("; ")
    if spot:
        parts = [p for p in parts if "spot" in p.lower()] or parts
    return "; ".join(parts)


def price_provenance(inst: Instance, spot: bool) -> PriceProvenance:
    """The provenance of a row's spot or on-demand price (module docstring)."""
    refreshed = inst.source.startswith(REFRESH_SOURCE_PREFIX)
    reasons: list[str] = []
    if spot:
        date = inst.as_of if refreshed and inst.as_of else ""
        origin = _origin(inst.source, spot=True)
        source = f"spot price refreshed {date} ({origin})" if date else f"undated spot snapshot ({origin})"
        if inst.spot_estimated:
            reasons.append(f"{inst.instance_type} spot price estimated from the Spot Advisor's average savings")
    else:
        source = (f"list price {inst.as_of} ({_origin(inst.source)})" if inst.as_of
                  else f"undated snapshot price ({_origin(inst.source)})")
        if FLAG_ON_DEMAND_REBASED in inst.flags:
            reasons.append(f"{inst.instance_type} in {inst.region}: on-demand price rebased to the newer us-east-1 list price")
    estimated = bool(reasons)
    if FLAG_SUSPECT_PRICE in inst.flags:
        reasons.append(f"{inst.instance_type}: {inst.cloud}'s price of this GPU varies more than 2x across regions (suspect-price)")
    return PriceProvenance(source=source, estimated=estimated, suspect=FLAG_SUSPECT_PRICE in inst.flags, reasons=tuple(reasons))


def combined(provenances: Iterable[PriceProvenance]) -> PriceProvenance:
    """The provenance of a configuration's total price: estimated or suspect when any part is."""
    items = list(provenances)
    return PriceProvenance(
        source="; ".join(dict.fromkeys(p.source for p in items)),
        estimated=any(p.estimated for p in items), suspect=any(p.suspect for p in items),
        reasons=tuple(dict.fromkeys(r for p in items for r in p.reasons)),
    )


def marked_usd(text: str, provenance: PriceProvenance | None) -> str:
    """``~$6.90`` for an estimated or suspect price, else the text as it is."""
    return ESTIMATE_MARK + text if provenance is not None and provenance.marked else text
