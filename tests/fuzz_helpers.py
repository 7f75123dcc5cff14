"""Mutation fuzzing of srift's loaders through the real command line (in-process ``srift.cli.main``).

A case starts from a shipped document (a profile, a cluster file, a job file, a baseline, a catalog
cache, a fitted-parameter file, a Hugging Face config), applies one to four mutations drawn by
hypothesis (a key deleted, duplicated or renamed, a value swapped for another type, for a huge,
negative, NaN or infinite number, for deep nesting or odd unicode; the text truncated, garbled,
given a YAML alias bomb or a duplicate key), writes it, and runs a command that loads it. The
command must exit 0 (or 1 for a failed check), or exit 2 with one ``Error:`` and one ``To fix:``
line; any other exception escapes ``main`` and fails the test with the document. On success every
number in the JSON output must be finite and (but for margins and changes) not negative.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import io
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from srift.cli import main

Path_ = tuple[Any, ...]

WEIRD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 3, 2**31, 2**63, 10**30, -10**30, 10**400, 0.5, -0.0, -2.5, 1e-320, 1e-300,
    1e308, -1e308, math.nan, math.inf, -math.inf, "", " ", "abc", "1e999", "NaN", "-1", "ñ€😀", "\x00\x01",
    "a\nb", "[bold]x[/y]", "x" * 5000, [], {}, [1, 2], {"a": 1}, [[[[[]]]]], datetime.date(2020, 1, 1),
    "<!-- hidden", "@everyone", "\x1b]0;title\x07\x1b[2J", "a | b", "\u202eevil",  # markdown and terminal injection
]
# Plain values YAML 1.1 reads differently from YAML 1.2 (refused with their line, never read silently).
YAML11_SURPRISES = ["1:30", "1:00:00", "032", "-07", "yes", "No", "on", "OFF"]
SCALE_FACTORS = [-1.0, 0.0, 1e-300, 1e-9, 1e6, 1e300, math.nan, math.inf, 10**20]
BILLION_LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))


def paths(doc: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every path (keys and list indices) into a parsed document, the root included."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def _parent(doc: Any, path: Path_) -> tuple[Any, Any]:
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


def _nest(depth: int) -> Any:
    out: Any = 1
    for _ in range(depth):
        out = [out]
    return out


def mutate_doc(doc: Any, data: st.DataObject, protect: tuple[str, ...] = ()) -> Any:
    """One structural mutation of ``doc`` (a copy), drawn from ``data``."""
    doc = copy.deepcopy(doc)
    # The root last: hypothesis favours the first elements of a sampled list.
    candidates = [p for p in paths(doc) if p and p[-1] not in protect] + [()]
    path = data.draw(st.sampled_from(candidates), label="path")
    op = data.draw(st.sampled_from(["number", "set", "number", "set", "delete", "dup", "wrap", "scale", "set", "rename",
                                    "scale", "deep"]), label="op")
    if not path:  # the whole document
        return data.draw(st.sampled_from(WEIRD_VALUES), label="root")
    parent, key = _parent(doc, path)
    value = parent[key]
    if op == "number":  # a plausible but arbitrary number where one is: what loads must still predict sanely
        parent[key] = data.draw(st.one_of(st.integers(0, 10**7), st.floats(0, 1e13, allow_nan=False)), label="number")
    elif op == "set":
        parent[key] = data.draw(st.sampled_from(WEIRD_VALUES), label="value")
    elif op == "delete":
        del parent[key]
    elif op == "dup":
        if isinstance(parent, list):
            parent.insert(key, copy.deepcopy(value))
        else:
            parent[f"{key}_copy" if isinstance(key, str) else 99] = copy.deepcopy(value)
    elif op == "wrap":
        parent[key] = data.draw(st.sampled_from([[value], {"x": value}, [value, value]]), label="wrap")
    elif op == "scale":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            factor = data.draw(st.sampled_from(SCALE_FACTORS), label="factor")
            try:
                parent[key] = value * factor
            except OverflowError:  # an integer beyond any float, times a float
                parent[key] = -value
        else:
            parent[key] = data.draw(st.sampled_from([-1, 0, 1e300, math.nan]), label="number")
    elif op == "rename" and isinstance(parent, dict):
        parent[data.draw(st.sampled_from([f"{key}x", str(key).upper(), 7]), label="newkey")] = parent.pop(key)
    elif op == "deep":
        parent[key] = _nest(data.draw(st.sampled_from([10, 70, 500]), label="depth"))
    return doc


def mutate_text(text: str, data: st.DataObject, yaml_text: bool) -> str:
    """One textual mutation: truncation, garbage, a duplicated line, an alias bomb, an alias, nothing left."""
    ops = ["garbage", "dupline", "truncate", "empty"] + (["bomb", "alias", "tab", "yaml11", "dupkey"] if yaml_text else [])
    op = data.draw(st.sampled_from(ops), label="text op")
    if op == "truncate":
        return text[: len(text) - data.draw(st.integers(1, max(len(text), 1)), label="cut")]
    if op == "garbage":
        at = data.draw(st.integers(0, len(text)), label="at")
        junk = data.draw(st.sampled_from(["{", "]", ": :", "\x00", "\ufeff", "&a", "*zz", "!!python/object:os.system x",
                                          "\n  - - -", "'", '"', "%YAML 9.9\n---\n", "\t"]), label="junk")
        return text[:at] + junk + text[at:]
    if op == "dupline":
        lines = text.splitlines()
        if not lines:
            return text
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        return "\n".join(lines[: i + 1] + [lines[i]] + lines[i + 1:])
    if op == "bomb":
        return BILLION_LAUGHS + text if data.draw(st.booleans(), label="prefix") else BILLION_LAUGHS
    if op == "alias":
        return "x_anchor: &big " + json.dumps(_nest(40)) + "\n" + text.replace(": 1\n", ": *big\n", 3)
    if op == "tab":
        return text.replace("  ", "\t", 5)
    if op == "yaml11":  # a plain number or boolean replaced by a YAML 1.1 surprise
        import re

        spots = [m for m in re.finditer(r"(?<=: )(?:-?[0-9][0-9.e+-]*|true|false)(?=\n)", text)]
        if not spots:
            return text
        m = spots[data.draw(st.integers(0, len(spots) - 1), label="spot")]
        return text[: m.start()] + data.draw(st.sampled_from(YAML11_SURPRISES), label="surprise") + text[m.end():]
    if op == "dupkey":  # a top-level key given again at the end with another value (last would win)
        keys = [line.split(":", 1)[0] for line in text.splitlines() if line[:1].isalpha() and ":" in line]
        if not keys:
            return text
        key = data.draw(st.sampled_from(keys), label="key")
        return text.rstrip("\n") + f"\n{key}: 1000000\n"
    return data.draw(st.sampled_from(["", "null", "[]", "42", "---\n...\n", "a: b: c"]), label="empty")


def dump_yaml(doc: Any) -> str:
    """``yaml.safe_dump``'s text, with libyaml's emitter where PyYAML has it (several times faster)."""
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, allow_unicode=True)


def dump_json(doc: Any) -> str:
    return json.dumps(doc, default=str)


def mutated_text(seed: Any, data: st.DataObject, dump: Callable[[Any], str], yaml_text: bool,
                 protect: tuple[str, ...] = ()) -> str:
    """A seed document with 1-4 mutations, as text (a textual mutation last, in a quarter of cases)."""
    doc = seed
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        doc = mutate_doc(doc, data, protect)
    try:
        text = dump(doc)
    except (ValueError, TypeError, RecursionError):  # a NaN in JSON, a value json cannot write
        text = json.dumps(doc, default=str, allow_nan=True) if not yaml_text else dump_yaml(str(doc))
    if data.draw(st.integers(0, 3), label="text?") == 3:
        text = mutate_text(text, data, yaml_text)
    return text


# ---- running a command --------------------------------------------------------------------------
@dataclass
class Tally:
    """What a loader's fuzzing saw."""

    loader: str
    cases: int = 0
    outcomes: dict[int, int] = field(default_factory=dict)
    numbers_checked: int = 0
    started: float = field(default_factory=time.perf_counter)

    def line(self) -> str:
        secs = time.perf_counter() - self.started
        codes = ", ".join(f"exit {k}: {v}" for k, v in sorted(self.outcomes.items()))
        return (f"{self.loader}: {self.cases} documents ({codes}); 0 other exceptions; "
                f"{self.numbers_checked} output numbers checked; {secs:.1f} s")


def run_cli(argv: list[str], tally: Tally, allowed: tuple[int, ...] = (0, 2),
            signed: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Run ``srift ARGV`` in-process; check the exit code, the error lines and the JSON numbers."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    stdout, stderr = out.getvalue(), err.getvalue()
    tally.cases += 1
    tally.outcomes[code] = tally.outcomes.get(code, 0) + 1
    assert code in allowed, f"exit {code}: {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr
    if code == 2:
        lines = [l for l in stderr.splitlines() if not l.startswith("Warning:")]
        assert len(lines) == 2 and lines[0].startswith("Error: ") and lines[1].startswith("To fix: "), stderr
    elif "--format" in argv and argv[argv.index("--format") + 1] == "json" and stdout.strip():
        tally.numbers_checked += check_numbers(json.loads(stdout), signed)
    if code in (0, 1):  # what reaches a terminal or a PR comment is inert
        assert "\x1b" not in stdout and "\x07" not in stdout, stdout[-2000:]
        if "markdown" in argv:
            assert "<!--" not in stdout and "@everyone" not in stdout, stdout[-2000:]
    return code, stdout, stderr


def check_numbers(doc: Any, signed: tuple[str, ...] = (), where: str = "") -> int:
    """Assert every number in ``doc`` is finite, and not negative unless its key is in ``signed``;
    return how many were checked."""
    n = 0
    if isinstance(doc, dict):
        for k, v in doc.items():
            n += check_numbers(v, signed, f"{where}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            n += check_numbers(v, signed, f"{where}[{i}]")
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        assert math.isfinite(doc), f"{where} = {doc}"
        key = where.rsplit(".", 1)[-1].split("[")[0]
        assert doc >= 0 or key in signed, f"{where} = {doc}"
        n = 1
    return n


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path
