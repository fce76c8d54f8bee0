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
- K windows of evidence (K = ``consecutive_windows``). Roll back (drafter → no drafter)
  after K regressed verdicts in a row while the drafter serves, or when the cumulative
  evidence of a loss (``judge._cumulative``: a CUSUM of each window's log-likelihood ratio,
  at most 1/K of its threshold per window) reaches ``ln(windows_per_false_alarm)``. A window
  that is not regressed breaks the streak; one that brings no evidence — inconclusive (an
  idle window, a source that is down) or spanning a swap, an operator restart or a change
  in the pods (``Evidence.spans``) — breaks the streak and adds nothing to the cumulative
  evidence, and K of them in a row clear it: missing data is never evidence of a loss.
- Guards beside the median (``judge._guards``: p99 per-token latency, TTFT p50 and p99,
  end-to-end p99 on the window's pairs): a window with a confidently regressed guard counts
  as regressed toward the streak (the cause names the guard when the median alone would
  not have counted it); the cumulative evidence stays the median's. While the baseline
  serves, such a window holds a re-promotion and clears the evidence toward it.
- Re-promote (no drafter → drafter) only with stricter evidence: ``repromote_windows``
  (default K + 1) improved verdicts in a row, or the mirror image of the cumulative rule
  with a budget ``GAIN_STRICTNESS`` times smaller and as many windows at least; only windows
  that ended after the cooldown (``cooldown_s`` since the last mode change), judged at a
  confidence of at least ``repromote_confidence`` (default: any), count. Not while the
  drafter arm's error rate is far above the baseline's (that clears the evidence), nor
  while its tool calls are confidently more often invalid (the tool-call guardrail's test,
  on the shadow's pairs), nor while its engines fall behind arrivals the baseline keeps up
  with (the overload guardrail's test, the drafter as the shadow). With
  ``repromote="manual"`` the policy only notifies that it would.
- Which windows count (``judge._matching``): a window's verdict counts only where its
  direction does not depend on the clients' kind (under ``in_flight`` copies: clients told
  closed, or a shadow whose end-to-end times agree with its per-token verdict and, when it
  is the drafter, faster; under ``arrivals`` copies: clients told open by the window).
  Otherwise it brings no evidence either way, and the hold says why.
- What the clients got (``judge._served``): the serving arm's figures of every counted
  window are remembered per load (``PolicyState.served``); a statistical change toward an
  arm whose own record at a comparable load shows the clients were slower with it than they
  are now (or its engines fell behind there) is held, and the hold says why.
- Flaps (``judge._flaps``): each automatic change is kept with the traffic its window was
  judged on; one decided on the same traffic as the change before it continues a run of
  changes back and forth, one decided on other traffic starts a new run. When a run holds
  ``max_flaps`` changes within ``flap_window_s``, automatic changes stop (``halted``; a
  would-be change becomes ``notify`` with ``warning``, and is counted in ``held``) until a
  ``retry``. Changes that follow the traffic never stop anything.
- ``policy="notify"`` is a dry run: same bookkeeping, but a would-be change is reported as
  ``notify`` ("would roll back: ...") and the mode stays. ``policy="off"`` does nothing.

Extending it: new evidence is a field of ``Evidence``; new memory a field of
``PolicyState`` (in ``to_wire`` and ``from_wire``, with a default so that a status written
before it still loads); a new guardrail a function in ``judge._guardrails.GUARDRAILS``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from specguard._arms import ARM_BASELINE, ARM_SPECULATIVE, ARMS, Arm, other_arm
from specguard._times import parse_time, rfc3339
from specguard.judge._cumulative import Cumulative, Direction, add, evidence_summary, reached, weigh
from specguard.judge._evidence import Evidence
from specguard.judge._flaps import Traffic, same_traffic, traffic_of
from specguard.judge._guardrails import (
    Trip,
    error_rate_exceeded,
    first_trip,
    overload_excess,
    tool_call_excess,
)
from specguard.judge._matching import uncounted
from specguard.judge._served import Served, contradiction, fell_behind, remember
from specguard.judge._settings import PolicySettings
from specguard.judge._verdict import Verdict

Action = Literal["hold", "rollback", "repromote", "notify"]
Command = Literal["repromote", "reset"]

# status.policy.flapTimes keeps only the most recent automatic changes.
MAX_TRANSITIONS_KEPT = 32


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What the policy remembers between windows, stored in ``status.policy`` through
    :meth:`to_wire` / :meth:`from_wire` (the ladder and routing keep their own memories,
    ``status.ladder`` and ``status.routing``), so a restarted or newly elected operator
    continues where the last one stopped.

    ``mode``: the mode the policy chose (a pin can override it); ``streak``: agreeing
    verdicts in a row toward the other mode (regressed while the drafter serves, improved
    while it does not); ``cumulative``: the evidence across windows toward the other mode;
    ``since``: Unix time of the last mode change (the cooldown's start); ``flap_times``:
    Unix times of the automatic changes of the current run (changes back and forth on the
    same traffic, ``judge._flaps``); ``flap_traffic``: the traffic the last automatic change
    was decided on (None: unknown); ``halted``: automatic changes stopped after flaps;
    ``held``: the changes the windows asked for since then, not made; ``retry_seen``: the
    retry value already acted on; ``served``: what each arm gave the clients when it
    served, per load (``judge._served``)."""

    mode: Arm = ARM_SPECULATIVE
    streak: int = 0
    cumulative: Cumulative = field(default_factory=Cumulative)
    since: float | None = None
    flap_times: tuple[float, ...] = ()
    halted: bool = False
    retry_seen: str | None = None
    flap_traffic: Traffic | None = None
    held: int = 0
    served: tuple[Served, ...] = ()

    @property
    def direction(self) -> Direction:
        """The change the evidence is for: a loss while the drafter serves, else a gain."""
        return "loss" if self.mode == ARM_SPECULATIVE else "gain"

    def to_wire(self) -> dict[str, Any]:
        """camelCase, as ``status.policy`` stores it: times in RFC 3339, the evidence toward
        the other mode in one object (left out when there is none)."""
        out: dict[str, Any] = {"mode": self.mode}
        if self.since is not None:
            out["lastChange"] = rfc3339(self.since)
        out["flapTimes"] = [rfc3339(t) for t in self.flap_times]
        if self.flap_traffic is not None:
            out["flapTraffic"] = self.flap_traffic.to_wire()
        out["halted"] = self.halted
        if self.held:
            out["held"] = self.held
        if self.retry_seen is not None:
            out["retrySeen"] = self.retry_seen
        c = self.cumulative
        if self.streak or not c.empty:
            evidence: dict[str, Any] = {"toward": other_arm(self.mode), "inARow": self.streak}
            if not c.empty:
                evidence.update(cumulative=round(c.total, 4), windows=c.windows, gap=c.gap)
            ratio = c.ratio()
            if ratio is not None:
                evidence.update(ratio=round(ratio, 6), weight=round(c.weight, 1))
            if c.pods > 0:
                evidence.update(podVariance=float(f"{c.pods:.4g}"), edge=round(c.edge, 6))
            out["evidence"] = evidence
        if self.served:
            out["served"] = [record.to_wire() for record in self.served]
        return out

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> PolicyState:
        """The state ``to_wire`` stored, or that an operator before this one stored (Unix
        times in ``since`` and ``flapTimes``, ``streak`` and ``streakOutcome``). ValueError
        names a field that is wrong; unknown keys are ignored (a newer operator's memory)."""
        if not isinstance(data, Mapping):
            raise ValueError("policy: expected an object")
        mode = _mode("mode", data.get("mode", ARM_SPECULATIVE))
        values: dict[str, Any] = {"mode": mode}
        if data.get("lastChange") is not None:
            values["since"] = _time("lastChange", data["lastChange"])
        elif data.get("since") is not None:
            values["since"] = _time("since", data["since"])
        if data.get("flapTimes") is not None:
            values["flap_times"] = _times("flapTimes", data["flapTimes"])
        if data.get("flapTraffic") is not None:
            values["flap_traffic"] = Traffic.from_wire(data["flapTraffic"])
        if data.get("halted") is not None:
            values["halted"] = _flag("halted", data["halted"])
        if data.get("held") is not None:
            values["held"] = _count("held", data["held"])
        if data.get("retrySeen") is not None:
            values["retry_seen"] = _text("retrySeen", data["retrySeen"])
        if data.get("evidence") is not None:
            values.update(_evidence(data["evidence"], mode))
        if data.get("served") is not None:
            served = data["served"]
            if not isinstance(served, list):
                raise ValueError(f"served: expected a list, got {served!r}")
            values["served"] = tuple(
                Served.from_wire(record, f"served[{i}]") for i, record in enumerate(served)
            )
        elif data.get("streak") is not None:  # before the evidence object
            agreeing = "regressed" if mode == ARM_SPECULATIVE else "improved"
            streak = _count("streak", data["streak"])
            if data.get("streakOutcome") == agreeing:
                values["streak"] = streak
        return cls(**values)


def _evidence(data: Any, mode: Arm) -> dict[str, Any]:
    key = "evidence"
    if not isinstance(data, Mapping):
        raise ValueError(f"{key}: expected an object, got {data!r}")
    if data.get("toward", other_arm(mode)) != other_arm(mode):
        return {}  # evidence toward the mode in effect: from before a change, none now
    total = _number(f"{key}.cumulative", data.get("cumulative", 0.0))
    weight = _number(f"{key}.weight", data.get("weight", 0.0))
    ratio = _number(f"{key}.ratio", data.get("ratio", 1.0))
    if ratio <= 0:
        raise ValueError(f"{key}.ratio: expected a number > 0, got {ratio!r}")
    cumulative = Cumulative(
        total=total,
        windows=_count(f"{key}.windows", data.get("windows", 0)),
        gap=_count(f"{key}.gap", data.get("gap", 0)),
        weighted=math.log(ratio) * weight,
        weight=weight,
        pods=_number(f"{key}.podVariance", data.get("podVariance", 0.0)),
        edge=_number(f"{key}.edge", data.get("edge", 0.0)),
    )
    return {"streak": _count(f"{key}.inARow", data.get("inARow", 0)), "cumulative": cumulative}


def _mode(key: str, value: Any) -> Arm:
    for arm in ARMS:
        if value == arm:
            return arm
    raise ValueError(f"{key}: expected speculative or baseline, got {value!r}")


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key}: expected a whole number >= 0, got {value!r}")
    return int(value)


def _number(key: str, value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise ValueError(f"{key}: expected a number >= 0, got {value!r}")
    return float(value)


def _time(key: str, value: Any) -> float:
    """An RFC 3339 time, or Unix seconds (an operator before this one wrote those)."""
    if isinstance(value, str):
        parsed = parse_time(value)
        if parsed is not None:
            return parsed
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise ValueError(f"{key}: expected an RFC 3339 time, got {value!r}")


def _times(key: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{key}: expected a list of RFC 3339 times, got {value!r}")
    return tuple(_time(key, v) for v in value)[-MAX_TRANSITIONS_KEPT:]


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Decision:
    """What one step decided.

    ``action``: hold, rollback, repromote, or notify (a change reported, not made: dry run,
    halted, manual re-promotion). ``mode``: the policy's mode after the step; ``target``:
    the mode that should serve (the pin, else ``mode``). ``cause``: one CamelCase word for
    Events, transitions and conditions (``Regressed``, ``Improved``, ``Retry``, a
    guardrail's cause, ``WouldRollBack``, ``WouldRepromote``, ``FlapLimit``, ``Pinned``,
    ``Hold``). ``reason``: one sentence. ``trip``: the guardrail that tripped, acted on or
    not. ``command``: what a new retry value asked for. ``cumulative``: the evidence across
    windows when it (not K windows in a row) made the change, or would have."""

    action: Action
    reason: str
    mode: Arm
    target: Arm
    cause: str = "Hold"
    warning: bool = False
    trip: Trip | None = None
    command: Command | None = None
    flaps: int = 0
    cumulative: Cumulative | None = None

    @property
    def guardrail(self) -> bool:
        """Did a guardrail (not the statistics) cause this decision?"""
        return self.trip is not None and self.action != "hold"

    @property
    def headline(self) -> str:
        """The reason up to its first colon: what was decided, without the figures behind
        it (e.g. "would roll back (dry run)")."""
        return self.reason.split(":")[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def flaps(state: PolicyState, settings: PolicySettings, now: float) -> int:
    """The changes back and forth on the same traffic within the flap window."""
    return sum(1 for t in state.flap_times if now - t < settings.flap_window_s)


def change_mode(
    state: PolicyState, to: Arm, now: float, traffic: Traffic | None = None
) -> PolicyState:
    """``state`` after a change of mode at ``now``, decided on ``traffic``: no evidence yet
    toward the next change, and ``now`` in the run of changes back and forth when the last
    change was decided on the same traffic, else the start of a new run (the last
    :data:`MAX_TRANSITIONS_KEPT`)."""
    run = state.flap_times if same_traffic(state.flap_traffic, traffic) else ()
    kept = (*run, now)[-MAX_TRANSITIONS_KEPT:]
    return replace(_cleared(state), mode=to, since=now, flap_times=kept, flap_traffic=traffic)


def _cleared(state: PolicyState) -> PolicyState:
    """No evidence toward a change: no streak, no cumulative evidence."""
    return replace(state, streak=0, cumulative=state.cumulative.cleared())


def _no_evidence(state: PolicyState, settings: PolicySettings) -> PolicyState:
    """A window that brings no evidence: it breaks the streak and adds nothing to the
    cumulative evidence (K such windows in a row clear it)."""
    direction = state.direction
    cumulative = add(state.cumulative, None, direction, settings.cumulative)
    return replace(state, streak=0, cumulative=cumulative)


def step(
    state: PolicyState, settings: PolicySettings, now: float, evidence: Evidence
) -> tuple[PolicyState, Decision]:
    """One decision: the stored state and this tick's evidence → the new state, the decision."""
    command: Command | None = None
    if evidence.retry is not None and evidence.retry != state.retry_seen:
        command = "repromote" if state.mode == ARM_BASELINE else "reset"
        state = _cleared(replace(state, retry_seen=evidence.retry, halted=False, flap_times=(),
                                 flap_traffic=None, held=0))  # fmt: skip
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
    verdict = evidence.verdict
    figures = evidence.served
    if verdict is not None and evidence.spans is None and figures and figures.arm == state.mode:
        if figures.arm == ARM_SPECULATIVE:
            figures = replace(figures, acceptance=_acceptance(evidence, settings))
        state = replace(state, served=remember(state.served, figures, now))
    if settings.policy == "off":
        return state, _hold(state, "policy off", settings, now, trip=trip)
    if trip is not None:
        if trip.guardrail == "overload":
            state = replace(state, served=fell_behind(state.served, ARM_SPECULATIVE))
        return _act(state, settings, now, ARM_BASELINE, f"guardrail: {trip.message}", trip=trip,
                    traffic=traffic_of(evidence.verdict))  # fmt: skip
    if verdict is None:
        return state, _hold(state, "no window ended", settings, now)
    if evidence.spans is not None:
        kept = _no_evidence(state, settings)
        reason = f"window not counted: it spans {evidence.spans}; holding {state.mode}"
        return kept, _hold(kept, reason, settings, now)
    if verdict.outcome == "inconclusive":
        why = "; ".join(verdict.reasons) or "inconclusive"
        kept = _no_evidence(state, settings)
        return kept, _hold(kept, f"inconclusive, holding {state.mode}: {why}", settings, now)
    if state.mode == ARM_SPECULATIVE:
        return _while_speculative(state, settings, now, evidence, verdict)
    return _while_baseline(state, settings, now, evidence, verdict)


def _not_counted(
    state: PolicyState, settings: PolicySettings, now: float, evidence: Evidence, verdict: Verdict
) -> tuple[PolicyState, Decision] | None:
    """The hold for a window whose verdict does not count either way (``judge._matching``),
    or None when it counts."""
    why = uncounted(evidence.matching, verdict, state.mode)
    if why is None:
        return None
    kept = _no_evidence(state, settings)
    ratio = "" if verdict.ratio is None else f" {verdict.ratio:.3f}"
    reason = f"{verdict.outcome}{ratio}, not counted: {why}; holding {state.mode}"
    return kept, _hold(kept, reason, settings, now)


def _acceptance(evidence: Evidence, settings: PolicySettings) -> float | None:
    """The drafter's mean acceptance length over the window, from its arm's spec-decode
    counters (None: fewer than ``speculation_min_drafts`` drafts, or not read)."""
    counters = evidence.speculation
    if counters is None or counters.drafts < max(settings.speculation_min_drafts, 1):
        return None
    return 1.0 + counters.accepted / counters.drafts


def _contradicted(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    evidence: Evidence,
    verdict: Verdict,
    *,
    to: Arm,
) -> str | None:
    """Why what the clients got from ``to`` holds a statistical change toward it."""
    if evidence.served is None or evidence.served.arm != state.mode:
        return None
    return contradiction(state.served, evidence.served, to, verdict.tolerance, now,
                         acceptance=_acceptance(evidence, settings))  # fmt: skip


def _held(
    state: PolicyState, settings: PolicySettings, now: float, reason: str, why: str
) -> tuple[PolicyState, Decision]:
    """A statistical change the served history holds: the evidence stays (the change comes
    once the record is old or the load moves on), the reason says what held it."""
    verb = "roll back" if state.mode == ARM_SPECULATIVE else "re-promote"
    return state, _hold(state, f"would {verb} ({reason}), held: {why}", settings, now)


def _act(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    to: Arm,
    reason: str,
    *,
    trip: Trip | None = None,
    cumulative: Cumulative | None = None,
    traffic: Traffic | None = None,
    cause: str | None = None,
) -> tuple[PolicyState, Decision]:
    """Carry out (or, in dry run / halted, only report) a change of mode. ``cumulative``:
    the evidence across windows that made it, when that rule did; ``traffic``: what its
    window was judged on (the flap rule); ``cause``: a guard's (``judge._guards``) when it,
    not the median, made the last window regressed."""
    verb = "roll back" if to == ARM_BASELINE else "re-promote"
    would = "WouldRollBack" if to == ARM_BASELINE else "WouldRepromote"
    count = flaps(state, settings, now)
    if settings.policy == "notify":
        cause = trip.cause if trip is not None else would
        return _cleared(state), Decision(
            "notify", f"would {verb} (dry run): {reason}", state.mode, state.mode, cause,
            trip=trip, flaps=count, cumulative=cumulative,
        )  # fmt: skip
    if state.halted and trip is None:
        return replace(_cleared(state), held=state.held + 1), Decision(
            "notify",
            f"would {verb}, but automatic changes are stopped after {settings.max_flaps} "
            f"changes back and forth on the same traffic: {reason}",
            state.mode,
            state.mode,
            "FlapLimit",
            warning=True,
            flaps=count,
            cumulative=cumulative,
        )
    new = change_mode(state, to, now, traffic)
    count = flaps(new, settings, now)
    warning = trip is not None
    if count >= settings.max_flaps and not new.halted:
        new = replace(new, halted=True, held=0)
        warning = True
        reason += (
            f"; {count} changes back and forth on the same traffic within "
            f"{settings.flap_window_s / 3600:g}h: automatic changes stop"
        )
    action: Action = "rollback" if to == ARM_BASELINE else "repromote"
    if trip is not None:
        cause = trip.cause
    elif cause is None:
        cause = "Regressed" if to == ARM_BASELINE else "Improved"
    return new, Decision(action, reason, to, to, cause, warning=warning, trip=trip, flaps=count,
                         cumulative=cumulative)  # fmt: skip


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


def _weighed(
    state: PolicyState, settings: PolicySettings, verdict: Verdict, agreeing: str
) -> PolicyState:
    """``state`` after a window that counts: the streak of ``agreeing`` verdicts, and the
    window's evidence added to the cumulative evidence."""
    rule, direction = settings.cumulative, state.direction
    cumulative = add(state.cumulative, weigh(verdict, direction, rule), direction, rule)
    # A confidently regressed guard (judge._guards) counts as a regressed window.
    agrees = verdict.outcome == agreeing or (agreeing == "regressed" and verdict.regressed_guards)
    streak = state.streak + 1 if agrees else 0
    return replace(state, streak=streak, cumulative=cumulative)


def _progress(state: PolicyState, settings: PolicySettings, need: int, agreeing: str) -> str:
    """Where the evidence stands, e.g. "regressed 2/3 windows; evidence of a loss 4.2 of
    9.2 over 3 windows (together +5.1% ±2.3%)"."""
    parts = []
    if state.streak:
        parts.append(f"{agreeing} {state.streak}/{need} windows")
    if state.cumulative.windows and settings.cumulative.enabled:
        parts.append(evidence_summary(state.cumulative, state.direction, settings.cumulative))
    return "; ".join(parts)


def _while_speculative(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    evidence: Evidence,
    verdict: Verdict,
) -> tuple[PolicyState, Decision]:
    skipped = _not_counted(state, settings, now, evidence, verdict)
    if skipped is not None:
        return skipped
    counted = _weighed(state, settings, verdict, "regressed")
    need = settings.consecutive_windows
    sentence = verdict.sentence()
    loss = counted.cumulative
    cumulative: Cumulative | None = None
    guarded = verdict.regressed_guards
    # The cause names the guard when the median alone would not have counted this window.
    cause = guarded[0].cause if guarded and verdict.outcome != "regressed" else None
    if counted.streak >= need:
        if guarded:
            names = ", ".join(g.label for g in guarded)
            reason = (
                f"regressed {counted.streak} windows in a row ({names} regressed in the last): "
                f"{sentence}"
            )
        else:
            reason = f"regressed {counted.streak} windows in a row: {sentence}"
    elif reached(loss, "loss", settings.cumulative):
        cause = None
        cumulative = loss
        summary = evidence_summary(loss, "loss", settings.cumulative)
        reason = f"sustained loss: {summary}; last window {sentence}"
    else:
        reason = ""
    if reason:
        why = _contradicted(counted, settings, now, evidence, verdict, to=ARM_BASELINE)
        if why is not None:
            return _held(counted, settings, now, reason, why)
        return _act(counted, settings, now, ARM_BASELINE, reason, cumulative=cumulative,
                    traffic=traffic_of(verdict), cause=cause)  # fmt: skip
    progress = _progress(counted, settings, need, "regressed")
    named = f" ({', '.join(g.label for g in guarded)} regressed)" if guarded else ""
    head = f"{verdict.outcome}{named}: keeping the drafter"
    reason = f"{head} ({progress}): {sentence}" if progress else f"{head}: {sentence}"
    return counted, _hold(counted, reason, settings, now)


def _while_baseline(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    evidence: Evidence,
    verdict: Verdict,
) -> tuple[PolicyState, Decision]:
    cooldown_ends = (-math.inf if state.since is None else state.since) + settings.cooldown_s
    if now < cooldown_ends:
        kept = _no_evidence(state, settings)
        reason = (
            f"{verdict.outcome}: staying without the drafter (in cooldown for another "
            f"{cooldown_ends - now:.0f}s: not counted toward a re-promotion)"
        )
        return kept, _hold(kept, reason, settings, now)
    floor = settings.repromote_confidence
    if floor is not None and verdict.confidence < floor:
        kept = _no_evidence(state, settings)
        reason = f"{verdict.outcome} at {verdict.confidence:.1%}, re-promotion needs {floor:.1%}"
        return kept, _hold(kept, reason, settings, now)
    errors = (
        error_rate_exceeded(evidence.errors, settings)
        or tool_call_excess(evidence, settings)
        or overload_excess(evidence, settings)
    )
    if errors:
        cleared = _cleared(state)
        return cleared, _hold(cleared, f"{verdict.outcome}, but {errors}", settings, now)
    skipped = _not_counted(state, settings, now, evidence, verdict)
    if skipped is not None:  # a window that does not count: its guards neither
        return skipped
    if verdict.regressed_guards:
        guards = "; ".join(f"guard {g.sentence()}" for g in verdict.regressed_guards)
        cleared = _cleared(state)
        return cleared, _hold(cleared, f"{verdict.outcome}, but {guards}", settings, now)
    counted = _weighed(state, settings, verdict, "improved")
    need = settings.windows_to_repromote
    sentence = verdict.sentence()
    gain = counted.cumulative
    cumulative: Cumulative | None = None
    if counted.streak >= need:
        reason = f"improved {counted.streak} windows in a row after cooldown: {sentence}"
    elif reached(gain, "gain", settings.cumulative):
        cumulative = gain
        summary = evidence_summary(gain, "gain", settings.cumulative)
        reason = f"sustained gain after cooldown: {summary}; last window {sentence}"
    else:
        progress = _progress(counted, settings, need, "improved")
        head = f"{verdict.outcome}: staying without the drafter"
        reason = f"{head} ({progress}): {sentence}" if progress else f"{head}: {sentence}"
        return counted, _hold(counted, reason, settings, now)
    why = _contradicted(counted, settings, now, evidence, verdict, to=ARM_SPECULATIVE)
    if why is not None:
        return _held(counted, settings, now, reason, why)
    if settings.repromote == "manual":
        return _cleared(counted), Decision(
            "notify",
            f"would re-promote (repromote is manual): {reason}",
            state.mode,
            state.mode,
            "WouldRepromote",
            flaps=flaps(state, settings, now),
            cumulative=cumulative,
        )
    return _act(counted, settings, now, ARM_SPECULATIVE, reason, cumulative=cumulative,
                traffic=traffic_of(verdict))  # fmt: skip


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
