"""Routing by request domain in the decision: ``status.routing`` ↔ the judge's
``RoutingState``, one window's routing step, and the verdict the mode policy judges (pure).

The judge's ``judge._routing`` holds the rules (each domain's verdict, the hysteresis of a
move, the split being real, the pods per arm). Here: a window's per-domain verdicts move
domains while the arms are settled (no swap running, the target serving); the mode policy
then judges the traffic the serving arm keeps (the domains not routed away), so a split
and a rollback are never decided on the same evidence; the routes reach the routers
(``status.arms.routes``) only once the arms have the split's pods.
"""

from __future__ import annotations

from collections.abc import Sequence

from specguard._times import parse_time, rfc3339
from specguard.api import DomainRoute, RoutingStatus, Spec
from specguard.api.constants import Arm
from specguard.controller._conditions import rounded
from specguard.judge import (
    DomainState,
    JudgeSettings,
    RoutingState,
    Sample,
    Verdict,
    domain_verdicts,
    judge,
    route_window,
    served_load,
)


def routing_state(status: RoutingStatus | None) -> RoutingState:
    if status is None:
        return RoutingState()
    return RoutingState(
        tuple(
            DomainState(
                d.domain,
                d.arm,
                d.outcome,
                d.ratio,
                d.ci_lower,
                d.ci_upper,
                d.pairs,
                d.share,
                d.streak,
                parse_time(d.since),
            )
            for d in status.domains
        )
    )


def routing_status(
    state: RoutingState, mode: Arm, replicas: dict[Arm, int] | None
) -> RoutingStatus:
    return RoutingStatus(
        domains=[
            DomainRoute(
                domain=d.domain[:32],
                arm=d.arm,
                outcome=d.outcome,
                ratio=rounded(d.ratio),
                ci_lower=rounded(d.ci_low),
                ci_upper=rounded(d.ci_high),
                pairs=d.pairs,
                share=rounded(d.share),
                streak=d.streak,
                since=None if d.since is None else rfc3339(d.since),
            )
            for d in state.domains
        ],
        split=bool(state.routes(mode)),
        replicas=dict(replicas or {}),
    )


def route(
    spec: Spec,
    state: RoutingState,
    *,
    mode: Arm,
    samples: Sequence[Sample],
    settings: JudgeSettings,
    overall: Verdict,
    now: float,
) -> tuple[RoutingState, list[str], Verdict]:
    """One judged window while the arms are settled: the domains' moves (one sentence each)
    and the verdict the mode policy judges: the window's, or, with a split, the one of the
    requests of the domains the serving arm keeps."""
    state, moves = route_window(
        state,
        mode=mode,
        verdicts=domain_verdicts(samples, settings),
        served=served_load(samples),
        consecutive_windows=spec.evaluation.consecutive_windows,
        cooldown_s=float(spec.rollback.cooldown),
        now=now,
    )
    routes = state.routes(mode)
    if not routes:
        return state, moves, overall
    kept = [s for s in samples if s.domain not in routes]
    return state, moves, judge(kept, settings)


__all__ = ["route", "routing_state", "routing_status"]
