"""`srift recommend --plot FILE.png`: expected throughput against the cluster's price of every
configuration simulated, coloured by GPU type, with the Pareto frontier, the budget line, the
chosen configuration and the best one-node configuration marked (matplotlib, Agg backend).

``plot_data`` gathers what is drawn (tests check it against the search); ``plot_recommend``
draws it, writes the PNG atomically with normal permissions and says where on stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from srift import DISTRIBUTION
from srift.errors import SriftError
from srift.outputs import atomic_open
from srift.text import plot_label
from srift.report.recommend_view import header
from srift.results import RecommendResult
from srift.search.rank import Candidate

Point = tuple[float, float]  # ($/h, expected samples/s)


@dataclass(frozen=True)
class PlotData:
    """What the plot shows.

    Attributes:
        by_gpu: Configurations that meet the limits, per GPU type (``A10G``, ``A10G+V100``).
        violating: Configurations that miss a limit (grey).
        frontier: The Pareto frontier, cheapest first.
        chosen: The chosen configuration's label and point, or None when nothing meets the limits.
        best_one_node: The best one-node configuration when the choice spans several nodes, else None.
        budget_usd_per_hour: The budget line, or None without a budget.
        title: What was searched for.
    """

    by_gpu: dict[str, list[Point]]
    violating: list[Point]
    frontier: list[Point]
    chosen: tuple[str, Point] | None
    best_one_node: tuple[str, Point] | None
    budget_usd_per_hour: float | None
    title: str


def plot_data(result: RecommendResult) -> PlotData:
    """The points, lines and marks of the plot of ``result``."""
    found = result.search
    by_gpu: dict[str, list[Point]] = {}
    for cost, throughput, feasible, gpus in found.evaluated_points:
        if feasible:
            by_gpu.setdefault(gpus, []).append((cost, throughput))

    def mark(cand: Candidate | None) -> tuple[str, Point] | None:
        return None if cand is None else (cand.label, (cand.cost_per_hour_usd, cand.expected_throughput_samples_per_s))

    return PlotData(
        by_gpu=dict(sorted(by_gpu.items())),
        violating=[(c, t) for c, t, feasible, _ in found.evaluated_points if not feasible],
        frontier=[(c.cost_per_hour_usd, c.expected_throughput_samples_per_s) for c in found.frontier],
        chosen=mark(found.recommendations[0] if found.recommendations else None),
        best_one_node=mark(found.best_single_node),
        budget_usd_per_hour=result.constraints.budget_usd_per_hour,
        title=header(result),
    )


def _xy(points: list[Point]) -> tuple[list[float], list[float]]:
    return [x for x, _ in points], [y for _, y in points]


def plot_recommend(result: RecommendResult, path: str) -> Path:
    """Draw ``result`` to a PNG at ``path`` (atomically, normal permissions), say where on stderr,
    and return the path.

    Raises:
        SriftError: when matplotlib is not installed.
    """
    try:  # matplotlib is optional (the plot extra) and slow to import: only for --plot
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SriftError("--plot needs matplotlib, which is not installed.",
                         f"install matplotlib: pip install 'matplotlib>=3.7' (the plot extra of {DISTRIBUTION}; "
                         "in a srift checkout: pip install -e '.[plot]'), or drop --plot.") from None
    data = plot_data(result)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    if data.violating:
        ax.scatter(*_xy(data.violating), s=8, c="#d9d9d9", label="misses a limit", zorder=1)
    colours = plt.get_cmap("tab20" if len(data.by_gpu) > 10 else "tab10")
    for i, (gpus, points) in enumerate(data.by_gpu.items()):
        ax.scatter(*_xy(points), s=12, color=colours(i % colours.N), alpha=0.75, label=plot_label(gpus), zorder=2)
    if data.frontier:
        ax.plot(*_xy(data.frontier), "-", c="#555555", lw=1.2, label="Pareto frontier", zorder=3)
    if data.budget_usd_per_hour is not None:
        ax.axvline(data.budget_usd_per_hour, ls="--", c="#c44e52", lw=1.2, label=plot_label(f"budget ${data.budget_usd_per_hour:,.2f}/h"))
    if data.chosen is not None:
        ax.scatter(*data.chosen[1], s=260, marker="*", c="#c44e52", edgecolors="black", zorder=5,
                   label=plot_label(f"chosen: {data.chosen[0]}"))
    if data.best_one_node is not None:
        ax.scatter(*data.best_one_node[1], s=120, marker="D", facecolors="none", edgecolors="black", lw=1.5, zorder=5,
                   label=plot_label(f"best one node: {data.best_one_node[0]}"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(plot_label("cluster price ($/hour)"))
    ax.set_ylabel("expected throughput (samples/s)")
    ax.set_title(plot_label(data.title, 400))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    try:
        with atomic_open(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=120)
    finally:
        plt.close(fig)
    shown = len(data.violating) + sum(len(p) for p in data.by_gpu.values())
    print(f"Wrote plot {path}: {shown:,} configurations, {len(data.by_gpu)} GPU types.", file=sys.stderr)
    return Path(path)
