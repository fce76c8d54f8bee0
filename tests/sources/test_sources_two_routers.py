"""Two router processes in front of the same two simulators: each router sees only its own
half of a pod's load, the window source counts the requests of both.

The routers copy every request (``--load-match arrivals`` with one pod per arm: this is about
counting, not about which requests are copied).

Each router gets 4 closed-loop client streams, so the serving simulator has 8 in flight and,
with every request mirrored, about as many reach the shadow one. A router's own serving
``concurrency`` stays at most 4; the samples the operator gets from `RouterFeedSource`
count all 8 (less at the edges of the load). Pairs stay whole: both halves of a mirrored
request come from the router that mirrored it, and go to the window in which the later one
ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator

import pytest

from specguard.sim._launch import SimProcess, start_sim
from specguard.sources._router_feed import RouterFeed, RouterFeedSource
from specguard_testkit import router_process
from specguard_testkit._loadclient import closed_loop

PER_ROUTER = 4


# ``sims``: the default serving and shadow simulators (tests/conftest.py).


def router(serving: str, shadow: str) -> contextlib.AbstractContextManager[str]:
    return router_process([serving], [shadow], "--mirror-share", "1", "--load-match", "arrivals",
                          "--no-uvloop")  # fmt: skip


async def test_concurrency_counts_every_router(sims: tuple[SimProcess, SimProcess]) -> None:
    serving, shadow = sims
    with router(serving.url, shadow.url) as one, router(serving.url, shadow.url) as two:
        start = time.time()
        await asyncio.gather(
            *(closed_loop(url, concurrency=PER_ROUTER, duration=6.0, warmup=0.0, max_tokens=48,
                          model="m") for url in (one, two))
        )  # fmt: skip
        await asyncio.sleep(2.0)  # the last shadow copies end
        async with RouterFeed([one, two]) as raw:
            own = (await raw.poll()).samples
        async with RouterFeedSource([one, two]) as source:
            window = await source.collect(start, time.time())
            held = source.held
    assert window.state == "ok", window.problem
    samples = window.samples
    # The load's end cuts the last stream of each client: its serving half is not a sample
    # (the client closed it), its shadow copy runs on and is held for a twin that never
    # comes (given out alone after the source's pair_hold_s).
    assert held <= 2 * PER_ROUTER
    assert len(samples) + held == len(own) > 4 * PER_ROUTER
    # What each router counted alone, and what the source counts over both.
    # (Measured: serving 4 at most per router, 8 over both in most samples.)
    assert max(s.concurrency for s in own if s.role == "serving") <= PER_ROUTER
    served = [s.concurrency for s in samples if s.role == "serving"]
    assert statistics.median(served) >= 1.5 * PER_ROUTER, sorted(served)
    assert max(served) <= 2 * PER_ROUTER, sorted(served)
    # Shadow copies are not closed-loop (a lagging copy overlaps the next), so no upper
    # bound; the count over both routers is still about twice each router's own.
    shadow_own = [s.concurrency for s in own if s.role == "shadow"]
    shadow_all = [s.concurrency for s in samples if s.role == "shadow"]
    assert statistics.median(shadow_all) >= 1.5 * statistics.median(shadow_own), (
        sorted(shadow_own), sorted(shadow_all))  # fmt: skip
    # Every request was mirrored, and each pair arrives whole.
    pairs: dict[str, list[str]] = {}
    for s in samples:
        assert s.pair_id is not None
        pairs.setdefault(s.pair_id, []).append(s.role)
    whole = [roles for roles in pairs.values() if sorted(roles) == ["serving", "shadow"]]
    assert len(whole) == len(pairs)


@pytest.fixture
def slow_shadow() -> Iterator[tuple[SimProcess, SimProcess]]:
    """A shadow 1.4 times slower than the serving pod: a copy ends after its request."""
    with (
        start_sim(["m", "--seed", "1"]) as serving,
        start_sim(["m", "--seed", "2", "--time-scale", "1.4"]) as shadow,
    ):
        yield serving, shadow


async def test_pairs_are_whole_in_windows_cut_while_requests_run(
    slow_shadow: tuple[SimProcess, SimProcess],
) -> None:
    """The operator's windows over live traffic: windows of 1 s end while requests run (a
    request here takes about a second), and the routers are read ahead every 0.2 s as the
    operator's loop does between window ends. Every mirrored pair is judged whole, in the
    window its later half ended in (cut by end time alone, a pair's halves often end in two
    windows: 9 of 77 did in one run of this test)."""
    serving, shadow = slow_shadow
    with router(serving.url, shadow.url) as one, router(serving.url, shadow.url) as two:
        async with RouterFeedSource([one, two], read_ahead_s=0.2) as source:
            windows = []
            stop = asyncio.Event()

            async def operator() -> None:
                start = time.time()
                while not stop.is_set():
                    for _ in range(5):
                        source.read_ahead()
                        await asyncio.sleep(0.2)
                    windows.append(await source.collect(start, time.time()))
                    start = windows[-1].end

            task = asyncio.create_task(operator())
            await asyncio.gather(
                *(closed_loop(url, concurrency=PER_ROUTER, duration=6.0, warmup=0.0,
                              max_tokens=48, model="m") for url in (one, two))
            )  # fmt: skip
            await asyncio.sleep(2.0)  # the last shadow copies end
            stop.set()
            await task
            held = source.held
    assert all(w.state in ("ok", "empty") for w in windows), [w.problem for w in windows]
    seen: dict[str, list[tuple[int, str]]] = {}
    for k, window in enumerate(windows):
        for s in window.samples:
            if s.pair_id is not None:
                seen.setdefault(s.pair_id, []).append((k, s.role))
    # Whole pairs, each in one window (the clients' last requests, cut at the load's end,
    # leave their copies held: their serving halves never come).
    assert len(seen) > 8 * PER_ROUTER and held <= 2 * PER_ROUTER
    split = [p for p, where in seen.items() if len({k for k, _ in where}) > 1]
    alone = [p for p, where in seen.items() if sorted(r for _, r in where) != ["serving", "shadow"]]
    assert not split and not alone, (len(split), len(alone), len(seen))
