"""The one place a ``spec.metricsSource`` becomes a `Source`."""

from __future__ import annotations

from specguard.sources._prometheus import ArmSelectors, PrometheusSource
from specguard.sources._router_feed import RouterFeedSource
from specguard.sources._scrape import ScrapeSource
from specguard.sources._window import Source, SourceKind


def open_source(
    kind: SourceKind, *, deployment: str, namespace: str, prometheus_url: str | None = None
) -> Source:
    """A source of ``kind`` for one SpeculativeDeployment: the routers' sample feed
    (``router``), per-arm PromQL at ``prometheus_url`` (``prometheus``), or the vLLM pods'
    ``/metrics`` (``scrape``). Close it with ``aclose``."""
    if kind == "prometheus":
        selectors = ArmSelectors.for_deployment(deployment, namespace)
        return PrometheusSource(prometheus_url or "", selectors)
    if kind == "scrape":
        return ScrapeSource()
    return RouterFeedSource()


__all__ = ["open_source"]
