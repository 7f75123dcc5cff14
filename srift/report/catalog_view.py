"""`srift catalog list|show|refresh`: the instance table, one instance's facts, the refresh line."""

from __future__ import annotations

import dataclasses
import sys

from rich.table import Table

from srift.catalog import Instance
from srift.hardware import GpuSpec
from srift.report.format import console, print_json


def price(v: float | None, estimated: bool = False) -> str:
    if v is None:
        return "-"
    return (f"${v:,.2f}" if v >= 1 else f"${v:.3f}") + ("*" if estimated else "")


def show_list(rows: list[Instance], region: str, fmt: str) -> None:
    """The instance types as a table or a JSON list."""
    if fmt == "json":
        print_json([dataclasses.asdict(i) for i in rows])
        return
    table = Table(title=f"EC2 GPU instances, {region} (prices as of {rows[0].as_of if rows else '-'})")
    for col, just in (("instance", "left"), ("GPUs", "left"), ("GPU mem", "right"), ("vCPUs", "right"),
                      ("memory", "right"), ("network", "right"), ("on-demand/h", "right"), ("spot/h", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for i in rows:
        table.add_row(
            i.instance_type, f"{i.gpu_count} x {i.gpu_name}", f"{i.gpu_memory_gib:g} GiB", str(i.vcpus),
            f"{i.memory_gib:g} GiB", f"{i.network_gbps:g} Gb/s" + (" EFA" if i.efa else ""),
            price(i.on_demand_usd_per_hour), price(i.spot_usd_per_hour, i.spot_estimated),
        )
    con = console(width=160)
    con.print(table)
    con.print(f"{len(rows)} instance type(s). * spot price estimated from the family's spot/on-demand ratio.")


def show_instance(inst: Instance, spec: GpuSpec, region: str, fmt: str) -> None:
    """One instance type's GPUs, host, network and prices."""
    if fmt == "json":
        print_json(dataclasses.asdict(inst))
        return
    lines = [
        f"{inst.instance_type} ({region})",
        f"  GPUs:        {inst.gpu_count} x {spec.name} ({inst.gpu_memory_gib:g} GiB each), linked by {inst.intra_node}",
        f"  GPU peak:    {spec.fp32_tflops:g} TFLOP/s fp32, {spec.tf32_tflops:g} tf32, "
        f"{max(spec.fp16_tflops, spec.bf16_tflops or 0):g} fp16/bf16 per GPU",
        f"  Host:        {inst.vcpus} vCPUs, {inst.memory_gib:g} GiB memory",
        f"  Network:     {inst.network_gbps:g} Gb/s" + (" with EFA" if inst.efa else " (no EFA)"),
        f"  On demand:   {price(inst.on_demand_usd_per_hour)}/h" if inst.on_demand_usd_per_hour is not None
        else "  On demand:   not priced in this catalog",
        f"  Spot:        {price(inst.spot_usd_per_hour)}/h" + (" (estimated)" if inst.spot_estimated else " (median over zones)")
        + f", ~{inst.spot_interruption_per_hour * 730:.0%} interruptions per month (assumed)",
        f"  Prices as of {inst.as_of}; source: {inst.source}",
    ]
    print("\n".join(lines))


def progress(message: str) -> None:
    """A refresh step, on stderr when it is a terminal."""
    if sys.stderr.isatty():
        print(f"  {message}", file=sys.stderr)


def show_refreshed(rows: list[Instance], region: str) -> None:
    print(f"Catalog refreshed: {len(rows)} GPU instance types in {region}.")
