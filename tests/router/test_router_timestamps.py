"""A sample's end is stamped before the client can have sent its next request.

``judge.client_loop`` tells closed-loop clients from open-loop ones by the order of arrivals
and completions: a closed-loop client's next request comes right after its previous answer.
The router must therefore stamp a request's end (``started_at + e2e_s``) no later than the
moment the last byte is handed to the client's connection — before anything that yields to
the event loop and lets the next request in — and its start at the first moment it sees it.

Real HTTP all the way: two ``specguard sim`` processes (the serving and the shadow pod, fast
time scale), the router (every request mirrored) and many closed-loop streams, each sending
its next request right after reading the last byte of the previous one — to the end of the
body, or to ``data: [DONE]`` and closing, as guidellm does — on a new connection (on one
kept-alive connection the next request would wait for the previous handler anyway). The
router and the streams share this test's event loop on purpose: the streams keep it busy,
and its stamps race the clients' next requests directly (a router in a process of its own
sees the next request only after a round trip through a second busy process). Each request
is tagged with its stream and number in ``X-Specguard-Domain`` (the sample's ``domain``), so
each follow-up is compared with its own predecessor.

What it catches: an end stamped later than the streams' turnaround (on a loaded 2-core
machine 150-400 ms; a router that stamps the end 1 s after ``write_eof`` fails the
uncancelled case with ~300 of 336 follow-ups early). A single yield before the stamp is
caught by ``test_router_client_loop.py::test_a_sample_ends_when_its_last_bytes_went_to_the_client``,
whose upstream holds the body open after ``[DONE]``.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from specguard.router import Endpoint, Router, Topology
from specguard.sim import SimProcess
from specguard_testkit._ports import free_port

STREAMS = 48
REQUESTS = 8  # per stream
SIM = ["m", "--time-scale", "0.05", "--max-num-seqs", "512"]


SIMS = ([*SIM, "--seed", "1"], [*SIM, "--seed", "2"])  # ``sims``: serving, shadow


async def stream(session: aiohttp.ClientSession, url: str, client: int) -> None:
    """One closed-loop client: its next request right after the last byte it reads (to the
    end of the body, or to ``data: [DONE]`` and close, as guidellm does)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 24,
            "stream": True}  # fmt: skip
    for number in range(REQUESTS):
        headers = {"X-Specguard-Domain": f"c{client}.r{number}"}
        response = await session.post(url + "/v1/chat/completions", json=body, headers=headers)
        assert response.status == 200
        if client % 2:
            async for _ in response.content.iter_any():
                pass
            response.release()
            continue
        got = b""
        while not got.endswith(b"data: [DONE]\n\n"):
            data = await response.content.readany()
            assert data, got[-200:]
            got += data
        response.close()


@pytest.mark.slow
@pytest.mark.parametrize("cancellation", [True, False], ids=["cancelled", "uncancelled"])
async def test_no_follow_up_starts_before_its_predecessor_ended(
    sims: tuple[SimProcess, SimProcess], cancellation: bool
) -> None:
    """With handler cancellation (how ``specguard router`` serves) a client that closes
    cancels the handler; without it nothing does, and a late end would show whatever the
    client did after its last byte."""
    serving, shadow = sims
    top = Topology()
    top.set_roles("speculative", 1.0)
    top.set_endpoints(
        [
            Endpoint("serve-0", serving.url, "speculative"),
            Endpoint("shadow-0", shadow.url, "baseline"),
        ]
    )
    router = Router(top)
    runner = web.AppRunner(router.app(), handler_cancellation=cancellation, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            url = f"http://127.0.0.1:{port}"
            await asyncio.gather(*(stream(session, url, client) for client in range(STREAMS)))
        for _ in range(3000):
            if top.pods["speculative"][0].in_flight == 0:
                break
            await asyncio.sleep(0.01)
    finally:
        await runner.cleanup()
    samples = router.feed.read(None, 10_000).samples
    served = {s.domain: s for s in samples if s.role == "serving"}
    assert len(served) == STREAMS * REQUESTS
    assert sum(s.role == "shadow" for s in samples) >= STREAMS  # a busy router: it mirrors
    gaps = [
        after.started_at - (before.started_at + before.e2e_s)
        for client in range(STREAMS)
        for number in range(REQUESTS - 1)
        for before, after in [(served[f"c{client}.r{number}"], served[f"c{client}.r{number + 1}"])]
    ]
    early = sorted(gap for gap in gaps if gap < 0)
    assert not early, (
        f"{len(early)} of {len(gaps)} follow-ups start before their predecessor ended, "
        f"by up to {-early[0] * 1000:.2f} ms"
    )
