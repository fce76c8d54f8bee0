"""The load match from the clients (pure): which rule the routers copy by, and why.

The routers load the shadow as the other arm would be loaded had it served these clients
(docs/judge.md, closed or open clients): ``in_flight`` for closed-loop clients, ``arrivals``
for open-loop ones. With ``spec.evaluation.loadMatch: auto`` (the default) the operator
classifies each judged window's serving requests together with the window before, and with
the last two minutes' when those two tell neither way (``judge.client_loop_over``), and changes
the rule after two windows ask for the other one with none asking for the rule in force
between them (``judge.next_load_match``; a window that tells neither way leaves the count as
it is). Three windows in a row that tell neither way make the rule stale: it is said in
``status.clients`` (``stale``, ``unknownWindows``), and a stale ``arrivals`` falls back to
``in_flight`` (whose shadow-is-faster verdicts hold for either kind of client). The rule is
``status.arms.loadMatch`` (the routers read it every 2 s) and the finding ``status.clients``.
A fixed ``in_flight`` or ``arrivals`` in the spec is used as it is; the finding is still
reported.

The loop judges each window with the rule that was in force while it ran
(:func:`rule_in_force`), leaving out the requests that started before the routers can have
seen a change (:func:`settled_after`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specguard._times import parse_time
from specguard.api import ClientsStatus, Spec, Status
from specguard.judge import (
    LOAD_MATCHES,
    LoadMatch,
    LoadMatchState,
    LoopEvidence,
    LoopSettings,
    next_load_match,
)

# The routers read status every 2 s: a request that started this long after the rule changed
# was copied (or not) by the new rule.
SETTLE_S = 3.0
SETTINGS = LoopSettings()


def rule_in_force(spec: Spec, status: Status) -> LoadMatch:
    """The rule the routers copy by now: the spec's when it fixes one, else status's."""
    fixed = spec.evaluation.load_match
    if fixed != "auto":
        return fixed
    return status.arms.load_match if status.arms is not None else "in_flight"


def settled_after(status: Status) -> float | None:
    """Epoch seconds from which every request ran under the rule in force (None: always)."""
    since = parse_time(status.clients.since) if status.clients is not None else None
    return None if since is None else since + SETTLE_S


@dataclass(frozen=True, slots=True)
class LoadMatchAfter:
    """The rule after this tick, what status says about the clients, and the change."""

    rule: LoadMatch
    clients: ClientsStatus | None
    changed_from: LoadMatch | None = None  # set when the rule changed at this tick

    @property
    def message(self) -> str:
        """The Event's text for a change."""
        finding = self.clients.message if self.clients is not None else ""
        return f"{self.changed_from} → {self.rule}: {finding}"


def load_match_after(
    spec: Spec, prev: Status, evidence: LoopEvidence | None, now_iso: str
) -> LoadMatchAfter:
    """The rule and ``status.clients`` after one tick. ``evidence``: the finding on the
    window that ended now (None: no window ended, or its source has no per-request samples;
    the finding and the count toward a change stay as they were)."""
    routers = prev.arms.load_match if prev.arms is not None else "in_flight"
    fixed = spec.evaluation.load_match != "auto"
    rule, clients = rule_in_force(spec, prev), prev.clients
    if evidence is not None:
        before = prev.clients if prev.clients is not None else ClientsStatus(loop="unknown")
        streak = 0 if fixed else before.streak
        state = next_load_match(
            LoadMatchState(rule, streak, before.unknown_windows), evidence, SETTINGS
        )
        message = evidence.sentence()
        stale = state.stale(SETTINGS) and not fixed
        if fixed:
            message += f"; the load match is fixed to {rule} by spec.evaluation.loadMatch"
        else:
            if stale and state.rule != rule:
                message += (
                    f"; {rule} was kept through {state.unknown} windows that told neither way "
                    f"and is stale: back to {state.rule}, whose shadow-is-faster verdicts hold "
                    "for either kind of client"
                )
            elif stale:
                message += (
                    f"; {rule} was kept through {state.unknown} windows that told neither way "
                    "and is stale"
                )
            rule = state.rule
            if state.streak:
                other = next(m for m in LOAD_MATCHES if m != rule)
                message += f" ({state.streak} of {SETTINGS.windows} windows to switch to {other})"
        clients = ClientsStatus(
            loop=evidence.kind,
            message=message[:1024],
            streak=0 if fixed else state.streak,
            since=before.since,
            unknown_windows=state.unknown,
            stale=stale,
        )
    if rule == routers:
        return LoadMatchAfter(rule, clients)
    if clients is None:
        clients = ClientsStatus(loop="unknown", message="")
    clients = clients.model_copy(update={"since": now_iso, "streak": 0})
    return LoadMatchAfter(rule, clients, routers)


__all__ = ["SETTLE_S", "LoadMatchAfter", "load_match_after", "rule_in_force", "settled_after"]
