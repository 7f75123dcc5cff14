"""What the commands share when parsing flags: output formats."""

from __future__ import annotations

from srift.errors import SriftError

FORMATS = ("table", "json", "markdown")


def check_format(fmt: str, allowed: tuple[str, ...] = ("table", "json")) -> str:
    """Validate a --format value."""
    if fmt not in allowed:
        raise SriftError(f"unknown format '{fmt}'.", f"use --format {' or '.join(allowed)}.")
    return fmt
