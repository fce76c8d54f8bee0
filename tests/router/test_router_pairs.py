"""Mirrored requests reach the judge as pairs: the same ``pair_id`` on the serving and the
shadow sample, end to end through the proxy, ``GET /samples`` and the operator's window
source, also when the serving request fails; a request whose copy was dropped has none."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from specguard.judge._sample import Sample
from specguard.router._proxy import RouterConfig
from specguard.sources._router_feed import RouterFeedSource

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}


async def send(url: str, count: int, stream: bool = True) -> list[int]:
    statuses = []
    async with aiohttp.ClientSession() as s:
        for _ in range(count):
            async with s.post(url + "/v1/chat/completions", json={**CHAT, "stream": stream}) as r:
                await r.read()
                statuses.append(r.status)
    return statuses


async def window_of(rt: Any, h: Any, since: float) -> tuple[Sample, ...]:
    await h.wait_for(lambda: rt.router.shadow_in_flight == 0)
    async with RouterFeedSource([rt.url]) as source:
        window = await source.collect(since, time.time() + 1)
    assert window.state == "ok", window.problem
    return window.samples


def halves(samples: tuple[Sample, ...]) -> dict[str, list[Sample]]:
    by_id: dict[str, list[Sample]] = {}
    for s in samples:
        if s.pair_id is not None:
            by_id.setdefault(s.pair_id, []).append(s)
    return by_id


async def test_every_mirrored_request_is_a_pair_through_the_source(
    upstream: Any, start_router: Any, h: Any
) -> None:
    serve, shadow = await upstream(), await upstream()
    # Every request copied, also while an earlier copy still runs.
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0, load_match="arrivals"))
    since = time.time()
    assert await send(rt.url, 5) + await send(rt.url, 5, stream=False) == [200] * 10
    samples = await window_of(rt, h, since)
    pairs = halves(samples)
    assert len(samples) == 20 and len(pairs) == 10
    for both in pairs.values():
        assert sorted((s.role, s.arm) for s in both) == [
            ("serving", "speculative"),
            ("shadow", "baseline"),
        ]


async def test_a_failed_serving_request_keeps_its_pair(
    upstream: Any, start_router: Any, h: Any
) -> None:
    # 500 from the pod, silence past --read-timeout (504), every pod unreachable (502): the
    # serving half is an error sample of its arm, with the shadow half's pair_id.
    config = RouterConfig(read_timeout_s=0.3)
    shadow = await upstream()
    failing = [await upstream("error"), await upstream("hang")]
    dead = f"http://127.0.0.1:{h.free_port()}"
    since = time.time()
    statuses = []
    for url in (failing[0].url, failing[1].url, dead):
        rt = await start_router(h.topology([url], [shadow.url], share=1.0), config)
        statuses += await send(rt.url, 1)
        [pair] = halves(await window_of(rt, h, since)).values()
        serving = next(s for s in pair if s.role == "serving")
        shadow_half = next(s for s in pair if s.role == "shadow")
        assert serving.status == statuses[-1] and not serving.ok
        assert shadow_half.ok and shadow_half.arm == "baseline"
    assert statuses == [500, 504, 502]


async def test_a_dropped_copy_leaves_the_request_unpaired(
    upstream: Any, start_router: Any, h: Any
) -> None:
    serve, shadow = await upstream(), await upstream()
    # The shadow budget is full (0 copies allowed), then there is no shadow pod at all.
    rt = await start_router(
        h.topology([serve.url], [shadow.url], share=1.0), RouterConfig(shadow_max_in_flight=0)
    )
    since = time.time()
    await send(rt.url, 2)
    no_pod = await start_router(h.topology([serve.url], [], share=1.0))
    await send(no_pod.url, 2)
    for router in (rt, no_pod):
        samples = await window_of(router, h, since)
        assert len(samples) == 2
        assert all(s.role == "serving" and s.pair_id is None for s in samples)
    assert shadow.started == 0
