"""One decision: evidence (a window's verdict, the drafter's startup, annotations) → the
target mode, the policy's memory, and the Events to post. Then the status that results.

Pure. The operator calls :func:`decide` at every window end with the window's verdict, and
between windows (verdict None) so that the startup guardrail, pins and retries act at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from specguard.api import (
    Arms,
    ArmStatus,
    Condition,
    PolicyMemory,
    Spec,
    Status,
    StatusVerdict,
    Transition,
    append_transition,
)
from specguard.api import constants as c
from specguard.api.constants import Arm
from specguard.controller._conditions import set_condition, verdict_sentence
from specguard.controller._observe import DrafterStartup
from specguard.controller._settings import policy_settings
from specguard.controller._swap import ArmObserved, SwapPlan, other
from specguard.judge import (
    Command,
    Decision,
    Guardrails,
    PolicyState,
    Verdict,
    change_mode,
    error_guardrail,
    startup_guardrail,
    step,
)

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class EventSpec:
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Decided:
    target: Arm
    memory: PolicyMemory
    transition: Transition | None = None
    decision: Decision | None = None
    events: tuple[EventSpec, ...] = field(default=())


def pinned_mode(annotations: Mapping[str, str]) -> Arm | None:
    value = annotations.get(c.ANNOTATION_PIN_MODE, "").strip()
    if value == c.ARM_SPECULATIVE:
        return c.ARM_SPECULATIVE
    if value == c.ARM_BASELINE:
        return c.ARM_BASELINE
    return None


def current_target(status: Status) -> Arm:
    return status.target_mode or status.mode or c.ARM_SPECULATIVE


def policy_state(memory: PolicyMemory | None, fallback: Arm) -> PolicyState:
    m = memory or PolicyMemory()
    return PolicyState(
        mode=m.mode or fallback,
        streak=m.streak,
        streak_outcome=m.streak_outcome,
        since=m.since,
        transitions=tuple(m.flap_times),
        halted=m.halted,
    )


def _memory(state: PolicyState, old: PolicyMemory, retry_seen: str | None) -> PolicyMemory:
    return old.model_copy(
        update={
            "mode": state.mode,
            "streak": state.streak,
            "streak_outcome": state.streak_outcome,
            "since": state.since,
            "flap_times": list(state.transitions),
            "halted": state.halted,
            "retry_seen": retry_seen,
        }
    )


def decide(
    *,
    spec: Spec,
    status: Status,
    annotations: Mapping[str, str],
    verdict: Verdict | None,
    startup: DrafterStartup,
    now: float,
    now_iso: str,
    speculation: tuple[str, str] | None = None,
) -> Decided:
    """The target mode after this evidence. ``verdict`` None: no window ended now.
    ``speculation``: the drafter-arm check of this window (``speculation.py``), if tripped."""
    old_target = current_target(status)
    memory = status.policy or PolicyMemory(mode=old_target)
    state = policy_state(memory, old_target)
    settings = policy_settings(spec)
    events: list[EventSpec] = []

    retry = annotations.get(c.ANNOTATION_RETRY)
    command: Command | None = None
    if retry is not None and retry != memory.retry_seen:
        command = "repromote" if state.mode == c.ARM_BASELINE else "reset"
        events.append(EventSpec("Normal", "Retry", f"{c.ANNOTATION_RETRY}={retry}: {command}"))
    pin = pinned_mode(annotations)

    if verdict is not None:
        g = Guardrails.from_verdict(
            verdict, drafter_ready=startup.ready, drafter_since=startup.since
        )
    else:
        g = Guardrails(drafter_ready=startup.ready, drafter_since=startup.since)
    startup_trip = startup_guardrail(g, settings, now) if state.mode == c.ARM_SPECULATIVE else None
    error_trip = error_guardrail(g, settings) if state.mode == c.ARM_SPECULATIVE else None

    decision: Decision | None = None
    if command is not None or (pin is None and (verdict is not None or startup_trip)):
        state, decision = step(
            state,
            settings,
            now,
            verdict=verdict if pin is None else None,
            guardrails=g if pin is None else None,
            command=command,
        )
    spec_trip = speculation if state.mode == c.ARM_SPECULATIVE and pin is None else None
    if spec_trip is not None and command is None and settings.policy == "auto":
        # A drafter that does not speculate counts as a failed drafter: baseline at once.
        state = change_mode(state, c.ARM_BASELINE, now)
    new_memory = _memory(state, memory, retry if retry is not None else memory.retry_seen)
    target: Arm = pin or state.mode

    transition = None
    if target != old_target:
        reason, message = spec_trip or _why(
            pin, decision, startup_trip, error_trip, command, verdict
        )
        transition = Transition(
            time=now_iso,
            from_mode=old_target,
            to_mode=target,
            reason=reason,
            message=message,
            ratio=None if verdict is None else verdict.ratio,
        )
        kind: EventType = "Warning" if target == c.ARM_BASELINE and pin is None else "Normal"
        verb = "RolledBack" if target == c.ARM_BASELINE else "Repromoted"
        events.append(EventSpec(kind, verb, f"{reason}: {message}"))
    elif spec_trip is not None:
        events.append(EventSpec("Warning", spec_trip[0], spec_trip[1]))
    elif decision is not None and decision.action == "notify":
        would = "WouldRollBack" if state.mode == c.ARM_SPECULATIVE else "WouldRepromote"
        detail = verdict_sentence(verdict) if verdict is not None else decision.reason
        kind = "Warning" if decision.warning else "Normal"
        reason = "FlapLimit" if decision.warning else would
        events.append(EventSpec(kind, reason, f"{decision.reason.split(':')[0]}: {detail}"))
    return Decided(target, new_memory, transition, decision, tuple(events))


def _why(  # noqa: PLR0917 - one private call site
    pin: Arm | None,
    decision: Decision | None,
    startup_trip: str | None,
    error_trip: str | None,
    command: Command | None,
    verdict: Verdict | None,
) -> tuple[str, str]:
    if pin is not None:
        return "Pinned", f"{c.ANNOTATION_PIN_MODE}={pin}"
    if decision is None:
        return "Unpinned", f"{c.ANNOTATION_PIN_MODE} removed"
    if decision.guardrail and startup_trip:
        return "DrafterStartupFailed", startup_trip
    if decision.guardrail and error_trip:
        return "DrafterErrors", error_trip
    if command == "repromote":
        return "Retry", f"{c.ANNOTATION_RETRY}: manual re-promotion"
    sentence = verdict_sentence(verdict) if verdict is not None else decision.reason
    if decision.action == "rollback":
        return "Regressed", sentence
    return "Improved", sentence


def arms_status(
    name: str,
    *,
    mode: Arm,
    replicas: Mapping[str, int],
    observed: Mapping[str, ArmObserved],
    share: float,
    swapping: bool,
) -> Arms:
    shadow = other(mode)

    def one(arm: Arm) -> ArmStatus:
        return ArmStatus(
            arm=arm,
            deployment=c.arm_deployment_name(name, arm),
            replicas=replicas[arm],
            ready_replicas=observed[arm].ready,
        )

    return Arms(
        serving=one(mode),
        shadow=one(shadow),
        mirror_share=0.0 if swapping else share,
        swapping=swapping,
    )


@dataclass(frozen=True, slots=True)
class Evaluating:
    status: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Degraded:
    status: bool
    reason: str
    message: str


def build_status(
    prev: Status,
    *,
    name: str,
    spec: Spec,
    generation: int | None,
    plan: SwapPlan,
    target: Arm,
    observed: Mapping[str, ArmObserved],
    share: float,
    memory: PolicyMemory,
    transition: Transition | None,
    last_verdict: StatusVerdict | None,
    evaluating: Evaluating,
    degraded: Degraded | None,
    now_iso: str,
    speculation: tuple[str, str] | None = None,
    apply_error: str | None = None,
) -> Status:
    """The whole status after this tick (``degraded`` None keeps the previous condition;
    ``apply_error``: an owned object the API server refused, shown in Ready)."""
    mode = plan.mode
    conditions: list[Condition] = list(prev.conditions)

    def put(type_: str, value: bool | None, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = set_condition(
            conditions, type_, value, reason, message, generation=generation, now=now_iso
        )

    transitions = list(prev.transitions)
    if transition is not None:
        transitions = append_transition(transitions, transition)
    put(c.CONDITION_SPEC_VALID, True, "Valid", "the spec passes every rule")
    ready = observed[mode].ready
    if apply_error is not None:
        put(c.CONDITION_READY, False, "ApplyFailed", apply_error)
    elif plan.swapping:
        put(c.CONDITION_READY, False, "Swapping", f"{mode} → {target}: {plan.reason}")
    elif ready >= spec.replicas:
        put(c.CONDITION_READY, True, "Serving", f"{ready}/{spec.replicas} {mode} pods ready")
    else:
        put(c.CONDITION_READY, False, "PodsNotReady", f"{ready}/{spec.replicas} {mode} pods ready")
    last = next((t for t in reversed(transitions) if t.to_mode == mode), None)
    if mode == c.ARM_SPECULATIVE and speculation is not None:
        put(c.CONDITION_SPECULATING, False, speculation[0], speculation[1])
        put(c.CONDITION_ROLLED_BACK, False, "DrafterServing", "")
    elif mode == c.ARM_SPECULATIVE:
        put(
            c.CONDITION_SPECULATING,
            True,
            "DrafterServing",
            f"the {spec.drafter.method} drafter arm serves clients",
        )
        put(c.CONDITION_ROLLED_BACK, False, "DrafterServing", "")
    else:
        reason = last.reason if last is not None else "Baseline"
        message = last.message if last is not None else "the drafter-off arm serves clients"
        put(c.CONDITION_SPECULATING, False, reason, "the drafter-off arm serves clients")
        put(c.CONDITION_ROLLED_BACK, True, reason, message)
    put(c.CONDITION_EVALUATING, evaluating.status, evaluating.reason, evaluating.message)
    if degraded is not None:
        put(c.CONDITION_JUDGE_DEGRADED, degraded.status, degraded.reason, degraded.message)
    elif not any(x.type == c.CONDITION_JUDGE_DEGRADED for x in conditions):
        put(c.CONDITION_JUDGE_DEGRADED, None, "NoWindowYet", "no window judged yet")
    return Status(
        observed_generation=generation,
        mode=mode,
        target_mode=target,
        conditions=conditions,
        last_verdict=last_verdict,
        transitions=transitions,
        arms=arms_status(
            name,
            mode=mode,
            replicas=plan.replicas,
            observed=observed,
            share=share,
            swapping=plan.swapping,
        ),
        policy=memory,
    )


def invalid_status(prev: Status, generation: int | None, message: str, now_iso: str) -> Status:
    """``prev`` with SpecValid False (naming the fields) and nothing else touched."""
    conditions = set_condition(
        prev.conditions,
        c.CONDITION_SPEC_VALID,
        False,
        "Invalid",
        message,
        generation=generation,
        now=now_iso,
    )
    return prev.model_copy(update={"conditions": conditions})
