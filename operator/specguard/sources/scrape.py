"""Verdicts from scraping each vLLM pod's /metrics directly, for clusters without Prometheus.

Two readings of every pod, at the start and the end of a window, give each arm's TPOT
histogram over the window (bucket deltas, counter resets handled per pod). Readings in between
(``collect`` polls every ``every_s``) sample ``vllm:num_requests_running`` for the per-pod
concurrency. Coarser than router samples for the same reasons as Prometheus (buckets), and the
verdict's ``basis`` says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import httpx
import numpy as np

from specguard.judge.histogram import BASIS_SCRAPE, EMPTY, judge_histograms
from specguard.judge.sample import ARMS
from specguard.judge.verdict import JudgeSettings, Verdict
from specguard.sources.exposition import (
    Reading,
    acceptance_length,
    bucket_delta,
    counter_delta,
    histogram_of,
    parse_reading,
)


@dataclass
class ScrapeRound:
    """One reading of every pod: arm → pod URL → Reading; pods that failed are in ``failed``."""

    at: float
    readings: dict[str, dict[str, Reading]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class ScrapeSource:
    """Scrapes ``<pod URL>/metrics`` for each arm's pods (``{"speculative": [urls], ...}``)."""

    def __init__(
        self,
        pods: Mapping[str, Sequence[str]],
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.pods = {arm: [u.rstrip("/") for u in pods.get(arm, ())] for arm in ARMS}
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._own_client = client is None

    async def __aenter__(self) -> ScrapeSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def read(self) -> ScrapeRound:
        jobs = [(arm, url) for arm in ARMS for url in self.pods[arm]]
        texts = await asyncio.gather(*(self._get(url) for _, url in jobs))
        result = ScrapeRound(at=time.time(), readings={arm: {} for arm in ARMS})
        for (arm, url), text in zip(jobs, texts, strict=True):
            if isinstance(text, Exception):
                result.failed[url] = f"{type(text).__name__}: {text}"[:300]
                continue
            try:
                result.readings[arm][url] = parse_reading(text)
            except ValueError as exc:
                result.failed[url] = f"unparsable metrics: {exc}"[:300]
        return result

    async def _get(self, url: str) -> str | Exception:
        try:
            response = await self._client.get(f"{url}/metrics")
            response.raise_for_status()
            return response.text
        except httpx.HTTPError as exc:
            return exc

    async def collect(self, window_s: float, every_s: float = 5.0) -> list[ScrapeRound]:
        """Read now, every ``every_s`` and at ``window_s``: the rounds of one window."""
        rounds = [await self.read()]
        deadline = time.monotonic() + window_s
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(every_s, left))
            rounds.append(await self.read())
        return rounds


def verdict_from_rounds(
    rounds: Sequence[ScrapeRound], settings: JudgeSettings | None = None
) -> Verdict:
    """The verdict over the window from the first to the last round."""
    if len(rounds) < 2:
        return judge_histograms(EMPTY, EMPTY, settings, basis=BASIS_SCRAPE)
    first, last = rounds[0], rounds[-1]
    histograms = {}
    concurrency: dict[str, float | None] = {}
    pod_concurrency: dict[str, dict[str, float]] = {}
    acceptance = None
    for arm in ARMS:
        pods = sorted(set(first.readings.get(arm, {})) & set(last.readings.get(arm, {})))
        deltas = [bucket_delta(first.readings[arm][p], last.readings[arm][p]) for p in pods]
        histograms[arm] = histogram_of(deltas)
        per_pod = {}
        for pod in pods:
            values = [
                r.readings[arm][pod].running
                for r in rounds
                if pod in r.readings.get(arm, {}) and r.readings[arm][pod].running is not None
            ]
            if values:
                per_pod[pod] = float(np.mean([v for v in values if v is not None]))
        pod_concurrency[arm] = per_pod
        concurrency[arm] = float(np.mean(list(per_pod.values()))) if per_pod else None
        if arm == "speculative":
            drafts = accepted = 0.0
            for pod in pods:
                a, b = first.readings[arm][pod], last.readings[arm][pod]
                drafts += counter_delta(a.drafts, b.drafts) or 0.0
                accepted += counter_delta(a.accepted, b.accepted) or 0.0
            acceptance = acceptance_length(drafts, accepted)
    verdict = judge_histograms(
        histograms["speculative"],
        histograms["baseline"],
        settings,
        concurrency=concurrency,
        pod_concurrency=pod_concurrency,
        acceptance_length=acceptance,
        basis=BASIS_SCRAPE,
    )
    unread = sorted(set(first.failed) | set(last.failed))
    if unread:
        note = f"{len(unread)} pod(s) unreadable at the window's start or end: {', '.join(unread)}"
        verdict = replace(verdict, reasons=(*verdict.reasons, note))
    return verdict


__all__ = ["ScrapeRound", "ScrapeSource", "verdict_from_rounds"]
