"""Does the drafter break tool calls? Mirrored pairs compared call by call.

Each mirrored request that carried tools is answered by both arms; the router records what
each answer's tool calls were (``Sample.tool_call``: ``specguard.toolcalls``). A pair counts
when both answers completed and at least one made a call. The two arms answer the same
request, so the comparison is paired (McNemar's): only the **discordant** pairs say
anything — ``b`` pairs invalid on the drafter arm only, ``c`` on the baseline arm only.
Without a difference between the arms each discordant pair is a fair coin, and

    p = P(X ≥ b),  X ~ Binomial(b + c, 1/2)

is the chance of seeing at least ``b`` drafter-only failures. The drafter's excess is
**confident** when ``p < 1 − confidence`` (the resource's ``evaluation.confidence``, 0.99
by default), it failed alone at least ``min_only`` times (5) and more often than the
baseline did alone. The test is exact and needs no rate assumptions: a model that breaks
some tool calls on both arms (truncated at ``max_tokens``, a bad prompt) adds concordant
pairs, which do not count.

Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from specguard.judge._sample import INVALID_TOOL_CALLS, Sample

CHECKED: frozenset[str] = INVALID_TOOL_CALLS | {"valid", "none"}
MIN_ONLY = 5


@dataclass(frozen=True, slots=True)
class ToolCallPairs:
    """Mirrored pairs with tools: how many, and where the calls were invalid."""

    pairs: int = 0
    invalid_speculative: int = 0
    invalid_baseline: int = 0
    only_speculative: int = 0  # b: invalid with the drafter, valid without
    only_baseline: int = 0  # c: the other way round

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> ToolCallPairs:
        """The pairs among ``samples`` (both halves ok, checked, one of them a call)."""
        halves: dict[str, dict[str, str]] = {}
        for s in samples:
            if s.pair_id is None or s.tool_call not in CHECKED or not s.ok:
                continue
            halves.setdefault(s.pair_id, {})[s.arm] = s.tool_call
        pairs = spec_bad = base_bad = only_spec = only_base = 0
        for arms in halves.values():
            spec, base = arms.get("speculative"), arms.get("baseline")
            if spec is None or base is None or (spec == "none" and base == "none"):
                continue
            pairs += 1
            spec_invalid, base_invalid = spec in INVALID_TOOL_CALLS, base in INVALID_TOOL_CALLS
            spec_bad += spec_invalid
            base_bad += base_invalid
            only_spec += spec_invalid and not base_invalid
            only_base += base_invalid and not spec_invalid
        return cls(pairs, spec_bad, base_bad, only_spec, only_base)

    def p_value(self) -> float | None:
        """One-sided exact p of the drafter-only failures (None without discordant pairs)."""
        n = self.only_speculative + self.only_baseline
        if n == 0:
            return None
        return binomial_tail(self.only_speculative, n)

    def excess(self, confidence: float, min_only: int = MIN_ONLY) -> str | None:
        """The sentence when the drafter arm's excess of invalid tool calls is confident."""
        p = self.p_value()
        b, c = self.only_speculative, self.only_baseline
        if p is None or b < min_only or b <= c or p >= 1.0 - confidence:
            return None
        return (
            f"invalid tool calls on {self.invalid_speculative} of {self.pairs} mirrored pairs "
            f"with the drafter vs {self.invalid_baseline} without ({b} invalid only with the "
            f"drafter, {c} only without; one-sided exact p={p:.2g} < {1.0 - confidence:.2g})"
        )


def binomial_tail(k: int, n: int) -> float:
    """P(X ≥ k) for X ~ Binomial(n, 1/2), in log space (no overflow for large n)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    log_half_n = n * math.log(0.5)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n
             for i in range(k, n + 1)]  # fmt: skip
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


__all__ = ["MIN_ONLY", "ToolCallPairs", "binomial_tail"]
