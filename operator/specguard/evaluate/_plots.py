"""PNG plots of a sweep (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from specguard.evaluate._analysis import Analysis, Row

LATENCY_PNG, GAIN_PNG, ARMS_PNG = "latency.png", "gain.png", "arms.png"
DRAFTER_ARM_STYLE = {
    "fixed": ("drafter as configured", "tab:blue", "o-"),
    "schedule": ("recommended schedule (k=0 above N)", "tab:orange", "s-"),
    "adaptive": ("adaptive verification", "tab:green", "^-"),
}
ARM_STYLE = {
    "speculative": ("with drafter", "tab:blue", "o-"),
    "baseline": ("without drafter", "tab:gray", "s--"),
}


def _series(rows: list[Row], arm: str) -> tuple[list[int], list[float]]:
    points = [(r.concurrency, r.arms[arm].tpot_s) for r in rows]  # type: ignore[index]
    xs = [c for c, v in points if v is not None]
    ys = [v * 1000.0 for c, v in points if v is not None]
    return xs, ys


def _log_axis(ax: Any, levels: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.grid(True, which="major", alpha=0.3)


def latency_plot(analysis: Analysis, path: Path, title: str) -> Path:
    """Per-token latency vs concurrency, one panel per subset plus the pooled mix."""
    groups = [(s, [r for r in analysis.rows if r.subset == s]) for s in analysis.subsets]
    groups.append(("all subsets", analysis.levels))
    cols = min(3, len(groups))
    nrows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), squeeze=False)
    for index, (name, rows) in enumerate(groups):
        ax = axes[index // cols][index % cols]
        for arm, (label, colour, style) in ARM_STYLE.items():
            xs, ys = _series(rows, arm)
            ax.plot(xs, ys, style, color=colour, label=label)
        _log_axis(ax, analysis.concurrency)
        ax.set_title(name)
        ax.set_xlabel("concurrency")
        ax.set_ylabel("per-token latency (ms, median)")
        ax.legend(fontsize=8)
    for index in range(len(groups), nrows * cols):
        axes[index // cols][index % cols].axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def gain_plot(analysis: Analysis, path: Path, title: str) -> Path:
    """Per-token gain (baseline/speculative − 1) vs concurrency, one line per subset."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    groups = [(s, [r for r in analysis.rows if r.subset == s], "o-") for s in analysis.subsets]
    groups.append(("all subsets", analysis.levels, "^-"))
    for name, rows, style in groups:
        points = [(r.concurrency, r.gain) for r in rows if r.gain is not None]
        if points:
            kwargs: dict[str, Any] = (
                {"color": "black", "linewidth": 2.2} if name == "all subsets" else {}
            )
            ax.plot(
                [c for c, _ in points], [g * 100 for _, g in points], style, label=name, **kwargs
            )
    ax.axhline(0.0, color="red", linewidth=1.0, linestyle=":")
    for c in [*analysis.crossovers, analysis.overall]:
        if c.subset == "all" and c.interpolated:
            ax.axvline(
                c.interpolated,
                color="red",
                alpha=0.4,
                linestyle="--",
                label=f"crossover ≈ {c.interpolated:.0f}",
            )
    _log_axis(ax, analysis.concurrency)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("per-token gain with drafter (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def arms_plot(analysis: Analysis, path: Path, title: str) -> Path:
    """Per-token gain vs no drafter of every drafter arm measured, all subsets pooled."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for name, rows in {"fixed": analysis.levels, **analysis.variant_levels}.items():
        label, colour, style = DRAFTER_ARM_STYLE[name]
        points = [(r.concurrency, r.gain) for r in rows if r.gain is not None]
        if points:
            ax.plot(
                [c for c, _ in points], [g * 100 for _, g in points], style,
                color=colour, label=label,
            )  # fmt: skip
    ax.axhline(0.0, color="red", linewidth=1.0, linestyle=":", label="no drafter")
    _log_axis(ax, analysis.concurrency)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("per-token gain vs no drafter (%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(analysis: Analysis, out: Path, title: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    if not analysis.rows:
        return []
    latency_plot(analysis, out / LATENCY_PNG, title)
    gain_plot(analysis, out / GAIN_PNG, title)
    written = [LATENCY_PNG, GAIN_PNG]
    if analysis.variant_levels:
        arms_plot(analysis, out / ARMS_PNG, title)
        written.append(ARMS_PNG)
    return written


__all__ = [
    "ARMS_PNG",
    "GAIN_PNG",
    "LATENCY_PNG",
    "arms_plot",
    "gain_plot",
    "latency_plot",
    "write_plots",
]
