"""`srift examples [DIR]`: copy the shipped example files out of the install."""

from __future__ import annotations

from typing import Optional

import typer

from srift import api
from srift.report import examples_view


def examples(
    dest: str = typer.Argument(".", help="Folder to copy into (created when missing)."),
    force: bool = typer.Option(False, "--force", help="Overwrite files that exist."),
    repo: Optional[str] = typer.Option(None, "--repo", help="Pin the CI workflow to this srift repository URL (with --ref)."),
    ref: Optional[str] = typer.Option(None, "--ref", help="Pin the CI workflow to this commit or tag of it (with --repo)."),
) -> None:
    """Copy the example cluster files, the CI workflow and its job file, and the example training
    scripts into DIR, laid out as in srift's repository (configs/clusters/, configs/ci/, examples/)."""
    examples_view.show(api.copy_examples(dest, force, repo, ref))
