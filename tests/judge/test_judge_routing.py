"""Routing by domain, by exact equality: streaks, the hysteresis of each move, the split
being real, a mode change, and the pods each arm gets for the split."""

from __future__ import annotations

from typing import Any

import numpy as np

from specguard.judge import (
    DomainState,
    JudgeSettings,
    RoutingState,
    Sample,
    Verdict,
    after_mode_change,
    domain_verdicts,
    route_window,
    served_load,
    split_replicas,
)


def verdict(
    outcome: str, ratio: float | None = None, pairs: int = 300, conc: tuple[float, float] = (30, 30)
) -> Verdict:
    spread = None if ratio is None else (ratio * 0.95, ratio * 1.05)
    return Verdict(
        outcome=outcome,  # type: ignore[arg-type]
        ratio=ratio, ci_low=spread and spread[0], ci_high=spread and spread[1],
        confidence=0.99, tolerance=0.03, method="paired", basis="test",
        median_s={}, n={}, n_pairs=pairs,
        concurrency={"speculative": conc[0], "baseline": conc[1]},
    )  # fmt: skip


MIXED = {"math": verdict("improved", 0.5), "tool_call": verdict("regressed", 1.4)}
SERVED = {"math": 600, "tool_call": 400}


def step(
    state: RoutingState, verdicts: dict[str, Verdict], now: float = 0.0, **kw: Any
) -> tuple[RoutingState, list[str]]:
    args: dict[str, Any] = {"mode": "speculative", "served": SERVED, "consecutive_windows": 2,
                            "cooldown_s": 60.0, "now": now, **kw}  # fmt: skip
    return route_window(state, verdicts=verdicts, **args)


def test_tool_calls_move_to_the_baseline_after_k_windows() -> None:
    state, moves = step(RoutingState(), MIXED)
    assert moves == []
    assert state == RoutingState((
        DomainState("math", "speculative", "improved", 0.5, 0.475, 0.525, 300, 0.6, 0),
        DomainState("tool_call", "speculative", "regressed", 1.4, 1.4 * 0.95, 1.4 * 1.05, 300,
                    0.4, 1),
    ))  # fmt: skip
    state, moves = step(state, MIXED, now=10.0)
    assert moves == [
        "tool_call → baseline arm: regressed 2 windows in a row, per-token latency +40% with "
        "the drafter (CI +33%..+47%), n=300 pairs, 40% of requests"
    ]
    assert state.routes("speculative") == {"tool_call": "baseline"}
    assert state.domains[1] == DomainState("tool_call", "baseline", "regressed", 1.4, 1.4 * 0.95,
                                           1.4 * 1.05, 300, 0.4, 0, since=10.0)  # fmt: skip
    # The split holds while the verdicts hold: nothing moves.
    again, moves = step(state, MIXED, now=20.0)
    assert moves == [] and again.routes("speculative") == {"tool_call": "baseline"}


def test_a_streak_breaks_on_any_other_verdict() -> None:
    state, _ = step(RoutingState(), MIXED)
    state, _ = step(state, {**MIXED, "tool_call": verdict("inconclusive")})
    state, moves = step(state, MIXED)
    assert moves == [] and state.routes("speculative") == {}


def test_no_split_when_nothing_else_stays() -> None:
    # Every domain with a verdict points away: a rollback, the mode policy's business.
    both = {"math": verdict("regressed", 1.2), "tool_call": verdict("regressed", 1.4)}
    state = RoutingState()
    for t in range(4):
        state, moves = step(state, both, now=float(t))
        assert moves == []
    assert state.routes("speculative") == {}
    # A domain without a verdict does not make a split real either.
    alone = {"math": verdict("inconclusive"), "tool_call": verdict("regressed", 1.4)}
    for t in range(4):
        state, moves = step(state, alone, now=float(t))
    assert state.routes("speculative") == {}
    # A neutral one does: it is measured no worse where it is.
    neutral = {"math": verdict("neutral", 1.0), "tool_call": verdict("regressed", 1.4)}
    state, _ = step(RoutingState(), neutral)
    state, moves = step(state, neutral)
    assert state.routes("speculative") == {"tool_call": "baseline"}


def test_moving_a_domain_onto_the_drafter_needs_one_window_more_and_the_cooldown() -> None:
    # The baseline serves; math is faster with the drafter, tool calls are not.
    state = RoutingState()
    for t in range(2):
        state, moves = step(state, MIXED, now=float(t), mode="baseline")
        assert moves == []
    state, moves = step(state, MIXED, now=2.0, mode="baseline")
    assert [m.split(":")[0] for m in moves] == ["math → speculative arm"]
    assert state.routes("baseline") == {"math": "speculative"}
    # Math regresses: back after 2 windows, but not within the cooldown of its move.
    back = {**MIXED, "math": verdict("regressed", 1.2)}
    for when in (3.0, 4.0, 5.0):
        state, moves = step(state, back, now=when, mode="baseline")
        assert moves == []
    state, moves = step(state, back, now=62.0, mode="baseline")
    assert [m.split(":")[0] for m in moves] == ["math → baseline arm"]
    assert state.routes("baseline") == {}


def test_a_domain_moves_only_to_an_arm_measured_as_loaded_as_the_one_serving_it() -> None:
    # Tool calls were moved to the baseline arm; the drafter arm, left with math, runs
    # lighter (12 in flight against 30), and the tool calls' copies there look faster.
    split = RoutingState(
        (
            DomainState("math", "speculative", "improved"),
            DomainState("tool_call", "baseline", "regressed", since=-100.0),
        )
    )
    lighter = {**MIXED, "tool_call": verdict("improved", 0.7, conc=(12, 30))}
    state = split
    for t in range(5):
        state, moves = step(state, lighter, now=float(t))
        assert moves == []
    assert state.routes("speculative") == {"tool_call": "baseline"}
    # Measured as loaded (within two requests per pod): it may come back.
    loaded = {**MIXED, "tool_call": verdict("improved", 0.7, conc=(29, 30))}
    state = split
    for t in range(3):
        state, moves = step(state, loaded, now=float(t))
    assert [m.split(":")[0] for m in moves] == ["tool_call → speculative arm"]


def test_a_mode_change_sends_every_domain_to_the_new_serving_arm() -> None:
    split = RoutingState(
        (
            DomainState("math", "speculative", "improved"),
            DomainState("tool_call", "baseline", "regressed", since=5.0),
        )
    )
    after = after_mode_change(split, "baseline", 100.0)
    assert after.routes("baseline") == {}
    assert after.domains == (
        DomainState("math", "baseline", "improved", since=100.0),
        DomainState("tool_call", "baseline", "regressed", since=5.0),
    )


def test_split_replicas_make_the_busiest_arm_as_light_as_it_can_be() -> None:
    def split(shares: dict[str, float], mode: str = "speculative") -> RoutingState:
        other = "baseline" if mode == "speculative" else "speculative"
        return RoutingState(
            tuple(
                DomainState(d, other if d == "tool_call" else mode, share=s)  # type: ignore[arg-type]
                for d, s in shares.items()
            )
        )

    assert split_replicas(RoutingState(), "speculative", serving=2, shadow=1) is None
    # 60/40 on 3 pods: 2/1 gives the busier arm 0.4 a pod, 1/2 gives 0.6.
    assert split_replicas(
        split({"math": 0.6, "tool_call": 0.4}), "speculative", serving=2, shadow=1
    ) == {"speculative": 2, "baseline": 1}
    assert split_replicas(
        split({"math": 0.3, "tool_call": 0.7}), "speculative", serving=2, shadow=1
    ) == {"speculative": 1, "baseline": 2}
    # 50/50 on 3 pods is a tie: the counts in force stay (no pod moves), else the serving
    # arm keeps the larger part.
    even = split({"math": 0.5, "tool_call": 0.5})
    assert split_replicas(even, "speculative", serving=2, shadow=1) == {
        "speculative": 2, "baseline": 1,
    }  # fmt: skip
    assert split_replicas(
        even, "speculative", serving=2, shadow=1, current={"speculative": 1, "baseline": 2}
    ) == {"speculative": 1, "baseline": 2}
    # Never an arm without pods, whatever the shares.
    assert split_replicas(
        split({"math": 0.01, "tool_call": 0.99}), "speculative", serving=3, shadow=1
    ) == {"speculative": 1, "baseline": 3}
    assert split_replicas(
        split({"math": 0.99, "tool_call": 0.01}, "baseline"), "baseline", serving=1, shadow=1
    ) == {"speculative": 1, "baseline": 1}


def _samples(
    rng: np.random.Generator, domain: str, ratio: float, n: int, start: int
) -> list[Sample]:
    out = []
    for i in range(n):
        base = float(rng.lognormal(np.log(0.02), 0.6))
        spec = base * ratio * float(rng.lognormal(0, 0.1))
        for arm, tpot, role in (("speculative", spec, "serving"), ("baseline", base, "shadow")):
            sample = Sample(
                arm=arm,  # type: ignore[arg-type]
                role=role,  # type: ignore[arg-type]
                pod=f"{arm}-0",
                domain=domain,
                started_at=float(i),
                concurrency=30,
                output_tokens=64,
                e2e_s=0.05 + 64 * tpot,
                tpot_s=tpot,
                measurement="stream_usage",
                pair_id=f"{start + i}",
            )
            out.append(sample)
    return out


def test_domain_verdicts_from_one_mixed_window() -> None:
    rng = np.random.default_rng(1)
    window = _samples(rng, "math", 0.6, 250, 0) + _samples(rng, "tool_call", 1.3, 220, 1000)
    verdicts = domain_verdicts(window, JudgeSettings(resamples=200))
    assert {d: v.outcome for d, v in verdicts.items()} == {
        "math": "improved",
        "tool_call": "regressed",
    }
    load = served_load(window)
    assert set(load) == {"math", "tool_call"}
    served = {d: sum(s.e2e_s for s in window if s.domain == d and s.role == "serving")
              for d in load}  # fmt: skip
    assert load == served
