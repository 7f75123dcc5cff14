"""`srift catalog list|gpus|show|refresh`: the instance table, the GPU table, one instance's facts,
the refresh line; each says where its prices come from and how old they are."""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
from collections.abc import Mapping
from typing import Any

from rich.markup import escape

from srift.catalog import Instance
from srift.catalog.instances import CLOUDS
from srift.catalog.load import CLOUD_NAMES
from srift.hardware import GpuSpec
from srift.log import LOGGER
from srift.report.format import console, price_lines, print_json, save_json
from srift.report.table import Column, print_table
from srift.results import CATALOG_SCHEMA, GpuOffers, PriceAge, ages_json

# Narrow terminals drop host memory first, then vCPUs, GPU memory, network and where; never names or prices.
LIST_COLUMNS = [Column("instance"), Column("where", "left", 5), Column("GPUs"), Column("GPU mem", "right", 3),
                Column("vCPUs", "right", 2), Column("memory", "right", 1), Column("network", "right", 4),
                Column("on-demand/h", "right"), Column("spot/h", "right")]
SPOT_NOTE = "* spot price estimated from a spot/on-demand ratio or the Spot Advisor's saving."


def price(v: float | None, estimated: bool = False) -> str:
    if v is None:
        return "-"
    return (f"${v:,.2f}" if v >= 1 else f"${v:.3f}") + ("*" if estimated else "")


def list_json(rows: list[Instance], ages: Mapping[str, PriceAge]) -> dict[str, Any]:
    """The JSON document of `srift catalog list` (schema ``srift.catalog/v1``): the selection, the
    age of its prices and the rows (each with its own ``as_of`` and ``source``)."""
    dated = sorted(r.as_of for r in rows if r.as_of)
    regions = {r.region for r in rows}
    return {"schema": CATALOG_SCHEMA, "infra": ",".join(ages), "region": regions.pop() if len(regions) == 1 else None,
            "as_of": dated[0] if dated else None,
            "catalog_as_of": ages_json(dict(ages)), "instances": [dataclasses.asdict(i) for i in rows]}


def instance_json(inst: Instance, ages: Mapping[str, PriceAge]) -> dict[str, Any]:
    """The JSON document of `srift catalog show` (schema ``srift.catalog/v1``): the instance's fields."""
    return {"schema": CATALOG_SCHEMA, **dataclasses.asdict(inst), "catalog_as_of": ages_json(dict(ages))}


def gpus_json(rows: list[GpuOffers], ages: Mapping[str, PriceAge]) -> dict[str, Any]:
    """The JSON document of `srift catalog gpus` (schema ``srift.catalog/v1``)."""
    return {"schema": CATALOG_SCHEMA, "catalog_as_of": ages_json(dict(ages)), "gpus": [
        {"gpu": g.gpu, "memory_gib": g.memory_gib, "instance_types": list(g.instance_types), "gpus_per_instance": list(g.counts),
         "supported": g.supported,
         "clouds": {cloud: {m: None if v is None else {"usd_per_gpu_hour": v[0], "where": v[1]} for m, v in markets.items()}
                    for cloud, markets in g.clouds.items()}} for g in rows]}


def _list_cells(rows: list[Instance]) -> list[list[str]]:
    return [[i.instance_type + (" [arm64]" if i.host_arch == "arm64" else ""), i.infra, f"{i.gpu_count} x {i.gpu_name}",
             f"{i.gpu_memory_gib:g} GiB", str(i.vcpus), f"{i.memory_gib:g} GiB", f"{i.network_gbps:g} Gb/s" + (" EFA" if i.efa else ""),
             price(i.on_demand_usd_per_hour), price(i.spot_usd_per_hour, i.spot_estimated)] for i in rows]


def _markdown_table(columns: list[Column], cells: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(c.header or " " for c in columns) + " |",
             "|" + "|".join("---:" if c.justify == "right" else "---" for c in columns) + "|"]
            + ["| " + " | ".join(r) + " |" for r in cells])


def _footer(con: Any, ages: Mapping[str, PriceAge]) -> None:
    for line in price_lines(ages):
        con.print(f"[dim]{escape(line)}[/dim]")


def show_list(rows: list[Instance], ages: Mapping[str, PriceAge], fmt: str, out_file: str | None = None) -> None:
    """The instance types as a table, markdown or the JSON document (also written to ``out_file``)."""
    doc = list_json(rows, ages)
    if out_file:
        save_json(out_file, doc)
    if fmt == "json":
        print_json(doc)
        return
    several = len({(i.cloud, i.region) for i in rows}) > 1
    columns = [c for c in LIST_COLUMNS if several or c.header != "where"]
    cells = [[cell for cell, c in zip(row, LIST_COLUMNS) if several or c.header != "where"] for row in _list_cells(rows)]
    title = f"GPU instances, {', '.join(ages)}"
    if fmt == "markdown":
        print("\n".join([f"**{title}**", ""] + _markdown_table(columns, cells)
                        + ["", f"{len(rows)} instance type(s). {SPOT_NOTE}", ""] + price_lines(ages)))
        return
    con = console(width=160)
    print_table(con, columns, [[escape(x) for x in row] for row in cells], title=title)
    con.print(f"{len(rows)} instance type(s). {SPOT_NOTE}", markup=False)
    _footer(con, ages)


def _gpu_cells(rows: list[GpuOffers]) -> tuple[list[Column], list[list[str]]]:
    present = {cloud for g in rows for cloud in g.clouds}
    clouds = [c for c in CLOUDS if c in present]
    columns = [Column("GPU"), Column("memory", "right", 2), Column("per instance", "right", 1), Column("instance types", "left", 3)]
    columns += [Column(cloud, "right") for cloud in clouds]
    cells = []
    for g in rows:
        types = ", ".join(g.instance_types[:2]) + (f" +{len(g.instance_types) - 2}" if len(g.instance_types) > 2 else "")
        row = [g.gpu + ("" if g.supported else " [unsupported]"), f"{g.memory_gib:g} GiB", ",".join(map(str, g.counts)), types]
        for cloud in clouds:
            m = g.clouds.get(cloud)
            od, sp = (m["on_demand"], m["spot"]) if m else (None, None)
            row.append("" if m is None else f"{price(od[0]) if od else '-'} / {price(sp[0]) if sp else '-'}")
        cells.append(row)
    return columns, cells


def show_gpus(rows: list[GpuOffers], ages: Mapping[str, PriceAge], fmt: str, out_file: str | None = None) -> None:
    """One row per GPU type: memory, instance types, cheapest $/GPU-hour per cloud (on demand / spot)."""
    doc = gpus_json(rows, ages)
    if out_file:
        save_json(out_file, doc)
    if fmt == "json":
        print_json(doc)
        return
    columns, cells = _gpu_cells(rows)
    title = f"GPU types, {', '.join(ages)}: cheapest $ per GPU-hour (on demand / spot)"
    note = (f"{len(rows)} GPU type(s). [unsupported]: the current PyTorch CUDA wheels do not run on it "
            "(`srift recommend --include-unsupported` searches it anyway).")
    if fmt == "markdown":
        print("\n".join([f"**{title}**", ""] + _markdown_table(columns, cells) + ["", note, ""] + price_lines(ages)))
        return
    con = console(width=160)
    print_table(con, columns, [[escape(x) for x in row] for row in cells], title=title)
    con.print(note, markup=False)
    _footer(con, ages)


def show_instance(inst: Instance, spec: GpuSpec, ages: Mapping[str, PriceAge], fmt: str, out_file: str | None = None) -> None:
    """One instance type's GPUs, host, network and prices (text, markdown, or the JSON document,
    also written to ``out_file``)."""
    doc = instance_json(inst, ages)
    if out_file:
        save_json(out_file, doc)
    if fmt == "json":
        print_json(doc)
        return
    lines = [
        f"{inst.instance_type} ({inst.infra})",
        f"  GPUs:        {inst.gpu_count} x {spec.name} ({inst.gpu_memory_gib:g} GiB each), linked by {inst.intra_node}",
        f"  GPU peak:    {spec.fp32_tflops:g} TFLOP/s fp32, {spec.tf32_tflops:g} tf32, "
        f"{max(spec.fp16_tflops, spec.bf16_tflops or 0):g} fp16/bf16 per GPU",
        f"  Host:        {inst.vcpus} vCPUs ({inst.host_arch}), {inst.memory_gib:g} GiB memory",
        f"  Network:     {inst.network_gbps:g} Gb/s" + (" with EFA" if inst.efa else f" ({inst.transport})"),
        f"  On demand:   {price(inst.on_demand_usd_per_hour)}/h" if inst.on_demand_usd_per_hour is not None
        else "  On demand:   not priced in this catalog",
        f"  Spot:        {price(inst.spot_usd_per_hour)}/h" + (" (estimated)" if inst.spot_estimated else " (median over zones)")
        + f", ~{inst.spot_interruption_per_hour * 730:.0%} interruptions per month"
        + (f" (band {inst.spot_interruption_band})" if inst.spot_interruption_band else ""),
        f"  Source:      {inst.source}",
    ]
    if fmt == "markdown":  # the same lines as a list under the name
        lines = [f"**{lines[0]}**", ""] + ["- " + re.sub(r":\s+", ": ", line.strip(), count=1) for line in lines[1:]]
    print("\n".join(lines + price_lines(ages)))


def progress(message: str) -> None:
    """A refresh step: on stderr when it is a terminal, else a -v line (a CI log)."""
    if sys.stderr.isatty() and LOGGER.isEnabledFor(logging.WARNING):
        print(f"  {message}", file=sys.stderr)
    else:
        LOGGER.info(f"  {message}")


def show_refreshed(rows: list[Instance], ages: Mapping[str, PriceAge]) -> None:
    regions = sorted({f"{r.cloud}/{r.region}" for r in rows})
    clouds = ", ".join(CLOUD_NAMES.get(c, c) for c in dict.fromkeys(r.cloud for r in rows))
    print(f"Catalog refreshed: {len(rows)} GPU instance rows in {len(regions)} {clouds} region(s)"
          + (f" ({', '.join(regions[:6])}{', ...' if len(regions) > 6 else ''})" if regions else "") + ".")
    for line in price_lines(ages)[:1]:
        print(line)
