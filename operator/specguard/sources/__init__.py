"""specguard.sources: where the judge's data comes from (the I/O edge).

The operator's interface, the same for every ``metricsSource`` (see sources.window)::

    source: Source = RouterFeedSource()              # or PrometheusSource / ScrapeSource
    source.set_urls(router_pod_urls(router_pods, ROUTER_PORT))   # each window
    window: WindowSamples = await source.collect(start, end)
    if window.degraded:        # window.state "down" or "empty", window.problem one line
        ...                    # JudgeDegraded; no mode change
    verdict = window.verdict(settings)

- ``router_feed``: the routers' ``GET /samples`` feed, one cursor per router (``RouterFeed``)
  and its window source (``RouterFeedSource``);
- ``prometheus``: per-arm PromQL over vLLM's TPOT histogram (``PrometheusSource``);
- ``scrape``: direct ``/metrics`` scrapes of the vLLM pods (``ScrapeSource``);
- ``exposition``: parsing vLLM's metrics and subtracting readings.

See docs/judge.md and docs/samples.md.
"""

from specguard.sources._exposition import (
    Acceptance,
    Reading,
    Samples,
    acceptance_between,
    counter_delta,
    parse_reading,
    parse_samples,
)
from specguard.sources._prometheus import ArmSelectors, PrometheusSource
from specguard.sources._router_feed import RouterFeed, RouterFeedSource, router_pod_urls
from specguard.sources._scrape import ScrapeRound, ScrapeSource, verdict_from_rounds
from specguard.sources._window import (
    ArmHistograms,
    Source,
    SourceKind,
    SourceState,
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
    "WindowSamples",
    "acceptance_between",
    "counter_delta",
    "parse_reading",
    "parse_samples",
    "pod_concurrency",
    "router_pod_urls",
    "verdict_from_rounds",
]
