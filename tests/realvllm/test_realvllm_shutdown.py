"""SIGTERM on real vLLM, with and without the drain ``runtime.shutdownTimeout`` renders.

What vLLM 0.32.0 does (the simulator does the same, tests/sim/test_sim_fidelity.py):

- ``--shutdown-timeout N>0`` (render's default, 60s): the streams in flight run to their end;
  a new request gets 500 ``cannot schedule new futures after shutdown`` (not 503), while
  ``/health`` still answers 200 until the HTTP server stops; the process exits when the
  engine has drained (or at N seconds).
- no flag (``shutdownTimeout: 0s``): every stream in flight is cut: an error event
  (``EngineCore encountered an issue``, code 500) and ``data: [DONE]``, or finish_reason
  "abort" and [DONE], or (the engine killed first) a stream left open with nothing more.

This file runs last in the tier (it consumes servers other tests started).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web

from specguard.api.constants import ARM_BASELINE
from specguard.router import Endpoint, Router, RouterConfig, Topology
from specguard.sim import SimProcess
from specguard_testkit import free_port
from specguard_testkit._realvllm import SERVED_NAME

SHUTDOWN_ERROR = "cannot schedule new futures after shutdown"
T = TypeVar("T")


@pytest.fixture(scope="module", autouse=True)
def _last_of_the_tier(servers: Any) -> Iterator[None]:
    """This file runs last in the tier: after it no server is left running for the tests of
    other directories that follow in the same pytest run (each holds about 1.4 GB)."""
    yield
    servers.stop_all()


def completion(max_tokens: int, stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": SERVED_NAME, "prompt": "Once upon a time",
                            "max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True,
                            "stream": stream}  # fmt: skip
    if stream:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return body


@dataclass
class Stream:
    status: int = 0
    tokens: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)
    done: bool = False
    first_token: asyncio.Event = field(default_factory=asyncio.Event)


async def read_stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                      seen: Stream | None = None) -> Stream:  # fmt: skip
    seen = seen or Stream()
    async with session.post(url + "/v1/completions", json=body) as resp:
        seen.status = resp.status
        async for line in resp.content:
            if line.startswith(b"data: [DONE]"):
                seen.done = True
            elif line.startswith(b"data: {"):
                event = json.loads(line[6:])
                if "error" in event:
                    seen.errors.append(event["error"])
                    continue
                if event.get("usage"):
                    seen.tokens = max(seen.tokens, int(event["usage"]["completion_tokens"]))
                    if seen.tokens:
                        seen.first_token.set()
                for choice in event.get("choices") or []:
                    if choice.get("finish_reason"):
                        seen.finish.append(choice["finish_reason"])
    return seen


class EngineHungError(Exception):
    """vLLM 0.32's EngineCore logged the SIGTERM and then neither drained nor aborted: the
    streams stall and never end (seen in about one SIGTERM in four here, with either executor;
    docs/simulator.md). Not what specguard relies on: the attempt is made once more."""


async def after_sigterm(server: SimProcess, work: Awaitable[T], seconds: float = 60) -> T:
    try:
        return await asyncio.wait_for(work, seconds)
    except TimeoutError:
        log = server.log_path.read_text(errors="replace")
        if "trigger received signal=SIGTERM" in log and "EngineCore: start mode=" not in log:
            raise EngineHungError(server.log_tail(600)) from None
        raise


def twice(start: Callable[[int], SimProcess],
          attempt: Callable[[SimProcess], Coroutine[Any, Any, None]]) -> None:  # fmt: skip
    for n in (1, 2):
        server = start(n)
        try:
            asyncio.run(attempt(server))
            return
        except EngineHungError as hung:
            if n == 2:
                raise AssertionError(f"vLLM's EngineCore hung on SIGTERM twice: {hung}") from None
            print(f"vLLM's EngineCore hung on SIGTERM; once more with a new server: {hung}")
        finally:
            server.stop(timeout=10)


def test_drain_finishes_streams_in_flight_during_a_swap(servers: Any) -> None:
    """A router swaps from a draining pod to another: the streams on the draining pod end
    whole, new requests are answered by the other pod, and the pod exits drained."""
    assert "--shutdown-timeout" in servers.argv["ngram"]  # render's default: 60
    other = servers.get("off")

    def start(n: int) -> SimProcess:
        server: SimProcess = (servers.take("ngram") if n == 1
                              else servers.start(servers.argv["ngram"]))  # fmt: skip
        return server

    async def run(draining: SimProcess) -> None:
        top = Topology()
        top.set_roles("speculative", 0.0)
        top.set_endpoints([Endpoint("draining", draining.url, "speculative")])
        router = Router(top, RouterConfig())
        runner = web.AppRunner(router.app(), handler_cancellation=True, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        front = f"http://127.0.0.1:{port}"
        timeout = aiohttp.ClientTimeout(total=180)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                streams = [Stream() for _ in range(3)]
                in_flight = [asyncio.create_task(read_stream(session, front, completion(400), s))
                             for s in streams]  # fmt: skip
                # in flight: generating (a request still queued in the API server when the
                # drain starts ends as an empty 200 stream, finish_reason "abort")
                await asyncio.wait_for(asyncio.gather(*(s.first_token.wait() for s in streams)),
                                       60)  # fmt: skip
                sigterm_at = time.monotonic()
                os.kill(draining.pid, signal.SIGTERM)
                # the swap: the router sends nothing new to the pod being removed
                top.set_roles("baseline", 0.0, swapping=False)
                top.set_endpoints([Endpoint("draining", draining.url, "speculative"),
                                   Endpoint("other", other.url, "baseline")])  # fmt: skip
                await asyncio.sleep(0.5)
                # what the draining pod itself says to a newcomer, and to its probe
                async with session.post(draining.url + "/v1/completions",
                                        json=completion(4, stream=False)) as resp:  # fmt: skip
                    assert resp.status == 500
                    assert SHUTDOWN_ERROR in (await resp.json())["error"]["message"]
                async with session.get(draining.url + "/health") as resp:
                    assert resp.status == 200
                during = await read_stream(session, front, completion(16))
                assert (during.status, during.tokens, during.done) == (200, 16, True)
                for seen in await after_sigterm(draining, asyncio.gather(*in_flight)):
                    assert (seen.status, seen.tokens, seen.errors, seen.finish, seen.done) == (
                        200, 400, [], ["length"], True)
                drained_at = time.monotonic()
        finally:
            await runner.cleanup()
        code = await asyncio.to_thread(draining.proc.wait, 90)
        assert code == 0
        assert drained_at - sigterm_at < 60

    twice(start, run)


def test_sigterm_without_drain_cuts_streams(servers: Any) -> None:
    """shutdownTimeout 0s: render passes no flag, and vLLM cuts what it is generating. Three
    endings were seen with vLLM 0.32.0 here, all cut: the error event and [DONE]; a chunk with
    finish_reason "abort" and [DONE]; or, when the engine is killed before its abort output
    reaches the API server, a stream that stays open with nothing more (the HTTP server then
    waits for the client to leave before the process exits)."""
    argv = servers.render_argv(ARM_BASELINE, shutdownTimeout="0s")
    assert "--shutdown-timeout" not in argv
    server = servers.start(argv, "off, shutdownTimeout 0s")

    async def run() -> Stream:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session:
            seen = Stream()
            task = asyncio.create_task(read_stream(session, server.url, completion(900), seen))
            await asyncio.wait_for(seen.first_token.wait(), 60)
            os.kill(server.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), 30)
            if not task.done():  # stalled: the client leaves
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            return seen

    try:
        seen = asyncio.run(run())
        assert seen.status == 200
        assert 0 < seen.tokens < 900 and "length" not in seen.finish, seen
        if seen.errors:
            assert len(seen.errors) == 1 and seen.done, seen
            assert seen.errors[0]["code"] == 500
            assert seen.errors[0]["type"] == "InternalServerError"
            assert "EngineCore encountered an issue" in seen.errors[0]["message"]
        elif seen.done:
            assert seen.finish == ["abort"], seen
        print(f"SIGTERM without drain: {seen.tokens} tokens, errors {seen.errors}, finish "
              f"{seen.finish}, [DONE] {seen.done}")  # fmt: skip
        assert server.proc.wait(60) == 0
    finally:
        server.stop(timeout=10)
