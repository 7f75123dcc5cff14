"""Small helpers shared by the command modules (output formats, JSON printing)."""

from __future__ import annotations

import json
from typing import Any

from srift.errors import SriftError

FORMATS = ("table", "json", "markdown")


def check_format(fmt: str, allowed: tuple[str, ...] = ("table", "json")) -> str:
    """Validate a --format value."""
    if fmt not in allowed:
        raise SriftError(f"unknown format '{fmt}'.", f"use --format {' or '.join(allowed)}.")
    return fmt


def print_json(data: Any) -> None:
    """Print JSON to stdout (indented, stable)."""
    print(json.dumps(data, indent=2, default=_default))


def _default(obj: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)  # type: ignore[arg-type]
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
