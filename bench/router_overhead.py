"""What the shadow router costs: the same load through the router and straight upstream.

    .venv/bin/python bench/router_overhead.py            # full run, prints tables
    .venv/bin/python bench/router_overhead.py --quick    # smaller, for a smoke run
    .venv/bin/python bench/router_overhead.py --stacks   # HTTP stack comparison only

Parts (each upstream and the router run as their own processes; the load generator is
this process, on uvloop):

1. Latency against `specguard sim` (no drafter, one token per chunk, time scale chosen
   so a token takes ~10-30 ms): at concurrency 1, 16, 64, 256, alternate direct and routed
   runs; per request TTFT and TPOT = (t_last - t_first) / (tokens - 1). Added = routed p50
   (p99) minus direct p50 (p99).
2. Transit: a stamped upstream writes its monotonic clock into every chunk (the router
   passes bytes unchanged), so arrival - stamp is each chunk's one-way latency; routed minus
   direct is what the router adds per chunk. This sees a constant delay that TPOT cancels.
3. Capacity: 256 streams of chunks 1 ms apart saturate the router; chunks moved per CPU
   second of the router process = the most chunks/s one router process (one core) moves.
4. Memory: 512 concurrent slow streams through the router, each mirrored (1024 upstream
   streams), router peak RSS (VmHWM).

`--stacks` runs parts 2 and 3 through minimal forwarding proxies on each HTTP stack
(aiohttp or httpx client, uvloop or asyncio loop, aiohttp server) and through the router.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from specguard_testkit._ports import free_port

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


# -- helper processes --------------------------------------------------------------------


def serve_upstream(port: int) -> None:
    """A stamped SSE upstream: body {max_tokens, gap_ms}; each chunk carries "t" (ns)."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tokens = int(body.get("max_tokens", 16))
        gap = float(body.get("gap_ms", 20)) / 1000
        options = body.get("stream_options") or {}
        continuous = bool(options.get("continuous_usage_stats"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        head = b'data: {"id":"cmpl-b","object":"text_completion","created":1,"model":"m",'
        for i in range(tokens):
            await asyncio.sleep(gap)
            usage = (
                b',"usage":{"prompt_tokens":1,"total_tokens":%d,"completion_tokens":%d}'
                % (i + 2, i + 1)
                if continuous
                else b""
            )
            await response.write(
                head
                + b'"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}]'
                + b',"t":%d' % time.perf_counter_ns()
                + usage
                + b"}\n\n"
            )
        if options.get("include_usage"):
            await response.write(
                head + b'"choices":[],"usage":{"prompt_tokens":1,"total_tokens":%d,'
                b'"completion_tokens":%d}}\n\n' % (tokens + 1, tokens)
            )
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    _run_app(app, port, uvloop_on=True)


def serve_minimal_proxy(port: int, upstream: str, client: str, uvloop_on: bool) -> None:
    """The least a forwarding proxy does: aiohttp server, chosen client, bytes through."""
    from aiohttp import web

    if client == "httpx":
        import httpx

        state: dict[str, Any] = {}

        async def handle_httpx(request: web.Request) -> web.StreamResponse:
            if "c" not in state:
                state["c"] = httpx.AsyncClient(
                    timeout=None, limits=httpx.Limits(max_connections=None)
                )
            body = await request.read()
            req = state["c"].build_request(
                "POST", upstream + request.path, content=body,
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            up = await state["c"].send(req, stream=True)
            resp = web.StreamResponse(status=up.status_code)
            resp.content_type = "text/event-stream"
            await resp.prepare(request)
            async for data in up.aiter_raw():
                await resp.write(data)
            await up.aclose()
            return resp

        handler = handle_httpx
    else:
        state2: dict[str, aiohttp.ClientSession] = {}

        async def handle_aiohttp(request: web.Request) -> web.StreamResponse:
            if "s" not in state2:
                state2["s"] = aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
                )
            body = await request.read()
            async with state2["s"].post(
                upstream + request.path, data=body, headers={"Content-Type": "application/json"}
            ) as up:
                resp = web.StreamResponse(status=up.status)
                resp.content_type = "text/event-stream"
                await resp.prepare(request)
                async for data in up.content.iter_any():
                    await resp.write(data)
            return resp

        handler = handle_aiohttp
    app = web.Application()
    app.router.add_post("/v1/{tail:.*}", handler)
    _run_app(app, port, uvloop_on=uvloop_on)


def _run_app(app: Any, port: int, *, uvloop_on: bool) -> None:
    from aiohttp import web

    if uvloop_on:
        import uvloop

        uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=2048)


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    url: str

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def rss_peak_mb(self) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


@contextmanager
def spawn(name: str, argv: list[str], port: int, ready_path: str) -> Iterator[Proc]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    log = open(f"/tmp/bench-{name}-{port}.log", "wb")  # noqa: SIM115
    popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)  # fmt: skip
    proc = Proc(name, popen, f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while True:
            if popen.poll() is not None:
                raise RuntimeError(f"{name} exited: see /tmp/bench-{name}-{port}.log")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    pass
                if ready_path:
                    import urllib.request

                    urllib.request.urlopen(proc.url + ready_path, timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} not ready") from None
                time.sleep(0.1)
        yield proc
    finally:
        os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
        log.close()


def upstream_proc(name: str) -> Any:
    port = free_port()
    return spawn(name, [PY, __file__, "_upstream", "--port", str(port)], port, "")


def router_proc(serving: str, shadow: str | None = None, *, uvloop_on: bool = True,
                shadow_budget: int = 256) -> Any:  # fmt: skip
    port = free_port()
    argv = [PY, "-m", "specguard", "router", "--serving", serving, "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "WARNING",
            "--shadow-max-in-flight", str(shadow_budget)]  # fmt: skip
    if shadow:
        # Every request copied (the worst case for the router), whatever the shadow holds.
        argv += ["--shadow", shadow, "--mirror-share", "1", "--load-match", "arrivals"]
    if not uvloop_on:
        argv.append("--no-uvloop")
    return spawn("router", argv, port, "/health")


def minimal_proxy_proc(upstream: str, client: str, uvloop_on: bool) -> Any:
    port = free_port()
    argv = [PY, __file__, "_proxy", "--port", str(port), "--upstream", upstream,
            "--client", client, "--loop", "uvloop" if uvloop_on else "asyncio"]  # fmt: skip
    return spawn(f"proxy-{client}", argv, port, "")


def sim_proc(time_scale: float) -> Any:
    port = free_port()
    argv = [PY, "-m", "specguard", "sim", "m", "--time-scale", str(time_scale), "--seed", "3",
            "--max-num-seqs", "512", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    return spawn("sim", argv, port, "/v1/models")


# -- load generation ---------------------------------------------------------------------


@dataclass
class Result:
    ttft: list[float]
    tpot: list[float]
    transit: list[float]
    chunks: int
    seconds: float
    errors: int


async def one_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                      res: Result) -> None:  # fmt: skip
    start = time.perf_counter_ns()
    first = last = 0
    count = 0
    buf = b""
    try:
        async with session.post(url, json=body) as r:
            if r.status != 200:
                res.errors += 1
                await r.read()
                return
            async for data in r.content.iter_any():
                now = time.perf_counter_ns()
                buf += data
                *events, buf = buf.split(b"\n\n")
                for ev in events:
                    if not ev.startswith(b"data: {"):
                        continue
                    if b'"choices":[]' in ev:
                        continue
                    at = ev.rfind(b'"t":')
                    if at > 0:
                        end = at + 4
                        while ev[end : end + 1].isdigit():
                            end += 1
                        res.transit.append((now - int(ev[at + 4 : end])) / 1e9)
                    if b'"content":""' in ev and b'"role"' in ev:
                        continue  # chat role chunk: not a token
                    count += 1
                    if not first:
                        first = now
                    last = now
    except aiohttp.ClientError:
        res.errors += 1
        return
    res.chunks += count
    if first:
        res.ttft.append((first - start) / 1e9)
    if count >= 2:
        res.tpot.append((last - first) / 1e9 / (count - 1))


async def run_load(url: str, body: dict[str, Any], concurrency: int, requests: int) -> Result:
    res = Result([], [], [], 0, 0.0, 0)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    remaining = requests
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await one_request(session, url, body, res)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        res.seconds = time.perf_counter() - t0
    return res


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def ms(x: float) -> str:
    return f"{x * 1000:8.3f}"


# -- parts ---------------------------------------------------------------------------------


def part_latency(
    levels: list[int], tokens: int, time_scale: float, rounds: int
) -> list[dict[str, Any]]:
    rows = []
    with sim_proc(time_scale) as sim, router_proc(sim.url) as router:
        body = {"model": "m", "prompt": "benchmark prompt", "max_tokens": tokens,
                "stream": True, "ignore_eos": True}  # fmt: skip
        asyncio.run(run_load(sim.url + "/v1/completions", body, 4, 8))  # warm up
        for c in levels:
            n = max(c * rounds, 16)
            direct = Result([], [], [], 0, 0, 0)
            routed = Result([], [], [], 0, 0, 0)
            for _ in range(2):  # alternate to cancel drift
                for target, acc in ((sim.url, direct), (router.url, routed)):
                    r = asyncio.run(run_load(target + "/v1/completions", body, c, n // 2))
                    acc.ttft += r.ttft
                    acc.tpot += r.tpot
                    acc.errors += r.errors
            row = {
                "concurrency": c,
                "tpot_direct_p50": pct(direct.tpot, 0.5), "tpot_routed_p50": pct(routed.tpot, 0.5),
                "tpot_direct_p99": pct(direct.tpot, 0.99),
                "tpot_routed_p99": pct(routed.tpot, 0.99),
                "ttft_direct_p50": pct(direct.ttft, 0.5), "ttft_routed_p50": pct(routed.ttft, 0.5),
                "requests": len(routed.tpot), "errors": direct.errors + routed.errors,
            }  # fmt: skip
            rows.append(row)
            print(
                f"c={c:4d} TPOT p50 direct {ms(row['tpot_direct_p50'])} ms routed "
                f"{ms(row['tpot_routed_p50'])} ms added "
                f"{ms(row['tpot_routed_p50'] - row['tpot_direct_p50'])}"
                f" | p99 added {ms(row['tpot_routed_p99'] - row['tpot_direct_p99'])}"
                f" | TTFT p50 added {ms(row['ttft_routed_p50'] - row['ttft_direct_p50'])} ms"
                f" | n={row['requests']} err={row['errors']}",
                flush=True,
            )
    return rows


def transit(target: str, concurrency: int, requests: int, tokens: int, gap_ms: float) -> Result:
    body = {"model": "m", "prompt": "p", "max_tokens": tokens, "gap_ms": gap_ms, "stream": True}
    return asyncio.run(run_load(target + "/v1/completions", body, concurrency, requests))


def part_transit(levels: list[int], via: Callable[[str], Any], label: str,
                 tokens: int = 40, gap_ms: float = 20.0) -> list[dict[str, Any]]:  # fmt: skip
    rows = []
    with upstream_proc("up") as up, via(up.url) as proxy:
        transit(proxy.url, 2, 4, 5, 1)  # warm up
        for c in levels:
            n = max(c, 8)
            d = transit(up.url, c, n, tokens, gap_ms)
            r = transit(proxy.url, c, n, tokens, gap_ms)
            row = {
                "stack": label, "concurrency": c,
                "added_transit_p50": pct(r.transit, 0.5) - pct(d.transit, 0.5),
                "added_transit_p99": pct(r.transit, 0.99) - pct(d.transit, 0.99),
                "added_tpot_p50": pct(r.tpot, 0.5) - pct(d.tpot, 0.5),
                "added_ttft_p50": pct(r.ttft, 0.5) - pct(d.ttft, 0.5),
            }  # fmt: skip
            rows.append(row)
            print(
                f"{label:28s} c={c:4d} added per-chunk transit p50 "
                f"{row['added_transit_p50'] * 1e6:8.1f} us"
                f" p99 {row['added_transit_p99'] * 1e6:9.1f} us | added TPOT p50 "
                f"{row['added_tpot_p50'] * 1e6:8.1f} us | added TTFT p50 "
                f"{row['added_ttft_p50'] * 1e6:8.1f} us",
                flush=True,
            )
    return rows


def part_capacity(
    via: Callable[[str], Any], label: str, *, streams: int = 256, tokens: int = 400,
    gap_ms: float = 1.0, direct: bool = False,
) -> dict[str, Any]:  # fmt: skip
    with upstream_proc("up") as up, via(up.url) as proxy:
        transit(proxy.url, 2, 4, 5, 1)
        if direct:  # what the upstream and client manage alone: the ceiling of this setup
            d = transit(up.url, streams, streams, tokens, gap_ms)
            print(
                f"{'direct (no proxy)':28s} {d.chunks / d.seconds:9.0f} chunks/s wall", flush=True
            )
        cpu0 = proxy.cpu_seconds()
        r = transit(proxy.url, streams, streams, tokens, gap_ms)
        cpu = proxy.cpu_seconds() - cpu0
    row = {
        "stack": label, "chunks": r.chunks, "seconds": r.seconds, "cpu_seconds": cpu,
        "chunks_per_s": r.chunks / r.seconds, "chunks_per_cpu_s": r.chunks / cpu if cpu else 0.0,
    }  # fmt: skip
    print(
        f"{label:28s} {row['chunks_per_s']:9.0f} chunks/s wall, {row['chunks_per_cpu_s']:9.0f} "
        f"chunks per proxy CPU-second ({cpu:.1f} CPU s for {r.chunks} chunks, errors {r.errors})",
        flush=True,
    )
    return row


def part_memory(streams: int = 512, tokens: int = 120, gap_ms: float = 50.0) -> dict[str, Any]:
    with upstream_proc("up") as up, upstream_proc("shadow") as sh, \
            router_proc(up.url, sh.url, shadow_budget=streams) as router:  # fmt: skip
        idle = router.rss_mb()
        body = {"model": "m", "prompt": "p", "max_tokens": tokens, "gap_ms": gap_ms, "stream": True}
        peak_in_flight = 0

        async def go() -> Result:
            nonlocal peak_in_flight
            task = asyncio.create_task(
                run_load(router.url + "/v1/completions", body, streams, streams)
            )
            async with aiohttp.ClientSession() as s:
                while not task.done():
                    await asyncio.sleep(0.5)
                    async with s.get(router.url + "/metrics") as resp:
                        text = await resp.text()
                    total = sum(
                        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                        if line.startswith("specguard_router_in_flight{")
                    )  # fmt: skip
                    peak_in_flight = max(peak_in_flight, int(total))
            return await task

        r = asyncio.run(go())
        row = {
            "streams": streams, "upstream_in_flight_peak": peak_in_flight, "rss_idle_mb": idle,
            "rss_peak_mb": router.rss_peak_mb(), "errors": r.errors,
        }  # fmt: skip
    print(
        f"memory: {streams} client streams, {peak_in_flight} upstream streams in flight at peak "
        f"(serving + shadow): router RSS idle {row['rss_idle_mb']:.0f} MB, peak "
        f"{row['rss_peak_mb']:.0f} MB (goal < 300 MB: "
        f"{'met' if row['rss_peak_mb'] < 300 else 'NOT met'}), errors {row['errors']}",
        flush=True,
    )
    return row


def stacks(levels: list[int]) -> dict[str, Any]:
    configs: list[tuple[str, Callable[[str], Any]]] = [
        ("min aiohttp client + uvloop", lambda u: minimal_proxy_proc(u, "aiohttp", True)),
        ("min aiohttp client, asyncio", lambda u: minimal_proxy_proc(u, "aiohttp", False)),
        ("min httpx client + uvloop", lambda u: minimal_proxy_proc(u, "httpx", True)),
        ("min httpx client, asyncio", lambda u: minimal_proxy_proc(u, "httpx", False)),
        ("router (aiohttp) + uvloop", router_proc),
        ("router (aiohttp), asyncio", lambda u: router_proc(u, uvloop_on=False)),
    ]
    out: dict[str, Any] = {"transit": [], "capacity": []}
    for label, via in configs:
        out["transit"] += part_transit(levels, via, label)
    for label, via in configs:
        out["capacity"].append(part_capacity(via, label))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", nargs="?", default="bench", choices=("bench", "_upstream", "_proxy"))
    p.add_argument("--port", type=int)
    p.add_argument("--upstream")
    p.add_argument("--client", default="aiohttp")
    p.add_argument("--loop", default="uvloop")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--stacks", action="store_true", help="only compare HTTP stacks")
    p.add_argument("--time-scale", type=float, default=2.0,
                   help="simulator time scale (2: ~18 ms per token at concurrency 1)")  # fmt: skip
    p.add_argument("--json", type=Path, help="write all figures here")
    args = p.parse_args()
    if args.role == "_upstream":
        serve_upstream(args.port)
        return 0
    if args.role == "_proxy":
        serve_minimal_proxy(args.port, args.upstream, args.client, args.loop == "uvloop")
        return 0
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    levels = [1, 16, 64] if args.quick else [1, 16, 64, 256]
    results: dict[str, Any] = {"cpus": os.cpu_count()}
    if args.stacks:
        results["stacks"] = stacks([1, 64])
    else:
        print("== per-token latency and TTFT against specguard sim (no drafter)", flush=True)
        results["latency"] = part_latency(levels, 24 if args.quick else 64, args.time_scale,
                                          rounds=1 if args.quick else 2)  # fmt: skip
        print("== per-chunk transit against a stamped upstream (20 ms between chunks)", flush=True)
        results["transit"] = part_transit(levels, router_proc, "router")
        print("== capacity: 256 streams, chunks 1 ms apart", flush=True)
        results["capacity"] = part_capacity(router_proc, "router", direct=True)
        streams = 256 if args.quick else 512
        print(f"== memory at {streams} concurrent streams, all mirrored", flush=True)
        results["memory"] = part_memory(streams)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
