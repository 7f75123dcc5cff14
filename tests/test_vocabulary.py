"""Each vocabulary is defined once: code outside the module that defines a vocabulary compares
against its named words (``job.precision == BF16``), never against the string (``== "bf16"``),
and the search's markets and exclusion reasons are enums, never bare integers (``market == 2``).

A vocabulary is a module-level ``Literal[...]`` alias of strings anywhere in srift; its words are
those strings. The check reads every srift module's syntax tree (no import).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from source_trees import package_trees  # noqa: E402  (tests/source_trees.py: each module parsed once)

ROOT = Path(__file__).resolve().parents[1]
# Names whose values are a market or an exclusion reason (srift/search/space.py Market,
# srift/search/offers.py Exclusion): a comparison of one of them with an int literal is a bare int.
ENUM_NAMES = ("market", "reason")


def _package() -> tuple[tuple[str, ast.Module], ...]:
    return tuple((str(p.relative_to(ROOT)), tree) for p, tree in package_trees().items())


def _files() -> list[tuple[str, ast.Module]]:
    return list(_package())


def vocabularies(files: list[tuple[str, ast.Module]]) -> dict[str, set[str]]:
    """Word -> the modules that define a vocabulary holding it."""
    out: dict[str, set[str]] = defaultdict(set)
    for rel, tree in files:
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == "Literal":
                words = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
                for w in words:
                    if isinstance(w, ast.Constant) and isinstance(w.value, str):
                        out[w.value].add(rel)
    # A module that re-exports a vocabulary module whole (srift/job.py: ``from srift.job_vocabulary
    # import *``) is that vocabulary's home too.
    for rel, tree in files:
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and [a.name for a in node.names] == ["*"]:
                source = node.module.replace(".", "/") + ".py"
                for homes in out.values():
                    if source in homes:
                        homes.add(rel)
    return out


def _operands(node: ast.Compare) -> list[ast.expr]:
    out: list[ast.expr] = []
    for o in (node.left, *node.comparators):
        out += list(o.elts) if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o]
    return out


def _named(node: ast.expr) -> str:
    """The name an operand reads (``x.market``, ``market``, ``t["market"]``), lower-cased."""
    if isinstance(node, ast.Attribute):
        return node.attr.lower()
    if isinstance(node, ast.Name):
        return node.id.lower()
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value.lower()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" and node.args:
        return _named(node.args[0])  # int(t["market"][i])
    return _named(node.value) if isinstance(node, ast.Subscript) else ""


def _comparisons(files: list[tuple[str, ast.Module]]) -> list[tuple[str, ast.Compare]]:
    return [(rel, node) for rel, tree in files for node in ast.walk(tree) if isinstance(node, ast.Compare)]


def string_comparisons(files: list[tuple[str, ast.Module]]) -> list[str]:
    """``file:line: 'word'`` for each vocabulary word compared as a string outside its definition."""
    vocab = vocabularies(files)
    out = []
    for rel, node in _comparisons(files):
        for o in _operands(node):
            if isinstance(o, ast.Constant) and isinstance(o.value, str) and o.value in vocab and rel not in vocab[o.value]:
                out.append(f"{rel}:{node.lineno}: {o.value!r} in {ast.unparse(node)}")
    return out


def int_comparisons(files: list[tuple[str, ast.Module]]) -> list[str]:
    """``file:line`` for each market or exclusion reason compared with an int literal."""
    out = []
    for rel, node in _comparisons(files):
        ops = _operands(node)
        if any(isinstance(o, ast.Constant) and type(o.value) is int for o in ops) \
                and any(_named(o) in ENUM_NAMES for o in ops):
            out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


@pytest.mark.slow
def test_no_vocabulary_word_is_compared_as_a_string_outside_its_definition():
    assert string_comparisons(_files()) == []


@pytest.mark.slow
def test_markets_and_exclusion_reasons_are_never_compared_with_bare_ints():
    assert int_comparisons(_files()) == []


def test_the_checks_catch_what_they_forbid():
    """The two checks on a made-up module: each flags its example and passes the named form."""
    vocab_module = ast.parse('Colour = Literal["red", "blue"]\nRED = "red"\nok = colour == "red"\n')
    user = ast.parse('a = colour == "red"\nb = colour in ("blue", "green")\nc = colour == RED\nd = name == "green"\n'
                     'e = cand.market == 2\nf = t["reason"][i] != 1\ng = market == Market.SPOT\nh = count == 2\n')
    files = [("srift/colours.py", vocab_module), ("srift/user.py", user)]
    assert [s.split(":")[1] for s in string_comparisons(files)] == ["1", "2"]
    assert [s.split(":")[1] for s in int_comparisons(files)] == ["5", "6"]
