"""`srift catalog` (placeholder until its issue lands)."""

from __future__ import annotations

import typer

from srift.errors import SriftError


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="catalog commands.", no_args_is_help=True)
    app.add_typer(sub, name="catalog")

    @sub.command("placeholder")
    def _cmd() -> None:
        """Not available yet."""
        raise SriftError("`srift catalog` is not available in this build.", "use a newer srift.")
