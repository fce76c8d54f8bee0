"""A request that reaches a draining vLLM pod before the router sees it go is tried on another
pod: vLLM 0.32.0 answers it 500 "cannot schedule new futures after shutdown" (not 503), and
the simulator does the same (tests/realvllm/test_realvllm_shutdown.py records the real one)."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp
import pytest
from aiohttp import web

from specguard.router import Endpoint, Router, RouterConfig, Topology
from specguard.sim import start_sim
from specguard_testkit import free_port
from specguard_testkit._loadclient import StreamRecord, completion_payload, stream_once

pytestmark = pytest.mark.asyncio


async def test_drain_refusal_is_retried_on_another_pod() -> None:
    args = ["--time-scale", "1", "--seed", "1", "--shutdown-timeout", "30"]
    with start_sim(args) as draining, start_sim(args) as other:
        top = Topology()
        top.set_roles("speculative", 0.0)
        top.set_endpoints([Endpoint("a-draining", draining.url, "speculative"),
                           Endpoint("b-other", other.url, "speculative")])  # fmt: skip
        router = Router(top, RouterConfig())
        runner = web.AppRunner(router.app(), handler_cancellation=True, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        headers = {"Content-Type": "application/json"}
        try:
            async with aiohttp.ClientSession() as session:
                # a stream in flight keeps the draining simulator up (it exits when idle)
                held = StreamRecord(time.monotonic())
                task = asyncio.create_task(stream_once(
                    session, draining.url, completion_payload(None, 400), headers, held))
                while not held.chunk_times:
                    await asyncio.sleep(0.02)
                draining.proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.3)
                async with session.post(draining.url + "/v1/completions",
                                        data=completion_payload(None, 3), headers=headers
                                        ) as direct:  # fmt: skip
                    assert direct.status == 500
                # ties rotate: of four requests, some pick the draining pod first
                front = f"http://127.0.0.1:{port}"
                statuses = []
                for _ in range(4):
                    async with session.post(front + "/v1/completions",
                                            data=completion_payload(None, 3), headers=headers
                                            ) as resp:  # fmt: skip
                        await resp.read()
                        statuses.append(resp.status)
                assert statuses == [200] * 4
                refused = router.metrics.requests.labels("speculative", "serving", "refused")
                assert refused._value.get() >= 1
                await task
        finally:
            await runner.cleanup()
