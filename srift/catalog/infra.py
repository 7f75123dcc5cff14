"""Which clouds and regions to search: SkyPilot's ``--infra`` spelling, parsed and validated.

``aws`` (every AWS region), ``aws/us-west-2``, ``gcp,lambda``, ``azure/eastus``; several parts
joined by commas or given as a list. A bare region (``us-west-2``) means an AWS region, as
``--region`` always has. srift prices per region, so a zone (``aws/us-east-1/us-east-1a``) is
refused with a hint.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from srift.catalog.instances import CLOUDS
from srift.errors import SriftError

EXAMPLES = "e.g. --infra aws, --infra aws/us-west-2 or --infra gcp,lambda"


@dataclass(frozen=True)
class InfraTarget:
    """One part of an ``--infra`` value: a cloud, and one region of it or all (``region`` None)."""

    cloud: str
    region: str | None = None

    def __str__(self) -> str:
        return self.cloud if self.region is None else f"{self.cloud}/{self.region}"


def _parts(infra: str | Sequence[str]) -> list[str]:
    items: Iterable[str] = [infra] if isinstance(infra, str) else infra
    out = []
    for item in items:
        if not isinstance(item, str):
            raise SriftError(f"--infra takes text, got {item!r}.", f"pass clouds and regions, {EXAMPLES}.")
        out += [p.strip() for p in item.split(",")]
    return out


def parse_infra(infra: str | Sequence[str]) -> tuple[InfraTarget, ...]:
    """Parse an ``--infra`` value (syntax only; ``load_catalog`` checks the regions exist).

    Raises:
        SriftError: for an empty part, an unknown cloud (naming the known ones) or a zone.
    """
    parts = _parts(infra)
    if not parts or any(not p for p in parts):
        raise SriftError(f"--infra {infra!r} has an empty part.", f"name clouds and regions, {EXAMPLES}.")
    targets: list[InfraTarget] = []
    for part in parts:
        pieces = [p.strip() for p in part.split("/")]
        if any(not p for p in pieces):
            raise SriftError(f"'{part}' in --infra is not CLOUD or CLOUD/REGION.", f"write it as {EXAMPLES}.")
        head = pieces[0].lower()
        if head not in CLOUDS:
            if len(pieces) == 1 and any(ch.isdigit() for ch in head):
                targets.append(InfraTarget("aws", head))  # a bare region: AWS, as --region
                continue
            from srift.errors import closest

            near = closest(head, list(CLOUDS))
            raise SriftError(
                f"unknown cloud '{pieces[0]}' in --infra" + (f" (did you mean {', '.join(near)}?)" if near else "") + ".",
                f"srift knows {', '.join(CLOUDS)}; {EXAMPLES}.",
            )
        if len(pieces) > 2:
            raise SriftError(f"'{part}' names a zone; srift prices per region.",
                             f"drop the zone: --infra {head}/{pieces[1]}.")
        region = pieces[1] if len(pieces) == 2 else None
        # Azure regions are lower case; AWS/GCP/Lambda region names are too.
        targets.append(InfraTarget(head, region.lower() if region else None))
    # A whole cloud covers its regions; keep the order the user gave.
    whole = {t.cloud for t in targets if t.region is None}
    out: list[InfraTarget] = []
    for t in targets:
        if (t.region is not None and t.cloud in whole) or t in out:
            continue
        out.append(t)
    return tuple(out)
