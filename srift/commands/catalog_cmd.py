"""`srift catalog list|show|refresh`: the EC2 GPU instance catalog."""

from __future__ import annotations

from typing import Optional

import typer

from srift import api
from srift.commands.options import FORMAT, FORMATS, OUT_FILE, check_format
from srift.report import catalog_view


def list_(
    gpu: list[str] = typer.Option([], "--gpu", help="Only this GPU (name or alias, e.g. A100, a10g); repeatable."),
    region: str = typer.Option("us-east-1", "--region", help="AWS region."),
    fmt: str = FORMAT,
    out_file: Optional[str] = OUT_FILE,
) -> None:
    """List the GPU instance types with GPUs, network and prices."""
    check_format(fmt, FORMATS)
    catalog_view.show_list(api.catalog_list(gpu, region), region, fmt, out_file)


def show(
    instance_type: str = typer.Argument(..., help="Instance type, e.g. p4d.24xlarge."),
    region: str = typer.Option("us-east-1", "--region", help="AWS region."),
    fmt: str = FORMAT,
    out_file: Optional[str] = OUT_FILE,
) -> None:
    """Show one instance type."""
    check_format(fmt, FORMATS)
    inst, spec = api.catalog_show(instance_type, region)
    catalog_view.show_instance(inst, spec, region, fmt, out_file)


def refresh(region: str = typer.Option("us-east-1", "--region", help="AWS region.")) -> None:
    """Fetch current prices and instance types from AWS (boto3) into the user cache."""
    catalog_view.show_refreshed(api.catalog_refresh(region, progress=catalog_view.progress), region)
