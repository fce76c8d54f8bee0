"""The window's evidence from the configured ``metricsSource`` — a thin adapter over
``specguard.sources`` so the loop asks one question each window: the verdict, or why there
is none (the source is down).

- router (default): the routers' ``/samples`` feeds through ``RouterFeedSource``: the
  requests that ended in the window, concurrency at a pod counted over every router, paired
  samples keeping their ``pair_id``; judged by ``judge()``;
- prometheus: vLLM's TPOT histograms per arm over the window (``PrometheusSource``);
- scrape: two readings of every vLLM pod's ``/metrics``, at the window's start and end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from specguard.api import Spec
from specguard.judge import JudgeSettings, Verdict, judge
from specguard.sources import (
    ArmSelectors,
    PrometheusSource,
    RouterFeedSource,
    ScrapeRound,
    ScrapeSource,
    verdict_from_rounds,
)


@dataclass(frozen=True, slots=True)
class WindowEvidence:
    verdict: Verdict
    error: str | None  # the source is down: the message says how
    samples: int  # samples (or histogram observations) that arrived


class Collector:
    """One resource's sample source, asked once per window (``close_window``)."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self._feed = RouterFeedSource()
        self._rounds: list[ScrapeRound] = []

    async def aclose(self) -> None:
        await self._feed.aclose()

    def reset(self) -> None:
        """Forget the window so far (a swap started, the shadow paused, the spec changed)."""
        self._rounds.clear()

    async def poll(self, spec: Spec, routers: Sequence[str], pods: dict[str, list[str]]) -> None:
        """Between window ends: the scrape source reads the pods at the window's start."""
        if spec.metrics_source.type == "scrape" and not self._rounds:
            async with ScrapeSource(pods) as scrape:
                self._rounds.append(await scrape.read())

    async def close_window(
        self,
        spec: Spec,
        settings: JudgeSettings,
        routers: Sequence[str],
        pods: dict[str, list[str]],
        *,
        start: float,
        end: float,
    ) -> WindowEvidence:
        kind = spec.metrics_source.type
        try:
            if kind == "prometheus":
                return await self._prometheus(spec, settings)
            if kind == "scrape":
                return await self._scrape(settings, pods)
            return await self._router(settings, routers, start, end)
        finally:
            self.reset()

    async def _router(
        self,
        settings: JudgeSettings,
        routers: Sequence[str],
        start: float,
        end: float,
    ) -> WindowEvidence:
        if not routers:
            return WindowEvidence(
                judge([], settings), "no ready router pod to read samples from", 0
            )
        self._feed.set_urls(routers)
        window = await self._feed.collect(start, end)
        verdict = window.verdict(settings)
        if window.state == "down":
            return WindowEvidence(verdict, window.problem or "router sample feed unreachable", 0)
        return WindowEvidence(verdict, None, len(window.samples))

    async def _prometheus(self, spec: Spec, settings: JudgeSettings) -> WindowEvidence:
        url = spec.metrics_source.prometheus_url or ""
        source = PrometheusSource(url, ArmSelectors.for_deployment(self.name, self.namespace))
        verdict = await asyncio.to_thread(source.verdict, float(spec.evaluation.window), settings)
        down = next((r for r in verdict.reasons if r.startswith("prometheus unavailable")), None)
        return WindowEvidence(verdict, down, sum(verdict.n.values()))

    async def _scrape(self, settings: JudgeSettings, pods: dict[str, list[str]]) -> WindowEvidence:
        async with ScrapeSource(pods) as scrape:
            self._rounds.append(await scrape.read())
        verdict = verdict_from_rounds(self._rounds, settings)
        last = self._rounds[-1]
        reachable = sum(len(v) for v in last.readings.values())
        error = None
        if not reachable:
            error = "no vLLM pod's /metrics could be read" + (
                f" ({next(iter(last.failed.values()))})" if last.failed else ""
            )
        return WindowEvidence(verdict, error, sum(verdict.n.values()))
