"""The configuration ladder in the decision: ``status.ladder`` ↔ the judge's
``LadderState``, and what one tick does to it (pure).

The judge's ``judge._ladder`` holds the rules (which rung after a loss, climbing back, the
schedule's derivation); this module applies them to one tick's decision:

- a rollback of the drafter arm while it serves (any cause but a pin) is a loss of its rung;
- while the baseline serves, nothing is swapping, no pin holds and no routing split is in
  effect, the shadow rung loses after ``consecutiveWindows`` regressed windows in a row (a
  window with a confidently regressed guard, ``judge._guards``, counts as regressed), when
  its pods never became ready within the startup deadline, when its spec-decode counters
  show it not doing what it asks (the speculation guardrail's test: ``RungNotInEffect``
  where the engine ignored the rung, e.g. a per-batch-size schedule on vLLM's V2 model
  runner; ``NothingToPropose``, ``SpeculationOff``, ``AcceptanceCollapsed``; such a window
  is never credited to it either: ``gather`` counts it toward no change), on a confident
  excess of invalid tool calls, or when its engines fall behind arrivals the baseline keeps up with
  (the overload guardrail's test); a rung that has lost is replaced, once ``retryAfter``
  has passed, by the first eligible one (climbing back);
- a new ``specguard.io/retry`` value forgets every loss;
- the next rung takes effect once no swap is running (:func:`settle_rung`); the policy's
  streak starts afresh then (its windows judged another configuration).

Windows in which the drafter arm's pods run two configurations are not judged at all: the
loop checks that every drafter pod runs the rung's arguments (``rolled_out``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specguard._objects import lookup
from specguard._times import parse_time, rfc3339
from specguard.api import (
    BatchSizeRange,
    DrafterRung,
    LadderStatus,
    LevelVerdict,
    RungLoss,
    Spec,
)
from specguard.api import constants as c
from specguard.api.constants import Arm
from specguard.controller._conditions import EventSpec, rounded
from specguard.judge import (
    Decision,
    Evidence,
    LadderState,
    Level,
    Loss,
    PolicySettings,
    Rung,
    Verdict,
    after_loss,
    climb_back,
    describe,
    merge_levels,
    overload_excess,
    rung_order,
    settle,
    shadow_window,
    speculation_guardrail,
    startup_guardrail,
    tool_call_excess,
)

# -- status.ladder ↔ judge ----------------------------------------------------------------


def _rung(wire: DrafterRung | None) -> Rung | None:
    if wire is None:
        return None
    schedule = tuple(
        (r.min_batch_size, r.max_batch_size, r.num_speculative_tokens) for r in wire.schedule or ()
    )
    return Rung(wire.name, schedule)


def drafter_rung(rung: Rung) -> DrafterRung:
    """The rung as the API spells it (``render_all``'s ``rung``, ``status.ladder.rung``)."""
    schedule = [
        BatchSizeRange(min_batch_size=lo, max_batch_size=hi, num_speculative_tokens=k)
        for lo, hi, k in rung.schedule
    ]
    return DrafterRung(name=rung.name, schedule=schedule or None)


def ladder_state(status: LadderStatus | None) -> LadderState:
    if status is None:
        return LadderState()
    levels = tuple(
        Level(
            lv.low,
            lv.high,
            lv.in_flight,
            lv.outcome,
            lv.ratio,
            lv.ci_lower,
            lv.ci_upper,
            lv.pairs,
            parse_time(lv.window_end),
        )
        for lv in status.levels
    )
    lost = tuple(
        Loss(x.rung, at, x.reason, x.message, x.ratio)
        for x in status.lost
        if (at := parse_time(x.at)) is not None  # unreadable: as if long ago
    )
    return LadderState(
        rung=_rung(status.rung) or Rung(),
        next=_rung(status.next),
        lost=lost,
        levels=levels,
        streak=status.streak,
    )


def ladder_status(state: LadderState) -> LadderStatus:
    return LadderStatus(
        rung=drafter_rung(state.rung),
        next=None if state.next is None else drafter_rung(state.next),
        lost=[
            RungLoss(
                rung=x.rung,
                at=rfc3339(x.at),
                reason=x.cause,
                message=x.message[:1000],
                ratio=rounded(x.ratio),
            )
            for x in state.lost
        ],
        levels=[
            LevelVerdict(
                low=lv.low,
                high=lv.high,
                in_flight=round(lv.in_flight, 2),
                outcome=lv.outcome,
                ratio=rounded(lv.ratio),
                ci_lower=rounded(lv.ci_low),
                ci_upper=rounded(lv.ci_high),
                pairs=lv.pairs,
                window_end=None if lv.window_end is None else rfc3339(lv.window_end),
            )
            for lv in state.levels
        ],
        streak=state.streak,
    )


# -- one tick --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LadderTick:
    """What the decision needs from the ladder's side of one tick."""

    serving: Arm  # the arm serving before this tick (status.mode)
    swapping: bool  # a swap was running before this tick
    split: bool  # a routing split is in effect (the ladder waits)
    verdict: Verdict | None  # the verdict the policy judged this tick
    levels: Sequence[Level] = ()  # the configured drafter's band verdicts of this window
    halted: bool = False  # automatic changes stopped after flaps: the ladder stops too


def ladder_step(
    spec: Spec,
    state: LadderState,
    *,
    tick: LadderTick,
    decision: Decision,
    evidence: Evidence,
    settings: PolicySettings,
    rollback: tuple[str, str, float | None] | None,
    now: float,
) -> tuple[LadderState, list[EventSpec]]:
    """The ladder after this tick's decision (see the module docstring). ``rollback``: the
    transition that took the drafter arm out of service (reason, message, ratio), if any."""
    rungs = spec.ladder.rungs
    if not rungs:
        return state, []
    if tick.levels and state.rung.name == "configured":
        state = replace(state, levels=merge_levels(state.levels, tick.levels))
    if decision.command is not None:
        state = replace(state, lost=())
    order = rung_order(rungs)
    k = spec.drafter.num_speculative_tokens
    retry_after = float(spec.ladder.retry_after)
    events: list[EventSpec] = []
    lost: tuple[str, str, float | None] | None = rollback
    shadow_judged = (
        decision.target == c.ARM_BASELINE
        and tick.serving == c.ARM_BASELINE
        and not tick.swapping
        and not tick.split
        and evidence.pin is None
        and settings.policy == "auto"
        and not tick.halted
    )
    if lost is None and shadow_judged:
        startup = startup_guardrail(evidence, settings, now)
        speculation = speculation_guardrail(evidence, settings, now)
        tools = tool_call_excess(evidence, settings)
        overloaded = overload_excess(evidence, settings)
        if startup is not None:
            lost = (startup.cause, startup.message, None)
        elif speculation is not None:
            lost = (speculation.cause, speculation.message, None)
        elif tools is not None:
            lost = ("InvalidToolCalls", tools, None)
        elif overloaded is not None:
            lost = ("DrafterOverloaded", overloaded, None)
        elif tick.verdict is not None and tick.verdict.outcome != "inconclusive":
            # A confidently regressed guard (judge._guards) counts as a regressed window.
            guarded = tick.verdict.regressed_guards
            state, regressed = shadow_window(
                state, tick.verdict.guarded_outcome, settings.consecutive_windows
            )
            if regressed:
                sentence = f"as the shadow, {tick.verdict.sentence()}"
                if guarded and tick.verdict.outcome != "regressed":  # the guard decided
                    lost = (guarded[0].cause, sentence, guarded[0].ratio)
                else:
                    lost = ("Regressed", sentence, tick.verdict.ratio)
    if lost is not None and decision.action != "notify":
        cause, message, ratio = lost
        was = describe(state.rung, spec.drafter.method, k)
        state, sentence = after_loss(
            state,
            order=order,
            cause=cause,
            message=message,
            ratio=ratio,
            now=now,
            retry_after=retry_after,
            k=k,
        )
        nxt = (
            f"; next: {describe(state.next, spec.drafter.method, k)}, judged as the shadow "
            "against no drafter"
            if state.next is not None
            else ""
        )
        events.append(
            EventSpec("Warning", "RungLost", f"{was} lost: {cause}: {message}{nxt} — {sentence}")
        )
    elif shadow_judged and state.next is None:
        climbed = climb_back(state, order=order, now=now, retry_after=retry_after, k=k)
        if climbed is not None and climbed.next is not None:
            state = climbed
            events.append(
                EventSpec(
                    "Normal",
                    "RungRetried",
                    f"{climbed.next.name} may be tried again (its loss is older than "
                    f"{spec.ladder.retry_after}s): "
                    f"{describe(climbed.next, spec.drafter.method, k)}",
                )
            )
    return state, events


def settle_rung(
    spec: Spec, state: LadderState, *, settled: bool
) -> tuple[LadderState, list[EventSpec], bool]:
    """The pending rung takes effect when the cluster is settled (no swap running, the
    target serving): (state, events, changed)."""
    state, changed = settle(state, swapping=not settled)
    if not changed:
        return state, [], False
    text = describe(state.rung, spec.drafter.method, spec.drafter.num_speculative_tokens)
    return state, [EventSpec("Normal", "RungChanged", f"the drafter arm now runs {text}")], True


# -- the live Deployment runs the rung --------------------------------------------------


def rolled_out(pods: Sequence[Mapping[str, Any]], args: Sequence[str]) -> bool:
    """Do all of the drafter arm's pods (terminating ones included: their requests are still
    in the feed) run ``args``? No pod yet: nothing to judge either."""
    if not pods:
        return False
    for pod in pods:
        containers = lookup(pod, "spec", "containers") or []
        first = containers[0] if containers and isinstance(containers[0], Mapping) else {}
        if list(first.get("args") or []) != list(args):
            return False
    return True


__all__ = [
    "LadderTick",
    "drafter_rung",
    "ladder_state",
    "ladder_status",
    "ladder_step",
    "rolled_out",
    "settle_rung",
]
