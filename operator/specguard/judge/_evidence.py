"""What one decision sees: the :class:`Evidence` record that ``judge.step`` takes.

The operator gathers it once per tick (``specguard.controller``): at a window's end with
that window's verdict and counters, between windows with only what the cluster shows (the
drafter pods' startup) and the user's annotations. Each guardrail reads its own field.

Adding evidence (a tool-call validity count, say): add a field here with a default that
means "not observed", read it in ``step`` or in a guardrail (``judge._guardrails``), and
fill it in the controller's ``gather`` — no signature changes anywhere else.

Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specguard._arms import ARM_BASELINE, ARM_SPECULATIVE, Arm, LoadMatch
from specguard.judge._matching import Matching
from specguard.judge._served import Served
from specguard.judge._toolcalls import ToolCallPairs
from specguard.judge._verdict import Verdict


@dataclass(frozen=True, slots=True)
class Startup:
    """The drafter arm's startup, as the cluster shows it.

    ``ready``: False while some drafter pod has never become ready, True when all have,
    None when there is no drafter pod (unknown: never trips). ``since``: the creation time
    of the oldest drafter pod still not ready."""

    ready: bool | None = None
    since: float | None = None
    restarts: int = 0


@dataclass(frozen=True, slots=True)
class ArmErrors:
    """Requests and failed requests per arm over the window."""

    spec_requests: int = 0
    spec_errors: int = 0
    base_requests: int = 0
    base_errors: int = 0

    @classmethod
    def of(cls, verdict: Verdict) -> ArmErrors:
        """The counts a verdict carries (router samples; histograms count no errors)."""
        return cls(
            spec_requests=verdict.requests.get(ARM_SPECULATIVE, 0),
            spec_errors=verdict.errors.get(ARM_SPECULATIVE, 0),
            base_requests=verdict.requests.get(ARM_BASELINE, 0),
            base_errors=verdict.errors.get(ARM_BASELINE, 0),
        )


@dataclass(frozen=True, slots=True)
class DraftSpan:
    """One drafter pod's counters between two readings: its running requests at both
    (``vllm:num_requests_running``: the batch the per-batch-size schedule looks at), the
    request-steps it made (``vllm:inter_token_latency_seconds_count``: one observation per
    step per request), and the drafts and draft tokens it counted."""

    batch_low: float
    batch_high: float
    steps: float
    drafts: float
    draft_tokens: float


@dataclass(frozen=True, slots=True)
class DraftCounters:
    """The drafter arm's spec-decode counters over the window, summed over its pods read at
    both ends (``specguard.sources.draft_counters`` subtracts two readings). ``spans``: each
    exporting pod's own counters with its batch at both ends (where it exports the running
    gauge and the inter-token histogram), for the check that the rung is in effect."""

    pods: int = 0  # drafter pods read at both ends of the window
    exporting: int = 0  # of which export spec-decode counters
    drafts: float = 0.0
    accepted: float = 0.0
    draft_tokens: float = 0.0
    spans: tuple[DraftSpan, ...] = ()


@dataclass(frozen=True, slots=True)
class DrafterRun:
    """What the drafter arm is configured to run (the ladder's rung of ``spec.drafter``):
    vLLM's method, k (None: vLLM's default) and the per-batch-size schedule's
    ``(start, end, k)`` ranges (empty: k at every batch size)."""

    method: str
    k: int | None = None
    schedule: tuple[tuple[int, int, int], ...] = ()
    rung: str = "configured"

    def k_at(self, batch: int) -> int | None:
        """The draft length the rung asks for at this batch size (vLLM keeps the last
        range's k past its end)."""
        for low, high, k in self.schedule:
            if low <= batch <= high:
                return k
        if self.schedule and batch > self.schedule[-1][1]:
            return self.schedule[-1][2]
        return self.k


@dataclass(frozen=True, slots=True)
class ArmLoad:
    """Requests in the arms' engines (vLLM's ``num_requests_running`` + ``num_requests_waiting``)
    per pod, read at the window's start and end (``specguard.sources.arm_load``: the mean over
    the pods read at both ends), and the load-match rule the shadow was copied by over the
    window (``"arrivals"`` only when it held from the window's start: a window that saw the
    rule change says ``"in_flight"``). An arm without a pod read at both ends is absent.
    ``last``: the same pods' count at the operator's previous look in this window, when it
    looked between window ends and read every one of them there (else the arm is absent
    from it). ``done``: requests the same pods finished from the start to the end, per pod
    (vLLM's per-request TPOT histogram's count; an arm whose pods do not export it is
    absent). ``split``: routes by domain gave the arms different traffic (no arm is then a
    yardstick for the other's arrivals)."""

    start: Mapping[Arm, float] = field(default_factory=dict)
    end: Mapping[Arm, float] = field(default_factory=dict)
    pods: Mapping[Arm, int] = field(default_factory=dict)
    rule: LoadMatch = "in_flight"
    last: Mapping[Arm, float] = field(default_factory=dict)
    done: Mapping[Arm, float] = field(default_factory=dict)
    split: bool = False


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything one policy step sees. Defaults mean "not observed" and never act.

    - ``verdict``: the verdict of the window that ended now; None between windows (then
      nothing counts toward a streak, and only the guardrails that need no window act);
    - ``startup``: the drafter pods' startup (the startup guardrail);
    - ``errors``: request and error counts per arm over the window (the error guardrail;
      ``ArmErrors.of(verdict)`` for router samples);
    - ``speculation``: the drafter arm's spec-decode counters over the window (the
      speculation guardrail);
    - ``drafter``: what the drafter arm is configured to run (the speculation guardrail
      checks its counters against it: ``RungNotInEffect``, ``NothingToPropose``); None:
      not known (the counters are checked against no rung);
    - ``load``: requests in each arm's engines at the window's start and at its end, or at a
      look between window ends (the overload guardrail);
    - ``tool_calls``: the window's mirrored pairs with tools, and where their tool calls were
      invalid (the tool-call guardrail);
    - ``pin``: the mode a user pinned (``specguard.io/pin-mode``): the policy keeps its
      memory but neither judges nor acts, and the target is the pin;
    - ``retry``: the value of ``specguard.io/retry``; a value the state has not seen is a
      command: re-promote from baseline, or clear a flap stop;
    - ``spans``: what the window spans that keeps it out of the evidence ("a swap", "an
      operator restart", "a change in the pods (...)"), or None: such a window is judged and
      shown but counts toward no change (it breaks a streak; the cumulative evidence holds);
    - ``matching``: how the window's shadow was loaded and what its clients were told to be
      (``judge._matching``: which verdicts count toward a change); None without mirrored
      per-request samples (every verdict counts);
    - ``served``: what the serving arm gave the clients over the window (``judge._served``:
      remembered per load, and holding a change toward an arm the clients fared worse with).
    """

    verdict: Verdict | None = None
    startup: Startup = field(default_factory=Startup)
    errors: ArmErrors | None = None
    speculation: DraftCounters | None = None
    drafter: DrafterRun | None = None
    load: ArmLoad | None = None
    tool_calls: ToolCallPairs | None = None
    pin: Arm | None = None
    retry: str | None = None
    spans: str | None = None
    matching: Matching | None = None
    served: Served | None = None


__all__ = [
    "ArmErrors",
    "ArmLoad",
    "DraftCounters",
    "DraftSpan",
    "DrafterRun",
    "Evidence",
    "Startup",
]
