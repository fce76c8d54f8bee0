"""The tool-call guardrail's statistic: paired counts, the exact one-sided test, and how
often it fires when the arms break tool calls equally often (and when they do not)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specguard.judge import Sample, ToolCallPairs, binomial_tail


def pair(i: int, spec: str | None, base: str | None, *, ok: bool = True) -> list[Sample]:
    out = []
    for arm, result in (("speculative", spec), ("baseline", base)):
        out.append(
            Sample(
                arm=arm,  # type: ignore[arg-type]
                role="serving" if arm == "speculative" else "shadow",
                pod=f"{arm}-0",
                domain="tool_call",
                started_at=float(i),
                concurrency=4,
                output_tokens=40,
                e2e_s=1.0,
                tpot_s=0.01,
                pair_id=f"p{i}",
                status=200 if ok else 500,
                tool_call=result,  # type: ignore[arg-type]
            )
        )
    return out


def test_counts_only_completed_pairs_with_a_call() -> None:
    samples = [
        *pair(0, "valid", "valid"),
        *pair(1, "invalid_json", "valid"),
        *pair(2, "empty", "valid"),
        *pair(3, "valid", "invalid_schema"),
        *pair(4, "unknown_tool", "invalid_json"),  # both broken: concordant
        *pair(5, "none", "none"),  # no call on either arm: not a pair
        *pair(6, "none", "valid"),  # a text answer on one arm is not invalid
        *pair(7, "unchecked", "valid"),  # too large to check
        *pair(8, "invalid_json", "valid", ok=False),  # failed requests: the error guardrail's
        *pair(9, None, None),  # no tools in the request
    ]
    samples.append(pair(10, "invalid_json", None)[0])  # its other half never came
    assert ToolCallPairs.of(samples) == ToolCallPairs(
        pairs=6, invalid_speculative=3, invalid_baseline=2, only_speculative=2, only_baseline=1
    )


@pytest.mark.parametrize(
    ("k", "n", "expected"),
    [(0, 5, 1.0), (5, 5, 1 / 32), (4, 5, 6 / 32), (6, 5, 0.0), (1, 1, 0.5), (3, 4, 5 / 16)],
)
def test_binomial_tail_exact(k: int, n: int, expected: float) -> None:
    assert math.isclose(binomial_tail(k, n), expected, rel_tol=1e-12)


def test_binomial_tail_for_large_n_does_not_overflow() -> None:
    # P(X >= 5001) = P(X <= 4999) = 1 - P(X >= 5000), by symmetry.
    assert math.isclose(binomial_tail(5001, 10000) + binomial_tail(5000, 10000), 1.0,
                        rel_tol=1e-9)  # fmt: skip
    assert binomial_tail(6000, 10000) < 1e-80


def test_excess_needs_confidence_a_minimum_and_more_than_the_baseline() -> None:
    # 7 drafter-only failures, 0 baseline-only: p = 1/128 < 0.01.
    found = ToolCallPairs(pairs=200, invalid_speculative=9, invalid_baseline=2,
                          only_speculative=7, only_baseline=0)  # fmt: skip
    assert found.excess(0.99) == (
        "invalid tool calls on 9 of 200 mirrored pairs with the drafter vs 2 without (7 "
        "invalid only with the drafter, 0 only without; one-sided exact p=0.0078 < 0.01)"
    )
    assert found.excess(0.999) is None  # p = 0.0078 is not below 0.001
    few = ToolCallPairs(pairs=50, invalid_speculative=4, invalid_baseline=0,
                        only_speculative=4, only_baseline=0)  # fmt: skip
    assert few.excess(0.9) is None  # under MIN_ONLY drafter-only failures
    even = ToolCallPairs(pairs=500, invalid_speculative=40, invalid_baseline=40,
                         only_speculative=30, only_baseline=30)  # fmt: skip
    assert even.excess(0.5) is None
    assert ToolCallPairs().excess(0.99) is None and ToolCallPairs().p_value() is None


def _windows(
    rng: np.random.Generator,
    windows: int,
    pairs: int,
    *,
    spec_rate: float,
    base_rate: float,
    shared: float,
) -> list[ToolCallPairs]:
    """Windows of pairs: a shared failure (the prompt, max_tokens) breaks both arms at
    ``shared``; otherwise each arm breaks at its own rate, independently."""
    out = []
    for _ in range(windows):
        both = rng.random(pairs) < shared
        spec = both | (rng.random(pairs) < spec_rate)
        base = both | (rng.random(pairs) < base_rate)
        out.append(ToolCallPairs(
            pairs=pairs, invalid_speculative=int(spec.sum()), invalid_baseline=int(base.sum()),
            only_speculative=int((spec & ~base).sum()), only_baseline=int((base & ~spec).sum()),
        ))  # fmt: skip
    return out


@pytest.mark.parametrize(("rate", "pairs"), [(0.02, 200), (0.10, 200), (0.30, 60)])
def test_equal_arms_almost_never_trip(rate: float, pairs: int) -> None:
    # A/A: the same rate of broken calls on both arms (and 5% broken on both at once).
    rng = np.random.default_rng(7)
    windows = _windows(rng, 3000, pairs, spec_rate=rate, base_rate=rate, shared=0.05)
    tripped = sum(w.excess(0.99) is not None for w in windows)
    # The exact test's one-sided level is at most 1% (discrete: below it).
    assert tripped / len(windows) <= 0.01, tripped


# Measured with these seeds (400 windows each): 0.97, 0.35, 0.70 in one window; the
# guardrail acts on the first window that is significant, so within three windows
# 1 - (1 - p)^3: 0.99997, 0.72, 0.97.
@pytest.mark.parametrize(
    ("spec_rate", "base_rate", "pairs", "power"),
    [(0.10, 0.01, 200, 0.95), (0.05, 0.01, 200, 0.30), (0.25, 0.05, 60, 0.65)],
)
def test_a_drafter_that_breaks_calls_is_caught(
    spec_rate: float, base_rate: float, pairs: int, power: float
) -> None:
    rng = np.random.default_rng(11)
    windows = _windows(rng, 400, pairs, spec_rate=spec_rate, base_rate=base_rate, shared=0.02)
    caught = sum(w.excess(0.99) is not None for w in windows) / len(windows)
    assert caught >= power, caught
