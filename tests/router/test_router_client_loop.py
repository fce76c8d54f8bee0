"""Closed-loop and open-loop clients told apart from a real router's samples.

Real parts, each in a process of its own as in a cluster: ``specguard sim`` as the serving
and shadow pods, the router, the demo's client (``specguard.demo._load``: closed-loop streams,
or Poisson arrivals that ignore the answers); ``judge.client_loop`` runs on the router's
serving samples — the timing noise of real HTTP streaming and event loops included.

(With the router inside the test's own process the open-loop arrivals read up to +0.5
follow-ups per completion at 64–256 ms: the test's event loop couples the timestamps. A
router has its process to itself.)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import pytest

from specguard.judge import Sample, client_loop
from specguard.sim import SimProcess
from specguard_testkit import router_process

from .conftest import Helpers, RouterFactory, UpstreamFactory

# Long enough for each kind to be told: a closed loop answers within a few milliseconds; an
# open one is resolved only up to half the median request time, whose statistic's standard
# error is about sqrt(2 h / T) (docs/judge.md): a minute of arrivals. The open clients ask for
# short answers (8 tokens, ~30 ms on a quiet machine): on a starved host 48-token requests took
# 0.5-0.95 s, so "open" needed a lag of 0.25-0.48 s that a minute of arrivals cannot resolve.
SECONDS = {"closed": 25, "open": 60}
MAX_TOKENS = {"closed": 48, "open": 8}


# ``sims``: the default serving and shadow simulators (tests/conftest.py).


def samples_of(url: str) -> list[Sample]:
    out: list[Sample] = []
    after = ""
    while True:
        params = {"limit": "10000", **({"after": after} if after else {})}
        page = httpx.get(url + "/samples", params=params, timeout=10).json()
        out += [Sample.from_dict(s) for s in page["samples"]]
        after = page["next"]
        if not page["samples"]:
            return out


@pytest.mark.slow
@pytest.mark.parametrize(("schedule", "kind"), [("math:12", "closed"), ("math:20/s", "open")])
def test_the_demo_clients_are_told_apart_through_the_router(
    schedule: str, kind: str, sims: tuple[SimProcess, SimProcess], tmp_path: Path
) -> None:
    serving, shadow = sims
    out = tmp_path / "client.jsonl"
    with router_process([serving.url], [shadow.url]) as url:
        start = time.time() + 2.0  # the client's process starts meanwhile
        subprocess.run(
            [sys.executable, "-c", "import sys; from specguard.demo._load import main; "
             "raise SystemExit(main(sys.argv[1:]))", "--router", url, "--schedule",
             f"{schedule}:{SECONDS[kind]}", "--replicas", "1", "--start", f"{start:.3f}", "--out",
             str(out), "--model", "m", "--max-tokens", str(MAX_TOKENS[kind])],
            check=True, timeout=SECONDS[kind] + 60,
        )  # fmt: skip
        end = time.time()
        samples = samples_of(url)
    found = client_loop(samples, start=start, end=end)
    lags = [(f.lag_s, round(f.follow_up, 3), round(f.bound, 3)) for f in found.lags]
    assert found.kind == kind, (schedule, found.sentence(), found.median_request_s, lags)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(line["status"] == 200 for line in lines)
    if kind == "open":
        # Arrivals at 20/s whatever the answers: 1200 expected, Poisson ±35.
        assert 1000 <= len(lines) <= 1400, len(lines)


async def test_a_sample_ends_when_its_last_bytes_went_to_the_client(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """A closed-loop client sends its next request as soon as it reads ``data: [DONE]``; the
    router's task may resume long after (here the upstream keeps the body open 0.3 s after
    [DONE], as a busy event loop would delay it). The first sample must end before the next
    one starts, or the clients read as the opposite of a closed loop (judge.client_loop)."""
    serve = await upstream(done_tail_s=0.3)
    rt = await start_router(h.topology([serve.url]))
    body = {"model": "m", "messages": [], "max_tokens": 5, "stream": True}
    async with aiohttp.ClientSession() as session:

        async def one(then: bool) -> None:
            nxt = None
            async with session.post(rt.url + "/v1/chat/completions", json=body) as response:
                async for line in response.content:  # to the end of the body
                    if then and line.startswith(b"data: [DONE]"):
                        nxt = asyncio.create_task(one(False))  # the next request, at once
            if nxt is not None:
                await nxt

        await one(True)
        await h.wait_for(lambda: len(rt.router.feed) == 2)
    first, second = sorted(rt.router.feed.read(None, 10).samples, key=lambda s: s.started_at)
    assert first.started_at + first.e2e_s <= second.started_at, (first, second)
