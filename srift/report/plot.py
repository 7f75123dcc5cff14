"""`srift recommend --plot`: throughput vs $/h of every evaluated configuration (matplotlib)."""

from __future__ import annotations

from srift import DISTRIBUTION
from srift.errors import SriftError
from srift.files import atomic_open
from srift.report.recommend_view import header
from srift.results import RecommendResult


def plot_recommend(result: RecommendResult, path: str) -> None:
    """Write the evaluated configurations, the Pareto frontier and the choice to a PNG, atomically."""
    try:  # matplotlib is optional (the plot extra) and slow to import: only for --plot
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SriftError("--plot needs matplotlib, which is not installed.",
                         f"install matplotlib: pip install 'matplotlib>=3.7' (the plot extra of {DISTRIBUTION}; "
                         "in a srift checkout: pip install -e '.[plot]'), or drop --plot.") from None
    found = result.search
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ok = [(x, y) for x, y, f in found.evaluated_points if f]
    bad = [(x, y) for x, y, f in found.evaluated_points if not f]
    if bad:
        ax.scatter([x for x, _ in bad], [y for _, y in bad], s=8, c="#cccccc", label="violates a limit")
    if ok:
        ax.scatter([x for x, _ in ok], [y for _, y in ok], s=10, c="#4c72b0", alpha=0.6, label="meets the limits")
    if found.frontier:
        ax.plot([c.cost_per_hour_usd for c in found.frontier], [c.expected_throughput_samples_per_s for c in found.frontier],
                "-", c="#dd8452", lw=1.5, label="Pareto frontier")
    if found.recommendations:
        top = found.recommendations[0]
        ax.scatter([top.cost_per_hour_usd], [top.expected_throughput_samples_per_s], s=160, marker="*", c="#c44e52", zorder=5,
                   label=f"chosen: {top.label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cluster price ($/hour)")
    ax.set_ylabel("expected throughput (samples/s)")
    ax.set_title(header(result))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    try:
        with atomic_open(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=120)
    finally:
        plt.close(fig)
