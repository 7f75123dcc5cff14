"""`srift catalog list|gpus|show|refresh`: the GPU instance catalog of AWS, GCP, Lambda and Azure."""

from __future__ import annotations

from typing import Optional

import typer

from srift import api
from srift.commands import complete
from srift.commands.options import FORMAT, FORMATS, OUT_FILE, REGION, check_format
from srift.job import DEFAULT_INFRA
from srift.report import catalog_view

ALL_CLOUDS = "aws,gcp,lambda,azure"


def list_(
    gpu: list[str] = typer.Option([], "--gpu", autocompletion=complete.gpus, help="Only this GPU (name or alias, e.g. A100, a10g); repeatable."),
    infra: Optional[str] = typer.Option(None, "--infra", autocompletion=complete.infra, help=f"Clouds and regions (default {DEFAULT_INFRA}): aws, aws/us-west-2, gcp,lambda."),
    region: Optional[str] = REGION,
    fmt: str = FORMAT,
    out_file: Optional[str] = OUT_FILE,
) -> None:
    """List the GPU instance types with GPUs, network and prices."""
    check_format(fmt, FORMATS)
    api.check_outputs({"--out-file": out_file})
    where = api.resolve_infra(infra, region, DEFAULT_INFRA)
    catalog_view.show_list(api.catalog_list(gpu, where), api.catalog_ages(where), fmt, out_file)


def gpus(
    infra: str = typer.Option(ALL_CLOUDS, "--infra", autocompletion=complete.infra, help="Clouds and regions (default: every cloud and region)."),
    gpu: list[str] = typer.Option([], "--gpu", autocompletion=complete.gpus, help="Only this GPU (name or alias); repeatable."),
    sort: str = typer.Option("name", "--sort", help=f"{' or '.join(api.GPU_SORTS)} (price: cheapest on-demand $/GPU-hour first)."),
    fmt: str = FORMAT,
    out_file: Optional[str] = OUT_FILE,
) -> None:
    """One row per GPU type: memory, the instance types that have it, and the cheapest on-demand and spot $ per GPU-hour per cloud."""
    check_format(fmt, FORMATS)
    api.check_outputs({"--out-file": out_file})
    catalog_view.show_gpus(api.catalog_gpus(infra, gpu, sort), api.catalog_ages(infra), fmt, out_file)


def show(
    instance_type: str = typer.Argument(..., help="Instance type, e.g. p4d.24xlarge."),
    infra: Optional[str] = typer.Option(None, "--infra", autocompletion=complete.infra, help=f"Where (default {DEFAULT_INFRA}); several regions: the cheapest."),
    region: Optional[str] = REGION,
    fmt: str = FORMAT,
    out_file: Optional[str] = OUT_FILE,
) -> None:
    """Show one instance type."""
    check_format(fmt, FORMATS)
    api.check_outputs({"--out-file": out_file})
    inst, spec = api.catalog_show(instance_type, api.resolve_infra(infra, region, DEFAULT_INFRA))
    catalog_view.show_instance(inst, spec, api.catalog_ages(inst.infra), fmt, out_file)


def refresh(
    infra: Optional[str] = typer.Option(None, "--infra", autocompletion=complete.infra, help="Clouds and regions to re-price: aws (every region, the default), aws/REGION, gcp, lambda, azure, or a comma list."),
    region: Optional[str] = REGION,
) -> None:
    """Re-price AWS from its public price list and Spot Advisor (no credentials needed; spot price history with them), and GCP, Lambda and Azure from SkyPilot's published catalogs."""
    where = api.resolve_infra(infra, region, "aws")
    rows = api.catalog_refresh(where, progress=catalog_view.progress)
    catalog_view.show_refreshed(rows, api.catalog_ages(where))
