"""`srift catalog list|show|refresh`: the EC2 GPU instance catalog."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import typer

from srift.commands._common import check_format, print_json


def _row(inst: Any) -> dict[str, Any]:
    return dataclasses.asdict(inst)


def _price(v: float | None, estimated: bool = False) -> str:
    if v is None:
        return "-"
    return (f"${v:,.2f}" if v >= 1 else f"${v:.3f}") + ("*" if estimated else "")


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="The EC2 GPU instance catalog: list, show, refresh.", no_args_is_help=True)
    app.add_typer(sub, name="catalog")

    @sub.command("list")
    def list_(
        gpu: list[str] = typer.Option([], "--gpu", help="Only this GPU (name or alias, e.g. A100, a10g); repeatable."),
        region: str = typer.Option("us-east-1", "--region", help="AWS region."),
        fmt: str = typer.Option("table", "--format", help="table or json."),
    ) -> None:
        """List the GPU instance types with GPUs, network and prices."""
        from srift.catalog import load_catalog
        from srift.hardware import matching_gpus

        check_format(fmt)
        wanted = set().union(*(matching_gpus(g) for g in gpu)) if gpu else set()
        rows = [i for i in load_catalog(region) if not wanted or i.gpu_name in wanted]
        if fmt == "json":
            print_json([_row(i) for i in rows])
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"EC2 GPU instances, {region} (prices as of {rows[0].as_of if rows else '-'})")
        for col, just in (("instance", "left"), ("GPUs", "left"), ("GPU mem", "right"), ("vCPUs", "right"),
                          ("memory", "right"), ("network", "right"), ("on-demand/h", "right"), ("spot/h", "right")):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for i in rows:
            table.add_row(
                i.instance_type, f"{i.gpu_count} x {i.gpu_name}", f"{i.gpu_memory_gib:g} GiB", str(i.vcpus),
                f"{i.memory_gib:g} GiB", f"{i.network_gbps:g} Gb/s" + (" EFA" if i.efa else ""),
                _price(i.on_demand_usd_per_hour), _price(i.spot_usd_per_hour, i.spot_estimated),
            )
        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(table)
        console.print(f"{len(rows)} instance type(s). * spot price estimated from the family's spot/on-demand ratio.")

    @sub.command("show")
    def show(
        instance_type: str = typer.Argument(..., help="Instance type, e.g. p4d.24xlarge."),
        region: str = typer.Option("us-east-1", "--region", help="AWS region."),
        fmt: str = typer.Option("table", "--format", help="table or json."),
    ) -> None:
        """Show one instance type."""
        from srift.catalog import get_instance
        from srift.hardware import gpu as gpu_spec

        check_format(fmt)
        inst = get_instance(instance_type, region)
        if fmt == "json":
            print_json(_row(inst))
            return
        spec = gpu_spec(inst.gpu_name)
        lines = [
            f"{inst.instance_type} ({region})",
            f"  GPUs:        {inst.gpu_count} x {spec.name} ({inst.gpu_memory_gib:g} GiB each), linked by {inst.intra_node}",
            f"  GPU peak:    {spec.fp32_tflops:g} TFLOP/s fp32, {spec.tf32_tflops:g} tf32, "
            f"{max(spec.fp16_tflops, spec.bf16_tflops or 0):g} fp16/bf16 per GPU",
            f"  Host:        {inst.vcpus} vCPUs, {inst.memory_gib:g} GiB memory",
            f"  Network:     {inst.network_gbps:g} Gb/s" + (" with EFA" if inst.efa else " (no EFA)"),
            f"  On demand:   {_price(inst.on_demand_usd_per_hour)}/h" if inst.on_demand_usd_per_hour is not None
            else "  On demand:   not priced in this catalog",
            f"  Spot:        {_price(inst.spot_usd_per_hour)}/h" + (" (estimated)" if inst.spot_estimated else " (median over zones)")
            + f", ~{inst.spot_interruption_per_hour * 730:.0%} interruptions per month (assumed)",
            f"  Prices as of {inst.as_of}; source: {inst.source}",
        ]
        print("\n".join(lines))

    @sub.command("refresh")
    def refresh(region: str = typer.Option("us-east-1", "--region", help="AWS region.")) -> None:
        """Fetch current prices and instance types from AWS (boto3) into the user cache."""
        from srift.catalog.aws import refresh as do_refresh

        def progress(msg: str) -> None:
            if sys.stderr.isatty():
                print(f"  {msg}", file=sys.stderr)

        rows = do_refresh(region, progress=progress)
        print(f"Catalog refreshed: {len(rows)} GPU instance types in {region}.")
