"""Write the figures and example outputs that README.md and docs/*.md quote from their one source.

Two kinds of marker, invisible when the markdown is rendered:

- ``<!-- fig:FILE#PATH -->13.6 %<!-- /fig -->``: the value at the dotted PATH of
  configs/perf/FILE.json (``accuracy#groups.multi_node.loso``). A float is a percentage
  (``13.6 %``; ``13.6`` with ``,bare`` after the path, for a table whose header says %), an integer a
  count (``4,066``), text as it is. A constant that is not a percentage takes ``,x=FACTOR`` (a
  unit: ``,bare,x=1e6,d=0`` writes seconds as a whole number of microseconds) and ``,d=DIGITS``.
- ``<!-- table:NAME -->`` ... ``<!-- /table -->``: a table of such values (``TABLES`` below).
- ``<!-- api:SECTION -->`` ... ``<!-- /api -->``: the Python API reference's SECTION, written from
  the code's signatures and docstrings (scripts/api_reference.py).
- ``<!-- out:NAME -->`` followed by a fenced block: the block becomes ``$ COMMAND`` and what that
  command prints (``EXAMPLES`` below names each command and its terminal width).

    python scripts/render_docs.py          # rewrite the files in place
    python scripts/render_docs.py --check  # exit 1 and name each stale marker (tests/test_docs.py)

Output that depends on the day it was run (a price list's age in days) is compared without it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # this checkout's srift and the sibling script
from api_reference import reference  # noqa: E402 (a sibling script)
PERF = ROOT / "configs" / "perf"
FIG = re.compile(r"<!-- fig:(?P<file>[a-z_]+)#(?P<path>[A-Za-z0-9_./-]+)(?P<opts>(?:,[a-z]+(?:=[0-9.e+-]+)?)*) -->"
                 r"(?P<value>.*?)<!-- /fig -->")
TABLE = re.compile(r"<!-- table:(?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /table -->", re.S)
API = re.compile(r"<!-- api:(?P<name>[a-z]+) -->\n(?P<body>.*?)<!-- /api -->", re.S)
OUT = re.compile(r"^(?P<indent>[ ]*)<!-- out:(?P<name>[a-z0-9-]+) -->\n(?P=indent)```\n(?P<body>.*?)(?P=indent)```\n", re.S | re.M)
DAY_DEPENDENT = re.compile(r"\d+ days old")
# A search's progress lines (srift/report/progress.py) on a standard error that is not a terminal: how
# many depends on the machine's load; on a terminal they are a bar that clears. Quoted outputs drop them.
PROGRESS = re.compile(r"^Searching: .*\(--quiet: no progress lines\)\.\n", re.M)


@dataclass(frozen=True)
class Example:
    """A command whose output a document quotes: its arguments after ``srift`` and the width."""

    args: tuple[str, ...]
    columns: int = 100
    keep: str = ""  # a regular expression: quote only the lines that match it (all when empty)
    start: str = ""  # a regular expression: quote standard output from the first line that matches it on
    waits: bool = False  # waits out a timeout: `--check --skip-waiting` (the quick loop) leaves it to the full check


EXAMPLES: dict[str, Example] = {
    "recommend-resnet50": Example(("recommend", "--model", "resnet50", "--budget", "20")),
    "predict-gpt2-million-tokens": Example(("predict", "--model", "gpt2", "--instance", "p3.2xlarge", "--seq-len", "1000000")),
    "profile-timeout-no-step": Example(("profile", "docs/examples/forever.py", "--timeout", "30"), waits=True),
    "profile-timeout-stuck-loader": Example(("profile", "docs/examples/stuck.py", "--timeout", "30"), waits=True),
    "skypilot-task-resnet50": Example(("predict", "--model", "resnet50", "--instance", "g5.12xlarge:3", "--skypilot", "-"),
                                      start=r"^name: "),
    "torchrun-efa-fallbacks": Example(("predict", "--model", "llama3-8b", "--instance", "p5.48xlarge:4", "--torchrun"),
                                      keep=r"^# (Network|With one EFA|With no EFA)"),
}


# The README's accuracy table: (what, runs, the leave-one-source-out error), each value a FILE#PATH.
TABLES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "accuracy": (
        ("one GPU", "accuracy#groups.single_gpu.rows", "accuracy#groups.single_gpu.loso"),
        ("one node, 2-16 GPUs", "accuracy#groups.one_node.rows", "accuracy#groups.one_node.loso"),
        ("a profile measured on the target's GPU, one node", "accuracy#groups.one_node_same_gpu.rows",
         "accuracy#groups.one_node_same_gpu.loso"),
        ("2-16 nodes (TCP, InfiniBand, EC2)", "accuracy#groups.multi_node.rows", "accuracy#groups.multi_node.loso"),
        ("FSDP LLM training, 8-512 GPUs", "accuracy#groups.sharded.rows", "accuracy#groups.sharded.loso"),
        ("TP x PP x CP x DP layouts (Megatron-Core)", "", "layouts#validation.loso_mape_pct"),
        ("mixture of experts, expert parallelism", "accuracy#groups.moe.rows", "accuracy#groups.moe.loso"),
        ("fine-tuning speed, steady state", "accuracy#groups.finetune.steady_rows", "accuracy#groups.finetune.steady_loso"),
        ("fine-tuning peak memory", "accuracy#groups.finetune.memory_rows", "accuracy#groups.finetune.memory_mape"),
    ),
}


def documents() -> list[Path]:
    """The files that may hold markers: the README and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def figure(file: str, path: str, bare: bool = False, scale: float = 1.0, digits: int = 1) -> str:
    """The value at ``path`` of configs/perf/``file``.json, written as the docs write it (``bare``:
    a percentage without its sign; a float times ``scale`` to ``digits`` decimals)."""
    value: Any = json.loads((PERF / f"{file}.json").read_text(encoding="utf-8"))
    for key in path.split("."):
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) and scale == 1.0:
        return f"{value:,}"
    text = f"{value * scale:,.{digits}f}"
    return text if bare else f"{text} %"


def _fig(m: re.Match[str]) -> str:
    opts = dict(o.partition("=")[::2] for o in m["opts"].split(",") if o)
    return figure(m["file"], m["path"], "bare" in opts, float(opts.get("x", 1.0)), int(opts.get("d", 1)))


def table(name: str) -> str:
    """The markdown table ``name`` of ``TABLES``, its values read from their files."""
    def cell(ref: str) -> str:
        return figure(*ref.split("#")) if ref else ""
    rows = [f"| {what} | {cell(runs)} | {cell(error)} |" for what, runs, error in TABLES[name]]
    return "\n".join(["| group | runs | error |", "|---|---|---|", *rows]) + "\n"


def run_example(name: str) -> str:
    """``$ COLUMNS=N srift ARGS`` and what the command printed (standard output, then error)."""
    example = EXAMPLES[name]
    env = {**os.environ, "COLUMNS": str(example.columns), "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("SRIFT_HOME", None)
    with tempfile.TemporaryDirectory() as cache:  # the bundled catalog, not a refreshed one in the user's cache
        env["SRIFT_CACHE_DIR"] = cache
        done = subprocess.run([sys.executable, "-c", "import sys; from srift.cli import main; sys.exit(main())", *example.args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    shown = " ".join(example.args)
    printed = done.stdout + ("" if example.start else PROGRESS.sub("", done.stderr))
    if example.keep:
        printed = "".join(line for line in printed.splitlines(keepends=True) if re.search(example.keep, line))
        shown += " | grep ..."
    if example.start:
        found = re.search(example.start, printed, re.M)
        printed = printed[found.start():] if found else printed
        shown += " 2>/dev/null | sed -n '/" + example.start.lstrip("^") + "/,$p'"
    return f"$ COLUMNS={example.columns} srift {shown}\n{printed}"


def _unindented(body: str, indent: str) -> str:
    return "".join(line[len(indent):] if line.startswith(indent) else line for line in body.splitlines(keepends=True))


def comparable(text: str) -> str:
    """Text without what changes from day to day."""
    return DAY_DEPENDENT.sub("N days old", text)


def render(text: str, outputs: dict[str, str]) -> str:
    """``text`` with every marker's value or block replaced by what it should be."""
    text = TABLE.sub(lambda m: f"<!-- table:{m['name']} -->\n{table(m['name'])}<!-- /table -->", text)
    text = API.sub(lambda m: f"<!-- api:{m['name']} -->\n{reference(m['name'])}<!-- /api -->", text)
    text = FIG.sub(lambda m: f"<!-- fig:{m['file']}#{m['path']}{m['opts']} -->{_fig(m)}<!-- /fig -->", text)
    return OUT.sub(lambda m: _block(m["indent"], m["name"], outputs[m["name"]]), text)


def _block(indent: str, name: str, output: str) -> str:
    """A quoted output as a fenced block, every line at the marker's indent (inside a list item)."""
    lines = [f"<!-- out:{name} -->", "```", *output.splitlines(), "```"]
    return "".join(f"{indent}{line}\n" if line else "\n" for line in lines)


def stale(text: str, outputs: dict[str, str | None]) -> list[str]:
    """What in ``text`` differs from its source: one line per marker."""
    found = [f"fig:{m['file']}#{m['path']} reads {m['value']!r}, the source says {_fig(m)!r}"
             for m in FIG.finditer(text) if m["value"] != _fig(m)]
    found += [f"table:{m['name']} differs from its source" for m in TABLE.finditer(text) if m["body"] != table(m["name"])]
    found += [f"api:{m['name']} differs from the code's signatures and docstrings" for m in API.finditer(text)
              if m["body"] != reference(m["name"])]
    found += [f"out:{m['name']} differs from a fresh run" for m in OUT.finditer(text)
              if outputs[m["name"]] is not None and comparable(_unindented(m["body"], m["indent"])) != comparable(outputs[m["name"]])]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale markers and exit 1 instead of writing")
    parser.add_argument("--skip-waiting", action="store_true",
                        help="with --check: leave out the outputs that wait out a timeout (the quick loop's check)")
    args = parser.parse_args(argv)
    if args.skip_waiting and not args.check:
        parser.error("--skip-waiting only goes with --check: a render writes every output")
    docs = {path: path.read_text(encoding="utf-8") for path in documents()}
    names = sorted({m["name"] for text in docs.values() for m in OUT.finditer(text)})
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        print(f"unknown example(s) {', '.join(unknown)}: add them to EXAMPLES in {Path(__file__).name}", file=sys.stderr)
        return 2
    # All at once: each is a process of its own, and two wait out a 30 s `srift profile --timeout`.
    run = [n for n in names if not (args.skip_waiting and EXAMPLES[n].waits)]
    with ThreadPoolExecutor(max_workers=max(1, len(run))) as pool:
        outputs: dict[str, str | None] = {n: None for n in names}
        outputs.update(zip(run, pool.map(run_example, run)))
    problems = 0
    for path, text in docs.items():
        rel = path.relative_to(ROOT)
        if args.check:
            for line in stale(text, outputs):
                print(f"{rel}: {line}")
                problems += 1
        else:
            rendered = render(text, {n: out for n, out in outputs.items() if out is not None})
            if rendered == text:
                continue
            path.write_text(rendered, encoding="utf-8")
            print(f"wrote {rel}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
