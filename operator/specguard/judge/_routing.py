"""Routing by request domain: when the domains' verdicts differ with confidence, each
domain is served by the arm that wins for it.

Every window, each domain's mirrored pairs are judged on their own (:func:`domain_verdicts`,
the judge at the resource's settings: a domain needs as many pairs as a window does). A
domain's **winner** is the speculative arm when its verdict is improved, the baseline arm
when regressed, and none when neutral or inconclusive. A domain moves to its winner with
the hysteresis of a mode change: ``consecutive_windows`` windows in a row pointing to the
baseline arm, or ``consecutive_windows + 1`` pointing to the drafter arm (a re-promotion's
stricter evidence), and not within ``cooldown_s`` of the domain's last move.

A domain leaves the serving arm (``mode``) only while the **split is real**: some other
domain stays on it with a verdict that does not point away (improved or neutral while the
drafter serves; regressed or neutral while the baseline serves). When every domain with a
verdict points away, that is a mode change, and the mode policy (``judge.step``, fed the
verdict of the traffic the serving arm keeps) makes it as it always has.

Both arms serve; each arm's requests are still copied to the other (the router), so every
domain stays judged. The arms' pods follow the split (:func:`split_replicas`): the
``replicas + shadow.replicas`` pods are shared in proportion to each arm's served requests,
at least one each, so no arm gets more requests per pod than the serving arm had before the
split (the GPU-neutral swap resizes them one pod at a time; the routers apply the routes
once the counts are there).

Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from specguard.judge._sample import ARMS, Arm, Sample
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
    """Each domain's verdict on its own samples (its pairs, when it has enough)."""
    by_domain: dict[str, list[Sample]] = {}
    for s in samples:
        by_domain.setdefault(s.domain, []).append(s)
    return {domain: judge(group, settings) for domain, group in sorted(by_domain.items())}


def served_counts(samples: Iterable[Sample]) -> Counter[str]:
    """Requests the arms served (not the copies) per domain, errors included."""
    return Counter(s.domain for s in samples if s.role == "serving")


def route_window(
    state: RoutingState,
    *,
    mode: Arm,
    verdicts: Mapping[str, Verdict],
    served: Mapping[str, int],
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
        updated[name] = replace(d, arm=win, streak=0, since=now)
        moves.append(_sentence(d, win))
    domains = tuple(updated[name] for name in names if _worth_keeping(updated[name], mode))
    return RoutingState(domains), moves


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
    state: RoutingState, mode: Arm, *, serving: int, shadow: int
) -> dict[Arm, int] | None:
    """Pods per arm for the split: ``serving + shadow`` in proportion to each arm's share of
    the served requests, at least one each; None without a split (the spec's counts)."""
    routes = state.routes(mode)
    if not routes:
        return None
    total = serving + shadow
    moved = sum(d.share or 0.0 for d in state.domains if d.domain in routes)
    other = "baseline" if mode == "speculative" else "speculative"
    pods_other = min(max(round(total * moved), 1), total - 1)
    counts: dict[Arm, int] = {mode: total - pods_other, other: pods_other}  # type: ignore[dict-item]
    return {arm: counts[arm] for arm in ARMS}


__all__ = [
    "DomainState",
    "RoutingState",
    "after_mode_change",
    "domain_verdicts",
    "route_window",
    "served_counts",
    "split_replicas",
    "winner",
]
