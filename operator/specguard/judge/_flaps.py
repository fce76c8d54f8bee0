"""The flap rule: which automatic changes count toward ``max_flaps``.

A drafter's gain moves with the traffic: it wins at a few requests per pod and loses at
many, wins on math and loses on tool calls. An operator that follows the traffic changes
mode each time the traffic crosses that line, and every one of those changes is right. What
the flap limit is for is the other kind: changes back and forth while the traffic stays
the same (a drafter at the edge of the tolerance, evidence the arms read differently
depending on which one serves), which swap pods for nothing.

So each automatic change is kept with the :class:`Traffic` its deciding window was judged
on. With two modes, every change undoes the one before; it **continues the run** of changes
back and forth when it was decided on the same traffic as the change before it
(:func:`same_traffic`), and starts a new run otherwise. Automatic changes stop (``halted``)
when a run holds ``max_flaps`` changes within ``flap_window_s``: rolled back, re-promoted,
rolled back on one traffic (the default 3). Changes that follow the traffic (rolled back at
40 requests per pod, re-promoted at 4, rolled back at 40 again) each start a run of their
own and never stop anything, however many a day brings.

Traffic is what stays the same whichever arm serves:

- the load: the heavier arm's in-flight requests per pod (the median over the window's
  judged requests, ``Verdict.concurrency``). Closed-loop clients keep a fixed number of
  requests open: the serving pods hold them and the shadow no more (the in-flight load
  match). Open-loop clients arrive at their own pace: each arm holds what its own speed
  makes of a serving pod's arrivals (the arrivals load match). Either way the heavier
  arm's count does not depend on which arm serves, as the serving arm's would (open loop)
  or the faster arm's would (a faster shadow runs lighter);
- the mix of request domains: each domain's share of the judged requests
  (``Verdict.domains``).

Two changes were decided on the same traffic when their loads are within the judge's own
load check (25%, at least 2 requests apart) and their mixes within 25% (total variation:
at most a quarter of the requests changed domain). What a change's window could not show
(a guardrail between windows has no window; histogram sources have no domains) is taken to
be the same: unknown traffic never lets a run through.

Pure data and functions; :class:`Traffic` is stored in ``status.policy.flapTraffic``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specguard.judge._verdict import Verdict

# The load check of flap traffic (the judge's own relative tolerance, with a slack for counts).
LOAD_TOLERANCE = 0.25
LOAD_SLACK = 2.0
# Largest share of requests that may change domain between two changes on the same traffic.
MIX_TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Traffic:
    """The traffic a change was decided on: ``load``, the heavier arm's in-flight requests
    per pod (None: unknown), and ``domains``, each request domain's share (empty:
    unknown)."""

    load: float | None = None
    domains: Mapping[str, float] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.load is not None:
            out["load"] = round(self.load, 1)
        if self.domains:
            out["domains"] = {d: round(s, 3) for d, s in sorted(self.domains.items())}
        return out

    @classmethod
    def from_wire(cls, data: Any, key: str = "flapTraffic") -> Traffic:
        """What :meth:`to_wire` stored; ValueError names a field that is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{key}: expected an object, got {data!r}")
        load = data.get("load")
        if load is not None and not _number(load):
            raise ValueError(f"{key}.load: expected a number >= 0, got {load!r}")
        domains = data.get("domains") or {}
        if not isinstance(domains, Mapping):
            raise ValueError(f"{key}.domains: expected an object, got {domains!r}")
        for name, share in domains.items():
            if not _number(share) or share > 1:
                raise ValueError(f"{key}.domains.{name}: expected a share 0..1, got {share!r}")
        return cls(
            None if load is None else float(load), {str(d): float(s) for d, s in domains.items()}
        )

    def describe(self) -> str:
        """E.g. "40 concurrent per pod, tool_call 70% math 30%", "4 concurrent per pod, all
        chat"."""
        parts = []
        if self.load is not None:
            parts.append(f"{self.load:.0f} concurrent per pod")
        if len(self.domains) == 1:
            parts.append(f"all {next(iter(self.domains))}")
        elif self.domains:
            ranked = sorted(self.domains.items(), key=lambda x: (-x[1], x[0]))
            parts.append(" ".join(f"{d} {s:.0%}" for d, s in ranked))
        return ", ".join(parts) or "traffic unknown"


def _number(value: Any) -> bool:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return ok and math.isfinite(value) and value >= 0


def traffic_of(verdict: Verdict | None) -> Traffic | None:
    """The traffic a window was judged on (None when it shows none: no window)."""
    if verdict is None:
        return None
    loads = [x for x in verdict.concurrency.values() if x is not None and math.isfinite(x)]
    counts = {d.domain: d.speculative + d.baseline for d in verdict.domains}
    total = sum(counts.values())
    domains = {d: n / total for d, n in counts.items()} if total > 0 else {}
    if not loads and not domains:
        return None
    return Traffic(max(loads) if loads else None, domains)


def same_load(a: float, b: float) -> bool:
    """Two per-pod request counts within the judge's default load check (25%, at least 2
    requests apart)."""
    return abs(a - b) <= max(LOAD_SLACK, LOAD_TOLERANCE * max(a, b))


def same_traffic(a: Traffic | None, b: Traffic | None) -> bool:
    """Were two changes decided on the same traffic? What either could not show counts as
    the same."""
    if a is None or b is None:
        return True
    if a.load is not None and b.load is not None and not same_load(a.load, b.load):
        return False
    if a.domains and b.domains:
        names = set(a.domains) | set(b.domains)
        moved = sum(abs(a.domains.get(d, 0.0) - b.domains.get(d, 0.0)) for d in names) / 2
        if moved > MIX_TOLERANCE:
            return False
    return True


__all__ = [
    "LOAD_SLACK",
    "LOAD_TOLERANCE",
    "MIX_TOLERANCE",
    "Traffic",
    "same_load",
    "same_traffic",
    "traffic_of",
]
