from __future__ import annotations

import math

from specguard.api._status import Condition
from specguard.controller._conditions import evidence_sentence, set_condition, verdict_sentence
from specguard.controller._plugin import guards_sentence
from specguard.judge import ArmLoad, Cumulative
from specguard.judge._verdict import DomainRatio, Verdict

Z99 = 2.5758293035489004


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
    assert verdict_sentence(_verdict(), "speculative") == (
        "per-token latency +27% with the drafter (99% CI +21..+33%) at 48 concurrent per "
        "serving pod, the median per-request ratio of 1210 pairs; by domain: tool_call +41%, "
        "math −12%"
    )


def test_the_load_is_the_serving_pods_and_the_shadow_is_named_when_apart() -> None:
    """The Repromoted Event said "at 8 concurrent per pod", the drafter shadow's count, while
    the serving pods held 15–16: the figure is the serving pods', the shadow's beside it."""
    lighter = _verdict(concurrency={"speculative": 8.0, "baseline": 15.5}, outcome="improved",
                       ratio=0.9, ci_low=0.88, ci_high=0.92)  # fmt: skip
    assert verdict_sentence(lighter, "baseline") == (
        "per-token latency −10% with the drafter (99% CI −12..−8%) at 16 concurrent per "
        "serving pod (the drafter shadow at 8), the median per-request ratio of 1210 pairs; "
        "by domain: tool_call +41%, math −12%"
    )
    # Within 2 requests or 25%: no second figure.
    near = _verdict(concurrency={"speculative": 14.0, "baseline": 15.5})
    assert "shadow" not in verdict_sentence(near, "baseline")
    assert " at 16 concurrent per serving pod," in verdict_sentence(near, "baseline")


def test_one_domain_is_the_headline_and_unpaired_names_its_statistic() -> None:
    one = _verdict(domains=(DomainRatio("chat", 10, 10, 1.27),))
    assert "by domain" not in verdict_sentence(one, "speculative")
    matched = "ratio of median per-token latency at matched concurrency"
    unpaired = _verdict(
        method="stratified", n={"speculative": 300, "baseline": 280}, quantity=matched
    )
    assert verdict_sentence(unpaired, "speculative").endswith(
        "at 48 concurrent per serving pod, the ratio of median per-token latency at matched "
        "concurrency, 300+280 requests; by domain: tool_call +41%, math −12%"
    )


def test_a_cumulative_change_says_what_the_windows_show_together() -> None:
    windows = [(1.07, 0.05), (1.05, 0.05), (1.08, 0.05)]
    weight = sum(1 / ((2 * math.log(1 + h) / (2 * Z99)) ** 2 + 0.005**2) for _, h in windows)
    weighted = sum(
        math.log(r) / ((2 * math.log(1 + h) / (2 * Z99)) ** 2 + 0.005**2) for r, h in windows
    )
    evidence = Cumulative(total=9.3, windows=3, weighted=weighted, weight=weight)
    last = _verdict(outcome="neutral", ratio=1.08, ci_low=1.08 / 1.05, ci_high=1.08 * 1.05,
                    concurrency={"speculative": 16.0, "baseline": 16.0})  # fmt: skip
    ratio = math.exp(weighted / weight)
    width = math.expm1(Z99 / math.sqrt(weight))
    assert evidence_sentence(evidence, last, "speculative") == (
        f"sustained loss over 3 windows: per-token latency +{(ratio - 1) * 100:.1f}% with the "
        f"drafter (99% CI +{(ratio / (1 + width) - 1) * 100:.1f}..+"
        f"{(ratio * (1 + width) - 1) * 100:.1f}%, the 3 windows together) at 16 concurrent per "
        "serving pod; last window +8% (99% CI +3..+13%), the median per-request ratio of 1210 "
        "pairs; by domain: tool_call +41%, math −12%"
    )


def test_the_load_is_what_the_engines_held_where_the_routers_counted_otherwise() -> None:
    """A rollback said 184 concurrent per serving pod (the routers' count) while the
    drafter's engines held 256 running + 30-41 waiting: the engines' figure, the routers'
    beside it; a queue that moved over the window shows from its start to its end."""
    routers = _verdict(concurrency={"speculative": 184.0, "baseline": 183.0})
    full = ArmLoad(start={"speculative": 286.0}, end={"speculative": 297.0})
    assert verdict_sentence(routers, "speculative", full) == (
        "per-token latency +27% with the drafter (99% CI +21..+33%) at 297 requests per "
        "serving pod in the engines (running + waiting; the routers counted 184 in flight), "
        "the median per-request ratio of 1210 pairs; by domain: tool_call +41%, math −12%"
    )
    climbing = ArmLoad(start={"speculative": 200.0, "baseline": 60.0},
                       end={"speculative": 290.0, "baseline": 64.0})  # fmt: skip
    assert verdict_sentence(routers, "speculative", climbing).startswith(
        "per-token latency +27% with the drafter (99% CI +21..+33%) at 200→290 requests per "
        "serving pod in the engines (running + waiting, from the window's start to its end; "
        "the routers counted 184 in flight; the baseline shadow at 64), the median "
    )
    # Engines that held what the routers counted, or no reading: the routers' figure.
    agree = ArmLoad(start={"speculative": 180.0}, end={"speculative": 190.0})
    plain = verdict_sentence(routers, "speculative")
    assert verdict_sentence(routers, "speculative", agree) == plain
    assert " at 184 concurrent per serving pod, " in plain
    # The cumulative sentence gives the same load.
    evidence = Cumulative(total=9.3, windows=3, weighted=3 * math.log(1.06) * 1e4, weight=3e4)
    assert " the 3 windows together) at 297 requests per serving pod in the engines (running " \
        "+ waiting; the routers counted 184 in flight); last window +27%" in evidence_sentence(
            evidence, routers, "speculative", full)  # fmt: skip


def test_a_guards_tolerance_keeps_its_digits_in_words() -> None:
    sentence = guards_sentence([{"name": "e2eP99", "outcome": "clear", "ratio": 1.05,
                                 "pairs": 600, "tolerance": 0.125}])  # fmt: skip
    assert "tolerance +12.5%, 600 pairs" in sentence, sentence
