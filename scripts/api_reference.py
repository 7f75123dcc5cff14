"""The Python API reference (docs/api.md) written from the code's own signatures and docstrings.

``scripts/render_docs.py`` fills each ``<!-- api:NAME -->`` block with ``reference(NAME)``; its
``--check`` (tests/test_docs.py) fails when a signature or docstring changed and the page did not.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from typing import Any

#: What each block documents: (module, names) in the order a reader meets them.
SECTIONS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "inputs": (("srift.job", ("Job",)), ("srift.search.limits", ("Constraints",))),
    "functions": (("srift.api", ("predict", "recommend", "check", "compare", "load_baseline", "launch_plan",
                                 "recommended_plan", "catalog_list", "catalog_gpus", "catalog_show", "catalog_refresh",
                                 "copy_examples", "profile_model", "profile_script", "calibrate_comm")),),
    "results": (("srift.results", ("PredictResult", "RecommendResult", "CheckResult", "LaunchPlan")),
                ("srift.simulate.prediction", ("Prediction",))),
}


SECTION = re.compile(r"^(Args|Arguments|Attributes|Returns|Raises|Yields):$")


def _markdown(doc: str | None) -> str:
    """A docstring as markdown: double backticks become single ones, and the Google-style
    sections (``Args:``, ``Attributes:``, ...) bold headings over bullet lists."""
    lines: list[str] = []
    for line in inspect.cleandoc(doc or "(no docstring)").splitlines():
        named = re.match(r"^    (\*{0,2}[A-Za-z_][\w.]*): ?(.*)$", line)
        if SECTION.match(line):
            lines += [f"**{line[:-1]}**", ""]
        elif named:
            lines.append(f"- `{named[1]}`: {named[2]}".rstrip())
        elif line.startswith("    "):
            lines.append("  " + line.strip())
        else:
            lines.append(line)
    return re.sub(r"``(.+?)``", r"`\1`", "\n".join(lines))


def _annotation(value: Any) -> str:
    text = value if isinstance(value, str) else getattr(value, "__name__", repr(value))
    return text.replace("'", "")


def signature(fn: Any) -> str:
    """``name(arg: type = default, ...) -> type`` as written in the source (annotations unevaluated)."""
    sig = inspect.signature(fn)
    parts = []
    for p in sig.parameters.values():
        part = p.name if p.annotation is inspect.Parameter.empty else f"{p.name}: {_annotation(p.annotation)}"
        if p.default is not inspect.Parameter.empty:
            part += f" = {p.default!r}"
        parts.append(part)
    returns = "" if sig.return_annotation is inspect.Signature.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"{fn.__name__}({', '.join(parts)}){returns}"


def _fields(cls: type) -> list[str]:
    rows = ["| field | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f"`{f.default!r}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{f.default_factory()!r}`"
        else:
            default = "required"
        kind, default = (text.replace("|", "\\|") for text in (_annotation(f.type), default))  # GitHub reads \\| in a cell as |
        rows.append(f"| `{f.name}` | `{kind}` | {default} |")
    return rows


def entry(module: str, name: str) -> str:
    """One function's or dataclass's section: its heading, signature or fields, and docstring."""
    obj = getattr(importlib.import_module(module), name)
    if dataclasses.is_dataclass(obj) and isinstance(obj, type):
        body = [f"### `{module}.{name}`", "", _markdown(obj.__doc__), "", *_fields(obj)]
    else:
        body = [f"### `{module}.{name}`", "", "```python", signature(obj), "```", "", _markdown(obj.__doc__)]
    return "\n".join(body) + "\n"


def reference(section: str) -> str:
    """Every entry of ``SECTIONS[section]``, one after the other."""
    return "\n".join(entry(module, name) for module, names in SECTIONS[section] for name in names)
