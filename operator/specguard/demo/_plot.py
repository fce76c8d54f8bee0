"""The demo's timeline PNG (matplotlib, imported when called: the `evaluate` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specguard.api import constants as c
from specguard.demo._accounting import Window
from specguard.demo._report import Decision
from specguard.demo._schedule import Span
from specguard.demo._watch import PodLoad, Snapshot, VerdictMark

OUTCOME_COLOURS = {
    "regressed": "tab:red",
    "improved": "tab:green",
    "neutral": "tab:gray",
    "inconclusive": "white",
}
ARM_COLOURS = {c.ARM_SPECULATIVE: "tab:blue", c.ARM_BASELINE: "tab:orange"}
MODE_COLOURS = {c.ARM_SPECULATIVE: "tab:blue", c.ARM_BASELINE: "tab:orange", "swapping": "tab:gray"}


def timeline(
    path: Path,
    *,
    t0: float,
    spans: Sequence[Span],
    windows: Sequence[Window],
    verdicts: Sequence[VerdictMark],
    snapshots: Sequence[Snapshot],
    loads: Sequence[PodLoad],
    decisions: Sequence[Decision],
    window_s: float,
    tolerance: float,
    title: str,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda y, _: f"{y:g}")

    fig, (lat, ver, conc) = plt.subplots(
        3, 1, figsize=(14, 9.5), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]}
    )
    end = spans[-1].end if spans else 0.0
    for ax in (lat, ver, conc):
        for span in spans:
            if span.phase.domain == "tool_call":
                ax.axvspan(span.start, span.end, color="tab:purple", alpha=0.07, lw=0)
        for d in decisions:
            colour = "tab:red" if d.rollback else "tab:green"
            ax.axvline(d.at - t0, color=colour, lw=1.4)
            if d.swap_done is not None:
                ax.axvline(d.swap_done - t0, color=colour, lw=1.0, ls=":")
        ax.grid(True, alpha=0.25)
        ax.set_xlim(0, end)
    for span in spans:
        p = span.phase
        lat.text(
            (span.start + span.end) / 2,
            1.01,
            f"{p.label()}, {p.per_pod_text()}",
            transform=lat.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
        )

    # 1. per-token latency of both arms on the mirrored pairs, and what the client got
    mid = [((w.start + w.end) / 2 - t0) for w in windows]
    for arm, values, label in (
        (c.ARM_SPECULATIVE, [w.spec_s for w in windows], "drafter arm (mirrored pairs)"),
        (c.ARM_BASELINE, [w.base_s for w in windows], "baseline arm (mirrored pairs)"),
    ):
        xs = [x for x, v in zip(mid, values, strict=True) if v is not None]
        ys = [v * 1000 for v in values if v is not None]
        lat.plot(xs, ys, "o-", color=ARM_COLOURS[arm], label=label, ms=4)
    xs = [x for x, w in zip(mid, windows, strict=True) if w.realized_s is not None]
    ys = [w.realized_s * 1000 for w in windows if w.realized_s is not None]
    lat.plot(xs, ys, "k--", lw=1.2, label="client (realized)")
    lat.set_yscale("log")
    lat.yaxis.set_major_formatter(plain)
    lat.yaxis.set_minor_formatter(plain)
    lat.set_ylabel("per-token latency (ms)")
    lat.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)

    # 2. each window's verdict (ratio and CI), the mode
    for v in verdicts:
        x = v.end - t0 - window_s / 2
        if v.ratio is None:
            ver.plot([x], [1.0], "o", mfc="white", mec="tab:gray", ms=6)
            continue
        low = v.ratio - (v.ci_low if v.ci_low is not None else v.ratio)
        high = (v.ci_high if v.ci_high is not None else v.ratio) - v.ratio
        colour = OUTCOME_COLOURS.get(v.outcome, "tab:gray")
        ver.errorbar(
            [x],
            [v.ratio],
            yerr=[[low], [high]],
            fmt="o",
            color=colour,
            mec="black",
            mew=0.5,
            ms=6,
            capsize=2,
        )
    ver.axhline(1.0, color="black", lw=0.8)
    ver.axhspan(1 - tolerance, 1 + tolerance, color="tab:gray", alpha=0.15, lw=0)
    ver.set_yscale("log")
    ver.set_yticks([0.25, 0.5, 1.0, 2.0, 4.0])
    ver.yaxis.set_major_formatter(plain)
    ver.yaxis.set_minor_formatter(NullFormatter())
    ver.set_ylabel("verdict: drafter ÷ baseline")
    _mode_band(ver, snapshots, t0)
    handles = [
        Line2D([], [], marker="o", ls="", color=colour, mec="black", label=outcome)
        for outcome, colour in OUTCOME_COLOURS.items()
    ]
    handles += [
        Line2D([], [], color="tab:red", label="rollback decided (dotted: serving)"),
        Line2D([], [], color="tab:green", label="re-promotion decided"),
        *(
            Line2D([], [], color=colour, lw=6, label=f"mode: {state}")
            for state, colour in MODE_COLOURS.items()
        ),
    ]
    ver.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7
    )

    # 3. concurrency per pod
    by_pod: dict[str, list[PodLoad]] = {}
    for load in loads:
        by_pod.setdefault(load.pod, []).append(load)
    for pod, series in sorted(by_pod.items()):
        arm = series[0].arm
        conc.plot(
            [x.t - t0 for x in series],
            [x.running + x.waiting for x in series],
            ".-",
            color=ARM_COLOURS.get(arm, "gray"),
            lw=0.8,
            ms=2,
            alpha=0.8,
            label=f"{pod} ({'drafter' if arm == c.ARM_SPECULATIVE else 'baseline'})",
        )
    for span in spans:
        if span.phase.open:
            continue  # arrivals: the in-flight count follows the serving arm's speed
        conc.hlines(
            span.phase.per_pod, span.start, span.end, colors="black", linestyles="--", lw=0.8
        )
    conc.set_ylabel("requests in flight per pod")
    conc.set_xlabel("seconds since the traffic started")
    conc.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mode_band(ax: Any, snapshots: Sequence[Snapshot], t0: float) -> None:
    """The serving mode along the bottom of the verdict panel."""
    if not snapshots:
        return
    runs: list[tuple[float, float, str]] = []
    for snap in snapshots:
        state = "swapping" if snap.swapping or snap.mode != snap.target else snap.mode
        if runs and runs[-1][2] == state:
            runs[-1] = (runs[-1][0], snap.t - t0, state)
        else:
            runs.append((snap.t - t0, snap.t - t0, state))
    for start, end, state in runs:
        ax.axvspan(
            start,
            max(end, start + 1),
            ymin=0,
            ymax=0.06,
            color=MODE_COLOURS[state],
            alpha=0.8,
            lw=0,
        )
