"""`srift catalog list|gpus|show|refresh`: the instance table, the GPU table, one instance's facts,
the refresh line; each with where its prices come from and how old they are."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping

from rich.markup import escape
from rich.table import Table

from srift.catalog import Instance
from srift.catalog.instances import CLOUDS
from srift.hardware import GpuSpec
from srift.report.format import console, price_lines, print_json
from srift.results import GpuOffers, PriceAge, ages_json


def price(v: float | None, estimated: bool = False) -> str:
    if v is None:
        return "-"
    return (f"${v:,.2f}" if v >= 1 else f"${v:.3f}") + ("*" if estimated else "")


def _footer(ages: Mapping[str, PriceAge]) -> None:
    con = console(width=160)
    for line in price_lines(ages):
        con.print(f"[dim]{escape(line)}[/dim]")


def show_list(rows: list[Instance], ages: Mapping[str, PriceAge], fmt: str) -> None:
    """The instance types as a table or a JSON list (each row carries its ``as_of`` and ``source``)."""
    if fmt == "json":
        print_json([dataclasses.asdict(i) for i in rows])
        return
    several = len({(i.cloud, i.region) for i in rows}) > 1
    table = Table(title=f"GPU instances, {', '.join(ages)}")
    cols = [("instance", "left")] + ([("where", "left")] if several else []) + [
        ("GPUs", "left"), ("GPU mem", "right"), ("vCPUs", "right"), ("memory", "right"), ("network", "right"),
        ("on-demand/h", "right"), ("spot/h", "right")]
    for col, just in cols:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for i in rows:
        marks = (" [arm64]" if i.host_arch == "arm64" else "")
        cells = [escape(i.instance_type + marks)] + ([i.infra] if several else []) + [
            f"{i.gpu_count} x {i.gpu_name}", f"{i.gpu_memory_gib:g} GiB", str(i.vcpus), f"{i.memory_gib:g} GiB",
            f"{i.network_gbps:g} Gb/s" + (" EFA" if i.efa else ""), price(i.on_demand_usd_per_hour),
            price(i.spot_usd_per_hour, i.spot_estimated)]
        table.add_row(*cells)
    con = console(width=160)
    con.print(table)
    con.print(f"{len(rows)} instance type(s). * spot price estimated from a spot/on-demand ratio or the Spot Advisor's saving.")
    _footer(ages)


def show_gpus(rows: list[GpuOffers], ages: Mapping[str, PriceAge], fmt: str) -> None:
    """One row per GPU type: memory, instance types, cheapest $/GPU-hour per cloud (on demand, spot)."""
    if fmt == "json":
        print_json({"catalog_as_of": ages_json(dict(ages)), "gpus": [
            {"gpu": g.gpu, "memory_gib": g.memory_gib, "instance_types": list(g.instance_types), "gpus_per_instance": list(g.counts),
             "supported": g.supported,
             "clouds": {cloud: {m: None if v is None else {"usd_per_gpu_hour": v[0], "where": v[1]} for m, v in markets.items()}
                        for cloud, markets in g.clouds.items()}} for g in rows]})
        return
    present = {cloud for g in rows for cloud in g.clouds}
    clouds = [c for c in CLOUDS if c in present]
    table = Table(title=f"GPU types, {', '.join(ages)}: cheapest $ per GPU-hour (on demand / spot)")
    table.add_column("GPU")
    table.add_column("memory", justify="right")
    table.add_column("per instance", justify="right")
    table.add_column("instance types")
    for cloud in clouds:
        table.add_column(cloud, justify="right")
    for g in rows:
        types = ", ".join(g.instance_types[:2]) + (f" +{len(g.instance_types) - 2}" if len(g.instance_types) > 2 else "")
        cells = [g.gpu + ("" if g.supported else " [unsupported]"), f"{g.memory_gib:g} GiB", ",".join(map(str, g.counts)), types]
        for cloud in clouds:
            m = g.clouds.get(cloud)
            if m is None:
                cells.append("")
                continue
            od, sp = m["on_demand"], m["spot"]
            cells.append(f"{price(od[0]) if od else '-'} / {price(sp[0]) if sp else '-'}")
        table.add_row(*(escape(c) for c in cells))
    con = console(width=160)
    con.print(table)
    con.print(f"{len(rows)} GPU type(s). [unsupported]: the current PyTorch CUDA wheels do not run on it "
              "(`srift recommend --include-unsupported` searches it anyway).", markup=False)
    _footer(ages)


def show_instance(inst: Instance, spec: GpuSpec, ages: Mapping[str, PriceAge], fmt: str) -> None:
    """One instance type's GPUs, host, network and prices."""
    if fmt == "json":
        print_json({**dataclasses.asdict(inst), "catalog_as_of": ages_json(dict(ages))})
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
    ] + price_lines(ages)
    print("\n".join(lines))


def progress(message: str) -> None:
    """A refresh step, on stderr when it is a terminal."""
    if sys.stderr.isatty():
        print(f"  {message}", file=sys.stderr)


def show_refreshed(rows: list[Instance], ages: Mapping[str, PriceAge]) -> None:
    regions = sorted({r.region for r in rows})
    print(f"Catalog refreshed: {len(rows)} GPU instance rows in {len(regions)} AWS region(s)"
          + (f" ({', '.join(regions[:6])}{', ...' if len(regions) > 6 else ''})" if regions else "") + ".")
    for line in price_lines(ages)[:1]:
        print(line)
