"""Fault injection and the loading phase."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from specguard._exposition import acceptance_length, sample_value
from specguard.judge import DraftCounters, DrafterRun, DraftSpan, rung_mismatch
from specguard.sim._launch import start_sim
from specguard_testkit._loadclient import (
    StreamRecord,
    completion_payload,
    read_metrics,
    stream_once,
)


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(
        url + "/v1/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def _health(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_fail_after_kills_the_engine() -> None:
    with start_sim(["--fail-after", "2", "--time-scale", "0.01"]) as sim:
        for _ in range(2):
            assert _post(sim.url, {"prompt": "hi", "max_tokens": 3})[0] == 200
        assert _health(sim.url) == 503
        status, body = _post(sim.url, {"prompt": "hi", "max_tokens": 3})
    assert status == 500
    error = body["error"]
    assert isinstance(error, dict)  # vLLM's ErrorResponse: {"error": ErrorInfo}
    assert error["type"] == "InternalServerError"
    assert error["code"] == 500


def test_error_rate_fails_that_fraction() -> None:
    with start_sim(["--error-rate", "0.5", "--seed", "3", "--time-scale", "0.01"]) as sim:
        codes = [_post(sim.url, {"prompt": "hi", "max_tokens": 2})[0] for _ in range(60)]
        assert _health(sim.url) == 200  # random errors do not mark the engine dead
    failed = codes.count(500)
    assert codes.count(200) + failed == 60
    # binomial(60, 0.5): 3 standard deviations is ±11.6
    assert 18 <= failed <= 42


def test_startup_delay_binds_the_port_but_answers_nothing() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="sim-delay-"))
    port_file = workdir / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specguard", "sim", "--startup-delay", "2.5", "--host",
         "127.0.0.1", "--port", "0", "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert time.monotonic() < deadline, "simulator never bound its port"
            time.sleep(0.05)
        started = time.monotonic()
        url = f"http://127.0.0.1:{port_file.read_text()}"
        with socket.create_connection(("127.0.0.1", int(port_file.read_text())), timeout=2):
            pass  # the port accepts connections while loading
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            urllib.request.urlopen(url + "/health", timeout=0.5)
        while _try_health(url) != 200:
            assert time.monotonic() - started < 15
            time.sleep(0.1)
        assert time.monotonic() - started > 1.5  # not before the delay is over
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _try_health(url: str) -> int | None:
    try:
        return _health(url)
    except (urllib.error.URLError, TimeoutError, OSError):
        return None


def _open_request(port: int, max_tokens: int) -> socket.socket:
    """A non-streamed completion sent on a raw socket, so the test decides exactly when
    the client goes away (by closing it)."""
    body = json.dumps({"prompt": "hi", "max_tokens": max_tokens}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    head = b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
    sock.sendall(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


def _wait_gauge(url: str, name: str, want: float) -> None:
    deadline = time.monotonic() + 10
    while sample_value(read_metrics(url), name) != want:
        assert time.monotonic() < deadline, f"{name} never reached {want}"
        time.sleep(0.02)


def test_client_leaving_a_non_streamed_request_aborts_it() -> None:
    # One batch slot. A holds it with ~27 s of work, B and C wait behind it. B's client
    # leaves while it waits, then A's: both are aborted (as vLLM aborts a request whose
    # client disconnected) and C, which nobody else wakes the engine for, runs at once.
    with start_sim(["--max-num-seqs", "1", "--seed", "4"]) as sim:
        before = read_metrics(sim.url)
        a = _open_request(sim.port, 3000)
        _wait_gauge(sim.url, "vllm:num_requests_running", 1)
        b = _open_request(sim.port, 3000)
        _wait_gauge(sim.url, "vllm:num_requests_waiting", 1)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            c = pool.submit(_post, sim.url, {"prompt": "hi", "max_tokens": 3})
            _wait_gauge(sim.url, "vllm:num_requests_waiting", 2)
            b.close()
            time.sleep(0.3)  # B's cancellation lands before A leaves the batch
            a.close()
            status, _ = c.result(timeout=5)
        after = read_metrics(sim.url)
        log = sim.log_tail()
    assert status == 200
    success = "vllm:request_success_total"
    assert sample_value(after, success, finished_reason="abort") - sample_value(
        before, success, finished_reason="abort") == 2  # fmt: skip
    assert sample_value(after, success, finished_reason="length") - sample_value(
        before, success, finished_reason="length") == 1  # fmt: skip
    assert "Traceback" not in log


DRAFTER = json.dumps({"method": "dspark", "model": "org/d-dspark", "num_speculative_tokens": 6})


def _spec_counters(url: str) -> dict[str, float]:
    samples = read_metrics(url)
    return {
        name: sample_value(samples, f"vllm:spec_decode_num_{name}_total")
        for name in ("drafts", "draft_tokens", "accepted_tokens")
        if any(n == f"vllm:spec_decode_num_{name}_total" for n, _ in samples)
    }


def _tokens_per_chunk(url: str) -> list[int]:
    async def go() -> list[int]:
        async with aiohttp.ClientSession() as session:
            payload = completion_payload(None, 60, prompt="Solve 12x + 7 = 91.")
            headers = {"Content-Type": "application/json"}
            records = await asyncio.gather(
                *(stream_once(session, url, payload, headers) for _ in range(3))
            )
        return [n for r in records for n in r.chunk_tokens]

    return asyncio.run(go())


def test_drop_drafter_serves_without_speculation_or_its_counters() -> None:
    args = ["--speculative-config", DRAFTER, "--fault-drop-drafter", "--time-scale", "0.05"]
    with start_sim(args) as sim:
        chunks = _tokens_per_chunk(sim.url)
        counters = _spec_counters(sim.url)
        log = sim.log_tail()
    assert counters == {}  # no vllm:spec_decode_* at all, as a drafter never applied
    assert set(chunks) == {1}  # one token per step: no speculation
    assert "NOT applied (--fault-drop-drafter)" in log
    with start_sim(["--speculative-config", DRAFTER, "--time-scale", "0.05"]) as sim:
        assert max(_tokens_per_chunk(sim.url)) > 1 and _spec_counters(sim.url)["drafts"] > 0


def test_accept_nothing_drafts_but_never_accepts() -> None:
    args = ["--speculative-config", DRAFTER, "--fault-accept-nothing", "--time-scale", "0.05"]
    with start_sim(args) as sim:
        chunks = _tokens_per_chunk(sim.url)
        counters = _spec_counters(sim.url)
    assert set(chunks) == {1}
    assert counters["drafts"] >= 3 * 58 and counters["draft_tokens"] == 6 * counters["drafts"]
    assert counters["accepted_tokens"] == 0
    assert acceptance_length(counters["drafts"], counters["accepted_tokens"]) == 1.0


def _crowd_counters(args: list[str], streams: int) -> DraftSpan:
    """Request-steps, drafts and draft tokens while ``streams`` requests run together."""
    counts = ("vllm:inter_token_latency_seconds_count", "vllm:spec_decode_num_drafts_total",
              "vllm:spec_decode_num_draft_tokens_total")  # fmt: skip

    async def go(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            payload = completion_payload(None, 200)
            headers = {"Content-Type": "application/json"}
            await asyncio.gather(
                *(stream_once(session, url, payload, headers) for _ in range(streams))
            )

    with start_sim(args) as sim:
        before = read_metrics(sim.url)
        asyncio.run(go(sim.url))
        after = read_metrics(sim.url)
    steps, drafts, tokens = (sample_value(after, n) - sample_value(before, n) for n in counts)
    return DraftSpan(streams, streams, steps, drafts, tokens)


def test_ignore_schedule_drafts_k_where_the_schedule_says_none() -> None:
    """--fault-ignore-schedule (vLLM's V2 model runner, #51510): the schedule is accepted
    but the engine drafts k at six running requests, where it asks for none; the judge's
    check against the rung (``rung_mismatch``) tells it from the engine that keeps it."""
    schedule = [[1, 2, 6], [3, 256, 0]]
    spec = json.dumps({"method": "dspark", "model": "org/d-dspark", "num_speculative_tokens": 6,
                       "num_speculative_tokens_per_batch_size": schedule})  # fmt: skip
    rung = DrafterRun("dspark", 6, ((1, 2, 6), (3, 256, 0)), rung="schedule")
    args = ["--speculative-config", spec, "--time-scale", "0.05", "--seed", "3"]
    ignored = _crowd_counters([*args, "--fault-ignore-schedule"], 6)
    kept = _crowd_counters(args, 6)
    # Ignored: a draft of 6 tokens at nearly every request-step (not only while the batch
    # ramps up or drains below 3); kept: hardly any.
    assert ignored.steps > 150 and ignored.drafts > 0.9 * ignored.steps
    assert ignored.draft_tokens == 6 * ignored.drafts
    assert kept.steps > 150 and kept.drafts < 0.1 * kept.steps

    def window(span: DraftSpan) -> DraftCounters:
        return DraftCounters(1, 1, span.drafts, 0.0, span.draft_tokens, (span,))

    assert rung_mismatch(window(ignored), rung, 100) is not None
    assert rung_mismatch(window(kept), rung, 100) is None


async def _stream_then_sigterm(args: list[str]) -> tuple[bool, int, int, int | None, float]:
    """A long stream; SIGTERM after its first chunks. (stream completed, tokens, a new
    request's status during the shutdown (None: refused a connection), /health then, seconds
    from the stream's end to the process's)."""
    with start_sim(["--time-scale", "1", "--seed", "1", *args]) as sim:
        async with aiohttp.ClientSession() as session:
            record = StreamRecord(time.monotonic())
            headers = {"Content-Type": "application/json"}
            task = asyncio.create_task(
                stream_once(session, sim.url, completion_payload(None, 300), headers, record)
            )
            while len(record.chunk_times) < 3:
                await asyncio.sleep(0.02)
            sim.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            new: int | None = None
            health = 0
            with contextlib.suppress(aiohttp.ClientError):
                async with session.post(
                    sim.url + "/v1/completions", data=completion_payload(None, 5), headers=headers
                ) as resp:
                    new = resp.status
                async with session.get(sim.url + "/health") as resp:
                    health = resp.status
            with contextlib.suppress(aiohttp.ClientError):
                await task
            ended = time.monotonic()
        await asyncio.to_thread(sim.proc.wait, 30)
        return record.done, record.tokens, new or 0, health, time.monotonic() - ended


async def test_shutdown_timeout_lets_running_streams_finish() -> None:
    """vLLM's --shutdown-timeout: after SIGTERM the running stream ends normally (all its
    tokens and [DONE]), a new request is refused with 500 "cannot schedule new futures after
    shutdown", /health still says 200 (both as vLLM 0.32.0 does, tests/realvllm), and the
    process exits once nothing runs (not at the timeout). Without it the stream is cut."""
    done, tokens, new, health, exit_after = await _stream_then_sigterm(["--shutdown-timeout", "60"])
    assert (done, tokens, new, health) == (True, 300, 500, 200)
    assert exit_after < 10.0  # it did not wait out the 60 s
    # the stream ends early: vLLM's error event and [DONE] (tests/sim/test_sim_fidelity.py)
    _, tokens, _, _, _ = await _stream_then_sigterm([])
    assert tokens < 300
