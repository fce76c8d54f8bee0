"""Test-side clients of a vLLM-compatible server (the simulator's tests, the fidelity
benchmark): a lean streaming load client and a ``/metrics`` reader.

At 256 concurrent streams the client shares the CPU with the server, so it parses
almost nothing: it reads SSE lines and pulls ``"completion_tokens":N`` (continuous usage
stats) out of the bytes, with no JSON decoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from dataclasses import dataclass, field

import aiohttp

from specguard.sources import Reading, Samples, parse_reading, parse_samples


def fetch_metrics(url: str, timeout: float = 5.0) -> str:
    """GET ``url``/metrics: the text exposition."""
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as resp:
        return str(resp.read().decode())


def read_metrics(url: str, timeout: float = 5.0) -> Samples:
    """Every sample of ``url``/metrics (read values with exposition.sample_value)."""
    return parse_samples(fetch_metrics(url, timeout))


def read_reading(url: str, timeout: float = 5.0) -> Reading:
    """``url``/metrics as the Reading specguard's sources take."""
    return parse_reading(fetch_metrics(url, timeout))


_USAGE_KEY = b'"completion_tokens":'


@dataclass(slots=True)
class StreamRecord:
    """One streamed request as the client saw it (monotonic clock seconds)."""

    started: float
    worker: int = 0
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    done: bool = False

    @property
    def tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.started if self.chunk_times else None

    @property
    def tpot(self) -> float | None:
        """(t_last - t_first) / (tokens - 1): per token, never per chunk."""
        n = self.tokens
        if n < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (n - 1)


@dataclass(slots=True)
class LoadResult:
    concurrency: int
    window_s: float
    window_tokens: int
    window_chunks: int
    records: list[StreamRecord]
    w0: float = 0.0
    w1: float = 0.0

    @property
    def throughput(self) -> float:
        """Output tokens per second over the measurement window (all streams)."""
        return self.window_tokens / self.window_s

    @property
    def chunk_rate(self) -> float:
        return self.window_chunks / self.window_s

    @property
    def stream_throughput(self) -> float:
        """Sum over workers of (tokens after its first chunk in the window) / (time from
        that chunk to its last in the window): chunk-aligned, so free of the +-1 step
        quantisation of counting tokens in a fixed window when steps are long."""
        per_worker: dict[int, list[tuple[float, int]]] = {}
        for r in self.records:
            per_worker.setdefault(r.worker, []).extend(
                zip(r.chunk_times, r.chunk_tokens, strict=True)
            )
        total = 0.0
        for chunks in per_worker.values():
            inside = sorted(c for c in chunks if self.w0 <= c[0] <= self.w1)
            if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
                total += sum(n for _, n in inside[1:]) / (inside[-1][0] - inside[0][0])
        return total

    def tpots(self) -> list[float]:
        return [t for r in self.records if r.done and (t := r.tpot) is not None]


def _completion_tokens(line: bytes) -> int | None:
    i = line.rfind(_USAGE_KEY)
    if i < 0:
        return None
    j = i + len(_USAGE_KEY)
    k = j
    while k < len(line) and 48 <= line[k] <= 57:
        k += 1
    return int(line[j:k])


def completion_payload(model: str | None, max_tokens: int, prompt: str = "Hello") -> bytes:
    body: dict[str, object] = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if model:
        body["model"] = model
    return json.dumps(body).encode()


async def stream_once(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    headers: dict[str, str],
    record: StreamRecord | None = None,
    *,
    path: str = "/v1/completions",
) -> StreamRecord:
    """POST a streaming completion (``path``: ``/v1/chat/completions`` for chat; the payload
    asks for continuous usage stats) and time every chunk that carries tokens (filling
    ``record`` as chunks arrive, so a cancelled stream keeps what it received)."""
    record = record or StreamRecord(time.monotonic())
    async with session.post(url + path, data=payload, headers=headers) as resp:
        resp.raise_for_status()
        seen = 0
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            n = _completion_tokens(line)
            if n is None or n <= seen or b'"choices":[]' in line:
                continue
            record.chunk_times.append(time.monotonic())
            record.chunk_tokens.append(n - seen)
            seen = n
    record.done = True
    return record


async def closed_loop(
    url: str,
    *,
    concurrency: int,
    duration: float,
    warmup: float,
    max_tokens: int,
    domain: str | None = None,
    model: str | None = None,
) -> LoadResult:
    """``concurrency`` workers each sending one streaming request after another; tokens
    are counted when their chunk arrives inside [start + warmup, start + warmup + duration]."""
    headers = {"Content-Type": "application/json"}
    if domain:
        headers["X-Specguard-Domain"] = domain
    payload = completion_payload(model, max_tokens)
    records: list[StreamRecord] = []
    t0 = time.monotonic()
    w0, w1 = t0 + warmup, t0 + warmup + duration
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker(index: int) -> None:
            while time.monotonic() < w1:
                record = StreamRecord(time.monotonic(), index)
                records.append(record)
                await stream_once(session, url, payload, headers, record)

        tasks = [asyncio.create_task(worker(i)) for i in range(concurrency)]
        await asyncio.sleep(max(0.0, w1 - time.monotonic()))
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    tokens = chunks = 0
    for r in records:
        for t, n in zip(r.chunk_times, r.chunk_tokens, strict=True):
            if w0 <= t <= w1:
                tokens += n
                chunks += 1
    return LoadResult(concurrency, duration, tokens, chunks, records, w0, w1)
