"""The README and docs quote figures and outputs from one source (scripts/render_docs.py): a figure
typed by hand drifts from the validation that produced it, so the README types none."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _render_docs():
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "scripts" / "render_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_marked_figure_table_and_output_matches_its_source(capsys):
    """README's accuracy table equals configs/perf/*.json, and its quoted `srift recommend` output
    equals a fresh run (the price list's age in days aside)."""
    assert _render_docs().main(["--check"]) == 0, capsys.readouterr().out


def test_a_figure_reads_as_the_json_says():
    docs = _render_docs()
    # configs/perf/accuracy.json: groups.multi_node.loso is a float (a MAPE), rows an int.
    assert re.fullmatch(r"\d+\.\d %", docs.figure("accuracy", "groups.multi_node.loso"))
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", docs.figure("accuracy", "groups.single_gpu_other_gpu.rows"))
    stale = "<!-- fig:accuracy#groups.multi_node.loso -->99.9 %<!-- /fig -->"
    assert docs.stale(stale, {}) and docs.render(stale, {}) != stale


def test_the_readme_is_short_and_types_no_figure_by_hand():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.split()) <= 1500
    prose = re.sub(r"<!-- out:.*?```\n.*?```\n", "", text, flags=re.S)
    prose = re.sub(r"<!-- table:.*?<!-- /table -->", "", prose, flags=re.S)
    assert not re.findall(r"\d+(?:\.\d+)? ?%", prose), "a percentage typed by hand: generate it (scripts/render_docs.py)"


def test_the_readme_links_only_to_files_that_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_the_api_pages_example_runs_as_written(capsys):
    """docs/api.md's snippet is what a notebook user copies: it must run and print a prediction."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    snippet = re.search(r"```python\n(.*?)```", text, re.S)
    assert snippet is not None
    exec(compile(snippet[1], "docs/api.md", "exec"), {})
    first, second = capsys.readouterr().out.splitlines()
    assert 0 < float(first.split()[0]) < 10  # resnet50 on p3.8xlarge: an iteration in seconds
    assert float(second.split()[1]) > 0


def test_the_api_reference_is_written_from_the_code():
    docs = _render_docs()
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert "predict(job: Job, model: str | None = None" in page  # the signature, as the source writes it
    stale = "<!-- api:functions -->\nsomething else\n<!-- /api -->"
    assert docs.stale(stale, {}) and "### `srift.api.recommend`" in docs.render(stale, {})
