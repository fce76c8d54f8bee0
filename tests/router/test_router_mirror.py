"""Mirroring: the shadow copy never delays, fails or alters the client's response."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from specguard.judge import Arm, LoadMatch
from specguard.router import Pod, Topology
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
    still holds three, so the next request's copy waits in the queue, and is dropped when it
    has waited longer than the queue allows (counted); its serving half, still running then,
    carries no pair id."""
    serve, hang = await upstream(gap_s=0.05), await upstream("hang")
    rt = await start_router(
        h.topology([serve.url], [hang.url], share=1.0), RouterConfig(shadow_queue_wait_s=0.3)
    )
    body = {**CHAT, "stream": True, "max_tokens": 20}
    await asyncio.gather(*(post(rt.url + "/v1/chat/completions", body) for _ in range(3)))
    assert rt.router.shadow_in_flight == 3
    status, _, took = await post(rt.url + "/v1/chat/completions", body)
    assert status == 200 and rt.router.shadow_in_flight == 3
    assert took > 0.3  # 20 tokens 50 ms apart: the copy's wait ran out meanwhile
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        metrics = await r.text()
    assert "specguard_router_mirror_queued_total 1.0" in metrics
    assert "specguard_router_mirror_queue 0.0" in metrics
    assert 'specguard_router_mirror_dropped_total{reason="waited"} 1.0' in metrics
    assert 'specguard_router_mirrored_total{arm="baseline"} 3.0' in metrics
    assert 'specguard_router_in_flight{arm="baseline",role="shadow"} 3.0' in metrics
    serving = [s for s in rt.router.feed.read(None, 10).samples if s.role == "serving"]
    assert sorted(s.pair_id is not None for s in serving) == [False, True, True, True]


async def test_a_queued_copy_goes_as_soon_as_the_shadow_has_room(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """One closed-loop stream, a shadow twenty times as slow: the second request's copy finds
    the first copy still running (the target is the one request in flight), waits, and is
    sent the moment the first ends, while the stream goes on; nothing is dropped, and every
    copy's pair id is on its serving half (the second one's ended while its copy waited).
    (Twenty times, and half a second for "the moment": margins a busy 2-core machine keeps.
    The client thinks 0.5 s after the first answer: a copy sent late by a lagging event loop
    is owed its wait back (``Topology._deficit``) and may then go at once; half a second
    with the shadow ahead of the target pays that back first.)"""
    serve, shadow = await upstream(gap_s=0.01), await upstream(gap_s=0.2)
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    body = {**CHAT, "stream": True, "max_tokens": 10}
    status, _, _ = await post(rt.url + "/v1/chat/completions", body)  # ~0.1 s, copy ~2 s
    await asyncio.sleep(0.5)
    status, _, _ = await post(rt.url + "/v1/chat/completions", body)
    assert status == 200 and rt.router.shadow_in_flight == 1 and rt.router.topology.queued == 1
    while rt.router.topology.queued:  # the stream goes on (nothing in flight: no target)
        status, _, _ = await post(rt.url + "/v1/chat/completions", body)
        assert status == 200
    await h.wait_for(lambda: rt.router.shadow_in_flight == 0 and rt.router.topology.queued == 0)
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        metrics = await r.text()
    assert _counter(metrics, 'specguard_router_mirrored_total{arm="baseline"}') >= 2
    assert _counter(metrics, "specguard_router_mirror_queued_total") >= 1
    assert "specguard_router_mirror_queue 0.0" in metrics
    dropped = sum(
        _counter(metrics, f'specguard_router_mirror_dropped_total{{reason="{reason}"}}')
        for reason in ("waited", "flushed", "trimmed", "budget", "drain", "no_pod")
    )
    assert dropped == 0
    samples = rt.router.feed.read(None, 100).samples
    copies = sorted((s for s in samples if s.role == "shadow"), key=lambda s: s.started_at)
    first, second = copies[:2]
    assert second.started_at - (first.started_at + first.e2e_s) < 0.5  # sent as room appeared
    serving_ids = {s.pair_id for s in samples if s.role == "serving"}
    assert {s.pair_id for s in copies} <= serving_ids


def _counter(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the metrics")


def one_shadow_pod(serving_pods: int) -> tuple[Topology, list[Pod], Pod]:
    from specguard.router import Endpoint

    top = Topology()
    top.set_roles("speculative", 1.0)
    top.set_endpoints(
        [Endpoint(f"s{i}", f"s{i}", "speculative") for i in range(serving_pods)]
        + [Endpoint("b0", "b0", "baseline")]
    )
    return top, top.pods["speculative"], top.pods["baseline"][0]


def test_room_follows_the_fractional_target_over_time() -> None:
    from specguard.router import Endpoint

    top, serving, shadow = one_shadow_pod(2)
    # 2 serving pods, 1 shadow pod: the shadow's target is half the serving requests (with
    # the one being routed). Whole part: always room below it; none above the next whole.
    for in_serving, in_shadow, room in (
        (0, 0, True), (1, 0, True), (3, 1, True), (3, 2, False), (279, 139, True),
        (279, 140, False), (279, 141, False),
    ):  # fmt: skip
        serving[0].in_flight, serving[1].in_flight = in_serving - in_serving // 2, in_serving // 2
        shadow.in_flight = in_shadow
        assert top.shadow_has_room(routing=1) is room, (in_serving, in_shadow)
    # The fraction: 3 serving requests in flight -> a target of 1.5 (no request routed).
    # Holding 1 it falls behind, so a second copy may start; holding 2 it runs ahead, and
    # the room closes until the time-average is back: the average is 1.5, not 1 or 2.
    top, serving, shadow = one_shadow_pod(2)
    for pod in (serving[0], serving[0], serving[1]):
        top.begin(pod, 0.0)
    top.begin(shadow, 0.0)
    assert top.shadow_has_room()  # 1 < 1.5, not ahead on average (deficit 0)
    top.begin(shadow, 1.0)  # behind for 1 s at 0.5: deficit +0.5 request-seconds
    assert not top.shadow_has_room()  # 2 > 1.5
    top.end(shadow, 4.0)  # ahead for 3 s at 0.5: deficit -1.0
    assert not top.shadow_has_room()  # 1 < 1.5, but ahead on average
    assert top.next_check(4.0) is None  # nothing queued
    top.enqueue("copy", None, 4.0)
    assert top.next_check(4.0) == 6.0  # behind at 0.5 a second: back to 0 after 2 s
    copy, dropped = top.take_copy(5.0)
    assert copy is None and not dropped
    copy, dropped = top.take_copy(6.0)
    assert copy is not None and copy.payload == "copy" and not dropped
    # Time-averaged over the 6 s: 1 s at 1, 3 s at 2, 2 s at 1 = 1.5.
    # A quarter over 4 serving pods per shadow pod: one copy at a time, a quarter of the time.
    top, serving, shadow = one_shadow_pod(4)
    top.begin(serving[0], 0.0)
    assert top.shadow_has_room()  # target 0.25, holding 0, not ahead
    top.begin(shadow, 0.0)
    assert not top.shadow_has_room()
    top.end(shadow, 1.0)  # 1 s at 1 against 0.25: 0.75 ahead
    assert not top.shadow_has_room()
    top.enqueue("copy", None, 1.0)
    assert top.next_check(1.0) == 4.0  # 3 s at 0 to pay it back: one copy in four seconds
    top.set_roles("speculative", 1.0, swapping=True)
    assert not top.shadow_has_room()  # no copies during a swap
    copy, dropped = top.take_copy(4.0)
    assert copy is None and [reason for _, reason in dropped] == ["flushed"]
    top.set_roles("speculative", 1.0)
    top.set_endpoints([Endpoint("s0", "s0", "speculative")])
    assert not top.shadow_has_room()  # no shadow pod


def test_a_queued_copy_is_dropped_after_its_wait() -> None:
    from specguard.router import Endpoint, Topology

    top = Topology(queue_wait_s=2.0)
    top.set_roles("speculative", 1.0)
    top.set_endpoints([Endpoint("s0", "s0", "speculative"), Endpoint("b0", "b0", "baseline")])
    (shadow,) = top.pods["baseline"]
    top.begin(shadow, 0.0)
    assert top.mirror_decision(now=0.0) == "queue"  # target 1 with the routed request: full
    top.enqueue("first", None, 0.0)
    # As many copies may wait as the target holds (1); the next turn passes on, not dropped.
    assert top.mirror_decision(now=0.5) == "defer"
    assert top.next_check(0.5) == 2.0
    copy, dropped = top.take_copy(2.5)
    assert copy is None and [(p.payload, reason) for p, reason in dropped] == [("first", "waited")]
    assert top.queued == 0


async def _closed_loop(url: str, streams: int, seconds: float, body: dict[str, Any]) -> int:
    """``streams`` closed-loop clients for ``seconds``; how many requests failed."""
    failed = 0
    deadline = time.monotonic() + seconds

    async def stream() -> None:
        nonlocal failed
        while time.monotonic() < deadline:
            status, _, _ = await post(url + "/v1/chat/completions", body)
            failed += status != 200

    await asyncio.gather(*(stream() for _ in range(streams)))
    return failed


async def test_a_faster_shadow_is_held_at_the_serving_in_flight_by_ballast(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """Eight closed-loop streams on one serving pod, a shadow ten times as fast: with every
    request copied it would hold under one request in flight, and be judged at a lighter
    load than the clients give the serving pod. Ballast (replays of recent requests, never
    samples) holds it, time-averaged, within two of the serving pod's count; every copy is a
    real pair, and only real copies are samples."""
    serve, shadow = await upstream(gap_s=0.03), await upstream(gap_s=0.003)
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    body = {**CHAT, "stream": True, "max_tokens": 10}
    top = rt.router.topology
    arms: tuple[Arm, Arm] = ("speculative", "baseline")
    held: dict[Arm, list[int]] = {arm: [] for arm in arms}

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.01)
            for arm in arms:
                held[arm].append(sum(pod.in_flight for pod in top.pods[arm]))

    watcher = asyncio.create_task(watch())
    assert await _closed_loop(rt.url, 8, 4.0, body) == 0
    watcher.cancel()
    await h.wait_for(lambda: rt.router.shadow_in_flight == 0, timeout=10.0)
    serving_mean = statistics.mean(held["speculative"])
    shadow_mean = statistics.mean(held["baseline"])
    samples = rt.router.feed.read(None, 10_000).samples
    serving = [s for s in samples if s.role == "serving"]
    copies = [s for s in samples if s.role == "shadow"]
    # Every shadow sample is the copy of a serving request: ballast is never a sample.
    assert copies and all(s.pair_id is not None for s in copies)
    assert {s.pair_id for s in copies} <= {s.pair_id for s in serving}
    # Time-averaged over the run: the shadow holds the serving pod's count less the slot
    # left for real copies (without ballast: about 1.4 against 7.8).
    assert serving_mean >= 5, serving_mean
    assert serving_mean - 2 <= shadow_mean <= serving_mean + 0.5, (shadow_mean, serving_mean)
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        metrics = await r.text()
    assert _counter(metrics, "specguard_router_mirror_ballast_total") > len(copies)
    assert _counter(metrics, 'specguard_router_mirrored_total{arm="baseline"}') == len(copies)


def _timed(top: Topology, arm: str, took: float) -> None:
    pod = top.pods[arm][0]  # type: ignore[index]
    top.begin(pod, 0.0)
    top.end(pod, 0.0, took)


def test_ballast_only_where_real_copies_cannot_hold_the_shadow() -> None:
    """Ballast is due only under the in-flight rule, with the share's ceiling at 1, nothing
    queued, a shadow faster than real copies can feed, and room for two below the target."""
    from specguard.router import Endpoint

    def made(share: float = 1.0, shadow_took: float = 0.1, serving: int = 6,
             load_match: LoadMatch = "in_flight") -> Topology:  # fmt: skip
        top = Topology()
        top.set_roles("speculative", share, load_match=load_match)
        top.set_endpoints([Endpoint("s0", "s0", "speculative"), Endpoint("b0", "b0", "baseline")])
        _timed(top, "speculative", 1.0)
        _timed(top, "baseline", shadow_took)
        for _ in range(serving):
            top.begin(top.pods["speculative"][0], 0.0)
        return top

    assert made().ballast_due(0.0)
    assert not made(shadow_took=1.5).ballast_due(0.0)  # slower: real copies hold it
    assert not made(share=0.5).ballast_due(0.0)  # the operator's cost ceiling
    assert not made(load_match="arrivals").ballast_due(0.0)  # open loop: arrivals, not in-flight
    assert not made(serving=1).ballast_due(0.0)  # no room for two below the target
    top = made()
    for _ in range(4):
        top.begin(top.pods["baseline"][0], 0.0)
    assert top.ballast_due(0.0)  # 4 held of 6: one more leaves a slot for the next real copy
    top.begin(top.pods["baseline"][0], 0.0)
    assert not top.ballast_due(0.0)  # 5 of 6
    top = made()
    top.enqueue(object(), "speculative", 0.0)
    assert not top.ballast_due(0.0)  # a real copy waits: it goes first
    top = made()
    top.set_roles("speculative", 1.0, swapping=True)
    assert not top.ballast_due(0.0)


def test_a_shadow_below_its_target_gets_every_request_whatever_its_stale_request_time() -> None:
    """After an overload the drafter shadow's mean request time is still inflated (10 s
    against the serving arm's 1 s) and, with few copies, comes down slowly: by Little's law
    it would get 1/20 of the requests and stay starved. Once it has held less than its
    target for the deficit's whole bound, every request is copied (the room check still
    holds the count); before that, the estimate's share."""
    top, serving, shadow = one_shadow_pod(2)
    for pod, took in ((serving[0], 1.0), (shadow, 10.0)):
        top.begin(pod, 0.0)
        top.end(pod, 0.0, took)
    for pod in serving:
        for _ in range(4):
            top.begin(pod, 0.0)
    assert top.copy_share() == pytest.approx(0.5 / 10.0, rel=0.2)
    top._advance(60.0)  # a minute at 0 of 4 in flight: the deficit is at its bound
    assert top.copy_share() == 1.0


async def test_ballast_kept_before_a_swap_never_reaches_the_new_serving_arm(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """Replays kept while the drafter served were copies for the baseline shadow; once the
    roles swap, none of them may be replayed (they would load the baseline, now serving):
    the baseline gets exactly the clients' requests."""
    # Three drafter pods twice as slow as one baseline pod: after the swap the drafter
    # shadow is fed short of its target (3 pods at half speed), so ballast is due.
    fast, slow = await upstream(gap_s=0.01), await upstream(gap_s=0.02)
    rt = await start_router(h.topology([slow.url] * 3, [fast.url], share=1.0))
    body = {**CHAT, "stream": True, "max_tokens": 10}
    assert await _closed_loop(rt.url, 4, 1.5, body) == 0
    await h.wait_for(lambda: rt.router.shadow_in_flight == 0, timeout=10.0)
    assert rt.router._recent  # replays kept for the baseline shadow
    top = rt.router.topology
    top.set_roles("baseline", 1.0)  # the swap: the fast baseline serves, the drafter shadows
    before = fast.started
    sent = 0
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        status, _, _ = await post(rt.url + "/v1/chat/completions", body)
        assert status == 200
        sent += 1
    await h.wait_for(lambda: rt.router.shadow_in_flight == 0, timeout=10.0)
    assert fast.started - before == sent
    assert rt.router.metrics.registry.get_sample_value(
        "specguard_router_mirror_ballast_total"
    ), "ballast was due after the swap (the test must exercise it)"


async def test_a_real_copy_never_waits_behind_ballast(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """Eight closed-loop streams answered in lock-step (a fake upstream's fixed timing, as
    an engine's batched steps end many requests together) and a shadow 1.5× as fast, held
    at the serving pod's count by ballast, with a short copy queue (3): when the streams'
    next requests arrive together, the room ballast took is given back at once (the
    youngest ballast copies end), so every request is copied and none waits behind ballast
    or has its turn passed. Before: 48–52 of 80 requests copied, 28–32 turns passed."""
    serve, shadow = await upstream(gap_s=0.03), await upstream(gap_s=0.02)
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0),
                            RouterConfig(shadow_queue=3))  # fmt: skip
    body = {**CHAT, "stream": True, "max_tokens": 20}
    assert await _closed_loop(rt.url, 8, 6.0, body) == 0
    await h.wait_for(lambda: rt.router.shadow_in_flight == 0, timeout=10.0)
    samples = rt.router.feed.read(None, 10_000).samples
    serving = [s for s in samples if s.role == "serving"]
    copies = [s for s in samples if s.role == "shadow"]
    registry = rt.router.metrics.registry
    assert registry.get_sample_value("specguard_router_mirror_ballast_total"), "no ballast ran"
    assert registry.get_sample_value("specguard_router_mirror_ballast_ended_total")
    assert registry.get_sample_value("specguard_router_mirror_deferred_total") == 0
    assert len(copies) == len(serving), (len(copies), len(serving))
    assert {s.pair_id for s in copies} == {s.pair_id for s in serving}



def test_copies_waiting_beyond_a_target_that_fell_are_trimmed_oldest_first() -> None:
    """Twelve copies wait behind a shadow held at the serving pod's 12; then the clients'
    load drops to 2 in flight. At most as many copies wait as the target holds now: the ten
    oldest go (``trimmed``: copies of the other load's requests, sent late, would keep the
    shadow heavier than the serving pod into the next window), the two newest stay and are
    sent as room appears."""
    top, serving, shadow = one_shadow_pod(1)
    for _ in range(12):
        top.begin(serving[0], 0.0)
    for _ in range(14):  # past the target with the request being routed (13)
        top.begin(shadow, 0.0)
    for i in range(12):
        assert top.mirror_decision("speculative", 0.0) == "queue"
        top.enqueue(i, "speculative", float(i) / 100)
    assert top.queued == 12
    for _ in range(10):
        top.end(serving[0], 0.2, 1.0)  # the load drops: 2 in flight on the serving pod
    for _ in range(14):
        top.end(shadow, 0.2, 1.0)  # the shadow's copies end: room for the two left
    chosen, dropped = top.take_copy(0.3)
    assert [(p.payload, why) for p, why in dropped] == [(i, "trimmed") for i in range(10)]
    assert chosen is not None and chosen.payload == 10
    assert top.queued == 1
