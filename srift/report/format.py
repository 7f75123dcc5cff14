"""Formatting shared by the renderers: money, durations, sizes, the typical-error sentence, JSON."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from rich.console import Console

from srift.bounds import ascii_integer
from srift.results import STALE_AFTER_DAYS
from srift.outputs import atomic_write_text


def console(width: int = 140) -> Console:
    """A rich console as wide as ``$COLUMNS`` when set (also when piped), else the terminal, else
    ``width`` columns when output goes to a file or a pipe (wide enough for the tables)."""
    return Console(width=terminal_columns() or (None if sys.stdout.isatty() else width))


def terminal_columns() -> int | None:
    """``$COLUMNS`` as a positive number of columns, or None when unset or not a number."""
    columns = ascii_integer(os.environ.get("COLUMNS", ""))
    return columns if columns else None


def usd(v: float | None, digits: int = 2) -> str:
    """``$1,234.50``; a negative amount as ``-$60.34`` (not ``$-60.34``)."""
    if v is None:
        return "-"
    return ("-" if v < 0 and round(v, digits) != 0 else "") + f"${abs(v):,.{digits}f}"


def plural(n: int, word: str) -> str:
    """``1 GPU``, ``12 GPUs``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# Letters whose spoken name starts with a vowel sound: "an H100", "an L40S", "a T4", "a V100".
_VOWEL_SOUND_LETTERS = "AEFHILMNORSX"


def with_article(name: str) -> str:
    """``an A10G``, ``an L40S``, ``a T4``: a GPU or instance name with the article read aloud."""
    return ("an " if name[:1].upper() in _VOWEL_SOUND_LETTERS else "a ") + name


def usd_per_million_tokens(pred: Any) -> float | None:
    """What a million tokens cost (sequence models; spot interruptions included), else None."""
    tokens = pred.expected_throughput_tokens_per_s
    if tokens is None or pred.cost_per_hour_usd is None or tokens <= 0:
        return None
    return pred.cost_per_hour_usd / (tokens * 3600.0) * 1e6


def seconds(v: float) -> str:
    if v >= 1:
        return f"{v:.2f} s"
    if v >= 1e-3:
        return f"{v * 1e3:.1f} ms"
    return f"{v * 1e6:.0f} us"


def gib(v: float) -> str:
    return f"{v / 2**30:.1f} GiB"


def error_text(pct: float | None, basis: str) -> str:
    """``±9.9 % (what it rests on)``, or why there is no figure."""
    if pct is None:
        return basis or "unknown"
    return f"±{pct:.1f} % ({basis})"


def price_lines(ages: Mapping[str, Any]) -> list[str]:
    """Where the prices come from and how old they are (one line), then one warning line when any
    are older than STALE_AFTER_DAYS or undated. ``ages``: target -> srift.results.PriceAge."""
    if not ages:
        return []
    parts = []
    for key, a in ages.items():
        when = f"as of {a.as_of}, {a.age_days} days old" if a.as_of else "date not recorded"
        undated = f", {a.undated_rows:,} of {a.rows:,} rows undated" if a.as_of and a.undated_rows else ""
        parts.append(f"{key} {when} ({a.source}{undated})")
    lines = ["Prices: " + "; ".join(parts) + "."]
    old = [k for k, a in ages.items() if a.stale]
    if old:
        aws = any(k.split("/")[0] == "aws" for k in old)
        lines.append(f"Warning: prices of {', '.join(old)} are over {STALE_AFTER_DAYS} days old or undated"
                     + ("; `srift catalog refresh --infra aws` re-prices AWS from its public price list." if aws
                        else "; other clouds are re-priced by rebuilding the catalog (scripts/build_catalog.py)."))
    return lines


def print_json(data: Any) -> None:
    """Print JSON to stdout (indented, stable)."""
    print(json.dumps(data, indent=2, default=_default))


def save_json(path: str, data: Any) -> None:
    """Write the JSON document a command prints to ``path`` as well (``--out-file``), atomically."""
    atomic_write_text(path, json.dumps(data, indent=2, default=_default) + "\n")


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def signed_pct(fraction: float) -> str:
    """A relative change as a signed percentage: whole percents, one decimal below 1 % so that a
    small difference never reads "-0%" (-0.0017 -> "-0.2%"); exactly zero is "0%"."""
    if fraction == 0:
        return "0%"
    return f"{fraction:+.1%}" if abs(fraction) < 0.01 else f"{fraction:+.0%}"
