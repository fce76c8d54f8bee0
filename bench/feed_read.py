"""Do the operator's reads of the routers' sample feeds keep up? main's way against this one's,
side by side, from one run.

    .venv/bin/python bench/feed_read.py              # 6 windows of 10 s, then with a core busy
    .venv/bin/python bench/feed_read.py --quick      # 2 windows, for a smoke run

Each side has ``--routers`` router processes, each recording mirrored requests as they end
at ``--rate`` requests per second (the issue's load: 384 closed-loop streams over 2 routers,
~30 requests/s per router, requests of 6.4 s median; ``specguard_testkit._mirrored``), about
1.9 samples per request with the copies:

- **old** (main): the router encodes each sample to a dict and the page to JSON when it is
  read (main's ``SampleFeed`` and handler, kept below for the comparison); the operator reads
  every router's whole window at the window's end (``RouterFeedSource.collect`` alone).
- **new**: the real ``Router`` app, whose ring holds each sample's JSON record, encoded once
  when recorded; the operator's loop calls ``read_ahead()`` at each one-second tick, so the
  read at the window's end holds about a second.

Both sides read with ``RouterFeedSource`` (5 s timeout, pages of 5000), windows ending at the
operator's one-second ticks. A router also proxies the traffic: at the issue's load about
12 000 chunks/s (30 requests/s × ~200 tokens, mirrored), 23-50% of a core at the router's
24k-53k chunks per CPU-second (docs/router.md), so each router's event loop is kept
``--router-busy`` (default 40%) busy in 2 ms slices, as callbacks of other streams would
keep it. Then again with one core kept busy by another process (a busy loop).

Columns: ``as-is`` adds nothing to the host's own load (the load average is printed beside
the figures); ``+busy`` keeps one core busy besides. Printed per side: the read at the
window's end (its wall time, p50 and max, and the samples it brought), the routers' time
answering ``/samples`` per window, the reads per window, the samples of each judged window,
and windows whose reads timed out or stopped part way (``down``: not judged).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


# -- main's feed, for the comparison (router/_feed.py before this change) -----------------


class OldFeed:
    """main's ring: Sample objects, each encoded (dict, then JSON) when a page is read."""

    def __init__(self, capacity: int) -> None:
        self.epoch = secrets.token_hex(6)
        self._ring: deque[tuple[int, Any]] = deque(maxlen=capacity)
        self._last = 0

    def add(self, sample: Any) -> None:
        self._last += 1
        self._ring.append((self._last, sample))

    def read(self, after: str | None, limit: int) -> dict[str, Any]:
        oldest = self._ring[0][0] if self._ring else self._last + 1
        seq: int | None = None
        if after:
            epoch, _, number = after.rpartition(":")
            seq = int(number) if epoch == self.epoch and number.isdigit() else None
        if not after:
            missed, seq = 0, oldest - 1
        elif seq is None or seq > self._last:
            missed, seq = oldest - 1, oldest - 1
        else:
            missed = max(oldest - 1 - seq, 0)
            seq = max(seq, oldest - 1)
        start = seq - (oldest - 1)
        chosen = [s for _, s in itertools.islice(self._ring, start, start + max(limit, 0))]
        last = seq + len(chosen)
        return {"epoch": self.epoch, "next": f"{self.epoch}:{last}",
                "samples": [s.to_dict() for s in chosen], "missed": missed}  # fmt: skip


# -- a router process ----------------------------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """A router recording the issue's stream as its requests end, its loop ``busy`` busy."""
    mode, port, rate, seconds = args.serve, args.port, args.rate, args.seconds
    seed, busy = args.seed, args.router_busy
    from aiohttp import web

    from specguard.router._pool import Topology
    from specguard.router._proxy import Router, RouterConfig
    from specguard_testkit._mirrored import Mirrored, ended, feed

    stats = {"answer_s": 0.0, "answers": 0, "recorded": 0}
    if mode == "new":
        router = Router(Topology(), RouterConfig(samples_capacity=100_000))
        app = router.app()
        add = router.feed.add
    else:
        old = OldFeed(100_000)
        add = old.add

        async def samples(request: web.Request) -> web.Response:  # main's handler
            limit = min(max(int(request.query.get("limit", "1000")), 0), 10_000)
            return web.json_response(old.read(request.query.get("after"), limit))

        app = web.Application()
        app.router.add_get("/samples", samples)

    @web.middleware
    async def timed(request: web.Request, handler: Any) -> web.StreamResponse:
        began = time.perf_counter()
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            if request.path == "/samples":
                stats["answer_s"] += time.perf_counter() - began
                stats["answers"] += 1

    async def bench_stats(_request: web.Request) -> web.Response:
        return web.json_response(stats)

    app.middlewares.append(timed)
    app.router.add_get("/bench", bench_stats)

    async def record() -> None:
        # Requests that started in the last minute before now are running: the stream is
        # steady at once (those that ended before now were never recorded here).
        now = time.time()
        stream = feed(Mirrored(rate=rate), seconds + 60.0, now - 60.0, seed)
        for sample in (s for s in stream if ended(s) >= now):
            wait = ended(sample) - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            add(sample)
            stats["recorded"] += 1

    async def proxying() -> None:
        # Other streams' callbacks: 2 ms of work in every 2 / busy ms.
        while busy > 0:
            until = time.perf_counter() + 0.002
            while time.perf_counter() < until:
                pass
            await asyncio.sleep(0.002 / busy - 0.002)

    async def main() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.gather(record(), proxying())

    asyncio.run(main())


def _answers(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url + "/bench", timeout=2).status_code == 200
    return False


@contextlib.contextmanager
def routers(mode: str, count: int, args: argparse.Namespace, seconds: float) -> Iterator[list[str]]:
    from specguard_testkit._ports import free_port
    from specguard_testkit._wait import wait_until

    procs, urls = [], []
    try:
        for i in range(count):
            port = free_port()
            procs.append(subprocess.Popen(
                [PY, __file__, "--serve", mode, "--port", str(port), "--rate", str(args.rate),
                 "--seconds", str(seconds), "--seed", str(i), "--router-busy",
                 str(args.router_busy)],
                cwd=ROOT,
            ))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            wait_until(lambda url=url: _answers(url), timeout=120, what=f"router {url}")
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


@contextlib.contextmanager
def busy_core(on: bool) -> Iterator[None]:
    proc = subprocess.Popen([PY, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)


# -- the operator's side -------------------------------------------------------------------


@dataclass
class Side:
    """What one side's windows measured."""

    end_read_s: list[float] = field(default_factory=list)
    end_samples: list[int] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    answer_s: list[float] = field(default_factory=list)
    down: list[str] = field(default_factory=list)
    judged: int = 0
    window_samples: list[int] = field(default_factory=list)  # judged windows' samples
    load: float = 0.0  # the host's load average (1 min) at the phase's end


async def operate(urls: Sequence[str], ahead: bool, args: argparse.Namespace) -> Side:
    """The operator's loop over ``windows`` windows (after one to fill up): a tick every
    second; between window ends ``read_ahead`` (``ahead``); at the first tick past a
    window's end, ``collect``."""
    from specguard.sources import RouterFeed, RouterFeedSource
    from specguard.sources._router_feed import FeedRead

    polls: list[FeedRead] = []

    class Counted(RouterFeed):
        async def poll(self) -> FeedRead:
            read = await super().poll()
            polls.append(read)
            return read

    side = Side()
    async with httpx.AsyncClient(timeout=5.0) as client:
        source = RouterFeedSource(urls, feed=Counted(urls, client=client))
        start = time.time()
        answered = await _answer_s(client, urls)
        for k in range(args.windows + 1):
            mark = len(polls)
            now = time.time()
            while now - start < args.window:
                if ahead:
                    source.read_ahead()
                await asyncio.sleep(1.0 - (time.time() - start) % 1.0)
                now = time.time()
            began = time.perf_counter()
            window = await source.collect(start, now)
            took = time.perf_counter() - began
            start = now
            total = await _answer_s(client, urls)
            if k == 0:  # filling up
                answered = total
                continue
            side.end_read_s.append(took)
            side.end_samples.append(len(polls[-1].samples))
            side.reads.append(len(polls) - mark)
            side.answer_s.append(total - answered)
            answered = total
            if window.state == "down":
                side.down.append(window.problem)
            else:
                side.judged += 1
                side.window_samples.append(len(window.samples))
        await source.aclose()
    return side


async def _answer_s(client: httpx.AsyncClient, urls: Sequence[str]) -> float:
    """The routers' time answering /samples so far (their own clocks)."""
    total = 0.0
    for url in urls:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            total += float((await client.get(url + "/bench", timeout=10)).json()["answer_s"])
    return total


def phase(args: argparse.Namespace, busy: bool) -> dict[str, Side]:
    """Both sides at once, each operator in a process of its own (a parse on one side must
    not hold up the other's loop)."""
    # Recorded for longer than the windows take, even when reads fall behind.
    seconds = 3 * (args.windows + 2) * args.window + 60
    with (
        routers("old", args.routers, args, seconds) as old,
        routers("new", args.routers, args, seconds) as new,
        busy_core(busy),
    ):
        procs = {}
        for side, urls in (("old", old), ("new", new)):
            argv = [PY, __file__, "--operate", side, "--windows", str(args.windows),
                    "--window", str(args.window), *urls]  # fmt: skip
            procs[side] = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        out = {side: proc.communicate()[0] for side, proc in procs.items()}
        load = os.getloadavg()[0]
    return {side: Side(**{**json.loads(text), "load": load}) for side, text in out.items()}


def _row(label: str, cells: Sequence[str]) -> str:
    return f"{label:<44}" + "".join(f"{c:>12}" for c in cells)


def report(results: dict[str, dict[str, Side]], args: argparse.Namespace) -> list[str]:
    hosts = list(results)
    lines = [
        f"feed_read: {args.routers} routers per side, {args.rate:g} requests/s per router "
        f"(+ copies), {args.window:g} s windows x {args.windows}, router loops "
        f"{args.router_busy:.0%} busy; {os.cpu_count()} CPUs",
        _row("", [f"{h} {s}" for h in hosts for s in ("old", "new")]),
    ]

    def cells(fn: Any) -> list[str]:
        return [fn(results[h][s]) for h in hosts for s in ("old", "new")]

    lines += [
        _row("read at the window's end, p50 (s)",
             cells(lambda s: f"{statistics.median(s.end_read_s):.3f}")),
        _row("read at the window's end, max (s)", cells(lambda s: f"{max(s.end_read_s):.3f}")),
        _row("samples it brought, mean",
             cells(lambda s: f"{statistics.mean(s.end_samples):.0f}")),
        _row("routers' time answering /samples per window (s)",
             cells(lambda s: f"{statistics.mean(s.answer_s):.3f}")),
        _row("reads per window (polls of all routers)",
             cells(lambda s: f"{statistics.mean(s.reads):.1f}")),
        _row("samples per judged window, mean",
             cells(lambda s: f"{statistics.mean(s.window_samples or [0]):.0f}")),
        _row("windows down (reads timed out / part way)",
             cells(lambda s: f"{len(s.down)}/{len(s.down) + s.judged}")),
        _row("host load average (1 min) at the end", cells(lambda s: f"{s.load:.1f}")),
    ]  # fmt: skip
    for h in hosts:
        for s in ("old", "new"):
            for problem in results[h][s].down[:2]:
                lines.append(f"  {h} {s}: {problem[:150]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 windows, no busy core")
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--routers", type=int, default=2)
    parser.add_argument("--router-busy", type=float, default=0.4)
    parser.add_argument("--serve", choices=("old", "new"), help=argparse.SUPPRESS)
    parser.add_argument("--operate", choices=("old", "new"), help=argparse.SUPPRESS)
    parser.add_argument("urls", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    if args.operate:
        side = asyncio.run(operate(args.urls, args.operate == "new", args))
        print(json.dumps(vars(side)))
        return
    if args.quick:
        args.windows = 2
    results: dict[str, dict[str, Side]] = {}
    # "as-is": nothing added to the host's own load; "+busy": one core kept busy besides.
    hosts = [("as-is", False)] if args.quick else [("as-is", False), ("+busy", True)]
    for name, busy in hosts:
        print(f"feed_read: {name} host ...", file=sys.stderr, flush=True)
        results[name] = phase(args, busy)
    print("\n".join(report(results, args)))
    print(json.dumps({h: {s: vars(v) for s, v in r.items()} for h, r in results.items()}),
          file=sys.stderr)  # fmt: skip


if __name__ == "__main__":
    main()
