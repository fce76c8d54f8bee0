"""The router feed client against the real router's /samples handler (specguard.router._proxy
served on 127.0.0.1), with samples put straight into the router's feed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import numpy as np
import pytest
from aiohttp import web

from specguard.judge._verdict import judge
from specguard.router._pool import Topology
from specguard.router._proxy import Router, RouterConfig
from specguard.sources._router_feed import RouterFeed
from specguard_testkit._ports import free_port
from specguard_testkit._synthetic import samples


class RouterPod:
    """A real Router app on a fixed port that can be restarted (new epoch, empty feed)."""

    def __init__(self, capacity: int = 1000) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.capacity = capacity
        self.runner: web.AppRunner | None = None
        self.router = self._router()

    async def start(self) -> None:
        self.runner = web.AppRunner(self.router.app())
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def restart(self) -> None:
        await self.stop()
        self.router = self._router()
        await self.start()

    def _router(self) -> Router:
        # Router's own feed of this capacity (passing an empty SampleFeed as ``feed`` is
        # ignored by Router: an empty feed is falsy).
        return Router(Topology(), RouterConfig(samples_capacity=self.capacity))

    def add(self, arm: str, n: int, median: float = 0.03) -> None:
        values = median * np.exp(np.random.default_rng(n).normal(0, 0.1, n))
        for s in samples(arm, values):  # type: ignore[arg-type]
            self.router.feed.add(s)


@pytest.fixture
async def routers() -> AsyncIterator[Callable[..., Awaitable[RouterPod]]]:
    started: list[RouterPod] = []

    async def start(capacity: int = 1000) -> RouterPod:
        pod = RouterPod(capacity)
        await pod.start()
        started.append(pod)
        return pod

    yield start
    for pod in started:
        await pod.stop()


async def test_reads_every_router_and_only_new_samples(
    routers: Callable[..., Awaitable[RouterPod]],
) -> None:
    a, b = await routers(), await routers()
    a.add("speculative", 30)
    b.add("baseline", 20)
    async with RouterFeed([a.url, b.url + "/"], limit=7) as feed:  # small pages: paging
        read = await feed.poll()
        assert len(read.samples) == 50 and read.missed == 0 and not read.failed
        assert {s.arm for s in read.samples} == {"speculative", "baseline"}
        assert (await feed.poll()).samples == []
        a.add("speculative", 5)
        again = await feed.poll()
        assert len(again.samples) == 5
        assert set(feed.cursors) == {a.url, b.url}


async def test_missed_samples_are_counted(routers: Callable[..., Awaitable[RouterPod]]) -> None:
    a = await routers(capacity=10)
    async with RouterFeed([a.url]) as feed:
        a.add("baseline", 4)
        assert len((await feed.poll()).samples) == 4
        a.add("baseline", 25)  # 29 in all, ring keeps the last 10: 15 evicted unseen
        read = await feed.poll()
        assert len(read.samples) == 10 and read.missed == 15


async def test_router_restart_is_a_reset_and_reading_continues(
    routers: Callable[..., Awaitable[RouterPod]],
) -> None:
    a = await routers()
    async with RouterFeed([a.url]) as feed:
        a.add("speculative", 8)
        await feed.poll()
        old_epoch = feed.epochs[a.url]
        await a.restart()
        a.add("speculative", 3)
        read = await feed.poll()
        assert read.resets == 1 and len(read.samples) == 3
        assert feed.epochs[a.url] != old_epoch


async def test_unreachable_router_keeps_its_cursor(
    routers: Callable[..., Awaitable[RouterPod]],
) -> None:
    a = await routers()
    async with RouterFeed([a.url]) as feed:
        a.add("baseline", 6)
        await feed.poll()
        cursor = feed.cursors[a.url]
        await a.stop()
        read = await feed.poll()
        assert a.url in read.failed and read.samples == []
        assert feed.cursors[a.url] == cursor
        # the router set changes: cursors of routers gone are dropped
        feed.set_urls(["http://127.0.0.1:1"])
        assert feed.cursors == {}


async def test_feed_samples_make_a_verdict(routers: Callable[..., Awaitable[RouterPod]]) -> None:
    a, b = await routers(), await routers()
    a.add("speculative", 250, median=0.04)
    b.add("baseline", 250, median=0.03)
    async with RouterFeed([a.url, b.url]) as feed:
        verdict = judge((await feed.poll()).samples)
    assert verdict.outcome == "regressed"
    assert verdict.ratio is not None and verdict.ratio > 1.2
