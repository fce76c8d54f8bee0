"""One evaluation window's evidence, whichever source it came from: the operator's interface.

Every source has the same calls (the `Source` protocol; ``open_source`` makes the one a
resource's ``spec.metricsSource`` names)::

    source.set_targets(Targets(routers=..., pods=...))   # each tick: what may be read
    source.read_ahead()                                  # each tick while a window is open
    window = await source.collect(start, end)            # epoch seconds, [start, end)
    window.state     # "ok"; "empty" (nothing to judge); "down" (the source failed)
    window.problem   # one line when not ok
    verdict = window.verdict(settings)                   # the judge, on what was collected

- `RouterFeedSource` (sources.router_feed): per-request samples from every router pod's
  ``GET /samples``, read ahead between window ends, deduplicated, each assigned to the
  window its request ended in (a mirrored pair whole, to the window its later half ended
  in), with the concurrency at its pod counted over the requests of every router (see
  `pod_concurrency`). Paired by ``pair_id`` when the judge runs.
- `PrometheusSource` (sources.prometheus) and `ScrapeSource` (sources.scrape): per-arm TPOT
  histograms from vLLM's own metrics, for when there are no router samples.

A source never raises for a source problem: unreachable or failing endpoints, or a window
whose data may be incomplete (one router of two unreadable, a read that stopped before its
end), give state ``down``; a window with nothing to judge gives ``empty``; each with a
one-line ``problem``. Lesser trouble (a router restart, invalid records, late samples) keeps
state ``ok`` and is listed in ``notes``, which the verdict carries among its reasons.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from specguard.judge import (
    BASIS_PROMETHEUS,
    Arm,
    Histogram,
    JudgeSettings,
    Sample,
    Verdict,
    judge,
    judge_histograms,
)

SourceState = Literal["ok", "empty", "down"]
SourceKind = Literal["router", "prometheus", "scrape"]


@dataclass(frozen=True)
class ArmHistograms:
    """Histogram evidence of one window (Prometheus or scrape)."""

    tpot: Mapping[Arm, Histogram]
    concurrency: Mapping[Arm, float | None] = field(default_factory=dict)
    pod_concurrency: Mapping[Arm, Mapping[str, float]] = field(default_factory=dict)
    acceptance_length: float | None = None
    basis: str = BASIS_PROMETHEUS


@dataclass(frozen=True)
class WindowSamples:
    """What one source collected for the window ``[start, end)`` (epoch seconds).

    ``samples`` holds the router feed's per-request samples (empty for histogram sources);
    ``histograms`` the Prometheus or scrape evidence (None for the router feed).
    ``served`` holds every serving request that ended in the window, whether ``samples``
    holds it now or a later window will (a mirrored pair goes whole to the window its later
    half ended in): what the clients' classification reads, by when requests ended.
    """

    source: SourceKind
    start: float
    end: float
    state: SourceState
    problem: str = ""
    samples: tuple[Sample, ...] = ()
    histograms: ArmHistograms | None = None
    notes: tuple[str, ...] = ()
    served: tuple[Sample, ...] = ()

    @property
    def degraded(self) -> bool:
        """The source is down or had nothing for this window: no verdict can be drawn."""
        return self.state != "ok"

    def verdict(self, settings: JudgeSettings | None = None) -> Verdict:
        """The judge's verdict on this window (inconclusive, with the problem, if degraded)."""
        if self.histograms is not None:
            h = self.histograms
            empty = Histogram((), ())
            verdict = judge_histograms(
                h.tpot.get("speculative", empty),
                h.tpot.get("baseline", empty),
                settings,
                concurrency={str(arm): v for arm, v in h.concurrency.items()},
                pod_concurrency={arm: dict(v) for arm, v in h.pod_concurrency.items()},
                acceptance_length=h.acceptance_length,
                basis=h.basis,
            )
        else:
            verdict = judge(self.samples, settings)
        if self.state == "down":
            # What the source said comes first: it is why the verdict is inconclusive.
            reasons = (f"{self.source} unavailable: {self.problem}", *verdict.reasons)
        elif self.state == "empty":
            reasons = (*verdict.reasons, f"{self.source} empty: {self.problem}")
        else:
            reasons = verdict.reasons
        reasons = (*reasons, *self.notes)
        return replace(verdict, reasons=reasons)



@dataclass(frozen=True)
class Targets:
    """What a source may read for one window: the routers' base URLs (their ``/samples``)
    and the vLLM pods' base URLs per arm (their ``/metrics``). Each source reads what it
    needs and ignores the rest (Prometheus: neither)."""

    routers: tuple[str, ...] = ()
    pods: Mapping[Arm, tuple[str, ...]] = field(default_factory=dict)


class Source(Protocol):
    """What the operator calls each window (see the module docstring). A source never
    raises for a source problem: state ``down`` or ``empty`` says it."""

    def set_targets(self, targets: Targets) -> None: ...

    def read_ahead(self) -> None:
        """Each tick while a window is open: read what can be read before its end (in the
        background; the router feed polls its routers), or nothing."""

    async def collect(self, start: float, end: float) -> WindowSamples: ...

    async def aclose(self) -> None: ...


def pod_concurrency(samples: Sequence[Sample], known: Iterable[Sample] = ()) -> list[int]:
    """For each of ``samples``: the requests in flight at its pod when it started, itself
    included, counted over ``samples`` and ``known`` (e.g. earlier requests that overlap).

    A request is in flight at ``t`` when ``started_at <= t < started_at + e2e_s``. Counted
    from the samples of every router, this is the pod's load from all router replicas,
    where each router on its own sees only the requests it sent. Requests without a sample
    (cut off by their client, or still running when this is computed) are not counted.
    """
    by_pod: dict[str, tuple[list[float], list[float]]] = {}
    seen: set[int] = set()
    for sample in (*samples, *known):
        if id(sample) in seen:
            continue
        seen.add(id(sample))
        starts, ends = by_pod.setdefault(sample.pod, ([], []))
        starts.append(sample.started_at)
        ends.append(sample.started_at + max(sample.e2e_s, 0.0))
    for starts, ends in by_pod.values():
        starts.sort()
        ends.sort()
    out: list[int] = []
    for sample in samples:
        starts, ends = by_pod[sample.pod]
        count = bisect.bisect_right(starts, sample.started_at) - bisect.bisect_right(
            ends, sample.started_at
        )
        if sample.e2e_s <= 0.0:
            count += 1  # an instant request is not in flight by the rule above: count it
        out.append(max(count, 1))
    return out


__all__ = [
    "ArmHistograms",
    "Source",
    "SourceKind",
    "SourceState",
    "Targets",
    "WindowSamples",
    "pod_concurrency",
]
