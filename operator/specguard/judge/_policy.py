"""The decision policy: a pure state machine over successive verdicts and guardrail
observations. Plain data in, plain data out; the operator stores ``PolicyState.to_dict()`` in
status and applies the ``Decision`` (or, in dry-run, only reports it).

Rules (defaults in ``PolicySettings``):

- Roll back (drafter → no drafter) after ``consecutive_windows`` (K) regressed verdicts in a
  row while the drafter serves. Any other verdict — improved, neutral, inconclusive or no
  verdict at all — resets the count: missing data is never evidence of a regression, and a
  streak interrupted by an idle window starts again.
- Re-promote (no drafter → drafter) only with stricter evidence: ``repromote_windows``
  (default K + 1) improved verdicts in a row, every one of them from a window that ended after
  the cooldown (``cooldown_s`` since the last mode change) and judged at a confidence of at
  least ``repromote_confidence`` (default: the rollback confidence, i.e. any verdict). Not
  while the drafter arm's error guardrail is tripped. With ``repromote="manual"`` the policy
  only notifies that it would; the ``repromote`` command (a user's annotation) always does it.
- Flaps: every automatic mode change is a flap. After ``max_flaps`` of them within
  ``flap_window_s``, automatic changes stop (``halted``; decisions become ``notify`` with
  ``warning``) until a user issues ``repromote`` or ``reset``.
- Guardrails, apart from the statistics, act at once while the drafter serves (even when
  halted, since they protect users from a broken drafter, not from a slow one):
  the drafter arm never became ready within ``startup_deadline_s`` of its creation, or its
  error rate is far above the baseline's: at least ``error_min_requests`` drafter requests
  and ``error_min_errors`` drafter errors, a rate at least ``error_ratio`` × the baseline's
  AND at least ``error_margin`` (absolute, 0.05 = 5 percentage points) above it. With no
  baseline requests observed the baseline rate is taken as 0, so only the margin applies.
- ``policy="notify"`` is a dry run: same bookkeeping, but a would-be change is reported as
  ``notify`` ("would roll back: ...") and the mode stays. ``policy="off"`` does nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from specguard.judge._verdict import Verdict

Mode = Literal["speculative", "baseline"]
Action = Literal["hold", "rollback", "repromote", "notify"]
PolicyKind = Literal["auto", "notify", "off"]
RepromoteKind = Literal["auto", "manual"]
Command = Literal["repromote", "reset"]

MODES: tuple[Mode, ...] = ("speculative", "baseline")
MAX_TRANSITIONS_KEPT = 32


@dataclass(frozen=True, slots=True)
class PolicySettings:
    policy: PolicyKind = "auto"
    repromote: RepromoteKind = "auto"
    consecutive_windows: int = 3
    repromote_windows: int | None = None
    repromote_confidence: float | None = None
    cooldown_s: float = 1800.0
    max_flaps: int = 3
    flap_window_s: float = 86400.0
    startup_deadline_s: float = 1200.0
    error_ratio: float = 5.0
    error_margin: float = 0.05
    error_min_requests: int = 50
    error_min_errors: int = 5

    def __post_init__(self) -> None:
        if self.policy not in ("auto", "notify", "off"):
            raise ValueError(f"policy: expected auto, notify or off, got {self.policy!r}")
        if self.repromote not in ("auto", "manual"):
            raise ValueError(f"repromote: expected auto or manual, got {self.repromote!r}")
        if self.consecutive_windows < 1:
            raise ValueError("consecutive_windows: must be at least 1")
        if self.repromote_windows is not None and self.repromote_windows < 1:
            raise ValueError("repromote_windows: must be at least 1")
        if self.max_flaps < 1:
            raise ValueError("max_flaps: must be at least 1")
        for name in ("cooldown_s", "flap_window_s", "startup_deadline_s", "error_margin"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")

    @property
    def windows_to_repromote(self) -> int:
        return self.repromote_windows or self.consecutive_windows + 1


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What the policy remembers between windows (JSON-serialisable via to_dict)."""

    mode: Mode = "speculative"
    streak: int = 0
    streak_outcome: str | None = None
    since: float | None = None
    transitions: tuple[float, ...] = ()
    halted: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["transitions"] = list(self.transitions)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyState:
        mode = data.get("mode", "speculative")
        if mode not in MODES:
            raise ValueError(f"mode: expected speculative or baseline, got {mode!r}")
        since = data.get("since")
        return cls(
            mode=mode,
            streak=int(data.get("streak", 0)),
            streak_outcome=data.get("streak_outcome"),
            since=None if since is None else float(since),
            transitions=tuple(float(t) for t in data.get("transitions", ())),
            halted=bool(data.get("halted", False)),
        )


@dataclass(frozen=True, slots=True)
class Guardrails:
    """Observations for the immediate guardrails, over the same window as the verdict.

    ``drafter_ready``: has any drafter-arm pod been ready since ``drafter_since`` (when the
    drafter arm was created or last changed)? None when unknown (never trips)."""

    spec_requests: int = 0
    spec_errors: int = 0
    base_requests: int = 0
    base_errors: int = 0
    drafter_ready: bool | None = None
    drafter_since: float | None = None

    @classmethod
    def from_verdict(
        cls,
        verdict: Verdict,
        *,
        drafter_ready: bool | None = None,
        drafter_since: float | None = None,
    ) -> Guardrails:
        return cls(
            spec_requests=verdict.requests.get("speculative", 0),
            spec_errors=verdict.errors.get("speculative", 0),
            base_requests=verdict.requests.get("baseline", 0),
            base_errors=verdict.errors.get("baseline", 0),
            drafter_ready=drafter_ready,
            drafter_since=drafter_since,
        )


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    mode: Mode
    warning: bool = False
    guardrail: bool = False
    flaps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def error_guardrail(g: Guardrails, settings: PolicySettings) -> str | None:
    """The reason when the drafter arm's error rate is far above the baseline's, else None."""
    if g.spec_requests < settings.error_min_requests or g.spec_errors < settings.error_min_errors:
        return None
    spec_rate = g.spec_errors / g.spec_requests
    base_rate = g.base_errors / g.base_requests if g.base_requests else 0.0
    if spec_rate >= settings.error_ratio * base_rate and (
        spec_rate - base_rate >= settings.error_margin
    ):
        return (
            f"drafter-arm error rate {spec_rate:.1%} ({g.spec_errors}/{g.spec_requests}) vs "
            f"baseline {base_rate:.1%} ({g.base_errors}/{g.base_requests})"
        )
    return None


def startup_guardrail(g: Guardrails, settings: PolicySettings, now: float) -> str | None:
    """The reason when the drafter arm has not become ready by the startup deadline."""
    if g.drafter_ready is not False or g.drafter_since is None:
        return None
    waited = now - g.drafter_since
    if waited >= settings.startup_deadline_s:
        return (
            f"drafter pods not ready {waited:.0f}s after start "
            f"(startup deadline {settings.startup_deadline_s:.0f}s)"
        )
    return None


def flaps(state: PolicyState, settings: PolicySettings, now: float) -> int:
    return sum(1 for t in state.transitions if now - t < settings.flap_window_s)


def change_mode(state: PolicyState, to: Mode, now: float) -> PolicyState:
    """``state`` after a change of mode at ``now``: a new streak, and ``now`` in the flap
    history (the last :data:`MAX_TRANSITIONS_KEPT`)."""
    kept = (*state.transitions, now)[-MAX_TRANSITIONS_KEPT:]
    return replace(state, mode=to, streak=0, streak_outcome=None, since=now, transitions=kept)


def _act(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    to: Mode,
    reason: str,
    *,
    guardrail: bool = False,
) -> tuple[PolicyState, Decision]:
    """Carry out (or, in dry-run / halted, only report) a change of mode."""
    verb = "roll back" if to == "baseline" else "re-promote"
    action: Action = "rollback" if to == "baseline" else "repromote"
    if settings.policy == "notify":
        reset = replace(state, streak=0, streak_outcome=None)
        return reset, Decision(
            "notify",
            f"would {verb} (dry run): {reason}",
            state.mode,
            guardrail=guardrail,
            flaps=flaps(state, settings, now),
        )
    if state.halted and not guardrail:
        reset = replace(state, streak=0, streak_outcome=None)
        return reset, Decision(
            "notify",
            f"would {verb}, but automatic changes are stopped after "
            f"{settings.max_flaps} flaps: {reason}",
            state.mode,
            warning=True,
            flaps=flaps(state, settings, now),
        )
    new = change_mode(state, to, now)
    count = flaps(new, settings, now)
    warning = guardrail
    if count >= settings.max_flaps:
        new = replace(new, halted=True)
        warning = True
        reason += f"; {count} flaps within {settings.flap_window_s:.0f}s: automatic changes stop"
    return new, Decision(action, reason, to, warning=warning, guardrail=guardrail, flaps=count)


def _hold(state: PolicyState, reason: str, settings: PolicySettings, now: float) -> Decision:
    return Decision(
        "hold", reason, state.mode, warning=state.halted, flaps=flaps(state, settings, now)
    )


def step(
    state: PolicyState,
    settings: PolicySettings,
    now: float,
    *,
    verdict: Verdict | None = None,
    guardrails: Guardrails | None = None,
    command: Command | None = None,
) -> tuple[PolicyState, Decision]:
    """One evaluation: the previous state and this window's evidence → new state, decision."""
    if command == "repromote":
        cleared = replace(state, halted=False, transitions=())
        if state.mode == "speculative":
            return cleared, _hold(cleared, "already speculative", settings, now)
        new = replace(cleared, mode="speculative", streak=0, streak_outcome=None, since=now)
        return new, Decision("repromote", "manual re-promotion", "speculative")
    if command == "reset":
        state = replace(state, halted=False, transitions=())
    if settings.policy == "off":
        return state, _hold(state, "policy off", settings, now)

    g = guardrails or Guardrails()
    if state.mode == "speculative":
        tripped = startup_guardrail(g, settings, now) or error_guardrail(g, settings)
        if tripped:
            return _act(state, settings, now, "baseline", f"guardrail: {tripped}", guardrail=True)

    if verdict is None or verdict.outcome == "inconclusive":
        why = "no verdict" if verdict is None else "; ".join(verdict.reasons) or "inconclusive"
        reset = replace(state, streak=0, streak_outcome=None)
        return reset, _hold(reset, f"inconclusive, holding {state.mode}: {why}", settings, now)

    if state.mode == "speculative":
        return _while_speculative(state, settings, now, verdict)
    return _while_baseline(state, settings, now, verdict, g)


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
    return _act(
        counted,
        settings,
        now,
        "baseline",
        f"regressed {streak} windows in a row: {verdict.sentence()}",
    )


def _while_baseline(
    state: PolicyState, settings: PolicySettings, now: float, verdict: Verdict, g: Guardrails
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
    errors = error_guardrail(g, settings)
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
            flaps=flaps(state, settings, now),
        )
    return _act(counted, settings, now, "speculative", reason)


__all__ = [
    "MODES",
    "Action",
    "Command",
    "Decision",
    "Guardrails",
    "Mode",
    "PolicyKind",
    "PolicySettings",
    "PolicyState",
    "RepromoteKind",
    "error_guardrail",
    "flaps",
    "startup_guardrail",
    "step",
]
