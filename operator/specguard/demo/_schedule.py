"""The demo's traffic schedule: phases of one domain at one load for a while (pure).

A phase is written ``DOMAIN:PER_POD:SECONDS``, e.g. ``tool_call:144:100`` (DOMAIN math,
tool_call, mixed: every other stream math, the others tool calls, or agents: one stream
in four math, the others tool calls): ``PER_POD`` closed-loop streams for every serving pod
(the client runs ``PER_POD × replicas`` streams, each sending its next request when its last
one is answered), so the concurrency each engine sees is the one the simulator's crossover
is stated in. ``DOMAIN:RATE/s:SECONDS``, e.g. ``tool_call:80/s:90``, is an open loop
instead: ``RATE`` requests per second per serving pod (Poisson arrivals at ``RATE ×
replicas`` a second, sent whatever the answers), the clients that arrive at their own pace
(a mixed domain then alternates by arrival). Phases are separated by commas; one schedule
may mix both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specguard._args import UsageError

# "mixed": half the streams math, half tool calls, at once (one load, two domains);
# "agents": one stream in four math, the others tool calls (an agent's mix).
DOMAINS = ("math", "tool_call", "mixed", "agents")
MIXES: dict[str, tuple[str, ...]] = {
    "mixed": ("math", "tool_call"),
    "agents": ("math", "tool_call", "tool_call", "tool_call"),
}
# Low-concurrency math, tool calls past the DeepSeek-V4 profile's fixed-k=7 crossover (on tool
# calls the drafter loses from between 96 and 128 streams per engine: docs/demo.md), math again.
# The demo's cooldown (30 s) ends well inside the tool-call phase after the rollback (the
# drafter must stay off there on its verdicts, not on the cooldown), and the last phase leaves
# room for the re-promotion's three improved windows and a swap.
DEFAULT_SCHEDULE = "math:4:30,tool_call:144:90,math:4:100"
MAX_PER_POD = 512
MAX_RATE = 1000.0  # requests per second per serving pod
MAX_PHASE_S = 3600


@dataclass(frozen=True, slots=True)
class Phase:
    domain: str
    per_pod: int  # closed-loop streams per serving pod (0 in an open-loop phase)
    seconds: float
    rate: float | None = None  # open loop: requests per second per serving pod

    @property
    def open(self) -> bool:
        return self.rate is not None

    def streams(self, serving_pods: int) -> int:
        """Closed-loop streams in all (0 in an open-loop phase)."""
        return self.per_pod * serving_pods

    def label(self) -> str:
        if self.domain == "mixed":
            return "math + tool calls"
        if self.domain == "agents":
            return "math + 3× tool calls"
        return "tool calls" if self.domain == "tool_call" else self.domain

    def per_pod_text(self) -> str:
        """``144/pod`` (streams) or ``80/s/pod`` (arrivals)."""
        return f"{self.rate:g}/s/pod" if self.rate is not None else f"{self.per_pod}/pod"

    def load_text(self, serving_pods: int) -> str:
        """The load in words, for the demo's lines."""
        if self.rate is not None:
            return (
                f"{self.rate * serving_pods:g} requests/s arriving at their own pace "
                f"({self.rate:g} per serving pod)"
            )
        return f"{self.streams(serving_pods)} streams ({self.per_pod} per serving pod)"

    def domain_of(self, stream: int) -> str:
        """The domain stream number ``stream`` sends in this phase."""
        mix = MIXES.get(self.domain)
        return mix[stream % len(mix)] if mix else self.domain


@dataclass(frozen=True, slots=True)
class Span:
    """A phase placed in time (seconds since the schedule's start)."""

    index: int
    phase: Phase
    start: float
    end: float


def parse_schedule(text: str, flag: str = "--schedule") -> tuple[Phase, ...]:
    """``DOMAIN:PER_POD:SECONDS[,...]`` → phases; UsageError naming ``flag`` otherwise."""
    phases = []
    for number, part in enumerate(text.split(","), start=1):
        fields = part.strip().split(":")
        if len(fields) != 3:
            raise UsageError(
                f"{flag}: phase {number} {part.strip()!r}: expected DOMAIN:PER_POD:SECONDS"
            )
        domain, per_pod, seconds = fields
        if domain not in DOMAINS:
            raise UsageError(
                f"{flag}: phase {number}: domain must be one of {', '.join(DOMAINS)}, "
                f"got {domain!r}"
            )
        rate = None
        if per_pod.endswith("/s"):
            try:
                rate = float(per_pod[:-2])
            except ValueError:
                rate = -1.0
            if not 0.01 <= rate <= MAX_RATE:
                raise UsageError(
                    f"{flag}: phase {number}: requests per second per pod must be "
                    f"0.01..{MAX_RATE:g}, got {per_pod[:-2]!r}"
                )
        elif not per_pod.isdigit() or not 1 <= int(per_pod) <= MAX_PER_POD:
            raise UsageError(
                f"{flag}: phase {number}: streams per pod must be 1..{MAX_PER_POD} (or "
                f"RATE/s for an open loop), got {per_pod!r}"
            )
        try:
            length = float(seconds)
        except ValueError:
            length = -1.0
        if not 1 <= length <= MAX_PHASE_S:
            raise UsageError(
                f"{flag}: phase {number}: seconds must be 1..{MAX_PHASE_S}, got {seconds!r}"
            )
        phases.append(Phase(domain, 0 if rate is not None else int(per_pod), length, rate))
    return tuple(phases)


def spans(phases: Sequence[Phase]) -> tuple[Span, ...]:
    out = []
    at = 0.0
    for index, phase in enumerate(phases):
        out.append(Span(index, phase, at, at + phase.seconds))
        at += phase.seconds
    return tuple(out)


def format_schedule(phases: Sequence[Phase]) -> str:
    return ",".join(
        f"{p.domain}:{f'{p.rate:g}/s' if p.rate is not None else p.per_pod}:{p.seconds:g}"
        for p in phases
    )


def total_seconds(phases: Sequence[Phase]) -> float:
    return sum(p.seconds for p in phases)


__all__ = [
    "DEFAULT_SCHEDULE",
    "DOMAINS",
    "Phase",
    "Span",
    "format_schedule",
    "parse_schedule",
    "spans",
    "total_seconds",
]
