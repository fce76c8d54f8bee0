"""The decision policy: one pure step from the stored state and one window's evidence to the
new state and a decision. Plain data in, plain data out; the operator stores
``PolicyState.to_wire()`` in ``status.policy`` and carries out the ``Decision`` (or, in dry
run, only reports it).

    state, decision = step(state, settings, now, Evidence(verdict=..., startup=..., ...))

Rules (defaults in ``PolicySettings``):

- A new ``retry`` value (the user's ``specguard.io/retry`` annotation) is a command: from
  baseline it re-promotes at once; from speculative it clears a flap stop and the streak.
- A ``pin`` (``specguard.io/pin-mode``) holds everything else: nothing is judged or acted
  on, the memory is kept, and the decision's ``target`` is the pin.
- Guardrails (``judge._guardrails``) act at once while the drafter serves, even when halted.
  With ``policy="notify"`` they are reported as a dry run, with ``policy="off"`` only
  reported.
- Between windows (no verdict) nothing else happens: the streak is neither counted nor
  broken.
- Roll back (drafter → no drafter) after ``consecutive_windows`` (K) regressed verdicts in a
  row while the drafter serves. Any other verdict — improved, neutral or inconclusive (an
  idle window, a source that is down) — resets the count: missing data is never evidence of
  a regression, and a streak interrupted by an idle window starts again.
- Re-promote (no drafter → drafter) only with stricter evidence: ``repromote_windows``
  (default K + 1) improved verdicts in a row, every one of them from a window that ended
  after the cooldown (``cooldown_s`` since the last mode change) and judged at a confidence
  of at least ``repromote_confidence`` (default: any). Not while the drafter arm's error rate
  is far above the baseline's, nor while its tool calls are confidently more often invalid
  (the tool-call guardrail's test, on the shadow's pairs). With ``repromote="manual"``
  the policy only notifies that it would.
- Flaps: every automatic mode change is a flap. After ``max_flaps`` of them within
  ``flap_window_s``, automatic changes stop (``halted``; decisions become ``notify`` with
  ``warning``) until a ``retry``.
- ``policy="notify"`` is a dry run: same bookkeeping, but a would-be change is reported as
  ``notify`` ("would roll back: ...") and the mode stays. ``policy="off"`` does nothing.

Extending it: new evidence is a field of ``Evidence``; new memory a field of
``PolicyState`` (with its wire name in ``_WIRE``, and a default so that a status written
before it still loads); a new guardrail a function in ``judge._guardrails.GUARDRAILS``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from specguard._arms import ARM_BASELINE, ARM_SPECULATIVE, ARMS, Arm
from specguard.judge._evidence import Evidence
from specguard.judge._guardrails import Trip, error_rate_exceeded, first_trip, tool_call_excess
from specguard.judge._settings import PolicySettings
from specguard.judge._verdict import Verdict

Action = Literal["hold", "rollback", "repromote", "notify"]
Command = Literal["repromote", "reset"]

# status.policy.flapTimes keeps only the most recent automatic changes.
MAX_TRANSITIONS_KEPT = 32


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What the policy remembers between windows: the one stored type (``status.policy``,
    through :meth:`to_wire` / :meth:`from_wire`), so a restarted or newly elected operator
    continues where the last one stopped.

    ``mode``: the mode the policy chose (a pin can override it); ``streak`` and
    ``streak_outcome``: agreeing verdicts in a row; ``since``: Unix time of the last mode
    change (the cooldown's start); ``flap_times``: Unix times of the automatic changes;
    ``halted``: automatic changes stopped after flaps; ``retry_seen``: the retry value
    already acted on."""

    mode: Arm = ARM_SPECULATIVE
    streak: int = 0
    streak_outcome: str | None = None
    since: float | None = None
    flap_times: tuple[float, ...] = ()
    halted: bool = False
    retry_seen: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """camelCase, as ``status.policy`` stores it; None fields left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[_WIRE[f.name]] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> PolicyState:
        """The state ``to_wire`` stored. ValueError names a field that is wrong; unknown
        keys are ignored (a newer operator's memory)."""
        if not isinstance(data, Mapping):
            raise ValueError("policy: expected an object")
        values: dict[str, Any] = {}
        for name, key in _WIRE.items():
            if key in data and data[key] is not None:
                values[name] = _PARSE[name](key, data[key])
        return cls(**values)


_WIRE: Mapping[str, str] = {
    "mode": "mode",
    "streak": "streak",
    "streak_outcome": "streakOutcome",
    "since": "since",
    "flap_times": "flapTimes",
    "halted": "halted",
    "retry_seen": "retrySeen",
}


def _mode(key: str, value: Any) -> Arm:
    for arm in ARMS:
        if value == arm:
            return arm
    raise ValueError(f"{key}: expected speculative or baseline, got {value!r}")


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key}: expected a whole number >= 0, got {value!r}")
    return int(value)


def _time(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key}: expected a Unix time, got {value!r}")
    return float(value)


def _times(key: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{key}: expected a list of Unix times, got {value!r}")
    return tuple(_time(key, v) for v in value)[-MAX_TRANSITIONS_KEPT:]


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    return value


_PARSE: Mapping[str, Any] = {
    "mode": _mode,
    "streak": _count,
    "streak_outcome": _text,
    "since": _time,
    "flap_times": _times,
    "halted": _flag,
    "retry_seen": _text,
}


@dataclass(frozen=True, slots=True)
class Decision:
    """What one step decided.

    ``action``: hold, rollback, repromote, or notify (a change reported, not made: dry run,
    halted, manual re-promotion). ``mode``: the policy's mode after the step; ``target``:
    the mode that should serve (the pin, else ``mode``). ``cause``: one CamelCase word for
    Events, transitions and conditions (``Regressed``, ``Improved``, ``Retry``, a
    guardrail's cause, ``WouldRollBack``, ``WouldRepromote``, ``FlapLimit``, ``Pinned``,
    ``Hold``). ``reason``: one sentence. ``trip``: the guardrail that tripped, acted on or
    not. ``command``: what a new retry value asked for."""

    action: Action
    reason: str
    mode: Arm
    target: Arm
    cause: str = "Hold"
    warning: bool = False
    trip: Trip | None = None
    command: Command | None = None
    flaps: int = 0

    @property
    def guardrail(self) -> bool:
        """Did a guardrail (not the statistics) cause this decision?"""
        return self.trip is not None and self.action != "hold"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def flaps(state: PolicyState, settings: PolicySettings, now: float) -> int:
    return sum(1 for t in state.flap_times if now - t < settings.flap_window_s)


def change_mode(state: PolicyState, to: Arm, now: float) -> PolicyState:
    """``state`` after a change of mode at ``now``: a new streak, and ``now`` in the flap
    history (the last :data:`MAX_TRANSITIONS_KEPT`)."""
    kept = (*state.flap_times, now)[-MAX_TRANSITIONS_KEPT:]
    return replace(state, mode=to, streak=0, streak_outcome=None, since=now, flap_times=kept)


def step(
    state: PolicyState, settings: PolicySettings, now: float, evidence: Evidence
) -> tuple[PolicyState, Decision]:
    """One decision: the stored state and this tick's evidence → the new state, the decision."""
    command: Command | None = None
    if evidence.retry is not None and evidence.retry != state.retry_seen:
        command = "repromote" if state.mode == ARM_BASELINE else "reset"
        state = replace(state, retry_seen=evidence.retry, halted=False, flap_times=())
        state = replace(state, streak=0, streak_outcome=None)
    pin = evidence.pin
    if command == "repromote":
        state = replace(state, mode=ARM_SPECULATIVE, since=now)
        decision = Decision("repromote", "manual re-promotion", ARM_SPECULATIVE,
                            pin or ARM_SPECULATIVE, "Retry", command=command)  # fmt: skip
        return state, decision
    if pin is not None:
        return state, Decision("hold", f"pinned to {pin}", state.mode, pin, "Pinned",
                               command=command)  # fmt: skip
    state, decision = _judged(state, settings, now, evidence)
    return state, replace(decision, command=command)


def _judged(
    state: PolicyState, settings: PolicySettings, now: float, evidence: Evidence
) -> tuple[PolicyState, Decision]:
    trip = first_trip(evidence, settings, now) if state.mode == ARM_SPECULATIVE else None
    if settings.policy == "off":
        return state, _hold(state, "policy off", settings, now, trip=trip)
    if trip is not None:
        return _act(state, settings, now, ARM_BASELINE, f"guardrail: {trip.message}", trip=trip)
    verdict = evidence.verdict
    if verdict is None:
        return state, _hold(state, "no window ended", settings, now)
    if verdict.outcome == "inconclusive":
        why = "; ".join(verdict.reasons) or "inconclusive"
        reset = replace(state, streak=0, streak_outcome=None)
        return reset, _hold(reset, f"inconclusive, holding {state.mode}: {why}", settings, now)
    if state.mode == ARM_SPECULATIVE:
        return _while_speculative(state, settings, now, verdict)
    return _while_baseline(state, settings, now, evidence, verdict)


def _act(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    to: Arm,
    reason: str,
    *,
    trip: Trip | None = None,
) -> tuple[PolicyState, Decision]:
    """Carry out (or, in dry run / halted, only report) a change of mode."""
    verb = "roll back" if to == ARM_BASELINE else "re-promote"
    would = "WouldRollBack" if to == ARM_BASELINE else "WouldRepromote"
    count = flaps(state, settings, now)
    if settings.policy == "notify":
        reset = replace(state, streak=0, streak_outcome=None)
        cause = trip.cause if trip is not None else would
        return reset, Decision("notify", f"would {verb} (dry run): {reason}", state.mode,
                               state.mode, cause, trip=trip, flaps=count)  # fmt: skip
    if state.halted and trip is None:
        reset = replace(state, streak=0, streak_outcome=None)
        return reset, Decision(
            "notify",
            f"would {verb}, but automatic changes are stopped after "
            f"{settings.max_flaps} flaps: {reason}",
            state.mode,
            state.mode,
            "FlapLimit",
            warning=True,
            flaps=count,
        )
    new = change_mode(state, to, now)
    count = flaps(new, settings, now)
    warning = trip is not None
    if count >= settings.max_flaps:
        new = replace(new, halted=True)
        warning = True
        reason += f"; {count} flaps within {settings.flap_window_s:.0f}s: automatic changes stop"
    action: Action = "rollback" if to == ARM_BASELINE else "repromote"
    cause = trip.cause if trip is not None else ("Regressed" if to == ARM_BASELINE else "Improved")
    return new, Decision(action, reason, to, to, cause, warning=warning, trip=trip, flaps=count)


def _hold(
    state: PolicyState,
    reason: str,
    settings: PolicySettings,
    now: float,
    *,
    trip: Trip | None = None,
) -> Decision:
    return Decision("hold", reason, state.mode, state.mode, "Hold", warning=state.halted,
                    trip=trip, flaps=flaps(state, settings, now))  # fmt: skip


def _while_speculative(
    state: PolicyState, settings: PolicySettings, now: float, verdict: Verdict
) -> tuple[PolicyState, Decision]:
    if verdict.outcome != "regressed":
        reset = replace(state, streak=0, streak_outcome=verdict.outcome)
        return reset, _hold(reset, f"{verdict.outcome}: keeping the drafter", settings, now)
    streak = state.streak + 1
    counted = replace(state, streak=streak, streak_outcome="regressed")
    need = settings.consecutive_windows
    if streak < need:
        reason = f"regressed {streak}/{need} windows: {verdict.sentence()}"
        return counted, _hold(counted, reason, settings, now)
    reason = f"regressed {streak} windows in a row: {verdict.sentence()}"
    return _act(counted, settings, now, ARM_BASELINE, reason)


def _while_baseline(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    evidence: Evidence,
    verdict: Verdict,
) -> tuple[PolicyState, Decision]:
    if verdict.outcome != "improved":
        reset = replace(state, streak=0, streak_outcome=verdict.outcome)
        return reset, _hold(reset, f"{verdict.outcome}: staying without the drafter", settings, now)
    cooldown_ends = (-math.inf if state.since is None else state.since) + settings.cooldown_s
    if now < cooldown_ends:
        reset = replace(state, streak=0, streak_outcome="improved")
        reason = f"improved, but in cooldown for another {cooldown_ends - now:.0f}s"
        return reset, _hold(reset, reason, settings, now)
    floor = settings.repromote_confidence
    if floor is not None and verdict.confidence < floor:
        reset = replace(state, streak=0, streak_outcome="improved")
        reason = f"improved at {verdict.confidence:.1%}, re-promotion needs {floor:.1%}"
        return reset, _hold(reset, reason, settings, now)
    errors = error_rate_exceeded(evidence.errors, settings) or tool_call_excess(evidence, settings)
    if errors:
        reset = replace(state, streak=0, streak_outcome="improved")
        return reset, _hold(reset, f"improved, but {errors}", settings, now)
    streak = state.streak + 1
    counted = replace(state, streak=streak, streak_outcome="improved")
    need = settings.windows_to_repromote
    if streak < need:
        reason = f"improved {streak}/{need} windows: {verdict.sentence()}"
        return counted, _hold(counted, reason, settings, now)
    reason = f"improved {streak} windows in a row after cooldown: {verdict.sentence()}"
    if settings.repromote == "manual":
        reset = replace(counted, streak=0)
        return reset, Decision(
            "notify",
            f"would re-promote (repromote is manual): {reason}",
            state.mode,
            state.mode,
            "WouldRepromote",
            flaps=flaps(state, settings, now),
        )
    return _act(counted, settings, now, ARM_SPECULATIVE, reason)


__all__ = [
    "MAX_TRANSITIONS_KEPT",
    "Action",
    "Command",
    "Decision",
    "PolicyState",
    "change_mode",
    "flaps",
    "step",
]
