"""The decision core: one pure step per tick, from what the loop observed to everything the
loop must do.

    outcome = decide(Observation(...))      # the target, the swap plan, the status, Events

The loop (``_loop.py``) is the I/O around it: it reads the watch caches, times and collects
the windows, calls :func:`decide`, applies ``outcome.plan``'s objects, writes
``outcome.status`` where it differs and posts ``outcome.events``. Everything here is
tested by exact equality (tests/controller/test_decide.py).

Inside, in order:

1. :func:`gather`: the observation → the judge's ``Evidence`` (the window's verdict,
   errors and drafter counters; the drafter pods' startup; the pin and retry annotations);
2. ``judge.step``: the stored ``PolicyState`` (``status.policy``) and the evidence → the
   new state and a ``Decision`` (target, cause, the guardrail that tripped);
3. the transition (when the target changes) and the Events;
4. ``plan_swap``: the next step of the rolling swap toward the target, from the cluster;
5. the load match: the clients' kind from the window, and the rule the routers copy by
   (``_clients.py``);
6. the status: mode, target, conditions, the last verdict, the arms and the memory.

Around them, beyond on/off (both no-ops for a resource without ``spec.ladder`` and
``spec.routing``):

- routing by domain (``_split.py``), before the policy: a settled window's per-domain
  verdicts move domains between the arms, and the policy judges the traffic the serving arm
  keeps; a split's pod counts go to the planner (a resize), its routes to the routers once
  the counts are there;
- the configuration ladder (``_rungs.py``), after the policy: a lost rung, the next one,
  climbing back, and the pending rung taking effect once the cluster is settled.

Where new behaviour goes: new evidence → ``judge.Evidence`` and :func:`gather`; new memory
→ ``judge.PolicyState``; a new guardrail → ``judge._guardrails``; a new condition or
message → :func:`_conditions_after` / :func:`_events`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specguard._times import parse_time, rfc3339
from specguard.api import (
    ArmFigures,
    Arms,
    ArmStatus,
    Condition,
    DrafterRung,
    Spec,
    Status,
    StatusVerdict,
    ToolCallFigures,
    Transition,
    append_transition,
    format_duration,
)
from specguard.api import constants as c
from specguard.api.constants import Arm, other_arm
from specguard.controller._clients import LoadMatchAfter, load_match_after, rule_in_force
from specguard.controller._conditions import (
    EventSpec,
    EventType,
    evidence_sentence,
    rounded,
    set_condition,
    status_verdict,
    verdict_sentence,
)
from specguard.controller._mirror import mirror_share
from specguard.controller._rungs import (
    LadderTick,
    drafter_rung,
    ladder_state,
    ladder_status,
    ladder_step,
    settle_rung,
)
from specguard.controller._schedule import shadow_active, shadow_replicas
from specguard.controller._settings import judge_settings, policy_settings
from specguard.controller._split import route, routing_state, routing_status
from specguard.controller._swap import ArmObserved, SwapPlan, plan_swap
from specguard.judge import (
    ArmErrors,
    ArmLoad,
    Cumulative,
    Decision,
    DraftCounters,
    DrafterRun,
    Evidence,
    LadderState,
    Level,
    LoopEvidence,
    Matching,
    PolicySettings,
    PolicyState,
    RoutingState,
    Sample,
    Served,
    Startup,
    ToolCallPairs,
    Verdict,
    after_mode_change,
    flaps,
    paired_e2e_ratio,
    served_figures,
    shadow_in_flight,
    speculation_guardrail,
    split_replicas,
    step,
)

# During a routing split each arm serves and receives the other's copies on the same pods:
# at most this share of requests is copied, so the comparison goes on at a bounded cost.
SPLIT_MIRROR_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Window:
    """A window that ended at this tick, as the loop collected it.

    ``start``: when the window opened; ``first_started``: when the earliest request it
    judges started (router samples; None for histogram sources), which may be before
    ``start``: a window holds the requests that *ended* in it."""

    verdict: Verdict
    source_down: str | None = None  # the source failed: why (JudgeDegraded SourceUnavailable)
    drafts: DraftCounters | None = None  # the drafter arm's counters over it (None: unread)
    load: ArmLoad | None = None  # requests in the arms' engines at its start and end
    start: float | None = None
    first_started: float | None = None
    # The clients behind its serving requests and the window before (None: no per-request
    # samples), for the load match (_clients.py).
    clients: LoopEvidence | None = None
    # The router feed's samples (per-domain verdicts, tool calls); empty for histograms.
    samples: tuple[Sample, ...] = ()
    # The configured drafter's verdicts per in-flight band (spec.ladder's schedule evidence).
    levels: tuple[Level, ...] = ()


@dataclass(frozen=True, slots=True)
class Disturbance:
    """The last change no counted window may span, and when the loop last saw it: a swap
    (or a paused shadow), an operator restart, a change in the pods of either arm, a new
    drafter configuration rolling out."""

    at: float
    what: str


@dataclass(frozen=True, slots=True)
class Observation:
    """Everything one tick observed, for one resource with a valid spec."""

    name: str
    spec: Spec
    generation: int | None
    status: Status  # as stored (or as last written, when the watch lags behind)
    now: float
    created: float  # the resource's creationTimestamp (the periodic shadow counts from it)
    annotations: Mapping[str, str] = field(default_factory=dict)
    arms: Mapping[Arm, ArmObserved] = field(
        default_factory=lambda: {arm: ArmObserved() for arm in c.ARMS}
    )
    startup: Startup = field(default_factory=Startup)
    window: Window | None = None
    apply_error: str | None = None  # the last apply the API server refused, until one works
    disturbed: Disturbance | None = None  # the last swap, restart or change in the pods
    # The drafter arm's Deployment runs the rung of status.ladder on every pod (_rungs).
    drafter_rolled_out: bool = True
    # Between window ends: the arms' engines read now against the window's start (the
    # overload guardrail looks every quarter window; None when not read at this tick).
    load: ArmLoad | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    target: Arm
    plan: SwapPlan
    status: Status
    events: tuple[EventSpec, ...]
    decision: Decision
    transition: Transition | None = None
    rung: DrafterRung = field(default_factory=DrafterRung)  # the drafter arm's configuration
    rung_changed: bool = False  # it changed at this tick: its Deployment is re-applied
    # A window ended and counts (it spans no disturbance and the drafter arm did what its
    # rung asks): the loop keeps its pairs as the ladder's band evidence only then.
    counted: bool = False


def current_target(status: Status) -> Arm:
    return status.target_mode or status.mode or c.ARM_SPECULATIVE


def pinned_mode(annotations: Mapping[str, str]) -> Arm | None:
    value = annotations.get(c.ANNOTATION_PIN_MODE, "").strip()
    return next((arm for arm in c.ARMS if arm == value), None)


def judging(
    spec: Spec, status: Status, created: float, now: float, rolled_out: bool = True
) -> bool:
    """Are windows judged now? The shadow is active, no swap is going on, the mode in effect
    is the target, and the drafter arm's pods all run its configuration (``rolled_out``:
    after a ladder rung changes) — the loop opens and closes windows only then."""
    return paused(spec, status, created, now, rolled_out) is None


def paused(
    spec: Spec, status: Status, created: float, now: float, rolled_out: bool = True
) -> str | None:
    """Why windows are not judged now ("a swap", "a paused shadow", "a new drafter
    configuration rolling out"), or None."""
    swapping = bool(status.arms and status.arms.swapping)
    in_effect = (status.mode or current_target(status)) == current_target(status)
    if swapping or not in_effect:
        return "a swap"
    if not shadow_active(spec, created, now):
        return "a paused shadow"
    if not rolled_out:
        return "a new drafter configuration rolling out"
    return None


def pods_changed(before: Mapping[Arm, ArmObserved], after: Mapping[Arm, ArmObserved]) -> str | None:
    """The change in either arm's pods between two ticks (replicas asked for, or ready), as
    a window that spans it names it, e.g. "a change in the pods (baseline ready 1→0)"."""
    changes = []
    for arm in c.ARMS:
        old, new = before.get(arm, ArmObserved()), after.get(arm, ArmObserved())
        if old.replicas != new.replicas:
            changes.append(f"{arm} replicas {old.replicas}→{new.replicas}")
        if old.ready != new.ready:
            changes.append(f"{arm} ready {old.ready}→{new.ready}")
    return f"a change in the pods ({', '.join(changes)})" if changes else None


def window_spans(window: Window, disturbed: Disturbance | None, length: float) -> str | None:
    """What the window spans, so that it must not count: the last disturbance, when a
    request the window judges started at or before it, or when it came after the window
    opened. One seen at the tick the window opened is before it (the loop reads the pods'
    counters at the start after it: a window restarted at a change in the pods opens
    then). Without per-request start times (histogram sources), a request is taken to have
    started up to one window ``length`` before the window opened."""
    if disturbed is None or window.start is None:
        return None
    began = window.first_started if window.first_started is not None else window.start - length
    if disturbed.at < began and disturbed.at <= window.start:
        return None
    return disturbed.what


def policy_state(status: Status) -> tuple[PolicyState, str | None]:
    """The stored policy memory, and why it was unreadable (then a fresh one)."""
    fallback = current_target(status)
    if status.policy is None:
        return PolicyState(mode=fallback), None
    try:
        return PolicyState.from_wire({"mode": fallback, **status.policy}), None
    except ValueError as exc:
        return PolicyState(mode=fallback), f"status.policy.{exc}"


def matching(obs: Observation) -> Matching | None:
    """How the window's shadow was loaded and what its clients were told to be (None
    without mirrored per-request samples, or while routes by domain have both arms serve:
    every verdict then counts)."""
    window, status = obs.window, obs.status
    if window is None or not any(s.pair_id is not None for s in window.samples):
        return None
    if status.arms and status.arms.routes:
        return None
    ratio, pairs = paired_e2e_ratio(window.samples)
    clients = window.clients.kind if window.clients is not None else "unknown"
    halves = None if window.start is None else shadow_in_flight(window.samples, window.start,
                                                                 obs.now)  # fmt: skip
    return Matching(rule_in_force(obs.spec, obs.status), clients, ratio, pairs, halves)


def served(obs: Observation) -> Served | None:
    """What the serving arm gave the clients over the window (None between windows, while
    routes by domain have both arms serve, or with too few serving requests)."""
    window, status = obs.window, obs.status
    if window is None or window.start is None or (status.arms and status.arms.routes):
        return None
    return served_figures(window.samples, status.mode or current_target(status), window.start,
                          obs.now, drafter_config(obs))  # fmt: skip


def drafter_config(obs: Observation) -> str:
    """The drafter configuration in force, as ``Served.config`` names it: the ladder's rung
    and a digest of ``spec.drafter`` (a record of another rung, or of the drafter before an
    edit, does not speak for this one)."""
    rung = obs.status.ladder.rung.name if obs.status.ladder is not None else "configured"
    drafter = obs.spec.drafter.model_dump_json()
    return f"{rung}/{hashlib.sha256(drafter.encode()).hexdigest()[:10]}"


def drafter_run(obs: Observation) -> DrafterRun:
    """What the drafter arm is configured to run: ``spec.drafter`` with the ladder's rung
    (its schedule, when it has one; else ``spec.drafter.perBatchSize``, as render does)."""
    drafter, ladder = obs.spec.drafter, obs.status.ladder
    rung = ladder.rung if ladder is not None else DrafterRung()
    ranges = rung.schedule or drafter.per_batch_size or ()
    schedule = tuple((r.min_batch_size, r.max_batch_size, r.num_speculative_tokens) for r in ranges)
    return DrafterRun(drafter.method, drafter.num_speculative_tokens, schedule, rung.name)


def gather(obs: Observation, verdict: Verdict | None = None) -> Evidence:
    """The judge's evidence for this tick (``verdict``: the one the policy judges, when it
    is not the window's own: with a routing split, the traffic the serving arm keeps).

    A window whose drafter-arm counters show the rung not doing what it asks (the
    speculation guardrail: not in effect, nothing to propose, no draft accepted) counts
    toward no change (``spans``): the drafter arm is never credited with a latency its
    rung did not produce; while it serves, the guardrail rolls it back."""
    window = obs.window
    evidence = Evidence(
        verdict=None if window is None else verdict or window.verdict,
        startup=obs.startup,
        errors=None if window is None else ArmErrors.of(window.verdict),
        speculation=None if window is None else window.drafts,
        drafter=drafter_run(obs),
        load=obs.load if window is None else window.load,
        tool_calls=None
        if window is None or not window.samples
        else ToolCallPairs.of(window.samples),
        pin=pinned_mode(obs.annotations),
        retry=obs.annotations.get(c.ANNOTATION_RETRY),
        spans=None
        if window is None
        else window_spans(window, obs.disturbed, float(obs.spec.evaluation.window)),
        matching=matching(obs),
        served=served(obs),
    )
    if window is not None and evidence.spans is None:
        trip = speculation_guardrail(evidence, policy_settings(obs.spec), obs.now)
        if trip is not None:
            evidence = replace(evidence, spans=f"a drafter not doing what its rung asks "
                                                f"({trip.cause})")  # fmt: skip
    return evidence


def decide(obs: Observation) -> Outcome:
    """One tick: the decision, the swap step, the status and the Events (see the module
    docstring)."""
    prev, spec, now = obs.status, obs.spec, obs.now
    old_target = current_target(prev)
    remembered, unreadable = policy_state(prev)
    mode = prev.mode or old_target
    swapping = bool(prev.arms and prev.arms.swapping)
    settled = not swapping and mode == old_target

    routing, verdict = routing_state(prev.routing), None
    moves: list[str] = []
    window = obs.window
    # A window that counts toward no change (it spans a disturbance, or the drafter arm
    # does not do what its rung asks) moves no domain and credits no band's latency.
    evidence = gather(obs)
    counted = window is not None and evidence.spans is None
    if spec.routing.by_domain and window is not None and window.samples and settled and counted:
        judged = judge_settings(spec, rule_in_force(spec, prev))
        routing, moves, verdict = route(
            spec, routing, mode=mode, samples=window.samples, settings=judged,
            overall=window.verdict, now=now,
        )  # fmt: skip
        if verdict is not None:
            evidence = gather(obs, verdict)
    settings = policy_settings(spec)
    state, decision = step(remembered, settings, now, evidence)
    transition = _transition(old_target, decision, evidence, mode, rfc3339(now))
    if transition is not None:
        routing = after_mode_change(routing, decision.target, now)

    ladder, ladder_events = ladder_step(
        spec, ladder_state(prev.ladder),
        tick=LadderTick(serving=mode, swapping=swapping, split=bool(routing.routes(mode)),
                        verdict=evidence.verdict if counted else None, halted=state.halted,
                        levels=() if window is None or not counted else window.levels),
        decision=decision, evidence=evidence, settings=settings,
        rollback=_lost_serving(transition, evidence), now=now,
    )  # fmt: skip
    if transition is not None and spec.ladder.rungs:  # the rung rolled back or re-promoted
        transition = transition.model_copy(update={"rung": ladder.rung.name})

    since = parse_time(prev.arms.swap_since) if prev.arms else None
    before = dict(prev.routing.replicas) if prev.routing is not None else {}
    counts = _split_counts(obs, routing, decision.target, before if not moves else None)
    plan = plan_swap(
        target=decision.target,
        mode=mode,
        swapping=swapping,
        serving_replicas=spec.replicas,
        shadow_replicas=shadow_replicas(spec, obs.created, now),
        max_pods=spec.replicas + spec.shadow.replicas,
        observed=obs.arms,
        now=now,
        swap_since=since,
        counts=counts,
        resize=(counts or {}) != before,  # a split's pods set, changed or given back
    )
    swap_since = (since or now) if plan.swapping else None
    ladder, rung_events, rung_changed = settle_rung(
        spec, ladder, settled=not plan.swapping and plan.mode == decision.target
    )
    if rung_changed:  # the policy's streak judged the configuration that is gone
        state = replace(state, streak=0, cumulative=Cumulative())

    events = list(_events(obs, decision, transition, evidence, mode))
    if state.halted and not remembered.halted:
        events.append(EventSpec("Warning", "FlapLimit", _halt_message(obs, settings, state)))
    events += [EventSpec("Normal", "RouteChanged", move) for move in moves]
    events += [*ladder_events, *rung_events]
    load_match = load_match_after(
        spec, prev, None if obs.window is None else obs.window.clients, rfc3339(now)
    )
    if load_match.changed_from is not None:
        events.append(EventSpec("Normal", "LoadMatchChanged", load_match.message))
    if plan.done and plan.mode != mode:
        events.append(EventSpec("Normal", "SwapComplete",
                                f"{mode} → {plan.mode}: {plan.replicas[plan.mode]} serving "
                                "pods ready"))  # fmt: skip
    elif plan.done and plan.reason == "resize complete":
        pods = ", ".join(f"{plan.replicas[a]} {a}" for a in c.ARMS)
        events.append(EventSpec("Normal", "SplitResized", f"pods for the split: {pods}"))
    if unreadable is not None:
        why = f"{unreadable[:500]}: the policy starts from a fresh memory"
        events.insert(0, EventSpec("Warning", "PolicyMemoryReset", why))
    status = _status_after(obs, decision, state, transition, plan=plan, swap_since=swap_since,
                           load_match=load_match, settings=settings)  # fmt: skip
    rung = drafter_rung(ladder.rung)
    status = _beyond_on_off(status, obs, plan=plan, routing=routing, counts=counts, ladder=ladder,
                            rung=rung, evidence=evidence)  # fmt: skip
    return Outcome(decision.target, plan, status, tuple(events), decision, transition, rung,
                   rung_changed, counted)  # fmt: skip


def _lost_serving(
    transition: Transition | None, evidence: Evidence
) -> tuple[str, str, float | None] | None:
    """A transition that took the drafter arm out of service on its own merits (not a pin
    or an unpin): the serving rung lost."""
    if transition is None or transition.to_mode != c.ARM_BASELINE:
        return None
    if transition.reason in ("Pinned", "Unpinned") or evidence.pin is not None:
        return None
    guards = () if evidence.verdict is None else evidence.verdict.regressed_guards
    guard = next((g for g in guards if g.cause == transition.reason), None)
    ratio = transition.ratio if guard is None or guard.ratio is None else rounded(guard.ratio)
    return transition.reason, transition.message, ratio  # the guard's ratio when it decided


def _split_counts(
    obs: Observation, routing: RoutingState, target: Arm, kept: Mapping[str, int] | None
) -> dict[Arm, int] | None:
    """Pods per arm for a routing split (None: the spec's counts). ``kept``: the counts in
    force, which stay while the routes do (chosen when they change, not every window)."""
    if not obs.spec.routing.by_domain or not routing.routes(target):
        return None
    if kept:
        return {arm: int(kept[arm]) for arm in c.ARMS if arm in kept} or None
    shadow = shadow_replicas(obs.spec, obs.created, obs.now)
    current = {arm: obs.arms[arm].replicas for arm in c.ARMS}
    return split_replicas(routing, target, serving=obs.spec.replicas, shadow=shadow,
                          current=current)  # fmt: skip


def _beyond_on_off(
    status: Status,
    obs: Observation,
    *,
    plan: SwapPlan,
    routing: RoutingState,
    counts: dict[Arm, int] | None,
    ladder: LadderState,
    rung: DrafterRung,
    evidence: Evidence,
) -> Status:
    """The ladder's and the routing's part of the status: ``status.ladder``,
    ``status.routing``, the routes in effect (once the arms have the split's pods), the
    rung of the last verdict, and the window's tool calls."""
    spec = obs.spec
    update: dict[str, Any] = {}
    if spec.ladder.rungs or obs.status.ladder is not None:
        update["ladder"] = ladder_status(ladder)
    if spec.routing.by_domain or obs.status.routing is not None:
        update["routing"] = routing_status(routing, plan.mode, counts)
        if status.arms is not None:
            in_effect = (
                plan.done
                and not plan.swapping
                and (counts is None or all(plan.replicas[a] == counts[a] for a in c.ARMS))
            )
            routes = routing.routes(plan.mode) if in_effect else {}
            arms: dict[str, Any] = {"routes": routes}
            if routes:  # both arms serve: copies take serving pods' time (docs/operator.md)
                arms["mirror_share"] = min(status.arms.mirror_share, SPLIT_MIRROR_SHARE)
            update["arms"] = status.arms.model_copy(update=arms)
    verdict = status.last_verdict
    if verdict is not None and obs.window is not None and verdict.window_end == rfc3339(obs.now):
        pairs = evidence.tool_calls
        figures = None
        if pairs is not None and pairs.pairs:
            figures = ToolCallFigures(
                pairs=pairs.pairs,
                invalid=ArmFigures(speculative=float(pairs.invalid_speculative),
                                   baseline=float(pairs.invalid_baseline)),
                only_speculative=pairs.only_speculative,
                only_baseline=pairs.only_baseline,
                p_value=None if (p := pairs.p_value()) is None else round(p, 6),
            )  # fmt: skip
        wanted = {"tool_calls": figures, "rung": rung.name if spec.ladder.rungs else None}
        update["last_verdict"] = verdict.model_copy(update=wanted)
    return status.model_copy(update=update) if update else status


def _why(decision: Decision, evidence: Evidence, serving: Arm) -> str:
    """The figures behind a statistical decision (made or only reported): the cumulative
    evidence when that rule acted, else the window's verdict; the load the engines held
    where it differs from the routers' count."""
    verdict, engines = evidence.verdict, evidence.load
    if verdict is None:
        return decision.reason
    if decision.cumulative is not None:
        return evidence_sentence(decision.cumulative, verdict, serving, engines)
    return verdict_sentence(verdict, serving, engines)


def _halt_message(obs: Observation, settings: PolicySettings, state: PolicyState) -> str:
    """The FlapLimit Event, posted once when automatic changes stop."""
    count = flaps(state, settings, obs.now)
    traffic = "" if state.flap_traffic is None else f", the last at {state.flap_traffic.describe()}"
    return (
        f"automatic changes stop: {count} changes back and forth on the same traffic within "
        f"{format_duration(round(settings.flap_window_s))}{traffic}; "
        f"`kubectl specguard retry {obs.name}` resumes them. Changes the windows ask for "
        "meanwhile are counted in the Halted condition (status.policy.held), not posted"
    )


def _halted(
    obs: Observation, settings: PolicySettings, state: PolicyState
) -> tuple[bool, str, str]:
    """The Halted condition: are automatic changes stopped, how many changes were held since,
    and how to resume; else how close the last changes came to the limit."""
    window = format_duration(round(settings.flap_window_s))
    limit = f"{settings.max_flaps} changes back and forth on the same traffic within {window}"
    if state.halted:
        held = state.held
        since = (
            f"; {held} change{'s' if held != 1 else ''} asked for since, not made" if held else ""
        )
        return True, "FlapLimit", (
            f"automatic changes stopped after {limit}{since}; "
            f"`kubectl specguard retry {obs.name}` resumes them"
        )  # fmt: skip
    count = flaps(state, settings, obs.now)
    if count < 2:
        return False, "Allowed", "automatic changes allowed"
    return False, "Allowed", (
        f"automatic changes allowed: {count} changes back and forth on the same traffic within "
        f"{window}; {settings.max_flaps} stop them"
    )  # fmt: skip


def _transition(
    old_target: Arm, decision: Decision, evidence: Evidence, serving: Arm, now_iso: str
) -> Transition | None:
    """The change of target, if any. ``serving``: the arm that served during the window."""
    target = decision.target
    if target == old_target:
        return None
    verdict = evidence.verdict
    if evidence.pin is not None and target == evidence.pin:
        reason, message = "Pinned", f"{c.ANNOTATION_PIN_MODE}={evidence.pin}"
    elif decision.action in ("rollback", "repromote"):
        reason = decision.cause
        if decision.trip is not None:
            message = decision.trip.message
        elif decision.cause == "Retry":
            message = f"{c.ANNOTATION_RETRY}: manual re-promotion"
        else:
            message = _why(decision, evidence, serving)
    else:
        reason, message = "Unpinned", f"{c.ANNOTATION_PIN_MODE} removed"
    ratio = None if verdict is None else rounded(verdict.ratio)
    together = None if decision.cumulative is None else decision.cumulative.ratio()
    if together is not None:
        ratio = rounded(together)  # what the windows of the cumulative rule show together
    return Transition(
        time=now_iso,
        from_mode=old_target,
        to_mode=target,
        reason=reason,
        message=message,
        ratio=ratio,
    )


def _events(
    obs: Observation,
    decision: Decision,
    transition: Transition | None,
    evidence: Evidence,
    serving: Arm,
) -> tuple[EventSpec, ...]:
    events: list[EventSpec] = []
    if decision.command is not None:
        asked = f"{c.ANNOTATION_RETRY}={evidence.retry}: {decision.command}"
        events.append(EventSpec("Normal", "Retry", asked))
    if transition is not None:
        to_baseline = transition.to_mode == c.ARM_BASELINE
        kind: EventType = "Warning" if to_baseline and evidence.pin is None else "Normal"
        verb = "RolledBack" if to_baseline else "Repromoted"
        events.append(EventSpec(kind, verb, f"{transition.reason}: {transition.message}"))
    elif decision.trip is not None:
        # A guardrail that did not act (dry run, policy off): said once per window.
        if obs.window is not None:
            events.append(EventSpec("Warning", decision.trip.cause, decision.trip.message))
    elif decision.action == "notify" and decision.cause != "FlapLimit":
        # A change held by a flap stop is counted in the Halted condition, not posted: the
        # FlapLimit Event was posted once, when the changes stopped.
        detail = _why(decision, evidence, serving)
        kind = "Warning" if decision.warning else "Normal"
        events.append(EventSpec(kind, decision.cause, f"{decision.headline}: {detail}"))
    return tuple(events)


# -- status ------------------------------------------------------------------------------


def _status_after(
    obs: Observation,
    decision: Decision,
    state: PolicyState,
    transition: Transition | None,
    *,
    plan: SwapPlan,
    swap_since: float | None,
    load_match: LoadMatchAfter,
    settings: PolicySettings,
) -> Status:
    prev, spec = obs.status, obs.spec
    active = shadow_active(spec, obs.created, obs.now)
    share = mirror_share(
        shadow_ready=obs.arms[other_arm(plan.mode)].ready,
        serving_ready=obs.arms[plan.mode].ready,
        judging=active and not plan.swapping,
    )
    transitions = list(prev.transitions)
    if transition is not None:
        transitions = append_transition(transitions, transition)
    last_verdict = prev.last_verdict
    if obs.window is not None:
        judged = status_verdict(obs.window.verdict, rfc3339(obs.now), engines=obs.window.load,
                                decision=decision.reason)  # fmt: skip
        last_verdict = _keep_idle(prev, judged)
    return Status(
        observed_generation=obs.generation,
        mode=plan.mode,
        target_mode=decision.target,
        conditions=_conditions_after(
            obs, decision, plan, transitions, active, halted=_halted(obs, settings, state)
        ),
        last_verdict=last_verdict,
        transitions=transitions,
        arms=Arms(
            serving=_arm_status(obs, plan, plan.mode),
            shadow=_arm_status(obs, plan, other_arm(plan.mode)),
            mirror_share=0.0 if plan.swapping else share,
            swapping=plan.swapping,
            swap_since=None if swap_since is None else rfc3339(swap_since),
            load_match=load_match.rule,
        ),
        policy=state.to_wire(),
        clients=load_match.clients,
    )


def _arm_status(obs: Observation, plan: SwapPlan, arm: Arm) -> ArmStatus:
    return ArmStatus(
        arm=arm,
        deployment=c.arm_deployment_name(obs.name, arm),
        replicas=plan.replicas[arm],
        ready_replicas=obs.arms[arm].ready,
    )


def _conditions_after(
    obs: Observation,
    decision: Decision,
    plan: SwapPlan,
    transitions: Sequence[Transition],
    active: bool,
    *,
    halted: tuple[bool, str, str],
) -> list[Condition]:
    prev, spec, mode = obs.status, obs.spec, plan.mode
    conditions: list[Condition] = list(prev.conditions)
    now_iso = rfc3339(obs.now)

    def put(type_: str, value: bool | None, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = set_condition(
            conditions, type_, value, reason, message, generation=obs.generation, now=now_iso
        )

    put(c.CONDITION_SPEC_VALID, True, "Valid", "the spec passes every rule")
    # Ready: clients are served. During a swap the routers answer from the ready pods of
    # both arms, one pod short at most (the swap's bound); the swap is its own condition.
    ready = obs.arms[mode].ready
    if obs.apply_error is not None:
        put(c.CONDITION_READY, False, "ApplyFailed", obs.apply_error)
    elif plan.swapping:
        answering = {arm: obs.arms[arm].ready for arm in c.ARMS}
        total = sum(answering.values())
        each = ", ".join(f"{answering[arm]} {arm}" for arm in c.ARMS)
        message = f"{total} pods answer clients during the swap ({each}); {spec.replicas} serve"
        served = total >= max(1, spec.replicas - 1)
        put(c.CONDITION_READY, served, "Serving" if served else "PodsNotReady", message)
    elif ready >= spec.replicas:
        put(c.CONDITION_READY, True, "Serving", f"{ready}/{spec.replicas} {mode} pods ready")
    else:
        put(c.CONDITION_READY, False, "PodsNotReady", f"{ready}/{spec.replicas} {mode} pods ready")
    if plan.swapping:
        put(c.CONDITION_SWAPPING, True, "RollingSwap", f"{mode} → {decision.target}: {plan.reason}")
    else:
        put(c.CONDITION_SWAPPING, False, "Settled", f"{mode} serves; no swap running")

    if mode == c.ARM_SPECULATIVE:
        trip = decision.trip
        speculating = next((x for x in prev.conditions if x.type == c.CONDITION_SPECULATING), None)
        if obs.window is not None and trip is not None and trip.guardrail == "speculation":
            put(c.CONDITION_SPECULATING, False, trip.cause, trip.message)
        elif (
            obs.window is None
            and prev.mode == mode
            and speculating is not None
            and (speculating.status == "False")
        ):
            pass  # between windows, the last window's finding stands
        else:
            put(c.CONDITION_SPECULATING, True, "DrafterServing",
                f"the {spec.drafter.method} drafter arm serves clients")  # fmt: skip
        put(c.CONDITION_ROLLED_BACK, False, "DrafterServing", "")
    else:
        last = next((t for t in reversed(transitions) if t.to_mode == mode), None)
        reason = last.reason if last is not None else "Baseline"
        message = last.message if last is not None else "the drafter-off arm serves clients"
        put(c.CONDITION_SPECULATING, False, reason, "the drafter-off arm serves clients")
        put(c.CONDITION_ROLLED_BACK, True, reason, message)

    put(c.CONDITION_HALTED, *halted)
    swapping = plan.swapping or bool(prev.arms and prev.arms.swapping)
    put(c.CONDITION_EVALUATING, *_evaluating(spec, swapping, active, pinned_mode(obs.annotations)))

    window = obs.window
    if window is not None:
        put(c.CONDITION_JUDGE_DEGRADED, *_degraded(window, spec.evaluation.window))
    elif not any(x.type == c.CONDITION_JUDGE_DEGRADED for x in conditions):
        put(c.CONDITION_JUDGE_DEGRADED, None, "NoWindowYet", "no window judged yet")
    return conditions


def _evaluating(spec: Spec, swapping: bool, active: bool, pin: Arm | None) -> tuple[bool, str, str]:
    window = spec.evaluation.window
    if swapping:
        return False, "Swapping", "no judging while the arms swap"
    if not active:
        return False, "ShadowInactive", "periodic shadow: between active periods"
    if pin is not None:
        return True, "Pinned", f"judging every {window}s; mode pinned to {pin}"
    policy = spec.rollback.policy
    if policy == "off":
        return True, "MeasureOnly", f"judging every {window}s; rollback.policy off"
    if policy == "notify":
        return True, "DryRun", f"judging every {window}s; rollback.policy notify"
    return True, "Judging", f"judging every {window}s"


def _degraded(window: Window, window_s: int) -> tuple[bool, str, str]:
    if window.source_down is not None:
        return True, "SourceUnavailable", window.source_down
    verdict = window.verdict
    if not any(verdict.n.values()) and not any(verdict.requests.values()):
        return True, "NoSamples", f"no samples in the last window ({window_s}s)"
    return False, "SamplesFlowing", "samples from both arms arrive"


def _keep_idle(prev: Status, new: StatusVerdict) -> StatusVerdict:
    """An idle window (no samples on either arm) after an idle window changes nothing."""
    old = prev.last_verdict
    if old is None:
        return new
    idle = not (new.samples.speculative or new.samples.baseline)
    was_idle = not (old.samples.speculative or old.samples.baseline)
    if idle and was_idle and new.reason == old.reason:
        return old
    return new


def invalid_status(prev: Status, generation: int | None, message: str, now_iso: str) -> Status:
    """``prev`` with SpecValid False (naming the fields) and nothing else touched."""
    conditions = set_condition(
        prev.conditions, c.CONDITION_SPEC_VALID, False, "Invalid", message,
        generation=generation, now=now_iso,
    )  # fmt: skip
    return prev.model_copy(update={"conditions": conditions})


__all__ = [
    "Disturbance",
    "EventSpec",
    "Observation",
    "Outcome",
    "Window",
    "current_target",
    "decide",
    "gather",
    "invalid_status",
    "judging",
    "paused",
    "pinned_mode",
    "pods_changed",
    "policy_state",
    "window_spans",
]
