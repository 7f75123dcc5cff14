"""Value completion of ``--model``, ``--gpu``, ``--instance`` and ``--infra`` (typer's
``autocompletion``): after ``srift --install-completion``, the shell asks srift for the values that
start with what is typed. Completion never fails loudly: a broken install completes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from srift import api
from srift.hardware import gpus as gpus_table


def _matching(names: Iterable[str], incomplete: str, prefix: str = "") -> list[str]:
    low = incomplete.lower()
    return sorted({prefix + n for n in names if n.lower().startswith(low)})


def _safe(find: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    def complete(incomplete: str) -> list[str]:
        try:
            return find(incomplete)
        except Exception:  # noqa: BLE001 (a shell asking for words must never see a traceback)
            return []

    complete.__doc__ = find.__doc__
    return complete


def _last(incomplete: str, separators: str) -> tuple[str, str]:
    """(what comes before the part being typed, that part): ``aws,gc`` -> (``aws,``, ``gc``)."""
    cut = max(incomplete.rfind(s) for s in separators) + 1
    return incomplete[:cut], incomplete[cut:]


@_safe
def models(incomplete: str) -> list[str]:
    """Built-in model names."""
    return _matching(api.completion_names("models"), incomplete)


@_safe
def gpus(incomplete: str) -> list[str]:
    """GPU names of srift's GPU table."""
    return _matching(gpus_table(), incomplete)


@_safe
def instances(incomplete: str) -> list[str]:
    """Instance types of every cloud's catalog; in ``TYPE:COUNT+TYPE`` the type after the last ``+``."""
    before, part = _last(incomplete, "+")
    if ":" in part:
        return []
    return _matching(api.completion_names("instances"), part, before)


@_safe
def infra(incomplete: str) -> list[str]:
    """Clouds and cloud/region targets; in a list (``aws,gcp``) the one after the last comma."""
    before, part = _last(incomplete, ",")
    return _matching([t for t in api.completion_names("targets") if "/" not in t or "/" in part], part, before)
