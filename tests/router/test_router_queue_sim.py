"""Low concurrency end to end: the router's own figures say the copies are delivered.

Real parts, each in its own process as in a cluster: two ``specguard sim`` (the serving pod
with a drafter, the shadow pod without: at 3 requests in flight the drafter is well ahead, so
the shadow is the slower arm and copies must wait for its room), the router (``specguard
router``, static mode: the in-flight rule, every request's turn may come), and three
closed-loop streams from this process — the load at which copies dropped for lack of room
left the shadow underfed (issue 34). The delivered share is read from the router's own
``/metrics``: copies sent ÷ (sent + dropped, every reason); turns passed on because copies
already waited (``mirror_deferred``) made no copy and are reported beside it.

And high concurrency: 192 closed-loop streams on a baseline pod of the kimi-k3 profile and a
DSpark drafter shadow, which is slower there (past its crossover): the serving pod's count
dips between its engine steps, when the shadow has no room and copies queue. A queue capped
at a fixed 16 filled at each dip and passed the next turns (the drafter shadow held 136
against the serving pod's 177 through aiperf, bench/serving_swap_aiperf.py); bounded by the
target it holds the serving pod's count.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time

import aiohttp
import httpx
import pytest

from specguard.judge import Sample
from specguard.sim import start_sim
from specguard_testkit import router_process

DRAFTER = json.dumps({"method": "dspark", "model": "drafter", "num_speculative_tokens": 8})
SCALE = ["--time-scale", "0.2"]  # engine steps of ~4 ms: ~0.1-0.3 s a request
STREAMS = 3
SECONDS = 12.0


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples (all label sets) in Prometheus text."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", re.M)
    return sum(float(value) for value in pattern.findall(text))


async def closed_loop(url: str, stop: float) -> int:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 48,
            "stream": True}  # fmt: skip
    done = 0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < stop:
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                assert response.status == 200
                await response.read()
            done += 1
    return done


@pytest.mark.slow
def test_at_three_streams_the_router_delivers_the_copies() -> None:
    with (
        start_sim(["m", "--seed", "1", *SCALE, "--speculative-config", DRAFTER]) as serving,
        start_sim(["m", "--seed", "2", *SCALE]) as shadow,
        router_process([serving.url], [shadow.url]) as url,
    ):
        start = time.time()

        async def drive() -> int:
            stop = time.monotonic() + SECONDS
            return sum(await asyncio.gather(*(closed_loop(url, stop) for _ in range(STREAMS))))

        requests = asyncio.run(drive())
        time.sleep(1.0)  # the last copies end
        end = time.time()
        text = httpx.get(url + "/metrics", timeout=10).text
        samples = [
            Sample.from_dict(s)
            for s in httpx.get(url + "/samples", params={"limit": "10000"}, timeout=10).json()[
                "samples"
            ]
        ]
    sent = metric(text, "specguard_router_mirrored_total")
    dropped = metric(text, "specguard_router_mirror_dropped_total")
    queued = metric(text, "specguard_router_mirror_queued_total")
    deferred = metric(text, "specguard_router_mirror_deferred_total")
    delivered = sent / (sent + dropped)
    figures = f"{requests=} {sent=} {dropped=} {queued=} {deferred=} {delivered=:.3f}"
    assert requests >= 60, figures
    assert delivered >= 0.95, figures
    assert queued >= 5, figures  # the shadow is the slower arm here: copies did wait
    # Little's law over the run: time-averaged in flight = summed request time ÷ the time.
    held = {
        role: sum(s.e2e_s for s in samples if s.role == role) / (end - start)
        for role in ("serving", "shadow")
    }
    # Measured 1.00-1.07 (12-20 s runs; 0.94 before the queue, with 52% delivered).
    assert 0.85 <= held["shadow"] / held["serving"] <= 1.15, (held, figures)


KIMI = json.dumps({"method": "dspark", "model": "org/kimi-k3-dspark", "num_speculative_tokens": 8})


async def closed_loop_streams(url: str, streams: int, seconds: float) -> int:
    body = {"model": "m", "messages": [{"role": "user", "content": "call the tool"}],
            "max_tokens": 32, "stream": True}  # fmt: skip
    headers = {"X-Specguard-Domain": "tool_call"}
    stop = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:  # fmt: skip

        async def one() -> int:
            done = 0
            while time.monotonic() < stop:
                async with session.post(url + "/v1/chat/completions", json=body,
                                        headers=headers) as response:  # fmt: skip
                    assert response.status == 200
                    await response.read()
                done += 1
            return done

        return sum(await asyncio.gather(*(one() for _ in range(streams))))


@pytest.mark.slow
def test_at_192_streams_a_slower_shadow_is_held_at_the_serving_count() -> None:
    scale = ["--profile", "kimi-k3", "--time-scale", "4"]
    with (
        start_sim(["m", "--seed", "5", *scale]) as serving,
        start_sim(["m", "--seed", "5", *scale, "--speculative-config", KIMI]) as shadow,
        router_process([serving.url], [shadow.url], "--serving-arm", "baseline",
                       "--shadow-max-in-flight", "2048") as url,  # fmt: skip
    ):
        requests = asyncio.run(closed_loop_streams(url, 192, 25.0))
        text = httpx.get(url + "/metrics", timeout=10).text
        samples = [
            Sample.from_dict(s)
            for s in httpx.get(url + "/samples", params={"limit": "100000"}, timeout=10).json()[
                "samples"
            ]
        ]
    deferred = metric(text, "specguard_router_mirror_deferred_total")
    late = [s for s in samples if s.started_at >= min(x.started_at for x in samples) + 8.0]
    held = {
        role: statistics.median(s.concurrency for s in late if s.role == role)
        for role in ("serving", "shadow")
    }
    figures = f"{requests=} {deferred=} {held=}"
    assert requests >= 500, figures
    # Measured 192 against 166 (125.5 against 158 with the queue capped at 16; through aiperf
    # 192 against 175, and 136 against 177).
    assert held["shadow"] >= 0.9 * held["serving"], figures
