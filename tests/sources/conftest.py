"""Helpers for source tests: real Router apps whose sample feed a test fills (``FeedRouter``),
vLLM-shaped /metrics endpoints with crafted histograms, and a real Prometheus (Debian's
binary) scraping static targets labelled the way specguard's cluster Prometheus labels pods
(``labelmap`` of pod labels: ``specguard_io_arm`` etc.)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specguard.judge import Sample
from specguard.router._pool import Topology
from specguard.router._proxy import Router, RouterConfig
from specguard_testkit._mirrored import ended
from specguard_testkit._ports import free_port

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FeedRouter:
    """A real Router app whose ring the test fills; ``faults`` scripts the next /samples
    answers: ``"ok"``, ``"500"`` or ``"slow"`` (answers after ``slow_s``)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.router = Router(Topology(), RouterConfig(samples_capacity=capacity))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.faults: deque[str] = deque()
        self.slow_s = 1.0
        self.served: list[int] = []  # records per /samples answer
        # A sample to record as each /samples request arrives (a loaded router records
        # between a reader's pages), or None.
        self.records_between: Callable[[], Sample] | None = None
        self.runner: web.AppRunner | None = None
        self._recorded = 0
        self._stream: Sequence[Sample] = ()

    async def start(self) -> FeedRouter:
        app = self.router.app()
        app.middlewares.append(self._faults)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    @web.middleware
    async def _faults(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/samples":
            return await handler(request)
        if self.records_between is not None:
            self.add(self.records_between())  # a request ended just before this read
        fault = self.faults.popleft() if self.faults else "ok"
        if fault == "500":
            return web.Response(status=500, text="injected")
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
        response = await handler(request)
        assert isinstance(response, web.Response) and isinstance(response.body, bytes)
        self.served.append(response.body.count(b'"arm"'))
        return response

    def add(self, *samples: Sample) -> None:
        for s in samples:
            self.router.feed.add(s)

    def play(self, stream: Sequence[Sample]) -> None:
        """Record ``stream`` (in end order) as time goes by: see ``until``."""
        self._stream, self._recorded = stream, 0

    def until(self, t: float) -> None:
        """Record the stream's requests that ended before ``t``."""
        while self._recorded < len(self._stream) and ended(self._stream[self._recorded]) < t:
            self.router.feed.add(self._stream[self._recorded])
            self._recorded += 1


@pytest.fixture
async def feed_routers() -> AsyncIterator[Callable[..., Awaitable[FeedRouter]]]:
    """``await feed_routers(capacity=100_000)`` → a started FeedRouter, stopped after."""
    made: list[FeedRouter] = []

    async def make(capacity: int = 100_000) -> FeedRouter:
        pod = await FeedRouter(capacity).start()
        made.append(pod)
        return pod

    yield make
    for pod in made:
        await pod.stop()


LABELS = {"model_name": "m", "engine": "0"}
FINE_BUCKETS = tuple(round(0.001 * i, 3) for i in range(1, 201))  # 1 ms steps to 200 ms




class FakeVllmPod:
    """A /metrics endpoint with vLLM's metric names whose values a test drives: each
    ``finish`` observes requests' per-token latency (TPOT) and per-step latencies (ITL)."""

    def __init__(self, buckets: Sequence[float] = FINE_BUCKETS, drafter: bool = False) -> None:
        self.registry = CollectorRegistry()
        names = tuple(LABELS)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds", "tpot", names,
                              buckets=buckets, registry=self.registry).labels(**LABELS)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "itl", names,
                             buckets=buckets, registry=self.registry).labels(**LABELS)
        self.running = Gauge("vllm:num_requests_running", "running", names,
                             registry=self.registry).labels(**LABELS)
        self.drafts = self.accepted = None
        if drafter:
            self.drafts = Counter("vllm:spec_decode_num_drafts", "drafts", names,
                                  registry=self.registry).labels(**LABELS)
            self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "acc", names,
                                    registry=self.registry).labels(**LABELS)
        self._lock = threading.Lock()
        registry, lock = self.registry, self._lock

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    body = generate_latest(registry)
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def finish(
        self,
        tpots: np.ndarray,
        *,
        tokens_per_step: float = 1.0,
        running: float | None = None,
        accepted_per_draft: float | None = None,
    ) -> None:
        """Record finished requests: each request's TPOT, and 10 engine steps each whose
        ITL is TPOT × tokens per step (a drafter emits several tokens per step)."""
        with self._lock:
            for t in tpots:
                self.tpot.observe(float(t))
                for _ in range(10):
                    self.itl.observe(float(t) * tokens_per_step)
            if running is not None:
                self.running.set(running)
            if self.drafts is not None and self.accepted is not None and accepted_per_draft:
                self.drafts.inc(100 * len(tpots))
                self.accepted.inc(100 * len(tpots) * accepted_per_draft)

    def close(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def make_pod() -> Iterator[Callable[..., FakeVllmPod]]:
    """``make_pod(buckets=..., drafter=False)`` → a started FakeVllmPod, closed after the test."""
    pods: list[FakeVllmPod] = []

    def make(**kwargs: Any) -> FakeVllmPod:
        pod = FakeVllmPod(**kwargs)
        pods.append(pod)
        return pod

    yield make
    for pod in pods:
        pod.close()


@pytest.fixture
def make_prometheus(tmp_path: Path) -> Callable[..., LocalPrometheus]:
    """``make_prometheus(targets)`` → a LocalPrometheus to use as a context manager."""

    def make(targets: Sequence[tuple[str, dict[str, str]]], **kwargs: Any) -> LocalPrometheus:
        workdir = tmp_path / f"prometheus-{len(list(tmp_path.iterdir()))}"
        workdir.mkdir()
        return LocalPrometheus(workdir, targets, **kwargs)

    return make


class LocalPrometheus:
    """/usr/bin/prometheus with static targets: ``targets`` is [(host:port, {labels})]."""

    def __init__(self, workdir: Path, targets: Sequence[tuple[str, dict[str, str]]],
                 scrape_interval: str = "1s") -> None:
        from specguard_testkit._prometheus import find_prometheus

        self.binary = find_prometheus()
        self.workdir = workdir
        config = {
            "global": {"scrape_interval": scrape_interval, "scrape_timeout": "800ms"},
            "scrape_configs": [{
                "job_name": "pods",
                "static_configs": [{"targets": [t], "labels": labels} for t, labels in targets],
            }],
        }  # fmt: skip
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalPrometheus:
        log = (self.workdir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [str(self.binary), f"--config.file={self.workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.workdir / "prometheus.log").read_text()[-2000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        raise RuntimeError("prometheus not ready in 60 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for_samples(self, expr: str, count: int, timeout: float = 60.0) -> None:
        """Wait until ``count_over_time(expr)`` reaches ``count`` for every series."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = self.query(f"count_over_time({expr}[10m])")
            if rows and all(float(r["value"][1]) >= count for r in rows):
                return
            time.sleep(0.3)
        raise TimeoutError(f"prometheus: fewer than {count} scrapes of {expr}")
