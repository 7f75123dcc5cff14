"""The one error type srift shows to users."""

from __future__ import annotations

import difflib


class SriftError(Exception):
    """A user-facing error: what is wrong, and how to fix it.

    The CLI prints ``Error: <message>`` and ``To fix: <hint>`` and exits with ``exit_code``
    (2 for bad input), without a traceback unless ``SRIFT_DEBUG=1``.

    Args:
        message: What is wrong, in one sentence.
        hint: What the user can do about it.
        exit_code: Process exit code the CLI uses.
    """

    def __init__(self, message: str, hint: str = "", exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return f"{self.message} (To fix: {self.hint})" if self.hint else self.message


def closest(name: str, choices: list[str] | tuple[str, ...], n: int = 3) -> list[str]:
    """Return up to ``n`` names from ``choices`` that look like ``name`` (for suggestions)."""
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    if not hits:  # nothing close: still offer the nearest few rather than nothing
        hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.0)
    return [lowered[h] for h in hits]


def unknown_name_error(kind: str, name: str, choices: list[str] | tuple[str, ...], list_cmd: str) -> SriftError:
    """Build the standard "unknown X" error with the closest names as a suggestion."""
    near = closest(name, choices)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    return SriftError(f"unknown {kind} '{name}'.", f"{hint}See `{list_cmd}` for the names srift knows.")


def one_of(names: list[str] | tuple[str, ...]) -> str:
    """``a, b or c``: a vocabulary in a sentence (help texts, messages)."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
