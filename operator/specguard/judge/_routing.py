"""Routing by request domain: when the domains' verdicts differ with confidence, each
domain is served by the arm that wins for it.

Every window, each domain's mirrored pairs are judged on their own (:func:`domain_verdicts`,
the judge at the resource's settings: a domain needs as many pairs as a window does). A
domain's **winner** is the speculative arm when its verdict is improved, the baseline arm
when regressed, and none when neutral or inconclusive. A domain moves to its winner with
the hysteresis of a mode change: ``consecutive_windows`` windows in a row pointing to the
baseline arm, or ``consecutive_windows + 1`` pointing to the drafter arm (a re-promotion's
stricter evidence), and not within ``cooldown_s`` of the domain's last move.

A domain moves only when the arm it would go to was **measured as loaded** as the arm that
serves it (its median in-flight requests per pod at least that arm's, within two): each arm
serves some domains and gets the other's copies, so the arm that lost a domain runs lighter,
and copies measured there would call the domain back only to find it slower with it.

A domain leaves the serving arm (``mode``) only while the **split is real**: some other
domain stays on it with a verdict that does not point away (improved or neutral while the
drafter serves; regressed or neutral while the baseline serves). When every domain with a
verdict points away, that is a mode change, and the mode policy (``judge.step``, fed the
verdict of the traffic the serving arm keeps) makes it as it always has.

Both arms serve; each arm's requests are still copied to the other (the router), so every
domain stays judged. The arms' pods follow the split (:func:`split_replicas`): the
``replicas + shadow.replicas`` pods are shared so that the busiest arm's load per pod is as
small as it can be, at least one pod each. Load is what the domains keep in flight (Little's
law: the sum of their served requests' durations, :func:`served_load`), not how many
requests they send: with clients that keep a number of streams open, the faster domain
completes more requests without holding more of the GPUs. The counts are chosen when the
routes change and kept until they change again (a tie keeps the current counts), so
traffic noise moves no pod; the GPU-neutral swap resizes the arms one pod at a time, and
the routers apply the routes once the counts are there.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from specguard._arms import ARMS, Arm
from specguard.judge._sample import Sample
from specguard.judge._verdict import JudgeSettings, Outcome, Verdict, judge

MAX_DOMAINS = 16


@dataclass(frozen=True, slots=True)
class DomainState:
    """One domain: the arm serving it, its last verdict, its share of the served requests,
    and the streak of windows pointing to the other arm."""

    domain: str
    arm: Arm
    outcome: Outcome = "inconclusive"
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pairs: int = 0
    share: float | None = None
    streak: int = 0
    since: float | None = None  # when it last moved


@dataclass(frozen=True, slots=True)
class RoutingState:
    domains: tuple[DomainState, ...] = ()

    def routes(self, mode: Arm) -> dict[str, Arm]:
        """Domains served by the other arm than ``mode``."""
        return {d.domain: d.arm for d in self.domains if d.arm != mode}

    def arm_of(self, domain: str, mode: Arm) -> Arm:
        return next((d.arm for d in self.domains if d.domain == domain), mode)


def winner(outcome: Outcome) -> Arm | None:
    if outcome == "improved":
        return "speculative"
    if outcome == "regressed":
        return "baseline"
    return None


def domain_verdicts(samples: Sequence[Sample], settings: JudgeSettings) -> dict[str, Verdict]:
    """Each domain's verdict on its own samples (its pairs, when it has enough). No guard:
    a domain moves on its median's outcome; only the overall verdict's guards act."""
    by_domain: dict[str, list[Sample]] = {}
    for s in samples:
        by_domain.setdefault(s.domain, []).append(s)
    plain = replace(settings, guards=())
    return {domain: judge(group, plain) for domain, group in sorted(by_domain.items())}


def served_load(samples: Iterable[Sample]) -> dict[str, float]:
    """Per domain, the request-seconds the arms served (not the copies): the sum of the
    served requests' durations, which is the domain's mean in-flight count times the window
    (Little's law). Errors count with the time they took."""
    load: dict[str, float] = {}
    for s in samples:
        if s.role == "serving":
            load[s.domain] = load.get(s.domain, 0.0) + max(s.e2e_s, 0.0)
    return load


def route_window(
    state: RoutingState,
    *,
    mode: Arm,
    verdicts: Mapping[str, Verdict],
    served: Mapping[str, float],
    consecutive_windows: int,
    cooldown_s: float,
    now: float,
) -> tuple[RoutingState, list[str]]:
    """One judged window: each domain's streak and the moves it calls for. Returns the new
    state and one sentence per domain that moved."""
    total = sum(served.values())
    known = {d.domain: d for d in state.domains}
    names = sorted(set(known) | set(verdicts))[:MAX_DOMAINS]
    updated: dict[str, DomainState] = {}
    for name in names:
        old = known.get(name, DomainState(name, mode))
        verdict = verdicts.get(name)
        if verdict is None:
            updated[name] = replace(old, streak=0, share=0.0 if total else old.share)
            continue
        win = winner(verdict.outcome)
        streak = old.streak + 1 if win is not None and win != old.arm else 0
        updated[name] = replace(
            old, outcome=verdict.outcome, ratio=verdict.ratio, ci_low=verdict.ci_low,
            ci_high=verdict.ci_high, pairs=verdict.n_pairs, streak=streak,
            share=served.get(name, 0) / total if total else None,
        )  # fmt: skip
    moves: list[str] = []
    for name in names:
        d = updated[name]
        win = winner(d.outcome)
        if win is None or win == d.arm:
            continue
        need = consecutive_windows + 1 if win == "speculative" else consecutive_windows
        cooled = d.since is None or now - d.since >= cooldown_s
        if d.streak < need or not cooled:
            continue
        if win != mode and not _split_is_real(updated, name, mode):
            continue
        if not _loaded_as_served(verdicts[name], win, d.arm):
            continue
        updated[name] = replace(d, arm=win, streak=0, since=now)
        moves.append(_sentence(d, win))
    domains = tuple(updated[name] for name in names if _worth_keeping(updated[name], mode))
    return RoutingState(domains), moves


# In-flight requests per pod the arm a domain would move to may run below the arm serving it
# and still count as measured at its load (the judge's own slack).
LOAD_SLACK = 2.0


def _loaded_as_served(verdict: Verdict, to: Arm, serving: Arm) -> bool:
    """Was the arm the domain would move to measured at least at the load of the arm that
    serves it? Each arm serves some domains and gets the other's copies: the arm that
    lost a domain runs lighter, a domain's copies there look faster than that arm would
    be with the domain back, and the domain would come and go. A move needs the arm it goes
    to measured as loaded as the one it leaves (within two requests per pod)."""
    conc_to, conc_from = verdict.concurrency.get(to), verdict.concurrency.get(serving)
    if conc_to is None or conc_from is None:
        return False
    return conc_to >= conc_from - LOAD_SLACK


def _split_is_real(domains: Mapping[str, DomainState], leaving: str, mode: Arm) -> bool:
    """Does a domain with a verdict stay on ``mode`` without pointing away?"""
    for name, d in domains.items():
        if name == leaving or d.arm != mode or d.outcome == "inconclusive":
            continue
        if winner(d.outcome) in (None, mode):
            return True
    return False


def _worth_keeping(d: DomainState, mode: Arm) -> bool:
    return d.arm != mode or d.outcome != "inconclusive" or d.streak > 0


def _sentence(d: DomainState, to: Arm) -> str:
    if d.ratio is not None and d.ci_low is not None and d.ci_high is not None:
        figure = (
            f"per-token latency {d.ratio - 1:+.0%} with the drafter "
            f"(CI {d.ci_low - 1:+.0%}..{d.ci_high - 1:+.0%}), n={d.pairs} pairs"
        )
    else:
        figure = d.outcome
    share = f", {d.share:.0%} of requests" if d.share is not None else ""
    return f"{d.domain} → {to} arm: {d.outcome} {d.streak} windows in a row, {figure}{share}"


def after_mode_change(state: RoutingState, mode: Arm, now: float) -> RoutingState:
    """The serving arm changed (the traffic it kept lost, or won): every domain goes to
    it, and the split is decided again from the windows that follow."""
    return RoutingState(
        tuple(replace(d, arm=mode, streak=0, since=now if d.arm != mode else d.since)
              for d in state.domains)
    )  # fmt: skip


def split_replicas(
    state: RoutingState,
    mode: Arm,
    *,
    serving: int,
    shadow: int,
    current: Mapping[Arm, int] | None = None,
) -> dict[Arm, int] | None:
    """Pods per arm for the split (None without one: the spec's counts): the
    ``serving + shadow`` pods shared so that the larger of the two arms' loads per pod
    (their domains' shares of :func:`served_load`) is smallest, at least one pod each; on a
    tie the ``current`` counts stay, else the serving arm keeps the larger part."""
    routes = state.routes(mode)
    if not routes:
        return None
    total = serving + shadow
    other: Arm = "baseline" if mode == "speculative" else "speculative"
    moved = sum(d.share or 0.0 for d in state.domains if d.domain in routes)
    kept = max(1.0 - moved, 0.0)

    def worst(pods_other: int) -> float:
        return max(kept / (total - pods_other), moved / pods_other)

    options = range(1, total)
    best = min(worst(n) for n in options)
    tied = [n for n in options if worst(n) <= best * (1 + 1e-9)]
    now_other = (current or {}).get(other)
    pods_other = now_other if now_other in tied else min(tied)
    counts = {mode: total - pods_other, other: pods_other}
    return {arm: counts[arm] for arm in ARMS}


__all__ = [
    "DomainState",
    "RoutingState",
    "after_mode_change",
    "domain_verdicts",
    "route_window",
    "served_load",
    "split_replicas",
    "winner",
]
