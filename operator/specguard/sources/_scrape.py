"""Verdicts from scraping each vLLM pod's /metrics directly, for clusters without Prometheus.

Two readings of every pod, at the start and the end of a window, give each arm's TPOT
histogram over the window (bucket deltas, counter resets handled per pod). Readings in between
sample ``vllm:num_requests_running`` for the per-pod concurrency. Coarser than router samples
for the same reasons as Prometheus (buckets), and the verdict's ``basis`` says so.

As the operator's `Source` (sources.window), the source reads every pod every ``every_s``
in the background once started (``collect`` starts it), keeps the readings of the last
``keep_s`` seconds, and ``collect(start, end)`` judges from the last reading at or before
``start`` to the first at or after ``end`` (read then, if there is none yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx
import numpy as np

from specguard._exposition import (
    Reading,
    acceptance_length,
    bucket_delta,
    counter_delta,
    histogram_of,
    parse_reading,
)
from specguard.judge import ARMS, BASIS_SCRAPE, Arm, Histogram, JudgeSettings, Verdict
from specguard.sources._window import ArmHistograms, Targets, WindowSamples

log = logging.getLogger("specguard.sources._scrape")


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
        pods: Mapping[str, Sequence[str]] | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 5.0,
        every_s: float = 5.0,
        keep_s: float = 3600.0,
    ) -> None:
        self.pods: dict[str, list[str]] = {}
        self.set_pods(pods or {})
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._own_client = client is None
        self.every_s = every_s
        self.keep_s = keep_s
        self._rounds: deque[ScrapeRound] = deque()
        self._poller: asyncio.Task[None] | None = None

    def set_pods(self, pods: Mapping[Arm, Sequence[str]] | Mapping[str, Sequence[str]]) -> None:
        """The vLLM pods to read, by arm (base URLs, e.g. ``http://<pod IP>:8000``)."""
        self.pods = {arm: [u.rstrip("/") for u in pods.get(arm, ())] for arm in ARMS}

    def set_targets(self, targets: Targets) -> None:
        """The `Source` call: read the vLLM pods (``targets.pods``)."""
        self.set_pods(targets.pods)

    async def __aenter__(self) -> ScrapeSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def read_ahead(self) -> None:
        """The `Source` call between window ends: nothing (``collect`` starts the background
        reads, which then run between windows too)."""

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        if self._own_client:
            await self._client.aclose()

    def start(self) -> None:
        """Read every pod every ``every_s`` in the background (idempotent)."""
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            try:
                self._keep(await self.read())
            except Exception:  # the poller must outlive any one bad round
                log.exception("scrape round failed")
            await asyncio.sleep(self.every_s)

    def _keep(self, reading: ScrapeRound) -> None:
        self._rounds.append(reading)
        while self._rounds and self._rounds[0].at < reading.at - self.keep_s:
            self._rounds.popleft()

    async def collect(self, start: float, end: float) -> WindowSamples:
        """The window ``[start, end)`` (epoch seconds), as the operator's `Source`."""
        if not any(self.pods.values()):
            return WindowSamples("scrape", start, end, "down", "no vLLM pods to scrape")
        self.start()
        if not self._rounds or self._rounds[-1].at < end:
            self._keep(await self.read())
        rounds = list(self._rounds)
        before = [i for i, r in enumerate(rounds) if r.at <= start]
        first = before[-1] if before else 0
        last = next((i for i, r in enumerate(rounds) if r.at >= end), len(rounds) - 1)
        chosen = rounds[first : last + 1]
        notes = []
        if not before:
            notes.append(f"first reading {rounds[0].at - start:.0f} s into the window")
        failed = chosen[-1].failed
        if len(failed) == sum(len(urls) for urls in self.pods.values()):
            url, why = next(iter(sorted(failed.items())))
            problem = f"no vLLM pod answered GET /metrics ({url}: {why})"
            return WindowSamples("scrape", start, end, "down", problem)
        if len(chosen) < 2:
            problem = "only one reading of the pods in the window"
            return WindowSamples("scrape", start, end, "empty", problem, notes=tuple(notes))
        evidence, unread = _evidence(chosen)
        notes.extend(unread)
        if all(h.total == 0 for h in evidence.tpot.values()):
            problem = "no request finished on either arm in the window (TPOT histograms empty)"
            return WindowSamples(
                "scrape", start, end, "empty", problem, histograms=evidence, notes=tuple(notes)
            )
        return WindowSamples("scrape", start, end, "ok", histograms=evidence, notes=tuple(notes))

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

    async def sweep(self, window_s: float, every_s: float = 5.0) -> list[ScrapeRound]:
        """Read now, every ``every_s`` and at ``window_s``: the rounds of one window, read
        in the foreground (``collect`` is the background-polled window)."""
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
        empty = ArmHistograms(tpot={}, basis=BASIS_SCRAPE)
        return WindowSamples("scrape", 0.0, 0.0, "ok", histograms=empty).verdict(settings)
    evidence, notes = _evidence(rounds)
    window = WindowSamples("scrape", rounds[0].at, rounds[-1].at, "ok", histograms=evidence,
                           notes=notes)  # fmt: skip
    return window.verdict(settings)


def _evidence(rounds: Sequence[ScrapeRound]) -> tuple[ArmHistograms, tuple[str, ...]]:
    """Histograms, concurrency and acceptance between the first and the last round, and
    notes on pods that could not be read at either end."""
    first, last = rounds[0], rounds[-1]
    histograms: dict[Arm, Histogram] = {}
    concurrency: dict[Arm, float | None] = {}
    pod_concurrency: dict[Arm, dict[str, float]] = {}
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
    evidence = ArmHistograms(
        tpot=histograms,
        concurrency=concurrency,
        pod_concurrency=pod_concurrency,
        acceptance_length=acceptance,
        basis=BASIS_SCRAPE,
    )
    unread = sorted(set(first.failed) | set(last.failed))
    if unread:
        note = f"{len(unread)} pod(s) unreadable at the window's start or end: {', '.join(unread)}"
        return evidence, (note,)
    return evidence, ()


__all__ = ["ScrapeRound", "ScrapeSource", "verdict_from_rounds"]
