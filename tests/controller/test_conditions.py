from __future__ import annotations

from specguard.api._status import Condition
from specguard.controller._conditions import set_condition, verdict_sentence
from specguard.judge._verdict import DomainRatio, Verdict


def test_transition_time_moves_only_with_status() -> None:
    one = set_condition([], "Ready", True, "Serving", "2/2", generation=1, now="T1")
    two = set_condition(one, "Ready", True, "Serving", "1/2", generation=1, now="T2")
    three = set_condition(two, "Ready", False, "Swapping", "x", generation=1, now="T3")
    assert two == [
        Condition(
            type="Ready",
            status="True",
            reason="Serving",
            message="1/2",
            observed_generation=1,
            last_transition_time="T1",
        )
    ]
    assert three[0].last_transition_time == "T3"


def _verdict(**kw: object) -> Verdict:
    base: dict[str, object] = dict(
        outcome="regressed",
        ratio=1.27,
        ci_low=1.21,
        ci_high=1.33,
        confidence=0.99,
        tolerance=0.03,
        method="paired",
        basis="router",
        median_s={},
        n={},
        n_pairs=1210,
        concurrency={"speculative": 48.0, "baseline": 47.0},
        domains=(DomainRatio("tool_call", 10, 10, 1.41), DomainRatio("math", 10, 10, 0.88)),
    )
    base.update(kw)
    return Verdict(**base)  # type: ignore[arg-type]


def test_event_sentence_has_the_numbers() -> None:
    assert verdict_sentence(_verdict()) == (
        "per-token latency +27% with the drafter (99% CI +21..+33%) at 48 concurrent per pod, "
        "n=1210 pairs; tool_call +41%, math −12%"
    )
