"""A client that closes its connection right after ``data: [DONE]`` completed its request.

guidellm does this: it reads up to the last event and closes without waiting for the end of
the chunked body. The router must record the stream as the complete, successful request it
was (a sample, outcome 200), not as an upstream error without a sample: errors feed the
drafter-arm error-rate guardrail, so a miscount can roll a deployment back for nothing.

The client is a raw socket, so nothing after the marker is read. The upstream pauses
between ``[DONE]`` and the end of its body, which makes the order of events certain: the
client is gone before the router sees the upstream's end. With handler cancellation (how
``specguard router`` serves) the close cancels the handler; without it, the router's
``write_eof`` meets a closed connection. Both must count as complete.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from specguard.router._pool import Endpoint, Topology
from specguard.router._proxy import Router
from specguard_testkit._ports import free_port

BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 6,
    "stream": True,
}


async def stream_then_close(url: str, how: str) -> bytes:
    """POST a streamed chat request, read until ``data: [DONE]``, and close at once."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    payload = json.dumps(BODY).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    writer.write(head.encode() + payload)
    await writer.drain()
    got = b""
    while b"data: [DONE]\n\n" not in got:
        data = await asyncio.wait_for(reader.read(65536), timeout=30)
        if not data:
            raise AssertionError(f"the router closed before [DONE]: {got[-200:]!r}")
        got += data
    if how == "reset":
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
    return got


def one_pod(url: str) -> Topology:
    top = Topology()
    top.set_endpoints([Endpoint("serve-0", url, "speculative")])
    return top


ServeRouter = Callable[[Topology, bool], Awaitable[tuple[Router, str]]]


@pytest.fixture
async def serve_router() -> AsyncIterator[ServeRouter]:
    runners: list[web.AppRunner] = []

    async def make(top: Topology, cancellation: bool) -> tuple[Router, str]:
        router = Router(top)
        runner = web.AppRunner(router.app(), handler_cancellation=cancellation, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return router, f"http://127.0.0.1:{port}"

    yield make
    for runner in runners:
        await runner.cleanup()


def outcomes(router: Router) -> dict[str, float]:
    found: dict[str, float] = {}
    for metric in router.metrics.requests.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.value:
                found[sample.labels["status"]] = sample.value
    return found


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("cancellation", [True, False], ids=["cancelled", "write_eof"])
async def test_close_right_after_done_is_a_completed_request(
    upstream: Callable[..., Awaitable[Any]],
    serve_router: ServeRouter,
    caplog: pytest.LogCaptureFixture,
    how: str,
    cancellation: bool,
) -> None:
    caplog.set_level(logging.WARNING)
    up = await upstream(tokens=6, done_tail_s=0.3)
    router, url = await serve_router(one_pod(up.url), cancellation)
    got = await stream_then_close(url, how)
    assert got.startswith(b"HTTP/1.1 200")
    for _ in range(3000):  # until the router has finished with the request (30 s at most)
        if router.topology.pods["speculative"][0].in_flight == 0 and up.finished == 1:
            break
        await asyncio.sleep(0.01)
    assert outcomes(router) == {"200": 1.0}
    [sample] = router.feed.read(None, 10).samples
    assert sample.status == 200 and sample.role == "serving"
    assert sample.output_tokens == 6 and sample.tpot_s is not None
    # The router's and aiohttp's own logs ("Error handling request" was the symptom); not
    # asyncio's, where an earlier test's garbage may report itself.
    errors = [
        r for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith(("aiohttp", "specguard"))
    ]  # fmt: skip
    assert not errors, [r.getMessage() for r in errors]


async def test_close_before_done_is_still_client_closed(
    upstream: Callable[..., Awaitable[Any]],
    serve_router: ServeRouter,
) -> None:
    # The guard of the rule above: a client that leaves mid-stream did not complete.
    up = await upstream(tokens=1000, gap_s=0.01)
    router, url = await serve_router(one_pod(up.url), True)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    payload = json.dumps({**BODY, "max_tokens": 1000}).encode()
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(payload) + payload
    )
    await writer.drain()
    assert b"data: " in await asyncio.wait_for(reader.read(65536), timeout=30)
    writer.close()
    for _ in range(3000):
        if up.finished == 1 and router.topology.pods["speculative"][0].in_flight == 0:
            break
        await asyncio.sleep(0.01)
    assert outcomes(router) == {"client_closed": 1.0}
    assert len(router.feed) == 0


@pytest.mark.parametrize("how", ["close", "reset"])
@pytest.mark.parametrize("cancellation", [True, False], ids=["cancelled", "uncancelled"])
async def test_a_client_gone_before_the_headers_is_one_info_line(
    serve_router: ServeRouter, caplog: pytest.LogCaptureFixture, how: str, cancellation: bool
) -> None:
    """Issue 36: a client that leaves before the response headers made aiohttp log ``ERROR
    aiohttp.server`` with a traceback (``_relay_stream -> response.prepare ->
    ClientConnectionResetError``). It happens when the client's connection is already
    closing as the pod's headers come in, before the close has cancelled the handler: here
    the upstream's headers and the client's close are sent in one step, so the router's
    loop sees both at its next poll, the headers first (without handler cancellation the
    handler meets the closed connection whatever the order). One INFO line, no traceback."""
    caplog.set_level(logging.DEBUG)
    arrived = asyncio.Event()
    upstreams: list[asyncio.StreamWriter] = []

    async def pod(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )  # fmt: skip
        await reader.readexactly(length)
        upstreams.append(writer)
        arrived.set()
        await asyncio.sleep(30)  # the answer is written by the test

    server = await asyncio.start_server(pod, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    router, url = await serve_router(one_pod(f"http://127.0.0.1:{port}"), cancellation)
    host, router_port = url.removeprefix("http://").rsplit(":", 1)
    # A plain socket: its close goes out at once (an asyncio transport closes a loop turn
    # later, when the router has long taken the headers).
    client = socket.create_connection((host, int(router_port)))
    payload = json.dumps(BODY).encode()
    client.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(payload) + payload
    )
    await asyncio.wait_for(arrived.wait(), timeout=30)
    upstreams[0].write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    if how == "reset":
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    try:
        for _ in range(3000):
            if router.topology.pods["speculative"][0].in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert outcomes(router) == {"client_closed": 1.0}
        assert len(router.feed) == 0
    finally:
        upstreams[0].close()
        server.close()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not errors, [(r.name, r.getMessage()) for r in errors]
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "specguard.router"]
    assert len(lines) == 1 and lines[0][0] == "INFO", lines
    assert re.fullmatch(
        r"client closed its connection before the response headers "
        r"\(serving pod serve-0, \d+\.\d s after the request\)",
        lines[0][1],
    ), lines
