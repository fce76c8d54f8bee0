"""The /samples feed: cursors, epochs, eviction and `missed`, in memory and over HTTP."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import aiohttp
import pytest

from specguard.judge._sample import Sample
from specguard.router._feed import CursorError, SampleFeed
from specguard.router._proxy import RouterConfig
from specguard.sources._router_feed import RouterFeed

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, RouterFactory, UpstreamFactory


def sample(n: int) -> Sample:
    return Sample(
        arm="speculative",
        role="serving",
        pod="p",
        domain="chat",
        started_at=float(n),
        concurrency=1,
        output_tokens=n,
        e2e_s=0.1,
    )


def tokens(page_samples: list[Sample]) -> list[int]:
    return [s.output_tokens for s in page_samples]


def test_reader_follows_with_next_cursor() -> None:
    feed = SampleFeed(10, epoch="e1")
    for n in range(1, 4):
        feed.add(sample(n))
    first = feed.read(None, 2)
    assert tokens(first.samples) == [1, 2] and first.next == "e1:2" and first.missed == 0
    second = feed.read(first.next, 100)
    assert tokens(second.samples) == [3] and second.next == "e1:3"
    empty = feed.read(second.next, 100)
    assert empty.samples == [] and empty.next == "e1:3"
    feed.add(sample(4))
    assert tokens(feed.read(empty.next, 100).samples) == [4]


def test_eviction_is_counted_as_missed() -> None:
    feed = SampleFeed(3, epoch="e")
    feed.add(sample(1))
    cursor = feed.read(None, 10).next  # saw 1
    for n in range(2, 8):
        feed.add(sample(n))  # keeps 5, 6, 7; 2, 3, 4 are gone unseen
    page = feed.read(cursor, 10)
    assert tokens(page.samples) == [5, 6, 7] and page.missed == 3 and page.next == "e:7"
    assert len(feed) == 3


def test_cursor_from_another_epoch_restarts_from_oldest() -> None:
    feed = SampleFeed(2, epoch="new")
    for n in range(1, 5):
        feed.add(sample(n))
    page = feed.read("old:123", 10)
    assert tokens(page.samples) == [3, 4]
    assert page.missed == 2  # this epoch's samples 1 and 2 were evicted before it came back
    assert page.epoch == "new" and page.next == "new:4"


def test_cursor_past_the_newest_restarts_from_oldest() -> None:
    # Such a cursor was never issued by this process (a restart changes the epoch): the
    # reader starts again from the oldest kept sample, as for another epoch's cursor, and
    # then follows normally.
    feed = SampleFeed(2, epoch="e")
    feed.add(sample(1))
    page = feed.read("e:99", 10)
    assert tokens(page.samples) == [1] and page.missed == 0 and page.next == "e:1"
    for n in range(2, 5):
        feed.add(sample(n))
    page = feed.read("e:99", 10)
    assert tokens(page.samples) == [3, 4] and page.next == "e:4"
    assert page.missed == 2  # 1 and 2 are gone: the reader cannot get them any more
    feed.add(sample(5))
    follow = feed.read(page.next, 10)
    assert tokens(follow.samples) == [5] and follow.missed == 0


def test_every_cursor_and_limit_reads_the_right_slice() -> None:
    # A page is cut from the ring's nearer end (a reader that keeps up wants the newest few).
    feed = SampleFeed(50, epoch="e")
    for n in range(1, 81):
        feed.add(sample(n))  # keeps 31..80
    for seq in range(30, 81):
        for limit in (1, 3, 7, 100):
            page = feed.read(f"e:{seq}", limit)
            assert tokens(page.samples) == list(range(seq + 1, min(seq + limit, 80) + 1))


def test_a_page_is_the_records_encoded_when_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Answering a read encodes nothing: a loaded router's event loop, which also proxies
    the traffic, only joins bytes (a page of 5000 took 0.5 s to encode on a busy host)."""
    feed = SampleFeed(10, epoch="e")
    recorded = [sample(n) for n in range(1, 4)]
    for s in recorded:
        feed.add(s)

    def refuse(self: Sample) -> None:
        raise AssertionError("encoded at read time")

    monkeypatch.setattr(Sample, "to_json", refuse)
    monkeypatch.setattr(Sample, "to_dict", refuse)
    page = feed.read("e:1", 10)
    body = json.loads(page.body())
    assert body == {"epoch": "e", "next": "e:3", "missed": 0, "more": False,
                    "samples": [json.loads(r) for r in page.records]}  # fmt: skip
    assert [Sample.from_dict(d) for d in body["samples"]] == recorded[1:]


def test_bad_cursor_is_an_error() -> None:
    feed = SampleFeed(2)
    for bad in ("nocolon", "e:x", ":3"):
        with pytest.raises(CursorError):
            feed.read(bad, 10)


def test_epochs_differ_between_feeds() -> None:
    assert SampleFeed(1).epoch != SampleFeed(1).epoch


async def test_samples_endpoint(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]), RouterConfig(samples_capacity=3))
    async with aiohttp.ClientSession() as s:
        for _ in range(5):
            async with s.post(
                rt.url + "/v1/completions",
                json={"model": "m", "prompt": "p", "max_tokens": 2, "stream": True},
            ) as r:
                await r.read()
        async with s.get(rt.url + "/samples", params={"limit": "2"}) as r:
            page = await r.json()
        assert set(page) == {"epoch", "next", "samples", "missed", "more"}
        assert len(page["samples"]) == 2 and page["missed"] == 0 and page["more"] is True
        assert [Sample.from_dict(d).output_tokens for d in page["samples"]] == [2, 2]
        async with s.get(rt.url + "/samples", params={"after": page["next"]}) as r:
            rest = await r.json()
        assert len(rest["samples"]) == 1 and rest["next"].endswith(":5")
        assert rest["more"] is False  # the newest: a reader stops here
        async with s.get(rt.url + "/samples", params={"after": f"{page['epoch']}:0"}) as r:
            assert (await r.json())["missed"] == 2
        async with s.get(rt.url + "/samples", params={"after": "garbage"}) as r:
            assert r.status == 400
        async with s.get(rt.url + "/metrics") as r:
            assert "specguard_router_samples_evicted_total 2.0" in await r.text()


async def test_reader_with_a_cursor_past_the_newest_is_not_stuck(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]), RouterConfig(samples_capacity=2))
    body = {"model": "m", "prompt": "p", "max_tokens": 2, "stream": True}
    async with aiohttp.ClientSession() as s:
        for _ in range(3):
            async with s.post(rt.url + "/v1/completions", json=body) as r:
                await r.read()
    async with RouterFeed([rt.url]) as reader:
        reader.cursors[rt.url] = f"{rt.router.feed.epoch}:999"
        first = await reader.poll()
        assert first.failed == {} and len(first.samples) == 2 and first.missed == 1
        assert reader.cursors[rt.url] == f"{rt.router.feed.epoch}:3"
        async with aiohttp.ClientSession() as s, s.post(rt.url + "/v1/completions", json=body) as r:
            await r.read()
        second = await reader.poll()
        assert len(second.samples) == 1 and second.missed == 0 and second.failed == {}
