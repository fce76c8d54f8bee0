"""Verdicts: one window of per-request samples of both arms → regressed / improved / neutral /
inconclusive, with the numbers behind it.

The quantity judged is how much slower (ratio > 1) or faster (< 1) the speculative arm makes
a request's per-token latency (TPOT). Which exact statistic depends on the data, and the point
estimate ``ratio`` and its CI are always of the same statistic (``quantity`` names it):

- paired (enough mirrored pairs, each prompt measured on both arms): the median per-request
  ratio exp(median_i(log s_i − log b_i)), CI the distribution-free interval of a median
  (order statistics, ``median_interval``). This
  removes the prompt-to-prompt spread (long vs short outputs, domains), which is most of the
  variance, so it has far more power than comparing the two arms' medians. It equals the ratio
  of medians exactly when the drafter scales every request by one factor; when the effect
  differs by request, it is the typical request's ratio, which is what a user feels. The ratio
  of the two arms' medians over the same pairs is reported beside it (``ratio_of_medians``)
  but is not what the CI is about.
- stratified (otherwise): the ratio of medians at matched concurrency. The comparison covers
  the in-flight levels (``Sample.concurrency``) from the lowest to the highest that both arms
  populate; requests outside have no counterpart and are left out (``matched`` counts what
  is compared). Adjacent levels are merged until each group holds
  ``min_requests_per_stratum`` requests of both arms (``matched_groups``). Per group, the
  ratio of the arms' medians; combined as a geometric mean weighted by the serving arm's
  share of requests per group (the mix clients see). The interval is normal in log space,
  its standard error summed over each group's and arm's median (each from a bootstrap of
  that arm within that group, read off its quantiles: the mix stays fixed, as in the
  estimate).
  When the arms share too little load to match (e.g. a large regression that lifts the slower
  arm's in-flight count, Little's law), they are compared pooled, said in ``reasons``; the
  pooled ratio is always reported beside it (``ratio_of_medians``).

Only one measurement kind is compared (``Sample.measurement``: the kind both arms share
most of), and a chunk-counted or non-streamed comparison is never ``regressed``
(``INEXACT_MEASUREMENTS``): such figures overstate a drafter's per-token latency.

Bootstraps are seeded (from ``seed`` and the window's values) and vectorised (resamples ×
samples rank matrix). Pure: no I/O, no clocks; the same input and seed give the same verdict.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from specguard.judge._adjust import (
    MAX_LOAD_SLOPE,
    GapCorrection,
    PodSpread,
    in_flight_gap,
    pod_spread,
    widen,
    z_of,
)
from specguard.judge._guards import DEFAULT_GUARDS, Guard, GuardLoad, GuardResult, judge_guards
from specguard.judge._robust import median_interval
from specguard.judge._sample import ARMS, MEASUREMENTS, Arm, Sample

Outcome = Literal["regressed", "improved", "neutral", "inconclusive"]
Method = Literal["paired", "stratified", "histogram", "none"]
ConcurrencyMatch = Literal["in_flight", "arrivals", "off"]

QUANTITY_PAIRED = "median per-request ratio of paired requests"
QUANTITY_MEDIANS = "ratio of median per-token latency"
QUANTITY_MATCHED = "ratio of median per-token latency at matched concurrency"

OUTCOMES: tuple[Outcome, ...] = ("regressed", "improved", "neutral", "inconclusive")
BASIS_ROUTER = "router samples (per-request TPOT)"

FloatArray = npt.NDArray[np.float64]

# Per-token latencies outside [1 µs, 1 h] are not measurements (a clock glitch, all tokens in
# one chunk); keeping them out also keeps every ratio finite.
MIN_TPOT_S = 1e-6
MAX_TPOT_S = 3600.0
# Requests left out of a matched comparison (outside the in-flight levels both arms cover)
# are named in the verdict's reasons from this share of an arm on.
_NOTE_LEFT_OUT = 0.10
# More resamples than this do not change a 99.9% interval visibly, and cost memory and time.
MAX_RESAMPLES = 100_000
# A matched comparison speaks for the load clients see only when its groups hold at least
# this share of the serving arm's requests: below it, a change it shows at those levels is
# reported, but "no change" (neutral) is not — the window is inconclusive.
MIN_MATCHED_SHARE = 0.5
# A record's own times must add up: TTFT + TPOT × (tokens − 1) runs from the request's start
# to its last token and cannot exceed its e2e time (to the last byte). The slack covers clock
# rounding; a TPOT in milliseconds against an e2e in seconds is 1000× over.
_TIMING_SLACK = 0.05
_TIMING_SLACK_S = 0.010
# An arm with more than this share of its ok records inconsistent is not judged: its recorder
# is wrong (units, a clock), not a few glitches, and what is left of it may be a biased part.
MAX_INCONSISTENT_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class JudgeSettings:
    """The parameters of one verdict.

    ``concurrency_match`` — when are the two arms under the same load?

    - ``"in_flight"`` (default): the arms' mean in-flight requests per pod (``Sample.concurrency``,
      counted over every router) differ by at most ``concurrency_tolerance × the larger`` plus the
      counting noise of the two means (``in_flight_allowance``: 1.96 standard errors of their
      difference, over the pairs' differences when paired) — no fixed slack, so 4 against 2 in
      flight is a mismatch however few the requests: both arms were measured at one concurrency.
      This is what specguard's routers hold: they copy a request to the shadow arm only while it has
      no more requests in flight per pod than the serving arm (``router.Topology.shadow_has_room``).
      One exception, from Little's law (in flight = arrival rate × latency): when the arm with fewer
      requests in flight received at least as many requests per pod (within
      ``concurrency_tolerance``) and the arms' arrival rates by Little's law agree
      (``_little_check``: with pairs, from the pairs' own e2e and in-flight ratios and their
      standard error), it is simply faster at that load — a shadow that every request was copied to
      and still ran lighter, or a regression that lifts the slower arm's in-flight count at one
      arrival rate — and the window is judged (compared at equal arrivals; a reason says so). A
      lighter arm that also got fewer requests per pod is "mismatched concurrency": it was underfed
      (mirrors dropped by a full shadow budget, a share below what matching needs). For paired and
      histogram verdicts; an unpaired verdict is itself made at the in-flight levels both arms cover
      (``matched_groups``), which this check would only repeat.
    - ``"arrivals"``: the arms' arrivals per pod in the window (all requests, errors
      included) differ by at most ``concurrency_tolerance`` (relative): for clients that
      arrive at their own pace (open loop; ``judge.client_loop``) and routers that copy a
      serving pod's arrivals to each shadow pod. One exception, Little's law again: an arm
      that got fewer requests per pod yet held more in flight (beyond the in-flight check's
      allowance) is slower at a lighter load (a shadow that cannot keep up, its copies
      dropped by a full budget), and the window is judged, with a reason that says so. With
      mirrored samples (serving and shadow roles, pair ids) arrivals are counted on the serving
      arm's requests: per serving pod, the serving requests; per shadow pod, those of them
      that were copied (they carry a ``pair_id``) — a slower or backlogged shadow's own
      completions lag its arrivals. Without mirrored samples: each arm's requests per pod.
    - ``"off"``: no check.

    Whatever the mode, the verdict reports both (``concurrency`` and ``requests_per_pod``).

    ``min_requests_per_stratum`` is the minimum evidence per group of in-flight levels, of
    *both* arms, for the matched comparison: thinner levels are merged with their neighbours,
    but a group spans at most ``max_group_span`` (its highest level ÷ its lowest), so that
    the arms are compared at one load; levels that cannot make such a group are left out.
    When the groups hold under half of the serving arm's requests, a change they show is
    reported but "no change" is not (inconclusive). When no group can be made, the arms are
    compared pooled only when their arrivals allow it (the same requests per pod, and an
    in-flight gap that their latencies explain at one arrival rate, Little's law); otherwise
    the window is inconclusive.

    Defaults are the resource's ``spec.evaluation`` defaults (``settings_from_spec``).
    """

    tolerance: float = 0.03
    confidence: float = 0.99
    min_requests_per_arm: int = 200
    min_output_tokens: int = 16
    concurrency_match: ConcurrencyMatch = "in_flight"
    concurrency_tolerance: float = 0.25
    resamples: int = 2000
    seed: int = 0
    min_domain_requests: int = 10
    min_requests_per_stratum: int = 20
    max_group_span: float = 1.5
    # The guards beside the median (judge._guards), judged on the same pairs.
    guards: tuple[Guard, ...] = DEFAULT_GUARDS

    def __post_init__(self) -> None:
        checks = (
            ("tolerance", 0.0 <= self.tolerance < 1.0, "must be in [0, 1)"),
            ("confidence", 0.5 <= self.confidence < 1.0, "must be in [0.5, 1)"),
            ("min_requests_per_arm", self.min_requests_per_arm >= 2, "must be at least 2"),
            ("min_output_tokens", self.min_output_tokens >= 2, "must be at least 2"),
            (
                "concurrency_match",
                self.concurrency_match in ("in_flight", "arrivals", "off"),
                "must be in_flight, arrivals or off",
            ),
            ("concurrency_tolerance", self.concurrency_tolerance >= 0, "must be >= 0"),
            (
                "resamples",
                100 <= self.resamples <= MAX_RESAMPLES,
                f"must be between 100 and {MAX_RESAMPLES}",
            ),
            ("seed", self.seed >= 0, "must be >= 0"),
            ("min_domain_requests", self.min_domain_requests >= 1, "must be at least 1"),
            (
                "min_requests_per_stratum",
                self.min_requests_per_stratum >= 1,
                "must be at least 1",
            ),
            ("max_group_span", self.max_group_span >= 1.0, "must be at least 1"),
        )
        for name, ok, problem in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise ValueError(f"{name}: {problem}, got {value!r}")


@dataclass(frozen=True, slots=True)
class StratumCount:
    """Samples per arm in one half-octave band of in-flight counts [low, high]: the table of
    the arms' mixes (the comparison itself matches in-flight levels, ``matched_groups``)."""

    low: int
    high: int
    speculative: int
    baseline: int

    @property
    def label(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True, slots=True)
class DomainRatio:
    """The headline's statistic within one request domain (point estimate only: domains are
    small): with pairs, the median per-request ratio of the domain's pairs; without, the
    domain's ratio of medians. A window of one domain gives it the headline ratio itself."""

    domain: str
    speculative: int
    baseline: int
    ratio: float | None


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    tolerance: float
    method: Method
    basis: str
    median_s: Mapping[str, float | None]
    n: Mapping[str, int]
    quantity: str = QUANTITY_MEDIANS
    ratio_of_medians: float | None = None
    n_pairs: int = 0
    strata: tuple[StratumCount, ...] = ()
    concurrency: Mapping[str, float | None] = field(default_factory=dict)
    requests_per_pod: Mapping[str, float | None] = field(default_factory=dict)
    pod_concurrency: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    domains: tuple[DomainRatio, ...] = ()
    acceptance_length: float | None = None
    requests: Mapping[str, int] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)
    excluded: Mapping[str, int] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    measurement: str | None = None
    matched_strata: int = 0
    matched: Mapping[str, int] = field(default_factory=dict)
    matched_levels: tuple[tuple[int, int], ...] = ()
    load_slope: float | None = None
    pod_spread: float | None = None
    # What the spread between pods added to the variance of the log ratio (the interval
    # carries it). While the same pods serve it is one fixed offset, not noise that more
    # windows average away: the cumulative rule leaves it out of each window's weight and
    # carries it once (judge._cumulative.pods_clear).
    pod_variance: float | None = None
    # The same before its floor at 0 (may be negative): the evidence across windows averages
    # it over the windows and carries the mean once.
    pod_variance_raw: float | None = None
    # The guards beside the median (judge._guards): judged on the pairs of a paired verdict
    # that is not inconclusive.
    guards: tuple[GuardResult, ...] = ()

    @property
    def regressed_guards(self) -> tuple[GuardResult, ...]:
        """The guards confidently regressed in this window (judged windows only)."""
        if self.outcome == "inconclusive":
            return ()
        return tuple(g for g in self.guards if g.regressed)

    @property
    def guarded_outcome(self) -> Outcome:
        """The outcome a streak counts: regressed when a guard confidently is."""
        return "regressed" if self.regressed_guards else self.outcome

    @property
    def actionable(self) -> bool:
        return self.outcome in ("regressed", "improved")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["strata"] = [{**asdict(s), "label": s.label} for s in self.strata]
        data["sentence"] = self.sentence()
        return data

    def sentence(self) -> str:
        """One readable sentence with the numbers (condition messages, events, the CLI)."""
        spec_c, base_c = self.concurrency.get("speculative"), self.concurrency.get("baseline")
        conc = ""
        if spec_c is not None and base_c is not None:
            conc = f", per-pod concurrency {_num(spec_c)} vs {_num(base_c)}"
        counts = (
            f"{self.n_pairs} pairs"
            if self.method == "paired"
            else f"n {self.n.get('speculative', 0)} vs {self.n.get('baseline', 0)}"
        )
        accept = (
            f", acceptance length {self.acceptance_length:.2f}"
            if self.acceptance_length is not None
            else ""
        )
        if self.ratio is None or self.ci_low is None or self.ci_high is None:
            why = "; ".join(self.reasons) or "no data"
            return f"{self.outcome}: {why} ({counts}{conc}; {self.basis})"
        med_s, med_b = self.median_s.get("speculative"), self.median_s.get("baseline")
        meds = f", median {_ms(med_s)} vs {_ms(med_b)} per token" if med_s and med_b else ""
        text = (
            f"{self.outcome}: {self.quantity}, speculative ÷ baseline, {self.ratio:.3f} "
            f"({self.confidence:.0%} CI {self.ci_low:.3f}–{self.ci_high:.3f}, "
            f"tolerance ±{self.tolerance:.1%}){meds}, {counts}{conc}{accept}; {self.basis}"
        )
        if self.reasons:
            text += f" — {'; '.join(self.reasons)}"
        guarded = self.regressed_guards
        if guarded:
            text += "; guard " + "; guard ".join(g.sentence() for g in guarded)
        return text


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def _num(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def classify(ci_low: float, ci_high: float, tolerance: float) -> Outcome:
    """The three-way rule: act only when the whole CI is beyond the tolerance band."""
    if ci_low > 1.0 + tolerance:
        return "regressed"
    if ci_high < 1.0 - tolerance:
        return "improved"
    return "neutral"


def stratum_of(concurrency: int) -> tuple[int, int]:
    """Half-octave concurrency bands: 1, 2, 3, 4-5, 6-7, 8-11, 12-15, 16-23, ... (0 counts
    as 1). Within a band in-flight varies by under 50%, so per-token latency that grows with
    load varies little inside one."""
    c = max(int(concurrency), 1)
    if c < 4:
        return c, c
    low = 1 << (c.bit_length() - 1)
    middle = low + low // 2
    return (low, middle - 1) if c < middle else (middle, 2 * low - 1)


def _usable(sample: Sample, settings: JudgeSettings) -> str | None:
    """Why a sample cannot be used for TPOT, or None when it can."""
    if not sample.ok:
        return "error"
    if sample.tpot_s is None or not math.isfinite(sample.tpot_s):
        return "no_tpot"
    if sample.tpot_s < MIN_TPOT_S:
        # A zero per-token time is no measurement (all tokens in one chunk), not a fast request.
        return "zero_tpot"
    if sample.tpot_s > MAX_TPOT_S:
        return "implausible_tpot"
    if not _timing_consistent(sample):
        return "inconsistent_timing"
    if sample.output_tokens < settings.min_output_tokens:
        return "too_few_tokens"
    return None


def _timing_consistent(sample: Sample) -> bool:
    """Do the record's times add up: TTFT + TPOT × (tokens − 1) within its e2e time?"""
    decode = (sample.tpot_s or 0.0) * max(sample.output_tokens - 1, 0)
    return (sample.ttft_s or 0.0) + decode <= sample.e2e_s * (1 + _TIMING_SLACK) + _TIMING_SLACK_S


def _timing_check(
    inconsistent: Mapping[str, int], requests: Mapping[str, int], errors: Mapping[str, int]
) -> tuple[str | None, str | None]:
    """(why the window is not judged, or a note) for records whose times do not add up:
    refused when more than ``MAX_INCONSISTENT_SHARE`` of an arm's ok records are; else
    those are left out and counted."""
    if not any(inconsistent.values()):
        return None, None
    counts = ", ".join(
        f"{inconsistent[arm]} of {requests[arm] - errors[arm]} {arm}"
        for arm in ARMS
        if inconsistent[arm]
    )
    what = (
        f"records whose TTFT + TPOT × (tokens − 1) exceeds their own e2e time ({counts} ok records)"
    )
    if any(
        inconsistent[arm] > MAX_INCONSISTENT_SHARE * max(requests[arm] - errors[arm], 1)
        for arm in ARMS
    ):
        return (
            f"{what}: more than {MAX_INCONSISTENT_SHARE:.0%} of an arm, so its recorder is "
            "wrong (a TPOT in milliseconds, a clock) and the window is not judged",
            None,
        )
    return None, f"left out {what}"


def inconclusive(reasons: Sequence[str], common: Mapping[str, Any]) -> Verdict:
    """The verdict when the evidence does not allow one: no ratio, no interval, the reasons."""
    return Verdict(
        outcome="inconclusive",
        ratio=None,
        ci_low=None,
        ci_high=None,
        method="none",
        reasons=tuple(reasons) or ("no data",),
        **common,
    )


def judge(
    samples: Iterable[Sample],
    settings: JudgeSettings | None = None,
    *,
    acceptance_length: float | None = None,
    basis: str | None = None,
) -> Verdict:
    """The verdict for one window of samples of both arms. Never raises on data problems:
    empty, short, NaN, one-sided or differently measured input gives ``inconclusive`` with
    reasons. ``basis`` defaults to the router's, naming the measurement kind compared."""
    settings = settings or JudgeSettings()
    if acceptance_length is not None and not math.isfinite(acceptance_length):
        acceptance_length = None
    requests: dict[str, int] = dict.fromkeys(ARMS, 0)
    errors: dict[str, int] = dict.fromkeys(ARMS, 0)
    excluded: dict[str, int] = {}
    usable: dict[Arm, list[Sample]] = {arm: [] for arm in ARMS}
    pods: dict[str, set[str]] = {arm: set() for arm in ARMS}
    serving_votes: dict[Arm, int] = dict.fromkeys(ARMS, 0)
    inconsistent: dict[str, int] = dict.fromkeys(ARMS, 0)
    arrivals = _Arrivals()
    for sample in samples:
        requests[sample.arm] += 1
        pods[sample.arm].add(sample.pod)
        arrivals.add(sample)
        serving_votes[sample.arm] += sample.role == "serving"
        why = _usable(sample, settings)
        if why == "error":
            errors[sample.arm] += 1
        elif why == "inconsistent_timing":
            inconsistent[sample.arm] += 1
        if why is not None:
            excluded[why] = excluded.get(why, 0) + 1
            continue
        usable[sample.arm].append(sample)

    kind, mismatch = _measurement(usable)
    measured_otherwise: dict[Arm, Counter[str]] = {arm: Counter() for arm in ARMS}
    if kind is not None:
        for arm in ARMS:
            other = [s for s in usable[arm] if s.measurement != kind]
            if other:
                excluded["other_measurement"] = excluded.get("other_measurement", 0) + len(other)
                measured_otherwise[arm].update(s.measurement for s in other)
                usable[arm] = [s for s in usable[arm] if s.measurement == kind]

    pairs = _pairs(usable["speculative"], usable["baseline"])
    paired = len(pairs) >= settings.min_requests_per_arm
    if paired:
        chosen: dict[Arm, list[Sample]] = {
            "speculative": [s for s, _ in pairs],
            "baseline": [b for _, b in pairs],
        }
    else:
        chosen = usable
    values = {arm: _tpots(chosen[arm]) for arm in ARMS}
    n: dict[str, int] = {arm: len(chosen[arm]) for arm in ARMS}
    medians: dict[str, float | None] = {
        arm: float(np.median(values[arm])) if n[arm] else None for arm in ARMS
    }
    concurrency: dict[str, float | None] = {
        arm: float(np.median([s.concurrency for s in chosen[arm]])) if n[arm] else None
        for arm in ARMS
    }
    domains = _domains(chosen, settings.min_domain_requests, paired=paired)
    base = {
        "confidence": settings.confidence,
        "tolerance": settings.tolerance,
        "basis": basis or _basis(kind),
        "median_s": medians,
        "n": n,
        "n_pairs": len(pairs),
        "ratio_of_medians": (
            medians["speculative"] / medians["baseline"]  # type: ignore[operator]
            if n["speculative"] and n["baseline"] and medians["baseline"]
            else None
        ),
        "strata": _strata(chosen),
        "concurrency": concurrency,
        "pod_concurrency": {arm: _pod_concurrency(chosen[arm]) for arm in ARMS},
        "domains": domains,
        "acceptance_length": acceptance_length,
        "requests": requests,
        "errors": errors,
        "excluded": excluded,
        "measurement": kind,
    }

    requests_per_pod = arrivals.per_pod(requests, pods)
    base["requests_per_pod"] = requests_per_pod
    allowed = (
        in_flight_allowance(chosen, settings.concurrency_tolerance, paired=paired)
        if all(n.values())
        else None
    )
    # A lighter arm that got more requests per pod (a faster shadow, every request copied):
    # judged with its interval widened by the in-flight ratio, not refused (_lighter_widened).
    lighter = (
        _lighter_and_busier(allowed, requests_per_pod, settings.concurrency_tolerance)
        if paired and settings.concurrency_match == "in_flight"
        else None
    )
    reasons, load_notes = _insufficient(
        n,
        concurrency,
        requests_per_pod,
        settings,
        levels_matched=not paired,
        little=(
            _little_check(chosen, settings.concurrency_tolerance, paired=paired)
            if all(n.values())
            else None
        ),
        allowed=allowed,
    )
    timing, timing_note = _timing_check(inconsistent, requests, errors)
    if timing:
        reasons.insert(0, timing)
    if mismatch:
        reasons.insert(0, mismatch)
    if not any(requests.values()):
        reasons = ["no samples in the window"]
    elif reasons and any(errors.values()):
        reasons.append(
            "errors: "
            + ", ".join(f"{arm} {errors[arm]} of {requests[arm]} requests" for arm in ARMS)
        )
    if reasons and kind is not None and any(measured_otherwise.values()):
        reasons.append(_left_out(kind, measured_otherwise))
    med_s, med_b = medians["speculative"], medians["baseline"]
    if reasons or med_s is None or med_b is None:
        return inconclusive(reasons, base)
    rng = _rng(settings.seed, values)
    if paired:
        # The in-flight match compares the arms at one concurrency; its tolerance leaves a
        # gap inside pairs that is corrected here. A lighter arm that got as many arrivals
        # (the Little's-law note) is compared at equal arrivals instead: not corrected.
        correct_gap = settings.concurrency_match == "in_flight" and not load_notes
        estimate = _paired(chosen, values, settings, correct_gap=correct_gap)
        if lighter is not None:
            estimate = _lighter_widened(estimate, *lighter)
        elif settings.concurrency_match == "in_flight" and load_notes:
            estimate = _little_widened(estimate, chosen)
    else:
        serving: Arm = max(ARMS, key=lambda arm: serving_votes[arm])
        estimate = _unpaired(chosen, values, serving, requests_per_pod, settings=settings, rng=rng)
    notes: list[str] = [*load_notes, *([timing_note] if timing_note else []), *estimate.notes]
    if estimate.refusal is not None:
        return inconclusive([estimate.refusal, *notes], base)
    outcome = classify(estimate.ci_low, estimate.ci_high, settings.tolerance)
    if outcome == "neutral" and estimate.thin:
        outcome = "inconclusive"
        notes.insert(0, estimate.thin)
    if outcome == "regressed" and kind in INEXACT_MEASUREMENTS:
        outcome = "inconclusive"
        notes.insert(0, f"not judged regressed on {_KIND_TEXT[kind]}: {_FIX[kind]}")
    if len(domains) == 1 and domains[0].ratio is not None:
        base["domains"] = (replace(domains[0], ratio=estimate.ratio),)  # one figure, not two
    guards = (
        judge_guards(
            pairs,
            settings.guards,
            confidence=settings.confidence,
            seed=settings.seed,
            resamples=settings.resamples,
            pod_variance=estimate.pod_variance or 0.0,
            exact_tpot=kind not in INEXACT_MEASUREMENTS,
            load=_guard_load(estimate),
        )
        if paired and outcome != "inconclusive"  # a guard acts only where the median can
        else ()
    )
    return Verdict(
        outcome=outcome,
        ratio=estimate.ratio,
        ci_low=estimate.ci_low,
        ci_high=estimate.ci_high,
        method=estimate.method,
        quantity=estimate.quantity,
        matched_strata=len(estimate.groups),
        matched=estimate.matched or dict(n),
        matched_levels=estimate.groups,
        load_slope=estimate.load_slope,
        pod_spread=estimate.pod_spread,
        pod_variance=estimate.pod_variance,
        pod_variance_raw=estimate.pod_variance_raw,
        guards=guards,
        reasons=tuple(notes),
        **base,  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class _Estimate:
    """A window's ratio and interval, or why it has none (``refusal``), with what a verdict
    reports of how they were made; ``thin``: why it cannot say "neutral" (a change it shows
    stands)."""

    ratio: float = 1.0
    ci_low: float = 1.0
    ci_high: float = 1.0
    method: Method = "none"
    quantity: str = QUANTITY_MEDIANS
    groups: tuple[tuple[int, int], ...] = ()
    matched: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    load_slope: float | None = None
    pod_spread: float | None = None
    pod_variance: float | None = None
    pod_variance_raw: float | None = None
    refusal: str | None = None
    thin: str | None = None
    gap: GapCorrection | None = None  # the pairs' in-flight correction, for the guards
    load_widen: tuple[float, float] = (0.0, 0.0)  # log (below, above) a lighter arm added


def _guard_load(estimate: _Estimate) -> GuardLoad:
    """What the median's load match did (its in-flight correction and widenings), for the
    guards on the same pairs to do alike (``judge._guards``, "Load")."""
    gap = estimate.gap
    below, above = estimate.load_widen
    if gap is None:
        return GuardLoad(below=below, above=above)
    return GuardLoad(shift=gap.shift, se=gap.se, below=below + gap.widen[0],
                     above=above + gap.widen[1], gap=gap.gap)  # fmt: skip


def _widened(
    centre: float,
    low: float,
    high: float,
    *,
    confidence: float,
    known: float = 0.0,
    spread: PodSpread | None,
) -> tuple[float, float, str | None]:
    """(low, high, a note) of the interval [low, high] around ``centre`` (log units, from
    sampling) with a ``known`` variance (a correction's) and the spread between pods added
    (its ``allowance``: estimated from a handful of pods, it is inflated as a t's variance
    is): each side becomes hypot(side, z·√(known + pods)), normal in log space."""
    z = z_of(confidence)
    pods = spread.allowance if spread is not None else 0.0
    wide_low, wide_high = widen(centre, low, high, z * math.sqrt(known + pods))
    note = None
    if spread is not None:
        before = math.hypot((high - low) / 2.0, z * math.sqrt(known))
        note = spread.note(before, (wide_high - wide_low) / 2.0)
    return wide_low, wide_high, note


def _paired(
    chosen: Mapping[Arm, Sequence[Sample]],
    values: Mapping[Arm, FloatArray],
    settings: JudgeSettings,
    *,
    correct_gap: bool,
) -> _Estimate:
    """The median per-request log ratio of the pairs and its interval: the distribution-free
    interval of the median (``median_interval``), widened by what the in-flight gap
    correction and the spread between pods add (``_adjust``)."""
    log_ratios = np.log(values["speculative"]) - np.log(values["baseline"])
    notes: list[str] = []
    gap = None
    if correct_gap:
        levels = {arm: np.fromiter((s.concurrency for s in chosen[arm]), np.int64) for arm in ARMS}
        gap = in_flight_gap(log_ratios, levels["speculative"], levels["baseline"])
    corrected = log_ratios if gap is None else log_ratios - gap.shift
    if gap is not None and gap.note:
        notes.append(gap.note)
    centre = float(np.median(corrected))
    low, high = median_interval(corrected, settings.confidence)
    n = corrected.size
    spread = pod_spread(
        dict.fromkeys(ARMS, corrected - centre),
        {arm: [s.pod for s in chosen[arm]] for arm in ARMS},
        dict.fromkeys(ARMS, np.full(n, 1.0 / n)),
    )
    low, high, note = _widened(
        centre,
        low,
        high,
        confidence=settings.confidence,
        known=(gap.se if gap is not None else 0.0) ** 2,
        spread=spread,
    )
    if note:
        notes.append(note)
    moved = gap.widen if gap is not None else (0.0, 0.0)
    low, high = low - moved[0], high + moved[1]
    ratio = math.exp(centre)
    return _Estimate(
        ratio=ratio,
        ci_low=min(math.exp(low), ratio),
        ci_high=max(math.exp(high), ratio),
        method="paired",
        quantity=QUANTITY_PAIRED,
        notes=tuple(notes),
        load_slope=gap.slope if gap is not None else None,
        gap=gap,
        pod_spread=spread.sigma if spread is not None else None,
        pod_variance=spread.allowance if spread is not None else None,
        pod_variance_raw=spread.raw_allowance if spread is not None else None,
    )


def _unpaired(
    chosen: Mapping[Arm, Sequence[Sample]],
    values: Mapping[Arm, FloatArray],
    serving: Arm,
    requests_per_pod: Mapping[str, float | None],
    *,
    settings: JudgeSettings,
    rng: np.random.Generator,
) -> _Estimate:
    """The ratio of medians at matched concurrency (``matched_groups``; too thin to say
    "neutral" when the groups hold under ``MIN_MATCHED_SHARE`` of the serving arm), or pooled
    when no group can be made and the arms' arrivals allow it (``_pooled_check``), or a
    refusal."""
    levels = {
        arm: np.fromiter((level_of(s.concurrency) for s in chosen[arm]), np.int64) for arm in ARMS
    }
    n = {arm: len(chosen[arm]) for arm in ARMS}
    groups = matched_groups(chosen, settings.min_requests_per_stratum, span=settings.max_group_span)
    inside = {arm: _in_groups(levels[arm], groups) for arm in ARMS}
    matched: dict[str, int] = {arm: int(inside[arm].sum()) for arm in ARMS}
    notes: list[str] = []
    thin = None
    if groups:
        if matched[serving] < MIN_MATCHED_SHARE * n[serving]:
            thin = (
                f"the levels compared hold only {matched[serving] / n[serving]:.0%} of the "
                f"{serving} arm's requests (the load its clients see): too little to say that "
                "nothing changed"
            )
        every = all(matched[arm] == n[arm] for arm in ARMS)
        quantity = QUANTITY_MEDIANS if every and len(groups) == 1 else QUANTITY_MATCHED
        left_out = {arm: 1.0 - matched[arm] / n[arm] for arm in ARMS}
        if max(left_out.values()) >= _NOTE_LEFT_OUT:
            notes.append(
                f"compared at in-flight {groups[0][0]}–{groups[-1][1]} ({_groups_text(groups)}"
                f"), where both arms hold {settings.min_requests_per_stratum} requests within "
                f"×{settings.max_group_span:g} of in-flight: "
                + " and ".join(f"{left_out[arm]:.0%} of {arm}" for arm in ARMS)
                + " requests lie outside (at other loads than the other arm's)"
            )
    else:
        refusal, note = _pooled_check(chosen, matched, requests_per_pod, settings)
        if refusal is not None:
            return _Estimate(refusal=refusal, matched=matched, groups=tuple(groups))
        if note:
            notes.append(note)
        everything = (
            min(int(levels[arm].min()) for arm in ARMS),
            max(int(levels[arm].max()) for arm in ARMS),
        )
        groups = [everything]
        matched = {arm: n[arm] for arm in ARMS}
        quantity = QUANTITY_MEDIANS
    ratio, se, spread = _matched_interval(
        chosen, values, levels, groups, serving, settings=settings, rng=rng
    )
    centre, reach = math.log(ratio), z_of(settings.confidence) * se
    low, high, note = _widened(
        centre, centre - reach, centre + reach, confidence=settings.confidence, spread=spread
    )
    ci_low, ci_high = min(math.exp(low), ratio), max(math.exp(high), ratio)
    if note:
        notes.append(note)
    return _Estimate(
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        method="stratified",
        quantity=quantity,
        groups=tuple(groups),
        matched=matched,
        notes=tuple(notes),
        pod_spread=spread.sigma if spread is not None else None,
        pod_variance=spread.allowance if spread is not None else None,
        pod_variance_raw=spread.raw_allowance if spread is not None else None,
        thin=thin,
    )


def _in_groups(
    levels: npt.NDArray[np.int64], groups: Sequence[tuple[int, int]]
) -> npt.NDArray[np.bool_]:
    inside = np.zeros(levels.size, dtype=bool)
    for low, high in groups:
        inside |= (levels >= low) & (levels <= high)
    return inside


def _groups_text(groups: Sequence[tuple[int, int]]) -> str:
    shown = [str(low) if low == high else f"{low}–{high}" for low, high in groups[:6]]
    more = f", … {len(groups) - 6} more" if len(groups) > 6 else ""
    return f"{len(groups)} group{'s' if len(groups) > 1 else ''}: " + ", ".join(shown) + more


# The two arms' arrival rates by Little's law agree when they differ by at most the tolerance
# beyond 1.96 standard errors (95%): a mean e2e time is noisy (long outputs, stragglers), and
# a wider allowance would let arms loaded differently through.
_LITTLE_Z = 1.96


def _little_rate(samples: Sequence[Sample]) -> tuple[float, float]:
    """(arrivals per second per pod by Little's law, the standard error of its log): the mean
    in-flight count a request found (less itself, at least 0.5) ÷ the mean e2e time."""
    conc = np.fromiter((s.concurrency for s in samples), np.float64, count=len(samples))
    e2e = np.fromiter((s.e2e_s for s in samples), np.float64, count=len(samples))
    n = max(len(samples), 1)
    held, took = max(float(conc.mean()) - 1.0, 0.5), float(e2e.mean())
    if took <= 0.0:
        return math.inf, math.inf
    se = math.hypot(float(conc.std()) / held, float(e2e.std()) / took) / math.sqrt(n)
    return held / took, se


def _pooled_check(
    chosen: Mapping[Arm, Sequence[Sample]],
    matched: Mapping[str, int],
    requests_per_pod: Mapping[str, float | None],
    settings: JudgeSettings,
) -> tuple[str | None, str | None]:
    """(why the arms cannot be compared pooled, or the note a pooled comparison carries),
    when the matched comparison is too thin.

    Arms at one in-flight load (medians within the in-flight tolerance) are compared pooled.
    Arms apart only when the gap is the one Little's law gives at one arrival rate (in
    flight = arrival rate × latency: a slower arm holds more): the same requests per pod
    (within ``concurrency_tolerance``), and the same arrival rate by Little's law (mean
    in-flight ÷ mean e2e), within the tolerance beyond its sampling error. Otherwise the
    arms were loaded differently (a wrong mirror share, an underfed shadow) and pooling
    would compare loads, not arms."""
    conc = {arm: float(np.median([s.concurrency for s in chosen[arm]])) for arm in ARMS}
    tolerance = settings.concurrency_tolerance
    means = in_flight_allowance(chosen, tolerance, paired=False)
    if abs(means[0] - means[1]) <= means[2]:
        return None, None
    n = {arm: len(chosen[arm]) for arm in ARMS}
    thin = (
        "the arms share too few in-flight levels to be compared at matched concurrency "
        f"(levels where both hold {settings.min_requests_per_stratum} requests within "
        f"×{settings.max_group_span:g} of in-flight cover "
        + " and ".join(f"{matched[arm] / max(n[arm], 1):.0%} of {arm}" for arm in ARMS)
        + f"; speculative {_num(conc['speculative'])} vs baseline {_num(conc['baseline'])} in"
        " flight per pod)"
    )
    spec_l, base_l = requests_per_pod.get("speculative"), requests_per_pod.get("baseline")
    if not spec_l or not base_l:
        return f"{thin}, and the arrivals per pod of an arm are unknown", None
    counts = f"{_num(spec_l)} vs {_num(base_l)} requests per pod"
    if max(spec_l, base_l) / min(spec_l, base_l) - 1.0 > tolerance:
        return (
            f"{thin}, and they cannot be compared pooled: their arrivals differ ({counts}, "
            f"allowed ±{tolerance:.0%}), and an in-flight gap says which arm is slower only "
            "at one arrival rate (Little's law) — is the mirror share right?",
            None,
        )
    agree, rates = _little_check(chosen, tolerance, paired=False)
    if not agree:
        return (
            f"{thin}, and they cannot be compared pooled: with the same arrivals ({counts}) "
            f"the in-flight gap is not the one their latencies explain ({rates}), so the arms "
            "were loaded differently",
            None,
        )
    return None, (
        f"{thin}, so this compares them pooled: they had the same arrivals ({counts}; {rates})"
        ", so the in-flight gap is the slower arm's own doing, and the pooled ratio includes "
        "the load it causes"
    )


def _little_check(
    chosen: Mapping[Arm, Sequence[Sample]], tolerance: float, *, paired: bool
) -> tuple[bool, str]:
    """(do the arms' arrival rates by Little's law agree, the rates in words): mean in-flight
    ÷ mean e2e per arm, within ``tolerance`` beyond 1.96 standard errors. With the same
    arrivals an arm holds more in flight exactly as much as it is slower; when the gap is
    not that, the arms were fed differently whatever their request counts say.

    ``paired`` (``chosen[arm][i]`` are the halves of pair i): the standard error is the
    pairs' own (``_paired_little_se``): a pair's halves share their prompt, output length and
    arrival moment, so the ratio of the arms' rates is known far better than two arms'
    unpaired spreads say — e2e times that spread ×30 between requests left a 0.32–0.41 log
    disagreement inside a 0.41–0.44 bound while the pairs put it 10 standard errors out."""
    (spec_r, _), (base_r, _) = (_little_rate(chosen[arm]) for arm in ARMS)
    rates = (
        f"arrivals by Little's law, mean in flight ÷ mean e2e: {spec_r:.3g} vs {base_r:.3g} "
        "per second per pod"
    )
    disagree, se = _little_gap(chosen, paired=paired)
    if not (math.isfinite(disagree) and math.isfinite(se)):
        return False, rates
    bound = math.log1p(tolerance) + _LITTLE_Z * se
    if paired:
        rates += f" (log {disagree:+.2f}, paired standard error {se:.3f})"
    return abs(disagree) <= bound, rates


def _little_widened(estimate: _Estimate, chosen: Mapping[Arm, Sequence[Sample]]) -> _Estimate:
    """A paired estimate compared at equal arrivals (the Little's-law exception), its
    interval widened by what the arms' disagreement by Little's law could hide: the log
    ratio of their arrival rates d (and 1.96 paired standard errors) is the in-flight gap
    their latencies do not explain, i.e. load one arm had beyond the other's at one arrival
    rate; with latency at most proportional to in-flight it moves the ratio by at most that
    much, toward the arm that was lighter than its speed says. Within the check's tolerance
    the gap is not refused, but nor does it decide a verdict: loaded-apart arms of an
    unchanged drafter (d 0.28–0.30 inside a 0.30 bound) were called improved otherwise."""
    if estimate.refusal is not None:
        return estimate
    d, se = _little_gap(chosen, paired=True)
    if not (math.isfinite(d) and math.isfinite(se)):
        return estimate
    reach = math.exp(MAX_LOAD_SLOPE * (abs(d) + _LITTLE_Z * se))
    # d < 0: the speculative arm held fewer in flight than its latency explains (lighter
    # than the baseline at one arrival rate), so it looks faster than it is: the truth may
    # lie higher.
    low, high = (estimate.ci_low, estimate.ci_high * reach) if d < 0 else (
        estimate.ci_low / reach, estimate.ci_high)  # fmt: skip
    note = (
        f"the arms' arrivals by Little's law differ by {math.exp(d) - 1:+.0%} (the in-flight "
        "gap their latencies do not explain): the interval is widened by the load that could "
        f"hide ({reach - 1:.0%})"
    )
    return replace(estimate, ci_low=low, ci_high=high, notes=(*estimate.notes, note),
                   load_widen=_widened_toward(d < 0, math.log(reach)))  # fmt: skip


def _widened_toward(speculative_lighter: bool, reach: float) -> tuple[float, float]:
    """(below, above) in log units: a lighter speculative arm may be slower than it looks
    (the upper end moves up), a lighter baseline faster (the lower end moves down)."""
    return (0.0, reach) if speculative_lighter else (reach, 0.0)


def _lighter_and_busier(
    allowed: tuple[float, float, float] | None,
    requests_per_pod: Mapping[str, float | None],
    tolerance: float,
) -> tuple[Arm, float] | None:
    """Under the in-flight rule: (the arm that held fewer requests in flight than the other,
    beyond the gap allowed, while it got more requests per pod, beyond ``tolerance``; the
    in-flight ratio, heavier ÷ lighter), else None. A shadow faster than the serving arm with
    every request copied to it (one shadow pod for two serving pods: twice a serving pod's
    arrivals), which ballast holds a slot below its target per router: the regret bench's
    drafter shadow after a rollback held 9.7 against the serving pods' 13.4 at twice their
    arrivals per pod, and the Little's-law check (which assumes one arrival rate) refused
    half its windows as loaded apart. It is faster at a heavier arrival load and a lighter
    in-flight one: what is not known is only how much slower it would be at the other
    arm's count."""
    if allowed is None:
        return None
    spec_c, base_c, gap = allowed
    if abs(spec_c - base_c) <= gap or min(spec_c, base_c) <= 0.0:
        return None
    light: Arm = "speculative" if spec_c < base_c else "baseline"
    heavy: Arm = "baseline" if light == "speculative" else "speculative"
    light_l, heavy_l = requests_per_pod.get(light), requests_per_pod.get(heavy)
    if not light_l or not heavy_l or light_l <= (1.0 + tolerance) * heavy_l:
        return None
    return light, max(spec_c, base_c) / min(spec_c, base_c)


def _lighter_widened(estimate: _Estimate, light: Arm, ratio: float) -> _Estimate:
    """A paired estimate whose ``light`` arm held ``ratio`` times fewer requests in flight
    than the other while it got more requests per pod (``_lighter_and_busier``), its
    interval widened toward that arm being slower by as much as its lighter load could hide
    (latency at most proportional to in-flight, ``MAX_LOAD_SLOPE``): a verdict that it is
    faster holds at the other arm's count too; one that it is slower holds as it is (heavier,
    it would be slower still)."""
    if estimate.refusal is not None:
        return estimate
    reach = ratio**MAX_LOAD_SLOPE
    low, high = (estimate.ci_low, estimate.ci_high * reach) if light == "speculative" else (
        estimate.ci_low / reach, estimate.ci_high)  # fmt: skip
    note = (
        f"{light} held {ratio:.2f}× fewer requests in flight with more requests per pod: "
        f"the interval is widened by what that lighter load could hide ({reach - 1:.0%})"
    )
    return replace(estimate, ci_low=low, ci_high=high, notes=(*estimate.notes, note),
                   load_widen=_widened_toward(light == "speculative", math.log(reach)))  # fmt: skip


def _little_gap(chosen: Mapping[Arm, Sequence[Sample]], *, paired: bool) -> tuple[float, float]:
    """(log ratio of the arms' arrival rates by Little's law, speculative over baseline, its
    standard error: the pairs' own when ``paired``); infinite when a rate is not known."""
    (spec_r, spec_se), (base_r, base_se) = (_little_rate(chosen[arm]) for arm in ARMS)
    if not (math.isfinite(spec_r) and math.isfinite(base_r) and spec_r > 0 and base_r > 0):
        return math.inf, math.inf
    se = _paired_little_se(chosen) if paired else math.hypot(spec_se, base_se)
    return math.log(spec_r / base_r), se


def _paired_little_se(chosen: Mapping[Arm, Sequence[Sample]]) -> float:
    """The standard error of the log ratio of the arms' Little's-law arrival rates over
    mirrored pairs (delta method): per pair, its in-flight counts and e2e times relative to
    their arm's means, speculative less baseline; the standard deviation of that over √n."""
    values = {}
    for arm in ARMS:
        conc = np.fromiter((s.concurrency for s in chosen[arm]), np.float64, len(chosen[arm]))
        e2e = np.fromiter((s.e2e_s for s in chosen[arm]), np.float64, len(chosen[arm]))
        held, took = max(float(conc.mean()) - 1.0, 0.5), float(e2e.mean())
        if took <= 0.0:
            return math.inf
        values[arm] = (conc - 1.0) / held - e2e / took
    terms = values["speculative"] - values["baseline"]
    return float(terms.std(ddof=1)) / math.sqrt(terms.size) if terms.size > 1 else math.inf


def in_flight_allowance(
    chosen: Mapping[Arm, Sequence[Sample]], tolerance: float, *, paired: bool
) -> tuple[float, float, float]:
    """(speculative, baseline mean in-flight per pod, the difference allowed between them):
    ``tolerance`` × the larger mean plus the counting noise of the two means, 1.96 standard
    errors of their difference (``paired``: of the pairs' own differences, whose halves
    arrived at one moment). No fixed number of requests: at 2–4 in flight a slack of 2 would
    accept one arm at twice the other's load."""
    conc = {
        arm: np.fromiter((s.concurrency for s in chosen[arm]), np.float64, len(chosen[arm]))
        for arm in ARMS
    }
    spec, base = conc["speculative"], conc["baseline"]
    if not spec.size or not base.size:
        return 0.0, 0.0, math.inf
    if paired and spec.size == base.size and spec.size > 1:
        se = float(np.std(spec - base, ddof=1)) / math.sqrt(spec.size)
    else:
        se = math.sqrt(
            sum(float(np.var(c, ddof=1)) / c.size if c.size > 1 else 0.0 for c in (spec, base))
        )
    spec_m, base_m = float(spec.mean()), float(base.mean())
    return spec_m, base_m, tolerance * max(spec_m, base_m) + _LITTLE_Z * se


# What each measurement kind is, and what a user does to get exact per-token latency.
_KIND_TEXT: dict[str, str] = {
    "stream_usage": "per-request TPOT from exact token counts",
    "stream_chunks": "chunk-counted TPOT (a chunk counted as one token)",
    "non_stream": "non-streamed time per token (TTFT included)",
    "unknown": "TPOT of records that do not say how it was measured",
}
_FIX: dict[str, str] = {
    "stream_chunks": "a drafter packs several tokens into a chunk, so chunk-counted TPOT "
    "overstates its per-token latency; enable continuous_usage_stats (stream_options "
    '{"include_usage": true, "continuous_usage_stats": true}) so token counts are exact',
    "non_stream": "prefill time is inside the figure; stream the requests with "
    "continuous_usage_stats so TTFT and per-token time are measured apart",
    "unknown": "the records have no measurement field, so how TPOT was counted is not known "
    "(a chunk counted as a token overstates a drafter's per-token latency); record it, and "
    'stream with stream_options {"include_usage": true, "continuous_usage_stats": true} so '
    "token counts are exact (stream_usage)",
}
# Measurements that can show a drafter faster, never reliably slower, than it is.
INEXACT_MEASUREMENTS: tuple[str, ...] = ("stream_chunks", "non_stream", "unknown")


def _basis(kind: str | None) -> str:
    return f"router samples ({_KIND_TEXT.get(kind or 'stream_usage', 'per-request TPOT')})"


def _measurement(usable: Mapping[Arm, Sequence[Sample]]) -> tuple[str | None, str | None]:
    """The measurement kind to compare (like with like only), and the reason when the arms
    share none: the kind both arms have most of, exact token counts first on a tie."""
    counts = {arm: Counter(s.measurement for s in usable[arm]) for arm in ARMS}
    common = {
        kind: min(counts["speculative"][kind], counts["baseline"][kind]) for kind in MEASUREMENTS
    }
    best = max(MEASUREMENTS, key=lambda kind: (common[kind], -MEASUREMENTS.index(kind)))
    if common[best] > 0:
        return best, None
    if not all(counts[arm] for arm in ARMS):
        return None, None  # an arm without usable samples: the minimum says so

    def describe(arm: Arm) -> str:
        return " + ".join(f"{c} {k}" for k, c in counts[arm].most_common())

    fixes = sorted({k for arm in ARMS for k in counts[arm] if k in _FIX})
    return None, (
        f"the arms are measured differently (speculative: {describe('speculative')}; "
        f"baseline: {describe('baseline')}) and per-token latency is compared only like with "
        "like: " + "; ".join(f"{k}: {_FIX[k]}" for k in fixes)
    )


def _left_out(kind: str, other: Mapping[Arm, Counter[str]]) -> str:
    """Why samples of other measurement kinds are missing from the counts, and the fix."""
    counts = "; ".join(
        f"{arm} " + " + ".join(f"{c} {k}" for k, c in other[arm].most_common())
        for arm in ARMS
        if other[arm]
    )
    fixes = sorted({k for arm in ARMS for k in other[arm] if k in _FIX})
    text = f"left out as measured otherwise ({counts}): only {kind} is compared with {kind}"
    return text + "".join(f"; {k}: {_FIX[k]}" for k in fixes)


@dataclass(slots=True)
class _Arrivals:
    """Per arm: serving-role requests, their pods, how many were mirrored; shadow-role
    requests, and those without a pair id (no serving twin to count them by)."""

    served: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARMS, 0))
    served_pods: dict[str, set[str]] = field(default_factory=lambda: {a: set() for a in ARMS})
    mirrored: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARMS, 0))
    shadowed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARMS, 0))
    unpaired_shadow: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ARMS, 0))

    def add(self, sample: Sample) -> None:
        if sample.role == "serving":
            self.served[sample.arm] += 1
            self.served_pods[sample.arm].add(sample.pod)
            self.mirrored[sample.arm] += sample.pair_id is not None
        else:
            self.shadowed[sample.arm] += 1
            self.unpaired_shadow[sample.arm] += sample.pair_id is None

    def per_pod(
        self, requests: Mapping[str, int], pods: Mapping[str, set[str]]
    ) -> dict[str, float | None]:
        """Arrivals per pod of each arm (see ``JudgeSettings``: ``"arrivals"``)."""
        per_pod: dict[str, float | None] = {
            arm: requests[arm] / len(pods[arm]) if pods[arm] else None for arm in ARMS
        }
        serving: Arm = max(ARMS, key=lambda arm: self.served[arm])
        shadow: Arm = "baseline" if serving == "speculative" else "speculative"
        if not self.mirrored[serving] or not self.shadowed[shadow]:
            return per_pod
        per_pod[serving] = self.served[serving] / len(self.served_pods[serving])
        arrived = self.mirrored[serving] + self.unpaired_shadow[shadow]
        per_pod[shadow] = arrived / len(pods[shadow])
        return per_pod


def _insufficient(
    n: Mapping[str, int],
    concurrency: Mapping[str, float | None],
    requests_per_pod: Mapping[str, float | None],
    settings: JudgeSettings,
    *,
    levels_matched: bool = False,
    little: tuple[bool, str] | None = None,
    allowed: tuple[float, float, float] | None = None,
) -> tuple[list[str], list[str]]:
    """(why the window is inconclusive, notes a verdict carries): the sample counts and the
    load check of ``settings.concurrency_match``. ``levels_matched``: the comparison itself
    is made at matched in-flight levels (an unpaired window), which the in-flight check
    would only repeat. ``little``: ``_little_check`` of the compared samples, when known: an
    in-flight gap is put down to speed at equal arrivals only when it agrees. ``allowed``:
    ``in_flight_allowance`` of the compared samples (the arms' mean in-flight and the gap
    allowed between them), when known."""
    reasons: list[str] = []
    notes: list[str] = []
    short = [f"{arm} {n[arm]}" for arm in ARMS if n[arm] < settings.min_requests_per_arm]
    if short:
        reasons.append(
            f"too few usable requests ({', '.join(short)}; need {settings.min_requests_per_arm}"
            " per arm)"
        )
    spec_l, base_l = requests_per_pod["speculative"], requests_per_pod["baseline"]
    tolerance = settings.concurrency_tolerance
    spec_c, base_c = concurrency["speculative"], concurrency["baseline"]
    if allowed is None and spec_c is not None and base_c is not None:
        # No per-request counts (a histogram source's gauges): the relative tolerance alone.
        allowed = (spec_c, base_c, tolerance * max(spec_c, base_c))
    if settings.concurrency_match == "arrivals":
        if spec_l and base_l:
            if max(spec_l, base_l) / min(spec_l, base_l) - 1 > tolerance:
                few: Arm = "speculative" if spec_l < base_l else "baseline"
                many: Arm = "baseline" if few == "speculative" else "speculative"
                few_c, many_c = concurrency[few], concurrency[many]
                per_pod = f"speculative {_num(spec_l)} vs baseline {_num(base_l)} requests per pod"
                busier = False
                if few_c is not None and many_c is not None and allowed is not None:
                    means = dict(zip(ARMS, allowed[:2], strict=True))
                    busier = means[few] - means[many] > allowed[2]
                if busier:
                    notes.append(
                        f"{few} got fewer requests ({per_pod}) and held more in flight "
                        f"({_num(few_c or 0)} vs {_num(many_c or 0)} per pod): it is slower at "
                        "a lighter load (Little's law), compared as it is"
                    )
                else:
                    reasons.append(
                        f"mismatched arrivals ({per_pod}; allowed ±{tolerance:.0%}: the "
                        f"{few} arm was underfed — shadow budget full, or more shadow pods "
                        "than serving pods?)"
                    )
        elif n["speculative"] and n["baseline"]:
            reasons.append("per-pod arrivals of an arm are unknown")
    elif settings.concurrency_match == "in_flight" and not levels_matched and allowed is not None:
        spec_c, base_c, gap = allowed
        if abs(spec_c - base_c) > gap:
            light: Arm = "speculative" if spec_c < base_c else "baseline"
            heavy: Arm = "baseline" if light == "speculative" else "speculative"
            light_l, heavy_l = requests_per_pod[light], requests_per_pod[heavy]
            in_flight = (
                f"speculative {_num(spec_c)} vs baseline {_num(base_c)} mean in flight per pod"
            )
            equal = light_l and heavy_l and light_l >= (1.0 - tolerance) * heavy_l
            if _lighter_and_busier(allowed, requests_per_pod, tolerance) is not None:
                notes.append(
                    f"{light} held fewer requests in flight ({in_flight}) with more requests "
                    f"per pod ({_num(light_l or 0)} vs {_num(heavy_l or 0)}): faster at a "
                    "heavier arrival load, compared with its interval widened by the "
                    "in-flight gap"
                )
            elif equal and little is not None and not little[0]:
                reasons.append(
                    f"mismatched concurrency ({in_flight}, allowed difference "
                    f"{_num(gap)}) with as many requests per pod ({_num(light_l or 0)} "
                    f"vs {_num(heavy_l or 0)}), but the gap is not the one their "
                    f"latencies explain ({little[1]}): the arms were loaded differently"
                )
            elif equal:
                notes.append(
                    f"{light} held fewer requests in flight ({in_flight}) with as many "
                    f"requests per pod ({_num(light_l or 0)} vs {_num(heavy_l or 0)}): it is "
                    "faster at this load, compared at equal arrivals (Little's law)"
                )
            else:
                arrivals = (
                    f"; {_num(light_l)} vs {_num(heavy_l)} requests per pod"
                    if light_l and heavy_l
                    else ""
                )
                reasons.append(
                    f"mismatched concurrency ({in_flight}, allowed difference "
                    f"{_num(gap)}{arrivals}: the lighter {light} arm was underfed — "
                    "shadow budget full, or a mirror share too small?)"
                )
    return reasons, notes


def _tpots(samples: Sequence[Sample]) -> FloatArray:
    return np.fromiter((s.tpot_s or 0.0 for s in samples), dtype=np.float64, count=len(samples))


def _pairs(spec: Sequence[Sample], base: Sequence[Sample]) -> list[tuple[Sample, Sample]]:
    """Pairs whose pair_id matches exactly one usable sample on each arm."""
    by_id: dict[str, list[Sample]] = {}
    for s in base:
        if s.pair_id is not None:
            by_id.setdefault(s.pair_id, []).append(s)
    seen: dict[str, int] = {}
    for s in spec:
        if s.pair_id is not None:
            seen[s.pair_id] = seen.get(s.pair_id, 0) + 1
    pairs = []
    for s in spec:
        if s.pair_id is None or seen[s.pair_id] != 1:
            continue
        match = by_id.get(s.pair_id, [])
        if len(match) == 1:
            pairs.append((s, match[0]))
    return pairs


# Cells of the (resamples × samples) rank matrix handled at once: bounds memory for big windows.
_CHUNK_CELLS = 4_000_000


def bootstrap_medians(
    values: FloatArray,
    groups: Sequence[npt.NDArray[np.intp]],
    resamples: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Medians of ``resamples`` bootstrap resamples of ``values``, each group of indices
    resampled within itself (strata; one group = plain bootstrap). Equal to
    ``np.median(values[idx], axis=1)`` but about 3× faster: it resamples the *ranks* of the
    values as small integers, partitions those, and looks the two middle ranks up in the
    sorted values (order statistics of ranks are the ranks of order statistics)."""
    n = values.size
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    rank_of = np.empty(n, dtype=np.intp)
    rank_of[order] = np.arange(n)
    dtype = np.int16 if n < 2**15 else np.int32
    # Sorted so that the verdict does not depend on the order the samples came in.
    rank_groups = [np.sort(rank_of[g]).astype(dtype) for g in groups if g.size]
    lo, hi = (n - 1) // 2, n // 2
    kth = [lo] if lo == hi else [lo, hi]
    out = np.empty(resamples, dtype=np.float64)
    rows_per_chunk = max(1, _CHUNK_CELLS // n)
    for first in range(0, resamples, rows_per_chunk):
        rows = min(rows_per_chunk, resamples - first)
        blocks = []
        for ranks in rank_groups:
            picks = rng.integers(0, ranks.size, size=(rows, ranks.size), dtype=dtype)
            blocks.append(picks if len(rank_groups) == 1 and ranks.size == n else ranks[picks])
        matrix = blocks[0] if len(blocks) == 1 else np.hstack(blocks)
        part = np.partition(matrix, kth, axis=1)
        out[first : first + rows] = (ranked[part[:, lo]] + ranked[part[:, hi]]) / 2.0
    return out


def level_of(concurrency: int) -> int:
    """The in-flight level a sample is matched on (0 counts as 1: the request itself)."""
    return max(int(concurrency), 1)


def matched_groups(
    chosen: Mapping[Arm, Sequence[Sample]], minimum: int, *, span: float = 1.5
) -> list[tuple[int, int]]:
    """The in-flight ranges [low, high] compared at matched concurrency, in order.

    A group starts and ends at levels that both arms populate, spans at most ``span`` (its
    highest level ÷ its lowest: the arms inside it are at one load, give or take that), and
    holds at least ``minimum`` requests of *both* arms. From the lowest shared level up,
    adjacent levels are merged until the group holds enough; a start level that cannot make
    a group within ``span`` is left out, and so is a thin tail. Levels left out have too few
    requests of one arm near them to be compared: their requests are not matched (the caller
    says how many). Empty when no group can be made."""
    counts: dict[int, list[int]] = {}
    for index, arm in enumerate(ARMS):
        for s in chosen[arm]:
            counts.setdefault(level_of(s.concurrency), [0, 0])[index] += 1
    levels = sorted(counts)
    shared = [level for level in levels if min(counts[level]) > 0]
    groups: list[tuple[int, int]] = []
    position = 0
    while position < len(shared):
        first = shared[position]
        have = [0, 0]
        made = False
        for level in levels[levels.index(first) :]:
            if level > span * first:
                break
            have = [have[0] + counts[level][0], have[1] + counts[level][1]]
            if min(have) >= minimum and min(counts[level]) > 0:
                groups.append((first, level))
                made = True
                break
        if made:
            end = groups[-1][1]
            position = next((i for i, lv in enumerate(shared) if lv > end), len(shared))
        else:
            position += 1
    return groups


# The standard error of a median is read off the central 95% of its bootstrap distribution.
_SE_TAIL = 0.025
_SE_Z = NormalDist().inv_cdf(1.0 - _SE_TAIL)


def _median_se(logs: FloatArray, resamples: int, rng: np.random.Generator) -> float:
    """The standard error of the median of ``logs`` (log latencies or log ratios), from a
    bootstrap: the half-width of the central 95% of the resampled medians ÷ 1.96. Not their
    standard deviation: the bootstrap distribution of a median lives on a few order
    statistics, and its variance overstates the median's (by 6–10% at tens of values, 3% at
    hundreds) though its quantiles do not; summed over groups and arms, the variance would
    make the interval too wide."""
    boot = bootstrap_medians(logs, [np.arange(logs.size)], resamples, rng)
    low, high = np.quantile(boot, [_SE_TAIL, 1.0 - _SE_TAIL])
    return float(high - low) / (2.0 * _SE_Z)


def _rng(seed: int, values: Mapping[Arm, FloatArray]) -> np.random.Generator:
    """The bootstrap's random numbers: from the seed and the window's values (sorted, so the
    same samples in any order give the same verdict). One fixed stream for every window
    would resample the same ranks in each, and its chance error would shift every window's
    interval the same way instead of averaging out."""
    data = b"".join(np.sort(values[arm]).tobytes() for arm in ARMS)
    return np.random.default_rng([seed, zlib.crc32(data)])


def _matched_interval(
    chosen: Mapping[Arm, Sequence[Sample]],
    values: Mapping[Arm, FloatArray],
    levels: Mapping[Arm, npt.NDArray[np.int64]],
    groups: Sequence[tuple[int, int]],
    serving: Arm,
    *,
    settings: JudgeSettings,
    rng: np.random.Generator,
) -> tuple[float, float, PodSpread | None]:
    """The ratio at matched concurrency, the standard error of its log from sampling, and
    the spread between pods it carries (the interval: ``_widened``).

    Per group, the log of the ratio of the arms' medians; combined with fixed weights, the
    serving arm's share of the compared requests in each group (the mix clients see): a
    weighted geometric mean of the groups' ratios (one group: the ratio of medians). Its
    standard error adds the groups' and arms' squared standard errors (each median's from its
    own bootstrap, each arm resampled within each group: the mix is held fixed, as in the
    estimate); the spread between pods comes from each sample's residual from its group's
    median, per pod (``pod_spread``)."""
    inside = {
        arm: [(levels[arm] >= low) & (levels[arm] <= high) for low, high in groups] for arm in ARMS
    }
    total = sum(int(mask.sum()) for mask in inside[serving])
    ratio, variance = 1.0, 0.0
    residuals = {arm: np.zeros(values[arm].size) for arm in ARMS}
    weights = {arm: np.zeros(values[arm].size) for arm in ARMS}
    for g in range(len(groups)):
        weight = int(inside[serving][g].sum()) / total
        medians = []
        for arm in ARMS:
            mask = inside[arm][g]
            picked = values[arm][mask]
            medians.append(float(np.median(picked)))
            logs = np.log(picked)
            variance += (weight * _median_se(logs, settings.resamples, rng)) ** 2
            residuals[arm][mask] = logs - math.log(medians[-1])
            weights[arm][mask] = weight / logs.size
        # A product of per-group ratios to the power of their weights: one group gives
        # exactly the ratio of medians.
        ratio *= (medians[0] / medians[1]) ** weight
    compared = {arm: weights[arm] > 0 for arm in ARMS}
    spread = pod_spread(
        {arm: residuals[arm][compared[arm]] for arm in ARMS},
        {arm: _pods_of(chosen[arm], compared[arm]) for arm in ARMS},
        {arm: weights[arm][compared[arm]] for arm in ARMS},
    )
    return ratio, math.sqrt(variance), spread


def _pods_of(samples: Sequence[Sample], keep: npt.NDArray[np.bool_]) -> list[str]:
    return [s.pod for s, kept in zip(samples, keep, strict=True) if kept]


def _strata(chosen: Mapping[Arm, Sequence[Sample]]) -> tuple[StratumCount, ...]:
    counts: dict[tuple[int, int], dict[str, int]] = {}
    for arm in ARMS:
        for s in chosen[arm]:
            slot = counts.setdefault(stratum_of(s.concurrency), dict.fromkeys(ARMS, 0))
            slot[arm] += 1
    return tuple(
        StratumCount(low, high, c["speculative"], c["baseline"])
        for (low, high), c in sorted(counts.items())
    )


def _pod_concurrency(samples: Sequence[Sample]) -> dict[str, float]:
    by_pod: dict[str, list[int]] = {}
    for s in samples:
        by_pod.setdefault(s.pod, []).append(s.concurrency)
    return {pod: float(np.median(c)) for pod, c in sorted(by_pod.items())}


def _domains(
    chosen: Mapping[Arm, Sequence[Sample]], minimum: int, *, paired: bool
) -> tuple[DomainRatio, ...]:
    by_domain: dict[str, dict[str, list[float]]] = {}
    if paired:  # chosen[arm][i] are the two halves of pair i: one prompt, one domain
        for with_drafter, without in zip(chosen["speculative"], chosen["baseline"], strict=True):
            arms = by_domain.setdefault(with_drafter.domain, {a: [] for a in ARMS})
            arms["speculative"].append(with_drafter.tpot_s or 0.0)
            arms["baseline"].append(without.tpot_s or 0.0)
    else:
        for arm in ARMS:
            for s in chosen[arm]:
                by_domain.setdefault(s.domain, {a: [] for a in ARMS})[arm].append(s.tpot_s or 0.0)
    result = []
    for domain, arms in sorted(by_domain.items()):
        spec, base = arms["speculative"], arms["baseline"]
        ratio = None
        if len(spec) >= minimum and len(base) >= minimum:
            if paired:
                ratio = float(np.exp(np.median(np.log(spec) - np.log(base))))
            else:
                ratio = float(np.median(spec) / np.median(base))
        result.append(DomainRatio(domain, len(spec), len(base), ratio))
    return tuple(result)


__all__ = [
    "BASIS_ROUTER",
    "OUTCOMES",
    "ConcurrencyMatch",
    "DomainRatio",
    "JudgeSettings",
    "Method",
    "Outcome",
    "StratumCount",
    "Verdict",
    "bootstrap_medians",
    "classify",
    "in_flight_allowance",
    "judge",
    "level_of",
    "matched_groups",
    "median_interval",
    "stratum_of",
]
