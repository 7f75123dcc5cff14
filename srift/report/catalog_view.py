"""`srift catalog list|show|refresh`: the instance table, one instance's facts, the refresh line."""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

from srift.catalog import Instance
from srift.hardware import GpuSpec
from srift.report.format import console, print_json, save_json
from srift.report.table import Column, print_table
from srift.results import CATALOG_SCHEMA


# Narrow terminals drop host memory first, then vCPUs, GPU memory and network; never names or prices.
LIST_COLUMNS = [Column("instance"), Column("GPUs"), Column("GPU mem", "right", 3), Column("vCPUs", "right", 2),
                Column("memory", "right", 1), Column("network", "right", 4), Column("on-demand/h", "right"),
                Column("spot/h", "right")]


def price(v: float | None, estimated: bool = False) -> str:
    if v is None:
        return "-"
    return (f"${v:,.2f}" if v >= 1 else f"${v:.3f}") + ("*" if estimated else "")


def list_json(rows: list[Instance], region: str) -> dict[str, Any]:
    """The JSON document of `srift catalog list` (schema ``srift.catalog/v1``)."""
    return {"schema": CATALOG_SCHEMA, "region": region, "as_of": rows[0].as_of if rows else None,
            "instances": [dataclasses.asdict(i) for i in rows]}


def instance_json(inst: Instance) -> dict[str, Any]:
    """The JSON document of `srift catalog show` (schema ``srift.catalog/v1``): the instance's fields."""
    return {"schema": CATALOG_SCHEMA, **dataclasses.asdict(inst)}


def _list_cells(rows: list[Instance]) -> list[list[str]]:
    return [[i.instance_type, f"{i.gpu_count} x {i.gpu_name}", f"{i.gpu_memory_gib:g} GiB", str(i.vcpus),
             f"{i.memory_gib:g} GiB", f"{i.network_gbps:g} Gb/s" + (" EFA" if i.efa else ""),
             price(i.on_demand_usd_per_hour), price(i.spot_usd_per_hour, i.spot_estimated)] for i in rows]


def _list_title(rows: list[Instance], region: str) -> str:
    return f"EC2 GPU instances, {region} (prices as of {rows[0].as_of if rows else '-'})"


def show_list(rows: list[Instance], region: str, fmt: str, out_file: str | None = None) -> None:
    """The instance types as a table, markdown or a JSON document (also written to ``out_file``)."""
    if out_file:
        save_json(out_file, list_json(rows, region))
    if fmt == "json":
        print_json(list_json(rows, region))
        return
    if fmt == "markdown":
        lines = [f"**{_list_title(rows, region)}**", "", "| " + " | ".join(c.header for c in LIST_COLUMNS) + " |",
                 "|" + "|".join("---:" if c.justify == "right" else "---" for c in LIST_COLUMNS) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in _list_cells(rows)]
        print("\n".join(lines + ["", f"{len(rows)} instance type(s). * spot price estimated from the family's spot/on-demand ratio."]))
        return
    con = console(width=160)
    print_table(con, LIST_COLUMNS, _list_cells(rows), title=_list_title(rows, region))
    con.print(f"{len(rows)} instance type(s). * spot price estimated from the family's spot/on-demand ratio.")


def show_instance(inst: Instance, spec: GpuSpec, region: str, fmt: str, out_file: str | None = None) -> None:
    """One instance type's GPUs, host, network and prices (text, markdown, or the JSON document,
    also written to ``out_file``)."""
    if out_file:
        save_json(out_file, instance_json(inst))
    if fmt == "json":
        print_json(instance_json(inst))
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
    if fmt == "markdown":  # the same lines as a list under the name
        lines = [f"**{lines[0]}**", ""] + ["- " + re.sub(r":\s+", ": ", line.strip(), count=1) for line in lines[1:]]
    print("\n".join(lines))


def progress(message: str) -> None:
    """A refresh step, on stderr when it is a terminal."""
    if sys.stderr.isatty():
        print(f"  {message}", file=sys.stderr)


def show_refreshed(rows: list[Instance], region: str) -> None:
    print(f"Catalog refreshed: {len(rows)} GPU instance types in {region}.")
