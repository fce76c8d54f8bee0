"""Is the drafter really speculating? Two guardrails on the drafter arm's own counters.

- **SpeculationOff**: the drafter arm served requests in the window but none of its pods
  exports vLLM's spec-decode counters (``vllm:spec_decode_num_drafts``), or they counted no
  draft at all: the drafter was downloaded but ``--speculative-config`` never took effect.
- **AcceptanceCollapsed**: enough drafts, but the mean acceptance length (1 + accepted ÷
  drafts) is within ``margin`` of 1: the drafter's tokens are (nearly) never accepted, e.g. a
  broken quantized drafter.

Acceptance alone never decides on/off (acceptance stays high while the right decision flips
with load); these catch a drafter that is not there or useless, whatever the latency says.
Pure: the loop scrapes the drafter pods' ``/metrics`` at each window's start and end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specguard.sources import Reading, counter_delta

MIN_DRAFTS = 100
MARGIN = 0.05


@dataclass(frozen=True, slots=True)
class DraftCounters:
    pods: int  # drafter pods read at both ends of the window
    exporting: int  # of which export spec-decode counters
    drafts: float
    accepted: float


def draft_counters(start: Mapping[str, Reading], end: Mapping[str, Reading]) -> DraftCounters:
    """Per-window deltas summed over the drafter pods read at both ends."""
    pods = sorted(set(start) & set(end))
    exporting = drafts = accepted = 0.0
    for pod in pods:
        a, b = start[pod], end[pod]
        if b.drafts is None:
            continue
        exporting += 1
        drafts += counter_delta(a.drafts, b.drafts) or 0.0
        accepted += counter_delta(a.accepted, b.accepted) or 0.0
    return DraftCounters(len(pods), int(exporting), drafts, accepted)


def speculation_guardrail(
    counters: DraftCounters | None,
    spec_requests: int,
    min_requests: int,
    *,
    min_drafts: int = MIN_DRAFTS,
    margin: float = MARGIN,
) -> tuple[str, str] | None:
    """(reason, message) when the drafter arm does not really speculate, else None.

    "Off" needs ``min_requests`` served (no drafts over a few requests proves little);
    "collapsed" needs only ``min_drafts``: a drafter that accepts nothing is also slow, so
    its arm may serve fewer requests per window than the judge needs."""
    if counters is None or counters.pods == 0:
        return None
    if counters.exporting > 0 and counters.drafts >= min_drafts:
        length = 1.0 + counters.accepted / counters.drafts
        if length < 1.0 + margin:
            return (
                "AcceptanceCollapsed",
                f"mean acceptance length {length:.3f} over {counters.drafts:.0f} drafts "
                f"(1.000 = no draft token accepted; threshold {1.0 + margin:.2f})",
            )
        return None
    if spec_requests < min_requests:
        return None
    if counters.exporting == 0:
        return (
            "SpeculationOff",
            f"the drafter arm served {spec_requests} requests but none of its {counters.pods} "
            "pods exports spec-decode counters (vllm:spec_decode_num_drafts): the speculative "
            "config is not in effect",
        )
    if counters.drafts <= 0:
        return (
            "SpeculationOff",
            f"the drafter arm served {spec_requests} requests with 0 drafts over the window",
        )
    return None
