"""The README and docs quote figures and outputs from one source (scripts/render_docs.py): a figure
typed by hand drifts from the validation that produced it, so the README types none."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

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
    equals a fresh run (the price list's age in days aside); the outputs that wait out a
    `srift profile --timeout` are left to the slow check below."""
    assert _render_docs().main(["--check", "--skip-waiting"]) == 0, capsys.readouterr().out


@pytest.mark.slow
def test_the_outputs_that_wait_out_a_timeout_match_a_fresh_run(capsys):
    """The whole check, with the two quoted `srift profile --timeout 30` refusals it waits for."""
    docs = _render_docs()
    assert [n for n, ex in docs.EXAMPLES.items() if ex.waits] == ["profile-timeout-no-step", "profile-timeout-stuck-loader"]
    assert docs.main(["--check"]) == 0, capsys.readouterr().out


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


# Pages whose figures are not yet all generated: each still types validation figures by hand (a
# refit can make them wrong). Remove a page from here once its figures are markers.
NOT_YET_CONVERTED: tuple[str, ...] = ()

# The percentages a converted page may type: fixed facts no refit changes (a target, a physical
# prior, a bound or constant of the code, a measurement in data/, a worked example of a formula).
FIXED_FACTS: dict[str, tuple[str, ...]] = {
    "accuracy.md": ("target of 10 %", "at most 10 % and at most 15 %", "above 80 % of peak FLOP/s or 90 % of DRAM",
                    "a 1 % knee", "within 5 % of the same system", "within the 10 % target", "Target: 5 % at B, 15 %"),
    "simulator.md": ("above 80 % of peak FLOP/s or 90 % of DRAM", "ib-loopback on HDR, 95.7 %", "at most 95 % of the GPU",
                     "`>20%` a month", "`10-15%` for the others", "or 3 % for a structural profile", "the 10 % target"),
    "sharded.md": ("at most 95 % of the GPU", "(95 % of the GPU usable)"),
    "limits.md": ("95 % of the GPU's memory", "(MAPE 0-1000 %)"),
    "profiling.md": ("within 5 % at B and 15 % at 2B",),
    "recommend.md": ("1 % go to the cheaper",),
    "profile-schema.md": ("2.5x plus 10 %", "more than 1 % of the backward"),
    # 95 %: the usable share of a GPU's memory (a code constant).
    "finetuning.md": ("95 % of the GPU usable",),
    # The SPD-KFAC paper's published range; scripts/bench_kfac.py's tolerance (a code constant); what
    # GPU libraries publish for their solvers; PipeFisher's timings over the datasheet peak (data/).
    # The GPU count a deadline needs at 25 % MFU and the 95 % usable share (code constants,
    # srift/search/gpu_range.py, srift/simulate/memory.py); Kimi-K2's parameters counted from its
    # config against its report's totals; the share of attention in Megatron's FLOP formula at 1M
    # tokens (a worked example of the formula, docs/layouts.md).
    "layouts.md": ("meet it at 25 % MFU", "is under 95 % of the GPU", "0.8 % above its technical report's 32.6B activated",
                   "1.3 % below its 1.04T total", "model FLOPs are 98 % attention"),
    "kfac.md": ("The paper measured SPD-KFAC 10-35 %", "inside the paper's 10-35 %", "outside both it and 15 %",
                "rates of roughly 60-85 %", "run at 85-100 % of the FP32 datasheet peak", "run at 69-79 % of the peak"),
}


def _hand_typed_percentages(text: str, allowed: tuple[str, ...]) -> list[str]:
    prose = re.sub(r"<!-- fig:.*?<!-- /fig -->", "", text)
    prose = re.sub(r"^[ ]*<!-- out:.*?```\n.*?```\n", "", prose, flags=re.S | re.M)
    prose = re.sub(r"<!-- (table|api):.*?<!-- /(table|api) -->", "", prose, flags=re.S)
    prose = " ".join(prose.split())  # a fact may wrap across lines
    for fact in allowed:
        assert fact in prose, f"{fact!r} is no longer in the page: drop it from FIXED_FACTS"
        prose = prose.replace(fact, "")
    return re.findall(r".{0,40}\d+(?:\.\d+)? ?%", prose)


def test_the_docs_type_no_validation_figure_by_hand():
    """A figure a refit can change is a marker (scripts/render_docs.py), on every page but the ones
    listed as not yet converted; what else a page types is a fixed fact listed above."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name in NOT_YET_CONVERTED:
            continue
        found = _hand_typed_percentages(page.read_text(encoding="utf-8"), FIXED_FACTS.get(page.name, ()))
        assert not found, f"docs/{page.name} types a percentage by hand, generate it (scripts/render_docs.py): {found}"


def test_the_docs_hold_no_dated_runs_or_commits():
    """Docs describe what is; when something was measured, on which commit, is CHANGELOG.md's."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name in NOT_YET_CONVERTED:
            continue
        text = page.read_text(encoding="utf-8")
        assert not re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b|\bmain [0-9a-f]{7}\b", text), page.name


def test_the_hand_typed_check_catches_a_typed_figure():
    assert _hand_typed_percentages("LOSO is 15.8 % on 58 rows.", ())
    assert not _hand_typed_percentages("LOSO is <!-- fig:accuracy#groups.multi_node.loso -->15.8 %<!-- /fig -->.", ())
    assert not _hand_typed_percentages("a target of\n10 % here", ("target of 10 %",))


def test_no_page_is_listed_as_unconverted_without_cause():
    """The exclusion list shrinks as pages convert: a listed page must still type figures by hand."""
    for name in NOT_YET_CONVERTED:
        page = ROOT / "docs" / name
        assert page.exists() and _hand_typed_percentages(page.read_text(encoding="utf-8"), ()), name


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
