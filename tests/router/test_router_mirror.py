"""Mirroring: the shadow copy never delays, fails or alters the client's response."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from specguard.router._proxy import RouterConfig

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, RouterFactory, UpstreamFactory

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def post(url: str, body: dict[str, Any]) -> tuple[int, bytes, float]:
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        data = await r.read()
        return r.status, data, time.perf_counter() - t0


async def test_mirror_pairs_and_always_streams_shadow(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve, shadow = await upstream(), await upstream()
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    direct = await post(serve.url + "/v1/chat/completions", CHAT)
    routed = await post(rt.url + "/v1/chat/completions", CHAT)  # the client does not stream
    assert routed[:2] == direct[:2]
    await h.wait_for(lambda: len(rt.router.feed) == 2)
    by_role = {s.role: s for s in rt.router.feed.read(None, 10).samples}
    assert by_role["serving"].pair_id is not None
    assert by_role["serving"].pair_id == by_role["shadow"].pair_id
    assert by_role["serving"].arm == "speculative" and by_role["shadow"].arm == "baseline"
    assert by_role["serving"].measurement == "non_stream"
    assert by_role["shadow"].measurement == "stream_usage" and by_role["shadow"].output_tokens == 5
    sent = shadow.bodies[-1]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert sent["messages"] == CHAT["messages"]


async def test_mirror_share_is_exact_and_spread(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve, shadow = await upstream(), await upstream()
    rt = await start_router(
        h.topology([serve.url], [shadow.url], share=0.25, load_match="arrivals")
    )
    for _ in range(12):
        await post(rt.url + "/v1/completions", {"model": "m", "prompt": "p", "max_tokens": 1})
    await h.wait_for(lambda: shadow.finished == 3)
    assert serve.finished == 12
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        metrics = await r.text()
    assert 'specguard_router_mirrored_total{arm="baseline"} 3.0' in metrics


async def test_hanging_shadow_does_not_delay_and_budget_drops(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve, hang = await upstream(), await upstream("hang")
    rt = await start_router(
        h.topology([serve.url], [hang.url], share=1.0, load_match="arrivals"),
        RouterConfig(shadow_max_in_flight=2),
    )
    for _ in range(5):
        status, _, took = await post(rt.url + "/v1/chat/completions", {**CHAT, "stream": True})
        assert status == 200
        # Generous bound: a hanging shadow would make this take the shadow timeout (600 s).
        assert took < 2.0
    assert rt.router.shadow_in_flight == 2
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        metrics = await r.text()
    # The third copy finds the budget full; by arrivals the router then lets the shadow's
    # copies end before it copies again (they never do here): the rest are "drain".
    assert 'specguard_router_mirror_dropped_total{reason="budget"} 1.0' in metrics
    assert 'specguard_router_mirror_dropped_total{reason="drain"} 2.0' in metrics
    assert 'specguard_router_in_flight{arm="baseline",role="shadow"} 2.0' in metrics
    serving = [s for s in rt.router.feed.read(None, 10).samples if s.role == "serving"]
    assert len(serving) == 5
    assert sum(s.pair_id is not None for s in serving) == 2  # only really mirrored ones pair


async def test_shadow_errors_do_not_reach_the_client(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve, bad = await upstream(), await upstream("error")
    rt = await start_router(h.topology([serve.url], [bad.url], share=1.0))
    direct = await post(serve.url + "/v1/chat/completions", {**CHAT, "stream": True})
    routed = await post(rt.url + "/v1/chat/completions", {**CHAT, "stream": True})
    assert routed[:2] == direct[:2]
    await h.wait_for(lambda: len(rt.router.feed) == 2)
    shadow = next(s for s in rt.router.feed.read(None, 10).samples if s.role == "shadow")
    assert shadow.status == 500 and shadow.output_tokens == 0


async def test_shadow_down_does_not_reach_the_client(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve = await upstream()
    down = f"http://127.0.0.1:{h.free_port()}"
    rt = await start_router(h.topology([serve.url], [down], share=1.0))
    for _ in range(3):
        status, body, _ = await post(rt.url + "/v1/chat/completions", {**CHAT, "stream": True})
        assert status == 200 and body.endswith(b"data: [DONE]\n\n")
    await h.wait_for(lambda: len(rt.router.feed) == 6)
    shadows = [s for s in rt.router.feed.read(None, 10).samples if s.role == "shadow"]
    assert [s.status for s in shadows] == [502, 502, 502]


async def test_no_shadow_pod_counts_a_drop(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve = await upstream()
    top = h.topology([serve.url], [], share=1.0)
    rt = await start_router(top)
    await post(rt.url + "/v1/chat/completions", CHAT)
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        assert 'specguard_router_mirror_dropped_total{reason="no_pod"} 1.0' in await r.text()


async def test_shadow_concurrency_is_its_pods_in_flight(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    serve, shadow = await upstream(gap_s=0.02), await upstream(gap_s=0.02)
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    body = {**CHAT, "stream": True, "max_tokens": 20}
    await asyncio.gather(*(post(rt.url + "/v1/chat/completions", body) for _ in range(3)))
    await h.wait_for(lambda: len(rt.router.feed) == 6)
    shadows = [s for s in rt.router.feed.read(None, 10).samples if s.role == "shadow"]
    assert sorted(s.concurrency for s in shadows) == [1, 2, 3]


async def test_the_shadow_holds_no_more_in_flight_than_a_serving_pod(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """In-flight matching over real HTTP: three requests at once are all copied (the shadow
    then runs three, as the serving pod does); once they are answered, the shadow (hanging)
    still holds three, so the next request is not copied and the skip is counted."""
    serve, hang = await upstream(gap_s=0.02), await upstream("hang")
    rt = await start_router(h.topology([serve.url], [hang.url], share=1.0))
    body = {**CHAT, "stream": True, "max_tokens": 20}
    await asyncio.gather(*(post(rt.url + "/v1/chat/completions", body) for _ in range(3)))
    assert rt.router.shadow_in_flight == 3
    status, _, _ = await post(rt.url + "/v1/chat/completions", body)
    assert status == 200 and rt.router.shadow_in_flight == 3
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        metrics = await r.text()
    assert 'specguard_router_mirror_dropped_total{reason="in_flight"} 1.0' in metrics
    assert 'specguard_router_in_flight{arm="baseline",role="shadow"} 3.0' in metrics
    serving = [s for s in rt.router.feed.read(None, 10).samples if s.role == "serving"]
    assert sorted(s.pair_id is not None for s in serving) == [False, True, True, True]


def test_room_is_per_pod_and_rounds_to_the_nearest_request() -> None:
    from specguard.router import Endpoint, Topology

    top = Topology()
    top.set_roles("speculative", 1.0)
    top.set_endpoints(
        [Endpoint(f"s{i}", f"s{i}", "speculative") for i in range(2)]
        + [Endpoint("b0", "b0", "baseline")]
    )
    serving, (shadow,) = top.pods["speculative"], top.pods["baseline"]
    # 2 serving pods, 1 shadow pod: the shadow may hold half the serving requests (with the
    # one being routed), rounded to the nearest.
    for in_serving, in_shadow, room in (
        (0, 0, True), (1, 0, True), (1, 1, False), (2, 1, True), (3, 2, False), (4, 2, True),
        (279, 139, True), (279, 140, False),
    ):  # fmt: skip
        serving[0].in_flight, serving[1].in_flight = in_serving - in_serving // 2, in_serving // 2
        shadow.in_flight = in_shadow
        assert top.shadow_has_room() is room, (in_serving, in_shadow)
    # 4 serving pods per shadow pod, the routed request the only one: the nearest whole share
    # (a quarter) is 0, yet one copy may run (or a light load would never be measured); a
    # second may not.
    top.set_endpoints(
        [Endpoint(f"s{i}", f"s{i}", "speculative") for i in range(4)]
        + [Endpoint("b0", "b0", "baseline")]
    )
    serving, (shadow,) = top.pods["speculative"], top.pods["baseline"]
    for pod in serving:
        pod.in_flight = 0
    shadow.in_flight = 0
    assert top.shadow_has_room()
    shadow.in_flight = 1
    assert not top.shadow_has_room()
    top.set_roles("speculative", 1.0, swapping=True)
    shadow.in_flight = 0
    assert not top.shadow_has_room()  # no copies during a swap
    top.set_roles("speculative", 1.0)
    top.set_endpoints([Endpoint("s0", "s0", "speculative")])
    assert not top.shadow_has_room()  # no shadow pod
