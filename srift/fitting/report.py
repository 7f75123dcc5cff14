"""Every breakdown row ``scripts/validate.py`` prints, kept for the docs that quote them.

``accuracy.json`` holds the figures predictions quote; this holds the rest of the printed table
(a group by source, precision, link or network), written beside it as ``validation.json`` by
``--write-accuracy`` so that docs/accuracy.md reads each cell from it (scripts/render_docs.py
``<!-- fig:validation#SECTION.ROW.FIGURE -->``) instead of typing it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from srift.fitting.validation import mape

SCHEMA = "srift.perf.validation/v1"

#: A prediction column of the validation frame and the figure it becomes (accuracy.json's names).
_COLUMNS = (("pred", "fit"), ("logo", "logo"), ("lomo", "lomo"), ("loso", "loso"), ("lono", "lono"),
            ("from_one", "from_one"))


def slug(label: str) -> str:
    """A printed row's label as a key: lower case, runs of other characters as one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


@dataclass
class Report:
    """The rows of one validation run: ``section -> row -> figure`` (MAPE %, ``signed_pct``: the
    mean of predicted / measured - 1 in %, positive = predicted too slow)."""

    meas_col: str
    sections: dict[str, dict[str, dict[str, float | int]]] = field(default_factory=dict)

    def add(self, section: str, label: str, rows: pd.DataFrame) -> None:
        figures: dict[str, float | int] = {"rows": int(len(rows))}
        if len(rows):
            measured = rows[self.meas_col]
            for col, name in _COLUMNS:
                if col in rows and rows[col].notna().all():
                    figures[name] = round(mape(rows[col], measured), 1)
            figures["signed_pct"] = round(float((rows["pred"] / measured - 1.0).mean() * 100.0), 1) + 0.0
        self.sections.setdefault(section, {})[slug(label)] = figures

    def put(self, section: str, label: str, figures: dict[str, float | int]) -> None:
        """A printed row whose figures are not a MAPE over prediction columns (a count, a fitted
        constant, a signed error): as the script computed them, floats to one decimal."""
        self.sections.setdefault(section, {})[slug(label)] = {
            k: (round(float(v), 1) + 0.0 if isinstance(v, float) else int(v)) for k, v in figures.items()}

    def write(self, accuracy_path: Path) -> Path:
        """``validation.json`` beside ``accuracy_path``, atomically; its path. Sections this run
        computed replace the file's; the others (another script's, a group run apart) stay."""
        return merge(accuracy_path.with_name("validation.json"), self.sections)


def merge(target: Path, sections: dict[str, dict[str, dict[str, float | int]]]) -> Path:
    """Write ``sections`` into the validation.json at ``target``, keeping its other sections."""
    from srift.files import write_json

    kept: dict[str, dict[str, dict[str, float | int]]] = {}
    if target.exists():
        kept = json.loads(target.read_text(encoding="utf-8")).get("sections", {})
    write_json(target, {"schema": SCHEMA, "source": "scripts/validate.py and scripts/validate_memory.py "
                                                    "(every printed breakdown row)",
                        "sections": dict(sorted({**kept, **sections}.items()))})
    return target
