"""Client of the routers' sample feed: ``GET /samples?after=CURSOR&limit=N`` on every router pod.

Each router keeps its own bounded ring of samples, so the reader keeps one cursor per router
(``"<epoch>:<seq>"``, the ``next`` of its last page) and pages until a router has nothing
newer. A router that restarted has a new epoch: its old cursor is answered from the oldest
kept sample (the router does that), and the reset is counted here. ``missed`` sums what
routers evicted before this reader saw it: a window with missed samples is judged on what
arrived, and the count is reported (a reader too slow for the traffic, or a restart).

A router that does not answer is reported in ``failed`` and keeps its cursor: the next poll
picks up where this one stopped, so a blip loses nothing the ring still holds.

``RouterFeedSource`` is the operator's face of it (sources.window): one call per evaluation
window gives that window's samples from every router pod, deduplicated, with each sample's
concurrency counted over the requests of every router.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from specguard.judge import Sample, SampleError
from specguard.sources._window import Targets, WindowSamples, pod_concurrency


@dataclass
class FeedRead:
    """What one poll of all routers brought. ``ids[i]`` names ``samples[i]`` uniquely:
    ``"<epoch>:<seq>"`` of the router that recorded it."""

    samples: list[Sample] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    missed: int = 0
    resets: int = 0
    invalid: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    def merge(self, other: FeedRead) -> None:
        self.samples.extend(other.samples)
        self.ids.extend(other.ids)
        self.missed += other.missed
        self.resets += other.resets
        self.invalid += other.invalid
        self.failed.update(other.failed)


class RouterFeed:
    """Cursors over a changing set of router base URLs (e.g. ``http://10.0.0.5:8080``)."""

    def __init__(
        self,
        urls: Iterable[str] = (),
        *,
        client: httpx.AsyncClient | None = None,
        limit: int = 5000,
        max_pages: int = 100,
        timeout: float = 5.0,
    ) -> None:
        self._client = client
        self._own_client = client is None
        self.limit = limit
        self.max_pages = max_pages
        self.timeout = timeout
        self.cursors: dict[str, str] = {}
        self.epochs: dict[str, str] = {}
        self.urls: list[str] = []
        self.set_urls(urls)

    def set_urls(self, urls: Iterable[str]) -> None:
        """Follow these routers; cursors of routers still listed are kept, others dropped."""
        self.urls = sorted({u.rstrip("/") for u in urls})
        for gone in set(self.cursors) - set(self.urls):
            self.cursors.pop(gone, None)
            self.epochs.pop(gone, None)

    async def __aenter__(self) -> RouterFeed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout)
        return self._client

    async def poll(self) -> FeedRead:
        """Everything new from every router since the last poll."""
        reads = await asyncio.gather(*(self._poll_one(url) for url in self.urls))
        total = FeedRead()
        for read in reads:
            total.merge(read)
        return total

    async def _poll_one(self, url: str) -> FeedRead:
        read = FeedRead()
        for _ in range(self.max_pages):
            params = {"limit": str(self.limit)}
            if url in self.cursors:
                params["after"] = self.cursors[url]
            try:
                response = await self._http().get(f"{url}/samples", params=params)
                response.raise_for_status()
                page = _page(response.json())
            except (httpx.HTTPError, ValueError) as exc:
                read.failed[url] = f"{type(exc).__name__}: {exc}"[:300]
                return read
            epoch, cursor, records, missed = page
            known = self.epochs.get(url)
            if known is not None and known != epoch:
                read.resets += 1
            self.epochs[url] = epoch
            self.cursors[url] = cursor
            read.missed += missed
            last = _sequence(cursor)
            for i, record in enumerate(records):
                try:
                    sample = Sample.from_dict(record)
                except SampleError:
                    read.invalid += 1
                    continue
                read.samples.append(sample)
                # The page holds seq last-n+1 .. last; without a number, the record itself.
                seq = last - len(records) + 1 + i if last is not None else None
                read.ids.append(f"{epoch}:{seq}" if seq is not None else sample.to_json())
            if not records:
                # Routers cap the page size, so a short page does not mean the end: only an
                # empty one does.
                break
        return read


def _sequence(cursor: str) -> int | None:
    number = cursor.rpartition(":")[2]
    return int(number) if number.isdigit() else None


def _page(body: Any) -> tuple[str, str, Sequence[Any], int]:
    """Check a /samples answer against the contract; ValueError names what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("samples page: expected a JSON object")
    epoch, cursor, records, missed = (body.get(k) for k in ("epoch", "next", "samples", "missed"))
    if not isinstance(epoch, str) or not isinstance(cursor, str):
        raise ValueError("samples page: epoch and next must be strings")
    if not isinstance(records, list):
        raise ValueError("samples page: samples must be a list")
    if isinstance(missed, bool) or not isinstance(missed, int) or missed < 0:
        raise ValueError("samples page: missed must be a whole number >= 0")
    return epoch, cursor, records, missed


class RouterFeedSource:
    """The routers' sample feed, one evaluation window at a time (the `Source` protocol).

    ``collect(start, end)`` polls every router pod (``set_urls`` with their base URLs, e.g.
    ``http://<pod IP>:8080``, before each call as router pods come and go) and returns the
    samples of the requests that *ended* in ``[start, end)``: each request belongs to
    exactly one window, and a request still running at ``end`` waits for the next one.
    Samples read twice (one router listed under two URLs, a router re-listed after it left)
    are counted once. Both halves of a mirrored request come from the same router, so their
    ``pair_id`` arrives together.

    Each returned sample's ``concurrency`` is replaced by the count over every router's
    samples at that pod (`sources.window.pod_concurrency`): a router alone sees only the
    requests it sent. Requests still running when ``collect`` runs are not yet counted, so
    call it a little after ``end`` (``settle``: the operator's choice; requests longer than
    that are the only ones missed); samples that arrive after their window was collected
    are dropped and noted as late.
    """

    def __init__(
        self,
        urls: Iterable[str] = (),
        *,
        feed: RouterFeed | None = None,
        client: httpx.AsyncClient | None = None,
        lookback_s: float = 900.0,
    ) -> None:
        self.feed = feed or RouterFeed(urls, client=client)
        if feed is not None and urls:
            self.feed.set_urls(urls)
        # Longest request whose overlap still counts for a later one's concurrency.
        self.lookback_s = lookback_s
        self._pending: dict[str, Sample] = {}  # read, ended at or after the last window's end
        self._history: dict[str, Sample] = {}  # given out (or late), kept for overlap counts

    def set_urls(self, urls: Iterable[str]) -> None:
        """The router pods to read (their base URLs)."""
        self.feed.set_urls(urls)

    def set_targets(self, targets: Targets) -> None:
        """The `Source` call: read the routers (``targets.routers``)."""
        self.feed.set_urls(targets.routers)

    async def aclose(self) -> None:
        await self.feed.aclose()

    async def __aenter__(self) -> RouterFeedSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def collect(self, start: float, end: float) -> WindowSamples:
        """The window ``[start, end)`` (epoch seconds); see the class docstring."""
        urls = list(self.feed.urls)
        if not urls:
            return WindowSamples("router", start, end, "down", "no router pods to read")
        read = await self.feed.poll()
        if len(read.failed) == len(urls):
            url, why = next(iter(sorted(read.failed.items())))
            problem = f"none of {len(urls)} router(s) answered GET /samples ({url}: {why})"
            return WindowSamples("router", start, end, "down", problem)
        duplicates = 0
        for key, sample in zip(read.ids, read.samples, strict=True):
            if key in self._pending or key in self._history:
                duplicates += 1
            else:
                self._pending[key] = sample
        chosen: list[Sample] = []
        late = 0
        for key, sample in list(self._pending.items()):
            ended = sample.started_at + sample.e2e_s
            if ended >= end:
                continue
            del self._pending[key]
            self._history[key] = sample
            if ended < start:
                late += 1
            else:
                chosen.append(sample)
        chosen.sort(key=lambda s: (s.started_at, s.pod))
        others = [*self._history.values(), *self._pending.values()]
        counts = pod_concurrency(chosen, others)
        samples = tuple(replace(s, concurrency=c) for s, c in zip(chosen, counts, strict=True))
        horizon = start - self.lookback_s
        for key in [k for k, s in self._history.items() if s.started_at + s.e2e_s < horizon]:
            del self._history[key]
        notes = _notes(read, len(urls), duplicates, late)
        if not samples:
            answered = len(urls) - len(read.failed)
            problem = f"no request ended in the window ({answered} router(s) read)"
            return WindowSamples("router", start, end, "empty", problem, notes=notes)
        return WindowSamples("router", start, end, "ok", samples=samples, notes=notes)


def _notes(read: FeedRead, routers: int, duplicates: int, late: int) -> tuple[str, ...]:
    notes = []
    if read.failed:
        names = ", ".join(sorted(read.failed))
        notes.append(f"{len(read.failed)} of {routers} router(s) unreadable: {names}")
    if read.missed:
        notes.append(f"{read.missed} sample(s) evicted by a router before they were read")
    if read.resets:
        notes.append(f"{read.resets} router restart(s) seen")
    if read.invalid:
        notes.append(f"{read.invalid} invalid sample record(s) skipped")
    if late:
        notes.append(f"{late} sample(s) arrived after their window and were left out")
    if duplicates:
        notes.append(f"{duplicates} sample(s) read twice, counted once")
    return tuple(notes)


__all__ = ["FeedRead", "RouterFeed", "RouterFeedSource"]
