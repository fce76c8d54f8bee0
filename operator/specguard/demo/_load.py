"""The demo's client: streaming chat requests through the router pods, following the
schedule, one JSON line per finished request (numbers only, never text).

A closed-loop phase runs ``PER_POD × replicas`` streams, each sending its next request when
its last one is answered; an open-loop phase sends Poisson arrivals at ``RATE × replicas``
a second, each on its own, whatever the answers (at most ``MAX_OPEN`` at once: beyond that an
arrival is recorded as failed, status 599, rather than piling up without bound).

It runs as its own process (``main`` in a ``python -c`` process started by the demo and
registered with the cluster's process groups), so its timing is not shared with the demo's
process kubelet, and it exits on SIGTERM/SIGINT or when the demo's process is gone.

Each line: ``{"started": epoch s, "ended": epoch s, "tokens": output tokens, "decode_s":
last − first token, "ttft_s", "status", "domain", "phase"}``; status 599: no answer (refused,
reset or cut off mid-stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp

from specguard._args import ArgumentParser, UsageError
from specguard.demo._accounting import ClientRecord
from specguard.demo._schedule import Phase, parse_schedule, spans
from specguard_testkit import StreamRecord, stream_once

PROMPTS = {
    "math": "Solve 37 * 41 step by step.",
    "tool_call": "What is the weather in Paris?",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def payload(domain: str, model: str, max_tokens: int) -> bytes:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPTS[domain]}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if domain == "tool_call":
        body["tools"] = TOOLS
    return json.dumps(body).encode()


def record_line(
    record: StreamRecord, *, started: float, ended: float, status: int, domain: str, phase: int
) -> str:
    decode = record.chunk_times[-1] - record.chunk_times[0] if record.chunk_times else 0.0
    return json.dumps(
        {
            "started": round(started, 6),
            "ended": round(ended, 6),
            "tokens": record.tokens,
            "decode_s": round(decode, 6),
            "ttft_s": None if record.ttft is None else round(record.ttft, 6),
            "status": status,
            "domain": domain,
            "phase": phase,
        },
        separators=(",", ":"),
    )


def read_records(path: Path) -> list[ClientRecord]:
    """The client's lines as accounting records (a torn last line is skipped)."""
    out = []
    with contextlib.suppress(FileNotFoundError), path.open() as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            out.append(
                ClientRecord(
                    float(row["started"]),
                    int(row["tokens"]),
                    float(row["decode_s"]),
                    row["status"] == 200,
                    str(row["domain"]),
                    None if row.get("ended") is None else float(row["ended"]),
                )
            )
    return out


MAX_OPEN = 4096


@dataclass
class _State:
    phase: int = -1
    current: Phase | None = None
    streams: int = 0
    rate: float = 0.0  # open loop: arrivals per second in all
    stop: bool = False


class Client:
    def __init__(
        self,
        routers: Sequence[str],
        phases: Sequence[Phase],
        *,
        replicas: int,
        start: float,
        out: IO[str],
        model: str,
        max_tokens: int,
    ) -> None:
        self.routers = list(routers)
        self.spans = spans(phases)
        self.replicas = replicas
        self.start = start
        self.out = out
        self.model = model
        self.max_tokens = max_tokens
        self.state = _State()
        self.payloads = {d: payload(d, model, max_tokens) for d in PROMPTS}
        self.open: set[asyncio.Task[int]] = set()
        self._sent = 0

    async def run(self, parent: int | None) -> None:
        most = max(s.phase.streams(self.replicas) for s in self.spans)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            workers = [asyncio.create_task(self._worker(session, i)) for i in range(most)]
            workers.append(asyncio.create_task(self._arrivals(session)))
            try:
                await self._drive(parent)
            finally:
                self.state.stop = True
                for w in [*workers, *self.open]:
                    w.cancel()
                await asyncio.gather(*workers, *self.open, return_exceptions=True)
                self.out.flush()

    async def _drive(self, parent: int | None) -> None:
        last_flush = 0.0
        while True:
            now = time.time()
            at = now - self.start
            if at >= self.spans[-1].end:
                return
            if parent is not None and os.getppid() != parent:
                return
            current = next((s for s in self.spans if s.start <= at < s.end), None)
            if current is not None and current.index != self.state.phase:
                self.state.phase = current.index
                self.state.current = current.phase
                self.state.streams = current.phase.streams(self.replicas)
                rate = current.phase.rate
                self.state.rate = 0.0 if rate is None else rate * self.replicas
            if now - last_flush >= 0.5:
                self.out.flush()
                last_flush = now
            await asyncio.sleep(0.05)

    async def _worker(self, session: aiohttp.ClientSession, index: int) -> None:
        """One closed-loop stream: the next request when the last one is answered."""
        url = self.routers[index % len(self.routers)]
        while not self.state.stop:
            current = self.state.current
            if current is None or index >= self.state.streams:
                await asyncio.sleep(0.05)
                continue
            status = await self._one(session, url, index, current.domain_of(index))
            if status != 200:
                await asyncio.sleep(0.2)  # a failing router: do not spin

    async def _arrivals(self, session: aiohttp.ClientSession) -> None:
        """Open-loop phases: Poisson arrivals at the phase's rate, each request on its own
        task, whatever the answers (the next arrival is drawn from the last one's due time,
        so a late wake-up does not slow the rate down)."""
        rng = random.Random(os.getpid())
        due = time.monotonic()
        while not self.state.stop:
            rate = self.state.rate
            if rate <= 0:
                await asyncio.sleep(0.05)
                due = time.monotonic()
                continue
            due += rng.expovariate(rate)
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            current = self.state.current
            if self.state.rate <= 0 or self.state.stop or current is None:
                continue
            self._sent += 1
            url = self.routers[self._sent % len(self.routers)]
            domain = current.domain_of(self._sent)
            if len(self.open) >= MAX_OPEN:
                now = time.time()
                self._write(StreamRecord(time.monotonic()), now, 599, domain,
                            self.state.phase)  # fmt: skip
                continue
            task = asyncio.create_task(self._one(session, url, -1, domain))
            self.open.add(task)
            task.add_done_callback(self.open.discard)

    async def _one(
        self, session: aiohttp.ClientSession, url: str, index: int, domain: str
    ) -> int:
        """Send one request of ``domain``, write its line; its status (599: no answer)."""
        phase = self.state.phase
        headers = {"Content-Type": "application/json", "X-Specguard-Domain": domain}
        started = time.time()
        record = StreamRecord(time.monotonic(), index)
        status = 200
        try:
            await stream_once(
                session, url, self.payloads[domain], headers, record, path="/v1/chat/completions"
            )
        except aiohttp.ClientResponseError as error:
            status = error.status
        except (aiohttp.ClientError, TimeoutError):
            status = 599  # no answer (connection refused or reset, timeout)
        self._write(record, started, status, domain, phase)
        return status

    def _write(
        self, record: StreamRecord, started: float, status: int, domain: str, phase: int
    ) -> None:
        line = record_line(record, started=started, ended=time.time(), status=status,
                           domain=domain, phase=phase)  # fmt: skip
        self.out.write(line + "\n")


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m specguard.demo._load",
        description="The demo's client (started by `specguard demo`).",
    )
    p.add_argument("--router", action="append", required=True, help="a router pod's base URL")
    p.add_argument("--schedule", required=True, help="DOMAIN:PER_POD:SECONDS[,...]")
    p.add_argument("--replicas", type=int, required=True, help="serving pods")
    p.add_argument("--start", type=float, required=True, help="epoch seconds of phase 1")
    p.add_argument("--out", type=Path, required=True, help="JSONL file of finished requests")
    p.add_argument("--model", required=True, help="served model name")
    p.add_argument("--max-tokens", type=int, default=64, help="output tokens per request")
    p.add_argument("--parent", type=int, help="exit when this process is gone")
    return p


def main(argv: Sequence[str]) -> int:
    try:
        args = build_parser().parse_args(list(argv))
        phases = parse_schedule(args.schedule)
    except UsageError as error:
        print(f"specguard.demo._load: {error}", file=sys.stderr)
        return 2
    with args.out.open("a", buffering=1 << 16) as out:
        client = Client(
            args.router,
            phases,
            replicas=args.replicas,
            start=args.start,
            out=out,
            model=args.model,
            max_tokens=args.max_tokens,
        )

        async def run() -> None:
            loop = asyncio.get_running_loop()
            task = asyncio.current_task()
            assert task is not None
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, task.cancel)
            with contextlib.suppress(asyncio.CancelledError):
                await client.run(args.parent)

        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
