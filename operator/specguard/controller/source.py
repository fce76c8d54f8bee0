"""The window's evidence from the configured ``metricsSource`` — a thin adapter over
``specguard.sources`` so the loop asks one question each window: the verdict, or why there
is none (the source is down).

- router (default): the routers' ``/samples`` feeds, polled every few seconds into the
  window's buffer (paired samples keep their ``pair_id``), judged by ``judge()``;
- prometheus: vLLM's TPOT histograms per arm over the window (``PrometheusSource``);
- scrape: two readings of every vLLM pod's ``/metrics``, at the window's start and end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from specguard.api.spec import Spec
from specguard.judge.sample import Sample
from specguard.judge.verdict import JudgeSettings, Verdict, judge
from specguard.sources.prometheus import ArmSelectors, PrometheusSource
from specguard.sources.router_feed import RouterFeed
from specguard.sources.scrape import ScrapeRound, ScrapeSource, verdict_from_rounds

MAX_BUFFER = 200_000  # samples kept per window at most (bounded memory)


@dataclass(frozen=True, slots=True)
class WindowEvidence:
    verdict: Verdict
    error: str | None  # the source is down: the message says how
    samples: int  # samples (or histogram observations) that arrived


class Collector:
    """One resource's sample source; ``poll`` between windows, ``close_window`` at the end."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self._feed = RouterFeed()
        self._buffer: list[Sample] = []
        self._failures: dict[str, str] = {}
        self._polls = 0
        self._dropped = 0
        self._rounds: list[ScrapeRound] = []

    async def aclose(self) -> None:
        await self._feed.aclose()

    def reset(self) -> None:
        """Forget the window so far (a swap started, the shadow paused, the spec changed)."""
        self._buffer.clear()
        self._failures.clear()
        self._rounds.clear()
        self._polls = 0
        self._dropped = 0

    async def poll(self, spec: Spec, routers: Sequence[str], pods: dict[str, list[str]]) -> None:
        kind = spec.metrics_source.type
        if kind == "router":
            self._feed.set_urls(routers)
            if not routers:
                return
            read = await self._feed.poll()
            self._polls += 1
            room = MAX_BUFFER - len(self._buffer)
            self._buffer.extend(read.samples[:room])
            self._dropped += max(0, len(read.samples) - room)
            if read.failed and len(read.failed) == len(routers):
                self._failures.update(read.failed)
        elif kind == "scrape" and not self._rounds:
            async with ScrapeSource(pods) as scrape:
                self._rounds.append(await scrape.read())

    async def close_window(
        self,
        spec: Spec,
        settings: JudgeSettings,
        routers: Sequence[str],
        pods: dict[str, list[str]],
    ) -> WindowEvidence:
        kind = spec.metrics_source.type
        try:
            if kind == "router":
                await self.poll(spec, routers, pods)
            if kind == "prometheus":
                return await self._prometheus(spec, settings)
            if kind == "scrape":
                return await self._scrape(settings, pods)
            return self._router(settings, routers)
        finally:
            self.reset()

    def _router(self, settings: JudgeSettings, routers: Sequence[str]) -> WindowEvidence:
        samples = list(self._buffer)
        verdict = judge(samples, settings)
        if not routers:
            return WindowEvidence(verdict, "no ready router pod to read samples from", 0)
        if self._failures and not samples:
            first = next(iter(sorted(self._failures.items())))
            error = f"router sample feed unreachable ({first[0]}: {first[1]})"
            return WindowEvidence(verdict, error, 0)
        return WindowEvidence(verdict, None, len(samples))

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
