"""End to end: a drafter that loses at high concurrency, judged from a real Prometheus
scraping two simulators and from the real router's sample feed.

DeepSeek-V4 profile, DSpark with fixed 7-token verification on one simulator, no drafter on
the other; the router (static mode) serves from the drafter and mirrors every request to the
no-drafter copy; 256 concurrent streams. The simulator models fixed-length verification at 256
streams as ~36% less throughput than no speculation (docs/simulator.md), i.e. a higher
per-token latency. Time scale 3 stretches every simulated step 3× so that the 2-core test box
keeps up with 256 streams through the router on both arms (chunk rates ÷ 3); ratios do not
depend on the scale.

The simulators' TPOT histograms get 2 ms buckets (--custom-histogram-buckets): with vLLM's
default buckets both arms' medians fall in one 25–50 ms... bucket and the Prometheus source
rightly says it cannot tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import httpx
import numpy as np
import pytest

from specguard.judge.verdict import JudgeSettings, judge
from specguard.sim.launch import SimProcess, start_sim
from specguard.sim.loadclient import completion_payload, stream_once
from specguard.sources.prometheus import ArmSelectors, PrometheusSource
from specguard.sources.router_feed import RouterFeed

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

SCALE = 3.0
CONCURRENCY = 256
LOAD_S = 36.0
STAGGER_S = 6.0
RAMP_S = 14.0
BUCKETS = [round(0.002 * i, 3) for i in range(1, 401)]  # 2 ms steps to 800 ms
FIXED_K7 = {"method": "dspark", "model": "org/dsv4-dspark", "num_speculative_tokens": 7}


def sim_args(drafter: bool) -> list[str]:
    args = ["--profile", "deepseek-v4", "--time-scale", str(SCALE), "--seed", "11",
            "--served-model-name", "dsv4",
            "--custom-histogram-buckets", json.dumps({"inter_token_latency": BUCKETS})]  # fmt: skip
    if drafter:
        args += ["--speculative-config", json.dumps(FIXED_K7)]
    return args


@contextlib.contextmanager
def router(serving: str, shadow: str, port: int) -> Iterator[str]:
    cmd = [sys.executable, "-m", "specguard", "router", "--serving", serving, "--shadow", shadow,
           "--mirror-share", "1.0", "--shadow-max-in-flight", "1024", "--host", "127.0.0.1",
           "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def labels(arm: str, pod: str) -> dict[str, str]:
    return {"namespace": "llm", "pod": pod, "specguard_io_deployment": "dsv4",
            "specguard_io_arm": arm}  # fmt: skip


def target(sim: SimProcess) -> str:
    return sim.url.removeprefix("http://")


async def staggered_load(url: str) -> int:
    """CONCURRENCY closed-loop workers, started at random moments over STAGGER_S and asking
    for 32-96 tokens each time, so that requests do not move in lockstep waves (256
    identical requests started together finish together, and any window then counts whole
    waves on one arm and not the other)."""
    rng = np.random.default_rng(12)
    end = time.monotonic() + LOAD_S
    headers = {"Content-Type": "application/json", "X-Specguard-Domain": "chat"}
    sent = 0
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=timeout) as session:  # fmt: skip

        async def worker(delay: float, lengths: list[int]) -> None:
            nonlocal sent
            await asyncio.sleep(delay)
            for tokens in lengths:
                if time.monotonic() >= end:
                    return
                sent += 1
                with contextlib.suppress(aiohttp.ClientError):
                    await stream_once(session, url, completion_payload("dsv4", tokens), headers)

        tasks = [
            asyncio.create_task(worker(float(rng.uniform(0, STAGGER_S)),
                                       rng.integers(32, 97, size=100).tolist()))
            for _ in range(CONCURRENCY)
        ]  # fmt: skip
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return sent


def test_fixed_k7_at_256_streams_is_regressed_by_prometheus_and_router(
    make_prometheus: Callable[..., Any],
) -> None:
    with (
        start_sim(sim_args(drafter=True)) as spec,
        start_sim(sim_args(drafter=False)) as base,
        router(spec.url, base.url, free_port()) as router_url,
        make_prometheus([(target(spec), labels("speculative", "dsv4-spec-0")),
                         (target(base), labels("baseline", "dsv4-base-0"))]) as prom,
    ):  # fmt: skip
        prom.wait_for_samples("vllm:num_requests_running", 2)
        started = time.time()
        streams = asyncio.run(staggered_load(router_url))
        ended = time.time()
        time.sleep(2.5)  # two more scrapes after the load
        # Judge the steady state only. A request takes up to ~12 s on the drafter arm here (up
        # to 96 tokens at ~130 ms), half that on the other; until every worker has started and
        # finished a request, the slower arm has finished fewer requests than the faster one,
        # which would read as a load mismatch. From RAMP_S on both arms finish what arrives.
        source = PrometheusSource(prom.url, ArmSelectors.for_deployment("dsv4", "llm"))
        prom_verdict = source.verdict(window_s=ended - started - RAMP_S, at=ended)

        for arm in ("speculative", "baseline"):
            sel = f'specguard_io_arm="{arm}"'
            print("DEBUG", arm, [(q, prom.query(q.format(sel=sel, w=int(ended - started - RAMP_S)))) for q in (
                "sum(increase(vllm:request_success_total{{{sel}}}[{w}s]))",
                "sum(increase(vllm:request_time_per_output_token_seconds_count{{{sel}}}[{w}s]))",
                "sum(vllm:request_success_total{{{sel}}})",
                "sum(vllm:request_time_per_output_token_seconds_count{{{sel}}})",
            )])

        for arm in ("speculative", "baseline"):
            sel = f'specguard_io_arm="{arm}"'
            body = httpx.get(prom.url + "/api/v1/query_range", params={
                "query": f"sum(vllm:request_time_per_output_token_seconds_count{{{sel}}})",
                "start": started, "end": ended + 3, "step": 2}).json()
            vals = [round(float(v[1])) for v in body["data"]["result"][0]["values"]]
            body = httpx.get(prom.url + "/api/v1/query_range", params={
                "query": f"sum(vllm:num_requests_running{{{sel}}})",
                "start": started, "end": ended + 3, "step": 2}).json()
            run = [round(float(v[1])) for v in body["data"]["result"][0]["values"]]
            body = httpx.get(prom.url + "/api/v1/query_range", params={
                "query": f"sum(vllm:num_requests_waiting{{{sel}}})",
                "start": started, "end": ended + 3, "step": 2}).json()
            wait = [round(float(v[1])) for v in body["data"]["result"][0]["values"]]
            print("DEBUG series", arm, vals, run, wait)

        async def read_feed() -> Any:
            async with RouterFeed([router_url], timeout=30) as feed:
                return await feed.poll()

        feed = asyncio.run(read_feed())
    # The router's window, by request start: after the ramp, and early enough that the
    # request finished before the client stopped (the client cancels the streams in flight
    # on the serving arm, which leave no serving sample, while their mirrored copies finish).
    in_window = [s for s in feed.samples if started + RAMP_S <= s.started_at <= ended - RAMP_S]
    router_verdict = judge(in_window, JudgeSettings())
    import collections
    print("DEBUG router", collections.Counter((x.arm, x.status, x.tpot_s is not None) for x in feed.samples))
    print("DEBUG window", collections.Counter((x.arm, x.status) for x in in_window), started, ended)
    print("load:", streams, "client streams;", len(feed.samples), "router samples",
          feed.failed)  # fmt: skip
    print("prometheus:", prom_verdict.sentence())
    print("router:", router_verdict.sentence())
    assert prom_verdict.outcome == "regressed", prom_verdict.sentence()
    assert prom_verdict.acceptance_length is not None and prom_verdict.acceptance_length > 1.5
    # The router measures the same requests on both arms: it must agree in direction.
    assert router_verdict.ratio is not None and router_verdict.ratio > 1.0 + 0.03
    assert router_verdict.outcome in ("regressed", "inconclusive"), router_verdict.sentence()
    assert feed.missed == 0
