"""From the sweep's cells to the answer: gains, crossovers, verdicts and a recommendation.

Pure: no I/O. Definitions (docs/evaluate.md repeats them for users):

- **per-token latency** of an arm in a cell: the median over its measured requests of
  (t_last_token − t_first_token) / (tokens − 1), from exact streamed token counts.
- **gain** = baseline per-token latency ÷ drafter per-token latency − 1: +0.50 means tokens
  arrive 1.5× as fast with the drafter; 0 or below means the drafter does not pay.
- **crossover** of a subset: the first swept concurrency whose gain is ≤ 0 (``step``), and
  a log-linear interpolation of the gain's zero between that level and the one before it
  (``interpolated``), since gain falls roughly linearly in log-concurrency between levels.
- **tool-call share of math**: tool_call gain ÷ math_reasoning gain at each concurrency
  (where math gains), and the ratio of extra accepted tokens per step, (AL−1)/(AL−1).
- **recommendation**: from the gain over all subsets pooled (the traffic mix the sweep
  ran): no crossover → keep the drafter; a DSpark drafter without adaptive verification
  that crosses over → keep it with adaptive verification (the schedule is the fallback);
  otherwise → no drafter above concurrency N, as a ``num_speculative_tokens_per_batch_size``
  schedule; a drafter that loses already at the lowest level → turn it off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from specguard.evaluate.sweep import ArmRun, Cell
from specguard.judge.sample import ARMS, Arm, Sample
from specguard.judge.verdict import JudgeSettings, Verdict, judge

Action = Literal["keep", "keep_adaptive", "off_above", "off"]
ALL = "all"
TOOL_SUBSET, MATH_SUBSET = "tool_call", "math_reasoning"
# Tool-call gain is reported as a share of math's only where math gains at least this much.
MIN_MATH_GAIN = 0.05


@dataclass(frozen=True, slots=True)
class DrafterInfo:
    """What is known of the with-drafter endpoint's drafter (from --simulate or the user)."""

    method: str | None = None
    k: int | None = None
    adaptive: bool = False
    model: str | None = None


@dataclass(frozen=True, slots=True)
class ArmStats:
    n: int
    errors: int
    tpot_s: float | None
    tpot_p90_s: float | None
    ttft_s: float | None
    ttft_p90_s: float | None
    throughput: float | None
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Row:
    """One subset (or ``all``) at one concurrency."""

    subset: str
    concurrency: int
    arms: Mapping[Arm, ArmStats]
    acceptance_length: float | None
    wall_s: float
    verdict: Verdict | None = None

    @property
    def ratio(self) -> float | None:
        spec, base = self.arms["speculative"].tpot_s, self.arms["baseline"].tpot_s
        if spec is None or base is None or base <= 0:
            return None
        return spec / base

    @property
    def gain(self) -> float | None:
        ratio = self.ratio
        return None if ratio is None or ratio <= 0 else 1.0 / ratio - 1.0


@dataclass(frozen=True, slots=True)
class Crossover:
    subset: str
    step: int | None  # first swept level with gain <= 0; None when the drafter always gains
    interpolated: float | None
    at_first_level: bool

    @property
    def label(self) -> str:
        if self.step is None:
            return "none in the swept range"
        if self.at_first_level:
            return f"at or below {self.step}"
        return (
            f"{self.step} (interpolated {self.interpolated:.0f})"
            if self.interpolated
            else str(self.step)
        )


@dataclass(frozen=True, slots=True)
class ToolVsMath:
    gain_share: Mapping[int, float | None]
    extra_tokens_share: float | None
    tool_acceptance_length: float | None
    math_acceptance_length: float | None


@dataclass(frozen=True, slots=True)
class Recommendation:
    action: Action
    sentence: str
    max_concurrency: int | None  # N of "no drafter above N"
    k: int | None
    schedule: list[list[int]] | None
    spec: dict[str, Any]
    alternative: dict[str, Any] | None = None


@dataclass(slots=True)
class Analysis:
    rows: list[Row]
    levels: list[Row]
    crossovers: list[Crossover]
    overall: Crossover
    tool_vs_math: ToolVsMath | None
    recommendation: Recommendation
    subsets: list[str] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)


def _quantile(values: Sequence[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(values, dtype=np.float64), q)) if values else None


def arm_stats(runs: Sequence[ArmRun], concurrency: int) -> ArmStats:
    samples = [s for run in runs for s in run.samples]
    ok = [s for s in samples if s.ok]
    tpots = [s.tpot_s for s in ok if s.tpot_s is not None and s.tpot_s > 0]
    ttfts = [s.ttft_s for s in ok if s.ttft_s is not None]
    rates = [t for t in (run.throughput(concurrency) for run in runs) if t is not None]
    return ArmStats(
        n=len(samples),
        errors=len(samples) - len(ok),
        tpot_s=_quantile(tpots, 0.5),
        tpot_p90_s=_quantile(tpots, 0.9),
        ttft_s=_quantile(ttfts, 0.5),
        ttft_p90_s=_quantile(ttfts, 0.9),
        # Pooled over subsets, each subset ran alone: the mean of their throughputs.
        throughput=float(np.mean(rates)) if rates else None,
        output_tokens=sum(s.output_tokens for s in ok),
    )


def _acceptance(cells: Sequence[Cell]) -> float | None:
    drafts = sum(c.acceptance.drafts for c in cells if c.acceptance is not None)
    accepted = sum(c.acceptance.accepted for c in cells if c.acceptance is not None)
    return 1.0 + accepted / drafts if drafts > 0 else None


def _row(
    subset: str, concurrency: int, cells: Sequence[Cell], settings: JudgeSettings | None
) -> Row:
    arms = {
        arm: arm_stats([c.arms[arm] for c in cells if arm in c.arms], concurrency) for arm in ARMS
    }
    acceptance = _acceptance(cells)
    verdict = None
    if settings is not None:
        samples: list[Sample] = [s for c in cells for run in c.arms.values() for s in run.samples]
        verdict = judge(
            samples,
            settings,
            acceptance_length=acceptance,
            basis="evaluate sweep (per-request TPOT)",
        )
    return Row(subset, concurrency, arms, acceptance, sum(c.wall_s for c in cells), verdict)


def crossover(subset: str, rows: Sequence[Row]) -> Crossover:
    """First level with gain <= 0, and the log-linear zero of the gain before it."""
    ordered = sorted((r for r in rows if r.gain is not None), key=lambda r: r.concurrency)
    previous: Row | None = None
    for row in ordered:
        gain = row.gain
        assert gain is not None
        if gain <= 0:
            if previous is None:
                return Crossover(subset, row.concurrency, None, at_first_level=True)
            g_a = previous.gain
            assert g_a is not None
            t = g_a / (g_a - gain)
            log_c = math.log(previous.concurrency) + t * (
                math.log(row.concurrency) - math.log(previous.concurrency)
            )
            return Crossover(subset, row.concurrency, math.exp(log_c), at_first_level=False)
        previous = row
    return Crossover(subset, None, None, at_first_level=False)


def tool_vs_math(rows: Sequence[Row]) -> ToolVsMath | None:
    by_key = {(r.subset, r.concurrency): r for r in rows}
    if not any(s == TOOL_SUBSET for s, _ in by_key) or not any(s == MATH_SUBSET for s, _ in by_key):
        return None
    shares: dict[int, float | None] = {}
    for (subset, concurrency), tool in sorted(by_key.items(), key=lambda kv: kv[0][1]):
        if subset != TOOL_SUBSET or (MATH_SUBSET, concurrency) not in by_key:
            continue
        math_gain, tool_gain = by_key[(MATH_SUBSET, concurrency)].gain, tool.gain
        # A share of a gain near zero is noise, not a fraction: only where math gains.
        # Only where both gain: a negative "share" of a positive gain reads as nonsense.
        if (
            tool_gain is not None
            and tool_gain > 0
            and math_gain is not None
            and math_gain >= MIN_MATH_GAIN
        ):
            shares[concurrency] = tool_gain / math_gain
        else:
            shares[concurrency] = None
    tool_al = _mean_acceptance([r for r in rows if r.subset == TOOL_SUBSET])
    math_al = _mean_acceptance([r for r in rows if r.subset == MATH_SUBSET])
    extra = (
        (tool_al - 1) / (math_al - 1)
        if tool_al is not None and math_al is not None and math_al > 1
        else None
    )
    return ToolVsMath(shares, extra, tool_al, math_al)


def _mean_acceptance(rows: Sequence[Row]) -> float | None:
    values = [r.acceptance_length for r in rows if r.acceptance_length is not None]
    return float(np.mean(values)) if values else None


def recommend(
    overall: Crossover, levels: Sequence[Row], drafter: DrafterInfo, max_batch: int
) -> Recommendation:
    k = drafter.k
    k_text = str(k) if k is not None else "k"
    k_value = k if k is not None else 1

    def drafter_fields(**extra: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if drafter.method:
            fields["method"] = drafter.method
        if drafter.model:
            fields["model"] = drafter.model
        if k is not None:
            fields["numSpeculativeTokens"] = k
        fields.update(extra)
        return {"drafter": fields}

    if overall.step is None:
        top = max((r.concurrency for r in levels), default=0)
        suffix = " with adaptive verification" if drafter.adaptive else ""
        return Recommendation(
            action="keep",
            sentence=(
                f"Keep the drafter{suffix}: it is faster per token at every swept "
                f"concurrency up to {top}."
            ),
            max_concurrency=None,
            k=k,
            schedule=[[1, max_batch, k_value]],
            spec=drafter_fields(**({"adaptiveVerification": True} if drafter.adaptive else {})),
        )
    if overall.at_first_level:
        return Recommendation(
            action="off",
            sentence=(
                f"Turn the drafter off: it is no faster per token even at concurrency "
                f"{overall.step}, "
                "the lowest level swept."
            ),
            max_concurrency=0,
            k=k,
            schedule=[[1, max_batch, 0]],
            spec={"drafter": None},
        )
    below = [r.concurrency for r in levels if r.concurrency < overall.step]
    last_win = max(below) if below else 1
    limit = max(last_win, math.floor(overall.interpolated or last_win))
    limit = min(limit, max_batch - 1)
    schedule = [[1, limit, k_value], [limit + 1, max_batch, 0]]
    off_above: dict[str, Any] = {
        "action": "off_above",
        "schedule": schedule,
        "spec": drafter_fields(perBatchSize=[list(r) for r in schedule]),
    }
    where = (
        f"interpolated crossover ≈ {overall.interpolated:.0f}"
        if overall.interpolated
        else f"crossover at {overall.step}"
    )
    if drafter.method == "dspark" and not drafter.adaptive:
        return Recommendation(
            action="keep_adaptive",
            sentence=(
                "Keep the DSpark drafter with adaptive verification: with fixed "
                f"{k_text}-token verification it stops paying at concurrency {overall.step} "
                f"({where}); adaptive verification shrinks the verified budget as the batch "
                f"grows. Without it, speculate only up to {limit} concurrent requests."
            ),
            max_concurrency=limit,
            k=k,
            schedule=schedule,
            spec=drafter_fields(adaptiveVerification=True),
            alternative=off_above,
        )
    return Recommendation(
        action="off_above",
        sentence=(
            f"No drafter above concurrency {limit}: it is faster per token below that, "
            f"and no faster from {overall.step} on ({where})."
        ),
        max_concurrency=limit,
        k=k,
        schedule=schedule,
        spec=off_above["spec"],
    )


def analyse(
    cells: Sequence[Cell],
    *,
    drafter: DrafterInfo,
    judge_settings: JudgeSettings,
    max_batch: int = 1024,
) -> Analysis:
    subsets = list(dict.fromkeys(c.subset for c in cells))
    levels_swept = sorted({c.concurrency for c in cells})
    rows = [
        _row(subset, level, [c], None)
        for level in levels_swept
        for subset in subsets
        for c in cells
        if c.subset == subset and c.concurrency == level
    ]
    levels = [
        _row(ALL, level, [c for c in cells if c.concurrency == level], judge_settings)
        for level in levels_swept
    ]
    crossovers = [crossover(subset, [r for r in rows if r.subset == subset]) for subset in subsets]
    overall = crossover(ALL, levels)
    return Analysis(
        rows=rows,
        levels=levels,
        crossovers=crossovers,
        overall=overall,
        tool_vs_math=tool_vs_math(rows),
        recommendation=recommend(overall, levels, drafter, max_batch),
        subsets=subsets,
        concurrency=levels_swept,
    )


__all__ = [
    "ALL",
    "Action",
    "Analysis",
    "ArmStats",
    "Crossover",
    "DrafterInfo",
    "Recommendation",
    "Row",
    "ToolVsMath",
    "analyse",
    "arm_stats",
    "crossover",
    "recommend",
    "tool_vs_math",
]
