"""specguard.sources: where the judge's data comes from (the I/O edge).

The operator's interface, the same for every ``metricsSource`` (see sources.window)::

    source: Source = open_source(spec.metrics_source.type, deployment=..., namespace=...)
    source.set_targets(Targets(routers=..., pods=...))   # each window, as pods come and go
    window: WindowSamples = await source.collect(start, end)
    window.state        # "ok", "empty" (nothing to judge) or "down" (the source failed)
    verdict = window.verdict(settings)

- ``router_feed``: the routers' ``GET /samples`` feed, one cursor per router (``RouterFeed``)
  and its window source (``RouterFeedSource``);
- ``prometheus``: per-arm PromQL over vLLM's TPOT histogram (``PrometheusSource``);
- ``scrape``: direct ``/metrics`` scrapes of the vLLM pods (``ScrapeSource``);
- ``exposition``: parsing vLLM's metrics and subtracting readings (``draft_counters``: the
  drafter arm's spec-decode counters over a window; ``arm_load``: requests in each arm's
  engines at a window's start and end).

See docs/judge.md and docs/samples.md.
"""

from specguard._exposition import (
    Acceptance,
    Reading,
    Samples,
    acceptance_between,
    arm_load,
    counter_delta,
    draft_counters,
    parse_reading,
    parse_samples,
)
from specguard.sources._open import open_source
from specguard.sources._prometheus import ArmSelectors, PrometheusSource
from specguard.sources._router_feed import RouterFeed, RouterFeedSource
from specguard.sources._scrape import ScrapeRound, ScrapeSource, verdict_from_rounds
from specguard.sources._window import (
    ArmHistograms,
    Source,
    SourceKind,
    SourceState,
    Targets,
    WindowSamples,
    pod_concurrency,
)

__all__ = [
    "Acceptance",
    "ArmHistograms",
    "ArmSelectors",
    "PrometheusSource",
    "Reading",
    "RouterFeed",
    "RouterFeedSource",
    "Samples",
    "ScrapeRound",
    "ScrapeSource",
    "Source",
    "SourceKind",
    "SourceState",
    "Targets",
    "WindowSamples",
    "acceptance_between",
    "arm_load",
    "counter_delta",
    "draft_counters",
    "open_source",
    "parse_reading",
    "parse_samples",
    "pod_concurrency",
    "verdict_from_rounds",
]
