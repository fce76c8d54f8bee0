"""The proxy against a scriptable upstream: passthrough, stripping, errors, cancellation."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from specguard.router._command import static_topology
from specguard.router._proxy import RouterConfig

if TYPE_CHECKING:
    from tests.router.conftest import Helpers, RouterFactory, UpstreamFactory


async def post(url: str, body: dict[str, Any], **kw: Any) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(url, json=body, **kw) as r,
    ):
        return r.status, dict(r.headers), await r.read()


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}


async def test_stream_without_usage_is_byte_identical_to_direct(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    body = {**CHAT, "stream": True}
    direct = await post(up.url + "/v1/chat/completions", body)
    routed = await post(rt.url + "/v1/chat/completions", body)
    assert routed[0] == direct[0] == 200
    assert routed[2] == direct[2]  # the fake upstream is deterministic: no normalising
    assert b'"usage"' not in routed[2]
    assert routed[1]["Content-Type"] == direct[1]["Content-Type"]
    assert routed[1]["X-Upstream"] == "yes"
    # ... while the upstream was asked for continuous usage, so the sample is exact.
    assert up.bodies[-1]["stream_options"] == {
        "include_usage": True,
        "continuous_usage_stats": True,
    }
    [sample] = rt.router.feed.read(None, 10).samples
    assert sample.measurement == "stream_usage"
    assert sample.output_tokens == 6
    assert sample.role == "serving" and sample.arm == "speculative" and sample.domain == "chat"
    assert sample.pod == "serve-0" and sample.concurrency == 1 and sample.pair_id is None
    assert sample.ttft_s is not None and sample.chunk_tpot_s is not None


async def test_stream_with_include_usage_keeps_final_usage_only(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    direct = await post(up.url + "/v1/chat/completions", body)
    routed = await post(rt.url + "/v1/chat/completions", body)
    assert routed[2] == direct[2]
    assert routed[2].count(b'"usage"') == 1


async def test_client_asking_continuous_usage_is_forwarded_untouched(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    raw = json.dumps(
        {
            **CHAT,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()
    async with aiohttp.ClientSession() as s:
        async with s.post(
            up.url + "/v1/chat/completions", data=raw, headers={"Content-Type": "application/json"}
        ) as r:
            direct = await r.read()
        async with s.post(
            rt.url + "/v1/chat/completions", data=raw, headers={"Content-Type": "application/json"}
        ) as r:
            routed = await r.read()
    assert up.raw_bodies[-1] == raw
    assert routed == direct


async def test_completion_stream_and_tool_calls(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    comp = {"model": "m", "prompt": "p", "max_tokens": 4, "stream": True}
    assert (await post(rt.url + "/v1/completions", comp))[2] == (
        await post(up.url + "/v1/completions", comp)
    )[2]
    tools = {**CHAT, "stream": True, "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert (await post(rt.url + "/v1/chat/completions", tools))[2] == (
        await post(up.url + "/v1/chat/completions", tools)
    )[2]
    samples = rt.router.feed.read(None, 10).samples
    assert [s.domain for s in samples] == ["completion", "tool_call"]
    assert [s.output_tokens for s in samples] == [4, 6]


async def test_domain_header_overrides(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    await post(
        rt.url + "/v1/chat/completions",
        {**CHAT, "stream": True},
        headers={"X-Specguard-Domain": "math"},
    )
    assert rt.router.feed.read(None, 10).samples[0].domain == "math"
    assert up.headers[-1]["X-Specguard-Domain"] == "math"  # the simulator reads it too


async def test_non_stream_passthrough_and_honest_measure(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    direct = await post(up.url + "/v1/chat/completions", CHAT)
    routed = await post(rt.url + "/v1/chat/completions", CHAT)
    assert routed[0] == 200 and routed[2] == direct[2]
    assert routed[1]["X-Upstream"] == "yes"
    assert "stream_options" not in up.bodies[-1]
    [sample] = rt.router.feed.read(None, 10).samples
    assert sample.measurement == "non_stream" and sample.ttft_s is None
    assert sample.output_tokens == 6 and sample.tpot_s is not None


async def test_upstream_error_comes_back_as_it_was(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream("error")
    rt = await start_router(h.topology([up.url]))
    direct = await post(up.url + "/v1/chat/completions", {**CHAT, "stream": True})
    routed = await post(rt.url + "/v1/chat/completions", {**CHAT, "stream": True})
    assert routed[0] == direct[0] == 500
    assert routed[2] == direct[2]
    assert routed[1]["X-Upstream"] == "err"
    [sample] = rt.router.feed.read(None, 10).samples
    assert sample.status == 500 and not sample.ok


async def test_get_models_passes_through_without_sample(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/v1/models?x=1") as r:
        assert r.status == 200
    assert len(rt.router.feed) == 0


async def test_no_ready_pod_is_502_openai_shaped(
    start_router: RouterFactory, h: type[Helpers]
) -> None:
    rt = await start_router(h.topology([]))
    status, _, body = await post(rt.url + "/v1/chat/completions", CHAT)
    assert status == 502
    assert json.loads(body)["error"]["type"] == "service_unavailable"


async def test_unreachable_pod_falls_over_to_another(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    dead = f"http://127.0.0.1:{h.free_port()}"
    rt = await start_router(h.topology([dead, up.url]))
    for _ in range(4):
        status, _, _ = await post(rt.url + "/v1/chat/completions", CHAT)
        assert status == 200
    only_dead = await start_router(h.topology([dead]))
    status, _, body = await post(only_dead.url + "/v1/chat/completions", CHAT)
    assert status == 502 and b"unreachable" in body


async def test_a_pod_that_refuses_503_hands_the_request_to_another(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    """A pod being removed answers 503 (vLLM shutting down) to a request that reached it
    before the router saw it go: the client gets another pod's answer, streamed or not, and
    the refusal is counted. When every pod refuses, the client gets the 503 as it was, and the
    judge an error sample of the arm."""
    refusing, up = await upstream("refuse"), await upstream()
    rt = await start_router(h.topology([refusing.url, up.url]))
    for stream in (False, True, False, True):
        status, _, body = await post(rt.url + "/v1/chat/completions", {**CHAT, "stream": stream})
        assert status == 200, body
    assert refusing.started >= 1 and up.finished == 4
    async with aiohttp.ClientSession() as s, s.get(rt.url + "/metrics") as r:
        metrics = await r.text()
    labels = '{arm="speculative",role="serving",status="refused"}'
    assert f"specguard_router_requests_total{labels} {float(refusing.started)}" in metrics
    only = await start_router(h.topology([refusing.url]))
    status, headers, body = await post(only.url + "/v1/chat/completions", CHAT)
    assert status == 503 and json.loads(body)["error"]["message"] == "The server is shutting down"
    assert headers["Retry-After"] == "1" and headers["Content-Type"].startswith("application/json")
    await h.wait_for(lambda: len(only.router.feed) == 1)
    [sample] = only.router.feed.read(None, 10).samples
    assert (sample.status, sample.ok, sample.role) == (503, False, "serving")


async def test_body_over_limit_is_413(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]), RouterConfig(max_body_bytes=1000))
    status, _, body = await post(rt.url + "/v1/chat/completions", {**CHAT, "pad": "x" * 2000})
    assert status == 413 and json.loads(body)["error"]["code"] == 413
    assert up.started == 0


async def test_hop_by_hop_headers_are_not_forwarded(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    await post(
        rt.url + "/v1/chat/completions",
        CHAT,
        headers={
            "Authorization": "Bearer k",
            "Keep-Alive": "timeout=5",
            "Connection": "keep-alive, X-Drop",
            "X-Drop": "1",
            "X-Keep": "2",
        },
    )
    got = {k.lower(): v for k, v in up.headers[-1].items()}
    assert got["authorization"] == "Bearer k" and got["x-keep"] == "2"
    assert "keep-alive" not in got and "x-drop" not in got


async def test_client_disconnect_cancels_upstream(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream(tokens=1000, gap_s=0.01)
    rt = await start_router(h.topology([up.url]))
    async with aiohttp.ClientSession() as s:
        r = await s.post(
            rt.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 1000, "stream": True}
        )
        await r.content.readany()
        r.close()  # drop the connection mid-stream
    await h.wait_for(lambda: up.finished == 1, timeout=5)
    assert up.cancelled == 1
    await h.wait_for(lambda: rt.router.topology.pods["speculative"][0].in_flight == 0)
    assert len(rt.router.feed) == 0  # a cut-off request is not a sample


async def test_upstream_break_mid_stream_cuts_client(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream("break", tokens=10)
    rt = await start_router(h.topology([up.url]))
    async with aiohttp.ClientSession() as s:
        r = await s.post(rt.url + "/v1/chat/completions", json={**CHAT, "stream": True})
        try:
            await r.read()
            cut = False
        except aiohttp.ClientPayloadError:
            cut = True
    assert cut, "a broken upstream stream must not look complete to the client"
    [sample] = rt.router.feed.read(None, 10).samples
    assert sample.status == 502


async def test_least_in_flight_and_concurrency(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    slow = await upstream(tokens=50, gap_s=0.02)
    rt = await start_router(h.topology([slow.url, slow.url]))
    pods = rt.router.topology.pods["speculative"]
    assert len(pods) == 2 and pods[0] is not pods[1]
    body = {**CHAT, "stream": True, "max_tokens": 50}
    tasks = [asyncio.create_task(post(rt.url + "/v1/chat/completions", body)) for _ in range(4)]
    await h.wait_for(lambda: sum(p.in_flight for p in pods) == 4)
    assert [p.in_flight for p in pods] == [2, 2]
    await asyncio.gather(*tasks)
    samples = rt.router.feed.read(None, 10).samples
    assert sorted(s.concurrency for s in samples) == [1, 1, 2, 2]
    assert {s.pod for s in samples} == {"serve-0", "serve-1"}


async def test_upstream_connections_are_reused(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    up = await upstream()
    rt = await start_router(h.topology([up.url]))
    for stream in (True, False, True, False, True):
        await post(rt.url + "/v1/chat/completions", {**CHAT, "stream": stream})
    assert up.started == 5 and len(up.peers) == 1  # one pooled connection, no reconnects


async def test_client_disconnect_of_mirrored_request_keeps_only_the_shadow_half(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    # The serving half of a request the client abandoned is not a sample: its status could
    # only be non-2xx, which the judge counts as an arm error, and the client, not the arm,
    # ended it. It is counted as client_closed. The shadow copy runs to its end and is a
    # whole measurement of its arm; the judge's pairing leaves it unpaired.
    serve, shadow = await upstream(tokens=1000, gap_s=0.01), await upstream(tokens=5)
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    async with aiohttp.ClientSession() as s:
        r = await s.post(
            rt.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 1000, "stream": True}
        )
        await r.content.readany()
        r.close()
    await h.wait_for(lambda: serve.finished == 1 and len(rt.router.feed) == 1)
    assert serve.cancelled == 1
    [sample] = rt.router.feed.read(None, 10).samples
    assert sample.role == "shadow" and sample.status == 200 and sample.pair_id is not None
    labels = {"arm": "speculative", "role": "serving", "status": "client_closed"}
    await h.wait_for(
        lambda: rt.router.metrics.registry.get_sample_value(
            "specguard_router_requests_total", labels
        )
        == 1.0
    )


async def test_upstream_silence_times_out(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    # Before the response: 504. Mid-stream: the client's stream is cut and the sample is 502.
    config = RouterConfig(read_timeout_s=0.3)
    hang, slow = await upstream("hang"), await upstream(tokens=3, gap_s=2.0)
    rt = await start_router(h.topology([hang.url]), config)
    status, _, body = await post(rt.url + "/v1/chat/completions", CHAT)
    assert status == 504 and json.loads(body)["error"]["type"] == "timeout"
    rt = await start_router(h.topology([slow.url]), config)
    async with aiohttp.ClientSession() as s:
        r = await s.post(rt.url + "/v1/chat/completions", json={**CHAT, "stream": True})
        assert r.status == 200
        try:
            await r.read()
            cut = False
        except aiohttp.ClientPayloadError:
            cut = True
    assert cut
    [sample] = rt.router.feed.read(None, 10).samples
    assert sample.status == 502 and sample.output_tokens == 0


async def _all_dead(start_router: RouterFactory, h: type[Helpers], count: int) -> None:
    # Static --serving URLs as the CLI builds them, none of them listening.
    dead = [f"http://127.0.0.1:{h.free_port()}" for _ in range(count)]
    rt = await start_router(static_topology(dead, [], None, "speculative"))
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        started = asyncio.get_running_loop().time()
        async with s.post(rt.url + "/v1/chat/completions", json=CHAT) as r:
            status, body = r.status, await r.json()
        took = asyncio.get_running_loop().time() - started
    assert status == 502 and took < 2.0
    assert body["error"]["type"] == "service_unavailable"
    assert f"{count} serving pods" in body["error"]["message"]
    # Each dead pod was tried exactly once: one failed attempt counted per pod.
    labels = {"arm": "speculative", "role": "serving", "status": "upstream_error"}
    tries = rt.router.metrics.registry.get_sample_value("specguard_router_requests_total", labels)
    assert tries == count
    assert all(pod.in_flight == 0 for pod in rt.router.topology.pods["speculative"])


async def test_two_dead_pods_give_a_prompt_502(
    start_router: RouterFactory, h: type[Helpers], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="specguard.router")
    await _all_dead(start_router, h, 2)
    assert sum("unreachable" in r.getMessage() for r in caplog.records) == 2


async def test_three_dead_pods_give_a_prompt_502(
    start_router: RouterFactory, h: type[Helpers], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="specguard.router")
    await _all_dead(start_router, h, 3)
    assert sum("unreachable" in r.getMessage() for r in caplog.records) == 3


async def test_live_pod_among_dead_ones_always_answers(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    # Dead pods finish with nothing in flight, so least-in-flight keeps picking them first:
    # only trying every pod once guarantees the live one is reached.
    up = await upstream()
    dead = [f"http://127.0.0.1:{h.free_port()}" for _ in range(2)]
    rt = await start_router(h.topology([*dead, up.url]))
    for _ in range(6):
        status, _, _ = await post(rt.url + "/v1/chat/completions", CHAT)
        assert status == 200
    assert up.started == 6


async def test_client_disconnect_cancels_non_streamed_upstream(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers]
) -> None:
    # A non-streamed generation sends nothing until it is done, so the router is still
    # waiting for the response head when the client leaves: that wait must be cancelled
    # and the upstream connection closed, or the pod keeps generating for nobody.
    up = await upstream("hang")
    rt = await start_router(h.topology([up.url]))
    async with aiohttp.ClientSession() as s:
        task = asyncio.create_task(s.post(rt.url + "/v1/chat/completions", json=CHAT))
        await h.wait_for(lambda: up.started == 1)
        task.cancel()  # drops the client's connection
        await asyncio.gather(task, return_exceptions=True)
    await h.wait_for(lambda: up.finished == 1, timeout=5)
    assert up.cancelled == 1
    await h.wait_for(lambda: rt.router.topology.pods["speculative"][0].in_flight == 0)
    labels = {"arm": "speculative", "role": "serving", "status": "client_closed"}
    assert (
        rt.router.metrics.registry.get_sample_value("specguard_router_requests_total", labels)
        == 1.0
    )
    assert len(rt.router.feed) == 0


MARKER = "prompt-kept-alive-6d1f"


def _parsed_prompts(exclude: set[int]) -> list[dict[str, Any]]:
    """Live dicts holding the test's prompt (a parsed request, or a copy of one), leaving
    out the objects whose ids are in ``exclude``."""
    gc.collect()
    found = []
    for obj in gc.get_objects():
        if id(obj) in exclude:
            continue
        messages = obj.get("messages") if isinstance(obj, dict) else None
        if isinstance(messages, list) and MARKER in json.dumps(messages):
            found.append(obj)
    return found


@pytest.mark.parametrize("stream", [True, False])
async def test_parsed_request_is_not_held_for_the_generation(
    upstream: UpstreamFactory, start_router: RouterFactory, h: type[Helpers], stream: bool
) -> None:
    # Memory: each in-flight request may be up to --max-body-bytes; the parsed dict is a
    # further copy of the prompt, needed only to decide what to send. Neither the serving
    # handler nor the shadow copy may keep it (under any name) while the generations run:
    # once both are under way, no dict holding the prompt may be alive.
    serve, shadow = await upstream(tokens=200, gap_s=0.01), await upstream(tokens=200, gap_s=0.01)
    rt = await start_router(h.topology([serve.url], [shadow.url], share=1.0))
    raw = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": MARKER}], "max_tokens": 200,
         "stream": stream}
    ).encode()  # fmt: skip
    serve.mode = "hang" if not stream else "ok"  # a non-streamed generation: still running
    async with aiohttp.ClientSession() as s:
        task = asyncio.create_task(
            s.post(rt.url + "/v1/chat/completions", data=raw,
                   headers={"Content-Type": "application/json"})
        )  # fmt: skip
        await h.wait_for(lambda: serve.started == 1 and shadow.started == 1)
        # The fake upstreams parse what they received: those copies are theirs.
        theirs = {id(body) for body in serve.bodies + shadow.bodies}
        assert rt.router.shadow_in_flight == 1
        assert not _parsed_prompts(theirs)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
