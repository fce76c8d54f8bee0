"""From the sweep's cells to the answer: gains, crossovers, verdicts and a recommendation.

Pure: no I/O. Definitions (docs/evaluate.md repeats them for users):

- **per-token latency** of an arm in a cell: the median over its measured requests of
  (t_last_token − t_first_token) / (tokens − 1), from exact streamed token counts.
- **gain** = baseline per-token latency ÷ drafter per-token latency − 1: +0.50 means tokens
  arrive 1.5× as fast with the drafter; 0 or below means the drafter does not pay.
- **verdict** of a row (a subset's cell, or a pooled level): the judge on its samples. An
  **inconclusive** row (too few requests, a load mismatch, chunk-counted TPOT, ...) is
  neither a win nor a loss nor "no measurable gain": its gain is a point estimate the judge
  could not confirm, and nothing is decided from it. A row without a verdict (built with no
  judge settings; ``analyse`` judges every row) is decided by its gain alone, labelled
  "point estimate".
- **losing level**: one where the drafter is measurably slower: the judge's verdict there is
  regressed, or the gain is below −tolerance (and the judge was not inconclusive). A level
  with gain ≤ 0 but neither is "no measurable gain", not a loss: a −0.5% dip inside the
  noise must not turn a drafter off.
- **crossover** of a subset: the first swept concurrency that loses (``step``), and a
  log-linear interpolation of the gain's zero between that level and the one before it
  (``interpolated``, when the gain there is positive), since gain falls roughly linearly in
  log-concurrency between levels. An inconclusive level is no loss, and no zero is
  interpolated from its gain.
- **tool-call share of math**: tool_call gain ÷ math_reasoning gain at each concurrency
  (where math gains, and the judge decided both cells), and the ratio of extra accepted
  tokens per step, (AL−1)/(AL−1).
- **recommendation**: from all subsets pooled (the traffic mix the sweep ran) and the
  judge's verdicts: no crossover → keep the drafter (off when it gains at no level and
  every level was decided); a drafter that loses already at the lowest level → turn it off;
  nothing decided (every level inconclusive, or no gain where decided and inconclusive
  elsewhere) → ``inconclusive``: the sweep could not tell, rerun with more requests. A
  drafter that gains at low concurrency and loses at high is answered only by what was
  *measured*: adaptive verification when its own arm loses at no level; else the
  ``num_speculative_tokens_per_batch_size`` schedule (no drafting above N) when its own
  arm loses at none of the levels the user sees most (a drafter held at k = 0 still costs
  per token, so the schedule can lose where it drafts nothing); else, or when neither
  was measured, the operator, which switches between the drafter and no drafter by
  measured per-token latency. With k unknown no schedule is made up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from specguard.evaluate._cells import VARIANTS, ArmRun, Cell
from specguard.judge import (
    ARMS,
    Arm,
    Crossing,
    JudgeSettings,
    LevelGain,
    Sample,
    Verdict,
    crossing,
    judge,
    schedule_limit,
    schedule_ranges,
)

Action = Literal["keep", "keep_adaptive", "off_above", "off", "operator", "inconclusive"]
ALL = "all"
TOOL_SUBSET, MATH_SUBSET = "tool_call", "math_reasoning"
# Tool-call gain is reported as a share of math's only where math gains at least this much.
MIN_MATH_GAIN = 0.05
# A row's status where no judge ran: decided by its gain alone.
POINT_ESTIMATE = "point estimate"


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

    @property
    def inconclusive(self) -> bool:
        """The judge looked and could not decide: the gain is a point estimate it did not
        confirm, neither a win nor a loss."""
        return self.verdict is not None and self.verdict.outcome == "inconclusive"

    @property
    def status(self) -> str:
        """The judge's outcome, or "point estimate" where no judge ran (the gain decides)."""
        return POINT_ESTIMATE if self.verdict is None else self.verdict.outcome

    @property
    def reason(self) -> str | None:
        """Why the judge could not decide (its reasons); None unless inconclusive."""
        if self.verdict is None or not self.inconclusive:
            return None
        return "; ".join(self.verdict.reasons) or "no data"


@dataclass(frozen=True, slots=True)
class Crossover:
    subset: str
    step: int | None  # first swept level that loses; None when none does
    interpolated: float | None
    at_first_level: bool
    # the levels the judge could not decide (neither a win nor a loss)
    inconclusive: tuple[int, ...] = ()
    # no level decided: every one inconclusive (or none measured)
    undecided: bool = False
    # no row had a verdict (no judge ran): found from the gains alone
    point_estimate: bool = False

    @property
    def label(self) -> str:
        if self.step is None and self.undecided and self.inconclusive:
            return f"inconclusive at every swept level ({_levels_text(self.inconclusive)})"
        if self.step is None:
            text = "none in the swept range"
        elif self.at_first_level:
            text = f"at or below {self.step}"
        elif self.interpolated:
            text = f"{self.step} (interpolated {self.interpolated:.0f})"
        else:
            text = str(self.step)
        if self.inconclusive:
            text += f"; inconclusive at {_levels_text(self.inconclusive)}"
        if self.point_estimate:
            text += f" ({POINT_ESTIMATE})"
        return text


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
    # every drafter arm measured, vs no drafter at each level: {arm: {level: gain}}
    measured: dict[str, dict[int, float | None]] = field(default_factory=dict)
    # the levels of each arm the judge could not decide, with its reasons: {arm: {level: why}}
    inconclusive: dict[str, dict[int, str]] = field(default_factory=dict)


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
    # the other drafter arms (schedule, adaptive) vs no drafter, pooled per level
    variant_levels: dict[str, list[Row]] = field(default_factory=dict)


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
            # The sweep is a closed loop at a fixed number of workers per arm: in-flight
            # requests are what stay equal (the judge's default check). Requests per pod are
            # not: in --duration mode the faster arm completes more.
            dataclasses.replace(settings, concurrency_match="in_flight"),
            acceptance_length=acceptance,
            basis="evaluate sweep (per-request TPOT)",
        )
    return Row(subset, concurrency, arms, acceptance, sum(c.wall_s for c in cells), verdict)


def loses(row: Row, tolerance: float) -> bool:
    """Measurably slower with the drafter: the judge says regressed, or the gain is below
    −tolerance where the judge was not inconclusive (an inconclusive row is no loss)."""
    if row.inconclusive:
        return False
    if row.verdict is not None and row.verdict.outcome == "regressed":
        return True
    return row.gain is not None and row.gain < -tolerance


def crossover(subset: str, rows: Sequence[Row], tolerance: float = 0.0) -> Crossover:
    """First level that loses, and the log-linear zero of the gain before it
    (``judge.crossing``, which the operator's ladder shares)."""
    found = crossing(_level_gains(rows, tolerance))
    undecided = [r.concurrency for r in rows if r.inconclusive]
    return Crossover(
        subset,
        found.step,
        found.interpolated,
        found.at_first_level,
        inconclusive=tuple(undecided),
        undecided=not any(r.gain is not None and not r.inconclusive for r in rows),
        point_estimate=bool(rows) and all(r.verdict is None for r in rows),
    )


def _level_gains(rows: Sequence[Row], tolerance: float) -> list[LevelGain]:
    no_gain = set(_no_gain(rows))
    # An inconclusive level keeps its place in the order (a loss after it is not "at the
    # first level") but its gain is unknown: 0, so that it is no win, no loss, and no zero
    # is interpolated from it.
    return [
        LevelGain(r.concurrency, 0.0, loses=False, no_gain=False)
        if r.inconclusive
        else LevelGain(r.concurrency, r.gain, loses(r, tolerance), r.concurrency in no_gain)
        for r in rows
    ]


def tool_vs_math(rows: Sequence[Row]) -> ToolVsMath | None:
    by_key = {(r.subset, r.concurrency): r for r in rows}
    if not any(s == TOOL_SUBSET for s, _ in by_key) or not any(s == MATH_SUBSET for s, _ in by_key):
        return None
    shares: dict[int, float | None] = {}
    for (subset, concurrency), tool in sorted(by_key.items(), key=lambda kv: kv[0][1]):
        if subset != TOOL_SUBSET or (MATH_SUBSET, concurrency) not in by_key:
            continue
        math = by_key[(MATH_SUBSET, concurrency)]
        math_gain, tool_gain = math.gain, tool.gain
        # A share of a gain near zero is noise, not a fraction: only where math gains.
        # Only where both gain: a negative "share" of a positive gain reads as nonsense.
        # Only where the judge decided both cells: a share of unconfirmed gains is noise.
        if (
            not tool.inconclusive
            and not math.inconclusive
            and tool_gain is not None
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


def _no_gain(levels: Sequence[Row]) -> list[int]:
    """Levels where the drafter is not measurably faster (and not measurably slower); an
    inconclusive level is not among them (the judge could not say)."""
    return [
        r.concurrency
        for r in levels
        if not r.inconclusive
        and (
            (r.verdict is not None and r.verdict.outcome == "neutral")
            or (r.gain is not None and r.gain <= 0)
        )
    ]


def _undecided(rows: Sequence[Row]) -> dict[int, str]:
    """The levels the judge could not decide, with its reasons."""
    return {r.concurrency: r.reason or "no data" for r in rows if r.inconclusive}


def _undecided_text(undecided: Mapping[int, str]) -> str:
    """The inconclusive levels and why, levels with the same reasons together."""
    by_reason: dict[str, list[int]] = {}
    for level, why in undecided.items():
        by_reason.setdefault(why, []).append(level)
    return "; ".join(f"{_levels_text(levels)} ({why})" for why, levels in by_reason.items())


# What to do when the judge could not decide: the usual reason is too few requests.
RERUN = "rerun with more requests per cell (--requests, or a longer --duration) at those levels"


def _levels_text(levels: Sequence[int]) -> str:
    return ", ".join(str(c) for c in levels)


def _per_batch_size(schedule: list[list[int]]) -> list[dict[str, int]]:
    """The schedule as spec.drafter.perBatchSize (the resource's field names)."""
    return [
        {"minBatchSize": lo, "maxBatchSize": hi, "numSpeculativeTokens": k}
        for lo, hi, k in schedule
    ]


def _unknown_k(limit: int, max_batch: int) -> str:
    speculate = (
        f"[1, {max_batch}, K]"
        if limit >= max_batch
        else f"[1, {limit}, K], [{limit + 1}, {max_batch}, 0]"
    )
    return (
        f" The drafter's num_speculative_tokens is unknown to this run (no --drafter-config, no "
        f"per-position counter), so no schedule is given: num_speculative_tokens_per_batch_size"
        f" is [{speculate}] with K your drafter's numSpeculativeTokens; rerun with "
        "--drafter-config '{\"num_speculative_tokens\": K, ...}' for a ready spec."
    )


def planned_schedule(analysis: Analysis) -> list[list[int]] | None:
    """The ``num_speculative_tokens_per_batch_size`` schedule the fixed arm's crossover
    calls for (no drafting above N), to be measured as an arm of its own; None when there
    is nothing to measure (no crossover, off everywhere, k unknown)."""
    rec = analysis.recommendation
    schedule = rec.alternative["schedule"] if rec.alternative else rec.schedule
    if rec.action in ("keep", "off") or not schedule or len(schedule) < 2:
        return None
    return [list(r) for r in schedule]


def _gains(rows: Sequence[Row]) -> dict[int, float | None]:
    return {r.concurrency: r.gain for r in rows}


def _gains_text(rows: Sequence[Row]) -> str:
    """Each level's gain, marked where the judge could not decide it."""
    return ", ".join(
        f"{r.concurrency}: {_pct(r.gain)}" + (" inconclusive" if r.inconclusive else "")
        for r in rows
    )


def _pct(gain: float | None) -> str:
    return "–" if gain is None else f"{gain:+.0%}"


def _losing(rows: Sequence[Row], tolerance: float, among: Sequence[int] | None) -> list[Row]:
    return [r for r in rows if loses(r, tolerance) and (among is None or r.concurrency in among)]


def recommend(
    overall: Crossover,
    levels: Sequence[Row],
    drafter: DrafterInfo,
    max_batch: int,
    variants: Mapping[str, Sequence[Row]] | None = None,
    *,
    usual: Sequence[int] | None = None,
    tolerance: float = 0.03,
) -> Recommendation:
    """``variants``: the schedule and adaptive arms measured, pooled per level; ``usual``:
    the levels the user sees most (None: every swept level)."""
    variants = variants or {}
    measured = {"fixed": _gains(levels), **{v: _gains(rows) for v, rows in variants.items()}}
    undecided = {
        arm: found
        for arm, rows in {"fixed": levels, **variants}.items()
        if (found := _undecided(rows))
    }
    rec = _recommend(
        overall, levels, drafter,
        max_batch=max_batch, variants=variants, usual=usual, tolerance=tolerance,
    )  # fmt: skip
    return dataclasses.replace(rec, measured=measured, inconclusive=undecided)


def _recommend(
    overall: Crossover,
    levels: Sequence[Row],
    drafter: DrafterInfo,
    *,
    max_batch: int,
    variants: Mapping[str, Sequence[Row]],
    usual: Sequence[int] | None,
    tolerance: float,
) -> Recommendation:
    k = drafter.k
    k_text = str(k) if k is not None else "k"

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

    no_gain = _no_gain(levels)
    undecided = _undecided(levels)
    # Faster where the gain is positive and the judge neither calls it neutral nor could
    # not decide (an inconclusive level is no win).
    faster = [
        r.concurrency
        for r in levels
        if r.gain is not None and r.concurrency not in no_gain and r.concurrency not in undecided
    ]
    # Said after every answer that leaves levels undecided: what was not known, and why.
    note = (
        f" The judge could not decide at concurrency {_undecided_text(undecided)}; these "
        f"levels count as neither a win nor a loss: {RERUN} to know."
        if undecided
        else ""
    )
    if not faster and overall.step is None and (undecided or not no_gain):
        # Nothing decided: every level inconclusive (or none measured), or no gain where
        # the judge decided and inconclusive elsewhere. Neither keep nor turn off on noise.
        known = f" It is not measurably faster at {_levels_text(no_gain)};" if no_gain else ""
        why = (
            f"the judge could not decide at concurrency {_undecided_text(undecided)}"
            if undecided
            else "no level was measured"
        )
        return Recommendation(
            action="inconclusive",
            sentence=(
                f"The sweep could not tell whether the drafter pays:{known} {why}. Nothing is "
                f"recommended from point estimates: {RERUN}, and keep the deployment as it is "
                "until then."
            ),
            max_concurrency=None,
            k=k,
            schedule=None,
            spec={},
        )
    if overall.step is None and faster:
        top = max(r.concurrency for r in levels)
        suffix = " with adaptive verification" if drafter.adaptive else ""
        sentence = (
            f"Keep the drafter{suffix}: it is faster per token at every swept concurrency up "
            f"to {top}."
            if not no_gain and not undecided
            else f"Keep the drafter{suffix}: it is faster per token at concurrency "
            f"{_levels_text(faster)}"
            + (
                f", with no measurable gain (and no measurable loss) at {_levels_text(no_gain)}"
                if no_gain
                else ""
            )
            + "."
        )
        sentence += note
        schedule = schedule_ranges(k, max_batch, max_batch)
        return Recommendation(
            action="keep",
            sentence=sentence + ("" if k is not None else _unknown_k(max_batch, max_batch)),
            max_concurrency=None,
            k=k,
            schedule=schedule,
            spec=drafter_fields(**({"adaptiveVerification": True} if drafter.adaptive else {})),
        )
    below = [r for r in levels if overall.step is None or r.concurrency < overall.step]
    if (
        overall.step is None
        or overall.at_first_level
        or not any(r.concurrency in faster for r in below)
    ):
        if overall.step is None:
            why = (
                "it is not measurably faster per token at any swept concurrency "
                f"({_levels_text(no_gain)})"
            )
        elif overall.at_first_level:
            why = (
                f"it is slower per token already at concurrency {overall.step}, "
                "the lowest level swept"
            )
        else:
            why = (
                f"it is not measurably faster per token below concurrency {overall.step} "
                f"and slower from {overall.step} on"
            )
        return Recommendation(
            action="off",
            sentence=f"Turn the drafter off: {why}.{note}",
            max_concurrency=0,
            k=k,
            schedule=[[1, max_batch, 0]],
            spec={"drafter": None},
        )
    found = Crossing(overall.step, overall.interpolated, overall.at_first_level)
    limit = schedule_limit(_level_gains(levels, tolerance), found, max_batch)
    assert limit is not None  # a crossing with a faster level below it
    schedule = schedule_ranges(k, limit, max_batch)
    unknown = "" if k is not None else _unknown_k(limit, max_batch)
    off_above: dict[str, Any] = {
        "action": "off_above",
        "schedule": schedule,
        "spec": drafter_fields(
            **({"perBatchSize": _per_batch_size(schedule)} if schedule is not None else {})
        ),
    }
    where = (
        f"interpolated crossover ≈ {overall.interpolated:.0f}"
        if overall.interpolated
        else f"crossover at {overall.step}"
    )
    fixed_text = (
        f"With fixed {k_text}-token verification the drafter is faster per token below "
        f"concurrency {overall.step} and slower from {overall.step} on ({where})."
    )
    adaptive_rows = variants.get("adaptive")
    if adaptive_rows:
        adaptive_losses = _losing(adaptive_rows, tolerance, None)
        adaptive_gains = [
            r for r in adaptive_rows if r.gain is not None and r.gain > 0 and not r.inconclusive
        ]
        if not adaptive_losses and adaptive_gains:
            return Recommendation(
                action="keep_adaptive",
                sentence=(
                    f"Keep the drafter with adaptive verification: measured, it is not slower "
                    f"than no drafter at any swept concurrency"
                    f"{' the judge decided' if _undecided(adaptive_rows) else ''} (gain "
                    f"{_gains_text(adaptive_rows)}). {fixed_text}{note}"
                ),
                max_concurrency=limit,  # the fallback's N
                k=k,
                schedule=schedule_ranges(k, max_batch, max_batch),
                spec=drafter_fields(adaptiveVerification=True),
                alternative=off_above,
            )
    schedule_rows = variants.get("schedule")
    seen_levels = "the levels you see most" if usual is not None else "every swept level"
    seen = seen_levels
    if schedule_rows and _undecided(schedule_rows):
        seen += " the judge decided"
    if schedule_rows:
        schedule_losses = _losing(schedule_rows, tolerance, usual)
        gains = _gains_text(schedule_rows)
        # "Not slower" needs a level the judge decided: all inconclusive says nothing.
        schedule_decided = [
            r
            for r in schedule_rows
            if not r.inconclusive and (usual is None or r.concurrency in usual)
        ]
        if not schedule_losses and schedule_decided:
            return Recommendation(
                action="off_above",
                sentence=(
                    f"No drafter above concurrency {limit}: measured, the schedule "
                    f"{schedule} is not slower than no drafter at {seen} (gain {gains}). "
                    f"{fixed_text}{unknown}{note}"
                ),
                max_concurrency=limit,
                k=k,
                schedule=schedule,
                spec=off_above["spec"],
            )
    # Nothing measured holds up (or nothing but the fixed arm was measured).
    tried: list[str] = []
    if schedule_rows:
        lost = ", ".join(
            f"{r.concurrency} ({_pct(r.gain)})" for r in _losing(schedule_rows, tolerance, usual)
        )
        tried.append(
            f"the schedule {schedule} (drafter held at k=0 above {limit}) is slower than no "
            f"drafter at {lost}: a drafter held at k=0 still costs per token"
            if lost
            else f"the judge could not decide the schedule {schedule} at {seen_levels} (gain "
            f"{gains})"
        )
    if adaptive_rows:
        lost = ", ".join(
            f"{r.concurrency} ({_pct(r.gain)})" for r in _losing(adaptive_rows, tolerance, None)
        )
        adaptive_undecided = _undecided(adaptive_rows)
        if lost:
            tried.append(f"adaptive verification is slower than no drafter at {lost}")
        elif adaptive_undecided:
            tried.append(
                "adaptive verification gains at no level the judge decided (it could not "
                f"decide at {_undecided_text(adaptive_undecided)})"
            )
        else:
            tried.append("adaptive verification gains at no level")
    if not tried:
        tried.append(
            "neither a schedule nor adaptive verification was measured (give a third "
            "endpoint running one with --with-variant and --variant-config)"
        )
    return Recommendation(
        action="operator",
        sentence=(
            f"Run the drafter under the specguard operator, which serves with the drafter and "
            f"switches to a server without it when measured per-token latency says so: "
            f"{'; '.join(tried)}. {fixed_text}{unknown}{note}"
        ),
        max_concurrency=limit,
        k=k,
        schedule=schedule_ranges(k, max_batch, max_batch),
        spec=drafter_fields(),
        alternative=off_above,
    )


def variant_levels(cells: Sequence[Cell], judge_settings: JudgeSettings) -> dict[str, list[Row]]:
    """Each measured variant against no drafter, all subsets pooled per level (judged)."""
    out: dict[str, list[Row]] = {}
    levels_swept = sorted({c.concurrency for c in cells})
    for variant in VARIANTS:
        rows = [
            _row(
                ALL,
                level,
                [
                    c.as_pair(variant)
                    for c in cells
                    if c.concurrency == level and variant in c.variants
                ],
                judge_settings,
            )
            for level in levels_swept
            if any(c.concurrency == level and variant in c.variants for c in cells)
        ]
        if rows:
            out[variant] = rows
    return out


def analyse(
    cells: Sequence[Cell],
    *,
    drafter: DrafterInfo,
    judge_settings: JudgeSettings,
    max_batch: int = 1024,
    usual: Sequence[int] | None = None,
) -> Analysis:
    subsets = list(dict.fromkeys(c.subset for c in cells))
    levels_swept = sorted({c.concurrency for c in cells})
    # Each subset's cell is judged too: its gain alone would call a level faster or slower
    # on a handful of requests.
    rows = [
        _row(subset, level, [c], judge_settings)
        for level in levels_swept
        for subset in subsets
        for c in cells
        if c.subset == subset and c.concurrency == level
    ]
    levels = [
        _row(ALL, level, [c for c in cells if c.concurrency == level], judge_settings)
        for level in levels_swept
    ]
    tolerance = judge_settings.tolerance
    crossovers = [
        crossover(subset, [r for r in rows if r.subset == subset], tolerance) for subset in subsets
    ]
    overall = crossover(ALL, levels, tolerance)
    variants = variant_levels(cells, judge_settings)
    return Analysis(
        rows=rows,
        levels=levels,
        crossovers=crossovers,
        overall=overall,
        tool_vs_math=tool_vs_math(rows),
        recommendation=recommend(
            overall, levels, drafter, max_batch, variants, usual=usual, tolerance=tolerance
        ),
        subsets=subsets,
        concurrency=levels_swept,
        variant_levels=variants,
    )


__all__ = [
    "ALL",
    "POINT_ESTIMATE",
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
    "loses",
    "planned_schedule",
    "recommend",
    "tool_vs_math",
    "variant_levels",
]
