"""The package's shape: imports flow down the stages, nothing imports in a circle, the offline
fitting and the test fakes stay out of the runtime, and the fast commands never load torch.

Every import counts: at module level, inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from source_trees import package_trees  # noqa: E402  (tests/source_trees.py: each module parsed once)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "srift"

# Top to bottom: a module may import its own layer's modules and anything below, never above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("srift.cli",)),
    ("commands", ("srift.commands",)),
    ("api", ("srift.api", "srift.api_tools", "srift.resolve")),
    ("search and report", ("srift.search", "srift.report", "srift.results")),
    ("simulate", ("srift.simulate",)),
    ("models and data", ("srift.perf", "srift.catalog", "srift.zoo", "srift.profiling", "srift.kfac")),
    ("nouns", ("srift.profile", "srift.profile_records", "srift.profile_format", "srift.profile_rescale",
               "srift.hardware", "srift.cluster", "srift.job", "srift.job_vocabulary", "srift.job_length",
               "srift.job_options", "srift.jobfile", "srift.stacks")),
    ("files and errors", ("srift.files", "srift.errors", "srift")),
]
# Used only by scripts/ and tests: they may import anything below the api, nothing imports them.
OFFLINE = ("srift.fitting", "srift.testing")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _statements(tree: ast.Module):
    """Every statement of a module, nested ones included (in functions, classes, if/try/with/match
    blocks). An import is a statement, so the expressions, most of a tree, need no walk."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(child for child in getattr(node, field, None) or () if isinstance(child, ast.AST))


def _imports(path: Path, known: set[str]) -> set[str]:
    """The srift modules a file imports anywhere in it (``from a import b`` counts as ``a.b`` when
    that is a module, else as ``a``)."""
    out = set()
    for node in _statements(package_trees()[path]):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "srift"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "srift":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
    return out


@functools.lru_cache(maxsize=1)
def _graph() -> dict[str, frozenset[str]]:
    mods = _modules()
    return {m: frozenset(_imports(p, set(mods)) - {m}) for m, p in mods.items()}


def import_graph() -> dict[str, set[str]]:
    """Module -> the srift modules it imports (itself left out); a fresh copy each call."""
    return {m: set(v) for m, v in _graph().items()}




def _prefix_of(module: str, prefixes: tuple[str, ...]) -> str | None:
    hits = [p for p in prefixes if module == p or module.startswith(p + ".")]
    return max(hits, key=len) if hits else None


def layer_of(module: str) -> int | None:
    """Index in LAYERS (0 = top) of a module, None for the offline ones."""
    if _prefix_of(module, OFFLINE):
        return None
    best = max(((i, p) for i, (_, ps) in enumerate(LAYERS) for p in ps if module == p or module.startswith(p + ".")),
               key=lambda x: len(x[1]), default=None)
    assert best is not None, f"{module} is in no layer of tests/test_architecture.py: add it where it belongs"
    return best[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` edges that go up the layer order or into the offline modules."""
    bad = []
    api = next(i for i, (name, _) in enumerate(LAYERS) if name == "api")
    for a, targets in graph.items():
        la = layer_of(a)
        for b in sorted(targets):
            lb = layer_of(b)
            if lb is None and la is not None:
                bad.append(f"{a} -> {b}: nothing at run time imports the offline {_prefix_of(b, OFFLINE)}")
            elif la is None and lb is not None and lb <= api:
                bad.append(f"{a} -> {b}: offline code may import only what lies below the api")
            elif la is not None and lb is not None and lb < la:
                bad.append(f"{a} ({LAYERS[la][0]}) -> {b} ({LAYERS[lb][0]}): an import up the layer order")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same imports between top-level parts of srift (``srift.search``, ``srift.api``, ...)."""
    def part(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = defaultdict(set)
    for a, targets in graph.items():
        out[part(a)] |= {part(b) for b in targets if part(b) != part(a)}
    return dict(out)


@pytest.mark.slow
def test_every_module_is_in_a_layer_and_imports_go_down():
    graph = import_graph()
    assert len(graph) > 50  # the walk found the package
    assert upward_imports(graph) == []


def test_no_import_cycle_between_modules_or_packages():
    graph = import_graph()
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == []


def test_the_checks_catch_an_upward_import_and_a_cycle():
    graph = {k: set(v) for k, v in import_graph().items()}
    graph["srift.simulate.predictor"].add("srift.search.rank")  # simulate reaching up into search
    assert any(e.startswith("srift.simulate.predictor (simulate) -> srift.search.rank") for e in upward_imports(graph))
    assert ["srift.search", "srift.simulate"] in cycles(package_graph(graph))
    graph["srift.perf.comm"].add("srift.fitting.comm_fit")
    assert any("offline srift.fitting" in e for e in upward_imports(graph))


def test_commands_go_through_the_api_and_the_renderers():
    """A command parses flags (nouns, limits, errors), calls srift.api, renders with srift.report."""
    allowed = ("srift.api", "srift.report", "srift.commands", "srift.errors", "srift.job", "srift.job_options", "srift.jobfile",
               "srift.search.limits", "srift.hardware", "srift.cluster", "srift.bounds")
    for module, targets in import_graph().items():
        if module.startswith("srift.commands."):
            assert [t for t in targets if not _prefix_of(t, allowed)] == [], module


@pytest.mark.slow
def test_the_fast_commands_do_not_import_torch(tmp_path):
    """What `srift predict`, `recommend`, `check` and `catalog` run, in one fresh interpreter."""
    job = tmp_path / "job.yaml"
    job.write_text("model: resnet50\nsteps: 1000\ninstance: g5.xlarge\nlimits: {max_cost_usd: 100}\n")
    code = f"""
import sys
import srift.cli, srift.api as api
from srift.job import Job
from srift.jobfile import load_jobfile
from srift.search.limits import Constraints
api.predict(Job(), model="resnet50", instance="p3.16xlarge:2")
api.predict(Job(optimizer="kfac"), model="resnet50", cluster_file={str(ROOT / "configs/clusters/ib-64.yaml")!r})
api.recommend(Job(), Constraints(budget_usd_per_hour=5, max_gpus=4), model="bert-base")
api.check(load_jobfile({str(job)!r}, env={{}}))
api.catalog_list(["A100"]), api.catalog_show("p4d.24xlarge")
heavy = [m for m in ("torch", "pandas", "sklearn", "scipy", "matplotlib", "boto3") if m in sys.modules]
sys.exit(f"imported {{heavy}}" if heavy else 0)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr + res.stdout


# Settings travel as one dataclass: no function of the package takes more than this many
# parameters (self and cls aside; *args and **kwargs count one each). The CLI's command functions,
# which take the parsed flags, are left out.
MAX_PARAMETERS = 12
PARAMETERS_EXEMPT = ("srift.commands",)


def parameter_counts(tree: ast.Module) -> list[tuple[str, int, int]]:
    """(name, parameters, line) of every function and method of ``tree`` (nested ones included)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            out.append((node.name, len(names) + (a.vararg is not None) + (a.kwarg is not None), node.lineno))
    return out


def test_no_function_takes_more_than_twelve_parameters():
    over = [f"{path.relative_to(ROOT)}:{line} {name} ({n})"
            for module, path in _modules().items() if not _prefix_of(module, PARAMETERS_EXEMPT)
            for name, n, line in parameter_counts(package_trees()[path])
            if n > MAX_PARAMETERS]
    assert over == [], f"functions over {MAX_PARAMETERS} parameters (pass a dataclass): {over}"


def test_the_parameter_count_counts_what_a_caller_passes():
    """By hand: ``self`` is not passed; positional, keyword-only, *args and **kwargs are; 13 is over."""
    code = ("class A:\n    def m(self, a, b=1, *rest, c, **kw): pass\n"
            "def f(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13): pass\n")
    assert sorted(parameter_counts(ast.parse(code))) == [("f", 13, 3), ("m", 5, 2)]


# A module of srift/ is kept under ~400 lines and never over this (split it by concern).
MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines():
    over = [f"{path.relative_to(ROOT)} ({n})" for path in sorted(PACKAGE.rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert over == [], f"modules over {MAX_MODULE_LINES} lines (split them by concern): {over}"
