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

import httpx
import pytest

from specguard.judge.verdict import JudgeSettings, judge
from specguard.sim.launch import SimProcess, start_sim
from specguard.sim.loadclient import closed_loop
from specguard.sources.prometheus import ArmSelectors, PrometheusSource
from specguard.sources.router_feed import RouterFeed

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

SCALE = 3.0
CONCURRENCY = 256
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
        load = closed_loop(router_url, concurrency=CONCURRENCY, duration=10.0, warmup=2.0,
                           max_tokens=32, domain="chat", model="dsv4")  # fmt: skip
        result = asyncio.run(load)
        ended = time.time()
        time.sleep(2.5)  # two more scrapes after the load
        # The window is the load itself. Ending it when the client stops matters: the client
        # then cancels the streams in flight on the serving (drafter) arm, which never finish
        # there, while their mirrored copies still finish on the baseline; counted after the
        # end, the arms' finished requests per pod would differ by those 256 (a fake load
        # mismatch). Within the window the arms differ only by what Little's law says (the
        # slower arm has more in flight), a few percent of a minute-long window.
        source = PrometheusSource(prom.url, ArmSelectors.for_deployment("dsv4", "llm"))
        prom_verdict = source.verdict(window_s=ended - started, at=ended)

        async def read_feed() -> Any:
            async with RouterFeed([router_url]) as feed:
                return await feed.poll()

        feed = asyncio.run(read_feed())
    router_verdict = judge(feed.samples, JudgeSettings())
    print("load:", len(result.records), "client streams")
    print("prometheus:", prom_verdict.sentence())
    print("router:", router_verdict.sentence())
    assert prom_verdict.outcome == "regressed", prom_verdict.sentence()
    assert prom_verdict.acceptance_length is not None and prom_verdict.acceptance_length > 1.5
    # The router measures the same requests on both arms: it must agree in direction.
    assert router_verdict.ratio is not None and router_verdict.ratio > 1.0 + 0.03
    assert router_verdict.outcome in ("regressed", "inconclusive"), router_verdict.sentence()
    assert feed.missed == 0
