"""During the operator's rolling swap the router answers clients from both arms' ready pods."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp

from specguard.router._discovery import swapping_from_resource
from specguard.router._pool import Endpoint, Topology

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, RouterFactory, UpstreamFactory


def test_swapping_serves_from_both_arms_and_only_then() -> None:
    top = Topology()
    top.set_endpoints(
        [
            Endpoint("spec-0", "http://127.0.0.1:1", "speculative"),
            Endpoint("base-0", "http://127.0.0.1:2", "baseline"),
        ]
    )
    top.set_roles("speculative", 0.0)
    assert {top.pick("speculative").name for _ in range(4)} == {"spec-0"}  # type: ignore[union-attr]
    top.set_roles("speculative", 0.0, swapping=True)
    assert {top.pick("speculative").name for _ in range(4)} == {"spec-0", "base-0"}  # type: ignore[union-attr]
    # The shadow side never widens.
    assert {top.pick("baseline").name for _ in range(4)} == {"base-0"}  # type: ignore[union-attr]


def test_swapping_flag_is_read_from_status() -> None:
    assert swapping_from_resource({"status": {"arms": {"swapping": True}}})
    assert not swapping_from_resource({"status": {"arms": {"mirrorShare": 0.5}}})
    assert not swapping_from_resource(None)


async def test_a_swap_ends_the_shadow_copies_in_flight(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """Nothing judges a copy during a swap, and the clients are then answered from both
    arms' pods: the copies still running on the shadow pod (by the in-flight rule as many
    as the serving pods hold) are ended at the swap's first request, their upstream
    requests with them, and leave no sample. Before the swap a copy runs to its end."""
    serve = await upstream()
    shadow = await upstream(gap_s=0.02)  # a copy of 400 tokens runs for about 8 s
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400,
            "stream": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(rt.url + "/v1/chat/completions", json=chat) as r:
            assert r.status == 200
        await h.wait_for(lambda: shadow.started == 1)
        await asyncio.sleep(0.2)
        assert rt.router.shadow_in_flight == 1 and shadow.cancelled == 0  # not before a swap
        rt.router.topology.set_roles("speculative", 1.0, swapping=True)
        async with s.post(rt.url + "/v1/chat/completions", json=chat) as r:
            assert r.status == 200
    await h.wait_for(lambda: shadow.cancelled == 1 and rt.router.shadow_in_flight == 0)
    assert shadow.started == 1  # and nothing copied during the swap
    assert [x.role for x in rt.router.feed.read(None, 10).samples] == ["serving", "serving"]


async def test_a_copy_ended_at_a_swap_leaves_its_serving_half_unpaired(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """A copy ended at a swap never records its half of the pair: the serving half still
    running then is recorded without the pair id (as when a copy is never sent), not left
    for the window source to hold for its bound waiting for a shadow half that never
    comes."""
    serve = await upstream(gap_s=0.004)  # the serving half of 400 tokens: about 1.6 s
    shadow = await upstream(gap_s=0.02)  # its copy: about 8 s
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with aiohttp.ClientSession() as s:

        async def served(max_tokens: int) -> None:
            async with s.post(
                rt.url + "/v1/chat/completions", json=chat | {"max_tokens": max_tokens}
            ) as r:
                assert r.status == 200
                await r.read()

        first = asyncio.create_task(served(400))
        await h.wait_for(lambda: shadow.started == 1 and serve.started == 1)
        rt.router.topology.set_roles("speculative", 1.0, swapping=True)
        await served(2)  # the swap's first request ends the copy
        await h.wait_for(lambda: shadow.cancelled == 1)
        assert not first.done()  # the serving half was still running at the swap
        await first
    samples = rt.router.feed.read(None, 10).samples
    assert [(x.role, x.pair_id) for x in samples] == [("serving", None), ("serving", None)]
