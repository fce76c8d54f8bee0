"""Guardrails: checks that act at once while the drafter serves, apart from the statistics.

Each is a pure function ``(evidence, settings, now) -> Trip | None``; ``step`` runs
:data:`GUARDRAILS` in order while the drafter arm serves and acts on the first that trips
(even when automatic changes are halted after flaps: they protect clients from a broken
drafter or a queue that only grows, not from a drafter merely slower per token). A new
guardrail is one more function in that tuple, reading its own field of
:class:`~specguard.judge.Evidence` and its thresholds in
:class:`~specguard.judge.PolicySettings`.

- **startup** (``DrafterStartupFailed``): a drafter pod has not become ready within
  ``startup_deadline_s`` of its creation;
- **errors** (``DrafterErrors``): at least ``error_min_requests`` drafter requests and
  ``error_min_errors`` drafter errors, at a rate at least ``error_ratio`` × the baseline's
  AND at least ``error_margin`` (absolute) above it (no baseline requests: rate 0);
- **speculation**: the drafter arm's own counters say it does not do what its rung asks
  (``Evidence.drafter``: method, k, per-batch-size schedule), in this order —
  ``RungNotInEffect``: the engine ignored the configuration it was given (vLLM's V2 model
  runner ignores ``num_speculative_tokens_per_batch_size``, vLLM #51510): in a batch band
  (the pods' running requests at both ends of the window fall in one of the schedule's
  ranges) with at least ``speculation_min_drafts`` request-steps, it drafted in more than
  half of them where the rung asks for k = 0, or more than k + 0.5 tokens per draft where
  it asks for k (:func:`rung_mismatch`); ``AcceptanceCollapsed``: at least
  ``speculation_min_drafts`` drafts but a mean acceptance length (1 + accepted ÷ drafts)
  within ``acceptance_margin`` of 1 (a broken drafter); ``SpeculationOff``: it served
  ``speculation_min_requests`` requests but no pod exports vLLM's spec-decode counters (vLLM
  registers them only when a drafter is configured: ``--speculative-config`` never took
  effect), or a drafter that proposes at every step (a draft model, EAGLE, MTP, DSpark...)
  counted no draft where its rung asks for k > 0; ``NothingToPropose``: the counters are
  there (the drafter is in effect) but a lookup drafter (ngram, ngram_gpu, suffix) counted
  no draft: it found nothing to propose in this traffic (sampled text repeats nothing it
  can match), a loss of its own, not a configuration that failed. With a schedule, zero
  drafts counts only where a pod's batch stayed in a range with k > 0 (above the schedule's
  limit no draft is what the rung asks for), and, where the pods' spans are read, only over
  at least ``speculation_min_drafts`` request-steps (no decode step, no draft to count).
  Acceptance alone never decides on/off: it
  stays high while the right decision flips with load; these catch a drafter that is not
  there, not in effect or useless.
- **overload** (``DrafterOverloaded``): open-loop clients (the shadow copied by arrivals),
  and the drafter arm falls behind them while the baseline, given a serving pod's arrivals,
  keeps up. Read from the engines themselves (requests running + waiting per pod at the
  window's start, and at its end or at a look between, ``Evidence.load``; the operator
  looks every quarter window): the baseline pod(s) held steady (the arrivals did too), the
  drafter pods' count grew — by ``overload_growth`` (relative) and ``overload_slack``
  requests, and by three standard deviations of a Poisson-like count's change — their
  count over the baseline's grew by ``overload_growth`` too (a stable arm, slower or not,
  keeps that quotient), and they hold more than the baseline now (by ``overload_slack``):
  at equal arrivals their requests take longer end to end (Little's law). When the operator
  looked between window ends, the drafter's count must also still be climbing since its
  last look (by one standard deviation) and the baseline's steady since it: a queue that
  runs away climbs at every look, one settling after a change in load stops (the first
  look of a window only records). Past its throughput peak a
  drafter's queue then only grows, and its per-token latency follows the batch up; the
  window's pairs lag that (a window judges the requests that *ended* in it, which arrived
  when the queue was shorter), so the statistics see it a window or two later, with a
  longer queue to drain. By the in-flight rule (clients read closed or not told, or a
  window the rule changed in) the clients, not the drafter, set the count and the shadow is
  fed to the serving pods' count, so the counts alone say nothing of the baseline at these
  arrivals: what each arm's engines *finished* (``ArmLoad.done``) is read instead
  (``_outpaced``). Never with routes by domain (``ArmLoad.split``).
- **tool calls** (``InvalidToolCalls``): on the window's mirrored pairs with tools, the
  drafter arm's tool calls are invalid (empty, not JSON, not what the schema asks) more
  often than the baseline's with confidence: at least ``tool_call_min_only`` pairs invalid
  with the drafter alone, more than without it, and a one-sided exact test below
  ``1 - tool_call_confidence`` (``judge._toolcalls``). Whatever the latency.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from specguard._arms import ARM_BASELINE, ARM_SPECULATIVE
from specguard.judge._evidence import ArmErrors, ArmLoad, DraftCounters, DrafterRun, Evidence
from specguard.judge._settings import PolicySettings

# The overload guardrail's noise bound: standard deviations of a count's change.
_Z = 3.0
# Drafters that look their drafts up in the text (prompt and output so far): they may find
# nothing to propose in a traffic, whatever the configuration. The others (a draft model,
# EAGLE, MTP, DSpark...) propose at every step they run.
LOOKUP_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
# RungNotInEffect where the rung asks for k = 0: drafts in more than this share of a band's
# request-steps (a batch that dipped below the limit between two readings drafts a little).
OFF_DRAFT_SHARE = 0.5
# ... where it asks for k: more than k + this many tokens per draft.
EXTRA_TOKENS = 0.5


@dataclass(frozen=True, slots=True)
class Trip:
    """A tripped guardrail: ``cause`` is the CamelCase reason a transition, an Event and a
    condition show; ``message`` one sentence with the numbers."""

    guardrail: str
    cause: str
    message: str


def startup_guardrail(evidence: Evidence, settings: PolicySettings, now: float) -> Trip | None:
    s = evidence.startup
    if s.ready is not False or s.since is None:
        return None
    waited = now - s.since
    if waited < settings.startup_deadline_s:
        return None
    return Trip(
        "startup",
        "DrafterStartupFailed",
        f"drafter pods not ready {waited:.0f}s after start "
        f"(startup deadline {settings.startup_deadline_s:.0f}s)",
    )


def error_rate_exceeded(errors: ArmErrors | None, settings: PolicySettings) -> str | None:
    """The sentence when the drafter arm's error rate is far above the baseline's."""
    e = errors or ArmErrors()
    if e.spec_requests < settings.error_min_requests or e.spec_errors < settings.error_min_errors:
        return None
    spec_rate = e.spec_errors / e.spec_requests
    base_rate = e.base_errors / e.base_requests if e.base_requests else 0.0
    far_above = spec_rate >= settings.error_ratio * base_rate
    if not far_above or spec_rate - base_rate < settings.error_margin:
        return None
    return (
        f"drafter-arm error rate {spec_rate:.1%} ({e.spec_errors}/{e.spec_requests}) vs "
        f"baseline {base_rate:.1%} ({e.base_errors}/{e.base_requests})"
    )


def error_guardrail(evidence: Evidence, settings: PolicySettings, now: float) -> Trip | None:
    sentence = error_rate_exceeded(evidence.errors, settings)
    return None if sentence is None else Trip("errors", "DrafterErrors", sentence)


def _asked(drafter: DrafterRun, low: float, high: float) -> int | None:
    """The one k the rung asks for at every batch size from ``low`` to ``high`` (None:
    ranges with different k, or k unknown)."""
    lo, hi = max(1, round(low)), max(1, round(high))
    asked = {drafter.k_at(b) for b in range(lo, min(hi, lo + 4096) + 1)}
    if len(asked) != 1:
        return None
    return next(iter(asked))


def _bands(
    counters: DraftCounters, drafter: DrafterRun
) -> dict[int, tuple[float, float, float, float, float]]:
    """The pods' spans grouped by the k their rung asks for over each span's batch:
    k → (steps, drafts, draft tokens, lowest batch, highest batch)."""
    bands: dict[int, tuple[float, float, float, float, float]] = {}
    for span in counters.spans:
        k = _asked(drafter, span.batch_low, span.batch_high)
        if k is None:
            continue
        steps, drafts, tokens, low, high = bands.get(k, (0.0, 0.0, 0.0, math.inf, 0.0))
        bands[k] = (steps + span.steps, drafts + span.drafts, tokens + span.draft_tokens,
                    min(low, span.batch_low), max(high, span.batch_high))  # fmt: skip
    return bands


def _schedule_words(drafter: DrafterRun) -> str:
    if not drafter.schedule:
        return f"k={drafter.k} at every batch size"
    return "schedule " + ", ".join(f"{lo}-{hi}: k={k}" for lo, hi, k in drafter.schedule)


def rung_mismatch(
    counters: DraftCounters | None, drafter: DrafterRun | None, min_steps: int
) -> str | None:
    """The sentence when the drafter arm's counters show its engine does not run the rung it
    was given (see the module doc: ``RungNotInEffect``), else None. ``min_steps``: the
    request-steps a band needs before it is judged."""
    if counters is None or drafter is None or not counters.spans:
        return None
    for k, (steps, drafts, tokens, low, high) in sorted(_bands(counters, drafter).items()):
        if steps < min_steps:
            continue
        batch = f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}"
        if k == 0 and drafts > OFF_DRAFT_SHARE * steps:
            return (
                f"the engine drafted in {drafts / steps:.0%} of {steps:.0f} request-steps at "
                f"{batch} running requests per pod, where the {drafter.rung} rung asks for no "
                f"draft ({_schedule_words(drafter)}): the configuration is not in effect"
            )
        if k > 0 and drafts >= min_steps and tokens / drafts > k + EXTRA_TOKENS:
            return (
                f"the engine drafted {tokens / drafts:.2f} tokens per draft over {drafts:.0f} "
                f"drafts at {batch} running requests per pod, where the {drafter.rung} rung "
                f"asks for k={k} ({_schedule_words(drafter)}): the configuration is not in "
                "effect"
            )
    return None


def _drafts_asked(counters: DraftCounters, drafter: DrafterRun | None) -> bool:
    """Did the rung ask for drafts over the window? Without a schedule, yes; with one, only
    where some pod's batch stayed in a range with k > 0 (no span read: unknown, taken as no
    unless every range drafts)."""
    if drafter is None or not drafter.schedule:
        return True
    if all(k > 0 for _, _, k in drafter.schedule):
        return True
    return any(k > 0 and band[0] > 0 for k, band in _bands(counters, drafter).items())


def speculation_guardrail(
    evidence: Evidence, settings: PolicySettings, now: float
) -> Trip | None:
    counters, drafter = evidence.speculation, evidence.drafter
    if counters is None or counters.pods == 0:
        return None
    mismatch = rung_mismatch(counters, drafter, settings.speculation_min_drafts)
    if mismatch is not None:
        return Trip("speculation", "RungNotInEffect", mismatch)
    if counters.exporting > 0 and counters.drafts >= settings.speculation_min_drafts:
        length = 1.0 + counters.accepted / counters.drafts
        floor = 1.0 + settings.acceptance_margin
        if length >= floor:
            return None
        return Trip(
            "speculation",
            "AcceptanceCollapsed",
            f"mean acceptance length {length:.3f} over {counters.drafts:.0f} drafts "
            f"(1.000 = no draft token accepted; threshold {floor:.2f})",
        )
    served = (evidence.errors or ArmErrors()).spec_requests
    if served < settings.speculation_min_requests:
        return None
    if counters.exporting == 0:
        return Trip(
            "speculation",
            "SpeculationOff",
            f"the drafter arm served {served} requests but none of its {counters.pods} "
            "pods exports spec-decode counters (vllm:spec_decode_num_drafts): the speculative "
            "config is not in effect",
        )
    if counters.drafts > 0 or not _drafts_asked(counters, drafter):
        return None
    if counters.spans and sum(s.steps for s in counters.spans) < settings.speculation_min_drafts:
        return None  # too few decode steps for 0 drafts to say anything
    if drafter is not None and drafter.method in LOOKUP_METHODS:
        return Trip(
            "speculation",
            "NothingToPropose",
            f"the drafter arm served {served} requests with 0 drafts over the window, its "
            f"spec-decode counters present (the {drafter.method} drafter is in effect): it "
            "finds nothing to propose in this traffic",
        )
    return Trip(
        "speculation",
        "SpeculationOff",
        f"the drafter arm served {served} requests with 0 drafts over the window",
    )


def overload_excess(evidence: Evidence, settings: PolicySettings) -> str | None:
    """The sentence when the serving drafter arm falls behind the arrivals the baseline
    keeps up with (see the module doc), else None."""
    load = evidence.load
    if not settings.overload_guardrail or load is None or load.split:
        return None
    arms = (ARM_SPECULATIVE, ARM_BASELINE)
    if any(arm not in load.start or arm not in load.end for arm in arms):
        return None
    if load.rule != "arrivals":
        return _outpaced(load, settings)
    spec_start, spec_end = load.start[ARM_SPECULATIVE], load.end[ARM_SPECULATIVE]
    base_start, base_end = load.start[ARM_BASELINE], load.end[ARM_BASELINE]
    margin, slack = 1.0 + settings.overload_growth, settings.overload_slack
    # The baseline, given the same arrivals, keeps up: its count neither climbed nor fell
    # away (so the arrivals held; a ramp, where both arms climb, is left to the statistics,
    # and a baseline shadow being drained by the router says nothing).
    base_steady = base_start / margin - slack <= base_end <= margin * base_start + slack
    # Where the operator looked before this look (both arms read there).
    looked = all(arm in load.last for arm in arms)
    # The drafter's count climbed by the margin and by more than a queue's own noise, and,
    # where there was a look before, is still climbing at this one.
    climbing = _climbing(
        spec_start, spec_end, load.last[ARM_SPECULATIVE] if looked else None, settings
    )
    # Falling further behind the baseline, not only growing with the arrivals as a stable
    # but slower arm would (its count then stays a constant multiple of the baseline's).
    behind = spec_end / max(base_end, 1.0) >= margin * spec_start / max(base_start, 1.0)
    # And past the baseline's count now: at equal arrivals more requests held is a longer
    # wait (Little's law). A drafter filling up from empty (a shadow after a drain, a new
    # rung) climbs too, but settles below the baseline if it keeps up.
    holds_more = spec_end >= base_end + slack
    # And the baseline still steady since that look.
    still = True
    if looked:
        base_last = load.last[ARM_BASELINE]
        still = base_last / margin - slack <= base_end <= margin * base_last + slack
    if not (base_steady and climbing and behind and holds_more and still):
        return None
    return (
        f"the drafter arm cannot keep up with its arrivals: requests in its engines grew from "
        f"{spec_start:.0f} to {spec_end:.0f} per pod since the window opened, while the "
        f"baseline, at the same arrivals per pod, held {base_start:.0f} to {base_end:.0f} (at "
        "equal arrivals, more requests held is a longer wait: Little's law)"
    )


def _climbing(start: float, end: float, last: float | None, settings: PolicySettings) -> bool:
    """The drafter's count per pod climbed since the window opened (``start`` to ``end``) by
    ``overload_growth`` (relative), ``overload_slack`` requests and three standard
    deviations of a Poisson-like count's change (a queue's own noise), and, where the
    operator looked between (``last``), since that look by one: a queue that runs away
    climbs at every look; one that settles (an arm filling up after a change in load)
    stops. Both load-match rules' readings (``overload_excess``, ``_outpaced``)."""
    grew = end >= (1.0 + settings.overload_growth) * start + settings.overload_slack
    if not grew or end - start < _Z * math.sqrt(start + end):
        return False
    return last is None or end - last >= math.sqrt(end + last)


def _outpaced(load: ArmLoad, settings: PolicySettings) -> str | None:
    """By the in-flight rule (the clients not told open, or a window the rule changed in):
    the shadow is fed to the serving pods' count, not their arrivals, so the counts alone
    say nothing of the baseline at these arrivals. What its engines *finished* does: the
    drafter's queue climbs (its arrivals outpace what it finishes), and the baseline arm
    finished at least as many requests per pod as the drafter pods received, and more than
    the drafter finished, beyond a count's noise — at these arrivals it keeps up where the
    drafter falls behind. A closed loop's streams joining make the drafter climb too; the
    baseline, fed to the same count, then finishes more only where each request takes it
    less time at that count: the in-flight counterfactual says the same. The same reading
    holds a re-promotion with the drafter as the shadow (fed to the serving baseline's
    count, it falls behind what it is given while the baseline finishes more)."""
    if ARM_SPECULATIVE not in load.done or ARM_BASELINE not in load.done:
        return None
    spec_start, spec_end = load.start[ARM_SPECULATIVE], load.end[ARM_SPECULATIVE]
    if not _climbing(spec_start, spec_end, load.last.get(ARM_SPECULATIVE), settings):
        return None
    spec_done, base_done = load.done[ARM_SPECULATIVE], load.done[ARM_BASELINE]
    arrived = spec_done + spec_end - spec_start  # what the drafter pods received, per pod
    keeps_up = base_done >= arrived - _Z * math.sqrt(base_done + arrived)
    faster = base_done - spec_done >= max(
        settings.overload_slack, _Z * math.sqrt(base_done + spec_done)
    )
    if not (keeps_up and faster):
        return None
    return (
        f"the drafter arm cannot keep up with its arrivals: requests in its engines grew from "
        f"{spec_start:.0f} to {spec_end:.0f} per pod since the window opened, finishing "
        f"{spec_done:.0f} of the {arrived:.0f} that arrived per pod, while the baseline arm "
        f"finished {base_done:.0f} per pod (the load match was by in-flight count: what each "
        "arm's engines finished tells which keeps up with these arrivals)"
    )


def overload_guardrail(evidence: Evidence, settings: PolicySettings, now: float) -> Trip | None:
    sentence = overload_excess(evidence, settings)
    return None if sentence is None else Trip("overload", "DrafterOverloaded", sentence)


def tool_call_excess(evidence: Evidence, settings: PolicySettings) -> str | None:
    """The sentence when the drafter arm's excess of invalid tool calls is confident."""
    pairs = evidence.tool_calls
    if not settings.tool_call_guardrail or pairs is None:
        return None
    return pairs.excess(settings.tool_call_confidence, settings.tool_call_min_only)


def tool_call_guardrail(evidence: Evidence, settings: PolicySettings, now: float) -> Trip | None:
    sentence = tool_call_excess(evidence, settings)
    return None if sentence is None else Trip("tool_calls", "InvalidToolCalls", sentence)


Guardrail = Callable[[Evidence, PolicySettings, float], "Trip | None"]

GUARDRAILS: tuple[Guardrail, ...] = (
    startup_guardrail, error_guardrail, speculation_guardrail, overload_guardrail,
    tool_call_guardrail,
)  # fmt: skip


def first_trip(evidence: Evidence, settings: PolicySettings, now: float) -> Trip | None:
    """The first guardrail of :data:`GUARDRAILS` that trips, else None."""
    for guardrail in GUARDRAILS:
        trip = guardrail(evidence, settings, now)
        if trip is not None:
            return trip
    return None


__all__ = [
    "GUARDRAILS",
    "LOOKUP_METHODS",
    "Guardrail",
    "Trip",
    "error_guardrail",
    "error_rate_exceeded",
    "first_trip",
    "overload_excess",
    "overload_guardrail",
    "rung_mismatch",
    "speculation_guardrail",
    "startup_guardrail",
    "tool_call_excess",
    "tool_call_guardrail",
]
