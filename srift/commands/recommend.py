"""`srift recommend` (placeholder until its issue lands)."""

from __future__ import annotations

import typer

from srift.errors import SriftError


def register(app: typer.Typer) -> None:
    @app.command("recommend", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def _cmd() -> None:
        """Not available yet."""
        raise SriftError("`srift recommend` is not available in this build.", "use a newer srift.")
