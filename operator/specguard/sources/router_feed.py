"""Client of the routers' sample feed: ``GET /samples?after=CURSOR&limit=N`` on every router pod.

Each router keeps its own bounded ring of samples, so the reader keeps one cursor per router
(``"<epoch>:<seq>"``, the ``next`` of its last page) and pages until a router has nothing
newer. A router that restarted has a new epoch: its old cursor is answered from the oldest
kept sample (the router does that), and the reset is counted here. ``missed`` sums what
routers evicted before this reader saw it: a window with missed samples is judged on what
arrived, and the count is reported (a reader too slow for the traffic, or a restart).

A router that does not answer is reported in ``failed`` and keeps its cursor: the next poll
picks up where this one stopped, so a blip loses nothing the ring still holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from specguard.judge.sample import Sample, SampleError


@dataclass
class FeedRead:
    """What one poll of all routers brought."""

    samples: list[Sample] = field(default_factory=list)
    missed: int = 0
    resets: int = 0
    invalid: int = 0
    failed: dict[str, str] = field(default_factory=dict)

    def merge(self, other: FeedRead) -> None:
        self.samples.extend(other.samples)
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
            for record in records:
                try:
                    read.samples.append(Sample.from_dict(record))
                except SampleError:
                    read.invalid += 1
            if not records:
                # Routers cap the page size, so a short page does not mean the end: only an
                # empty one does.
                break
        return read


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


__all__ = ["FeedRead", "RouterFeed"]
