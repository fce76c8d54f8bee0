"""The shadow router's HTTP side: forward ``/v1/*`` to the serving arm, mirror a share to
the shadow arm, measure both, and serve ``/health``, ``/metrics`` and ``/samples``.

A request is copied when ``Topology.mirror_decision`` says so: under the load-match rule
``"in_flight"`` (closed-loop clients) as a closed-loop replay at the serving pods' in-flight
count per pod — a copy whose turn came waits in a small queue until the shadow has room and
is sent by ``_release`` (after each start and end, and on a timer) —, under ``"arrivals"``
(open-loop clients) a serving pod's arrivals per shadow pod; the operator publishes the rule
and the share's ceiling.

aiohttp serves and aiohttp forwards (chosen by measurement: bench/router_overhead.py
--stacks, numbers in docs/router.md). Rules the code keeps:

- The client gets the upstream's status, headers (less hop-by-hop ones) and body bytes.
  Streams pass through read by read; the only rewrite is taking out usage the router itself
  asked for (strip.py), so the client sees what it would have seen directly.
- The shadow copy is a separate task on a separate connection pool with its own budget. It
  is started and forgotten: nothing on the client's path awaits it or sees its errors.
- Nothing here logs or keeps request or response text; samples hold numbers only. (The
  tool-call arguments of a mirrored pair are joined in memory until the response ends, to
  check them against the request's tool schema; only the result is kept.)
- With routes by domain (``status.arms.routes``) a request goes to its domain's arm and is
  copied to the other one: both arms serve, both are measured.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from specguard._arms import other_arm
from specguard.judge import LOAD_MATCHES, Arm, Role
from specguard.meter import Measured, StreamMeter, measure_json, request_domain, to_sample
from specguard.router._feed import CursorError, SampleFeed
from specguard.router._metrics import RouterMetrics, domain_label
from specguard.router._pool import QUEUE_LIMIT, QUEUE_WAIT_S, Pod, Topology
from specguard.router._strip import UsageStripper
from specguard.toolcalls import ToolCallCheck

log = logging.getLogger("specguard.router")

DOMAIN_HEADER = "X-Specguard-Domain"
# Requests kept for ballast to replay (in turn), one taken at most every REPLAY_EVERY_S:
# recent enough to be this traffic, each a serialized body (bounded by --max-body-bytes).
BALLAST_RECENT = 4
REPLAY_EVERY_S = 0.25
# RFC 9110 7.6.1 hop-by-hop fields, plus the ones aiohttp recomputes for the new message.
HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
    }
)  # fmt: skip
_NOT_FORWARDED_UP = HOP_BY_HOP | {"host", "content-length", "accept-encoding"}
_NOT_FORWARDED_DOWN = HOP_BY_HOP | {"content-length"}
# Requests whose response is a generation the router measures (and may mirror).
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


@dataclass(frozen=True)
class RouterConfig:
    max_body_bytes: int = 16 * 1024 * 1024
    connect_timeout_s: float = 10.0
    # Longest silence on an upstream connection: a non-streamed long generation is silent
    # until it is done, so this is generous; streams send a chunk per engine step.
    read_timeout_s: float = 600.0
    shadow_max_in_flight: int = 256
    shadow_timeout_s: float = 600.0
    # In-flight rule: copies waiting for the shadow's room (at most as many as its target,
    # and this many), and how long one may wait before it is dropped.
    shadow_queue: int = QUEUE_LIMIT
    shadow_queue_wait_s: float = QUEUE_WAIT_S
    samples_capacity: int = 100_000
    # Ask the serving pod for continuous usage when the client streams without it (and strip
    # it again) so serving samples count tokens exactly, as shadow ones do.
    exact_serving_usage: bool = True


def openai_error(status: int, message: str, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status)


class Router:
    def __init__(
        self,
        topology: Topology,
        config: RouterConfig | None = None,
        *,
        metrics: RouterMetrics | None = None,
        feed: SampleFeed | None = None,
    ) -> None:
        self.topology = topology
        self.config = config or RouterConfig()
        self.metrics = metrics or RouterMetrics()
        self.feed = SampleFeed(self.config.samples_capacity) if feed is None else feed
        self._serving: aiohttp.ClientSession | None = None
        self._shadow: aiohttp.ClientSession | None = None
        # Each copy's task and its pair (None for ballast): a swap ending the task drops it.
        self._shadow_tasks: dict[asyncio.Task[None], _Pair | None] = {}
        # Ballast in flight, with its flight (``_end_ballast`` counts one off at once).
        self._ballast: dict[asyncio.Task[None], _Flight] = {}
        self._timer: asyncio.TimerHandle | None = None
        # Recent requests as shadow bodies: what a ballast copy replays (Topology.ballast_due).
        self._recent: deque[_Replay] = deque(maxlen=BALLAST_RECENT)
        self._replayed_at = -math.inf
        self._ballast_turn = 0
        self._closing = False
        # The swap this router last ended its shadow copies for (``_end_copies_for_swap``).
        self._copies_ended_for_swap = False
        topology.queue_limit = self.config.shadow_queue
        topology.queue_wait_s = self.config.shadow_queue_wait_s
        self.refresh_gauges()

    # -- lifecycle ---------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/samples", self.samples)
        app.router.add_route("*", "/v1/{tail:.*}", self.proxy)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _app: web.Application) -> None:
        cfg = self.config
        # No pool limit on the serving side: the client's concurrency is the limit.
        self._serving = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s
            ),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )
        self._shadow = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=cfg.shadow_max_in_flight),
            timeout=aiohttp.ClientTimeout(
                total=cfg.shadow_timeout_s, connect=cfg.connect_timeout_s
            ),
            skip_auto_headers=("User-Agent",),
        )

    async def _close(self, _app: web.Application) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._shadow_tasks):
            task.cancel()
        if self._shadow_tasks:
            await asyncio.gather(*self._shadow_tasks, return_exceptions=True)
        for session in (self._serving, self._shadow):
            if session is not None:
                await session.close()

    def refresh_gauges(self) -> None:
        """Publish the pod counts and share after discovery changed them."""
        top = self.topology
        for role, arm in (("serving", top.serving_arm), ("shadow", top.shadow_arm)):
            self.metrics.ready_pods.labels(arm, role).set(len(top.pods[arm]))
            self.metrics.ready_pods.labels(
                "baseline" if arm == "speculative" else "speculative", role
            ).set(0)
        self.metrics.mirror_share.set(top.mirror_share)
        for rule in LOAD_MATCHES:
            self.metrics.load_match.labels(rule).set(1.0 if rule == top.load_match else 0.0)
        self.metrics.routes.clear()
        for domain, arm in top.routes.items():
            self.metrics.routes.labels(domain_label(domain), arm).set(1)

    @property
    def shadow_in_flight(self) -> int:
        return len(self._shadow_tasks)

    # -- own endpoints -----------------------------------------------------------------

    async def health(self, _request: web.Request) -> web.Response:
        top = self.topology
        return web.json_response(
            {
                "status": "ok",
                "mode": top.mode,
                "mirror_share": top.mirror_share,
                "load_match": top.load_match,
                "serving_pods": len(top.pods[top.serving_arm]),
                "shadow_pods": len(top.pods[top.shadow_arm]),
            }
        )

    async def prometheus(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def samples(self, request: web.Request) -> web.Response:
        after = request.query.get("after")
        try:
            limit = int(request.query.get("limit", "1000"))
        except ValueError:
            return openai_error(400, "limit: expected a whole number", "invalid_request_error")
        limit = min(max(limit, 0), 10_000)
        try:
            page = self.feed.read(after, limit)
        except CursorError as exc:
            return openai_error(400, str(exc), "invalid_request_error")
        # The records were encoded when recorded: the page is their join (router._feed).
        return web.Response(body=page.body(), content_type="application/json")

    # -- the proxy ---------------------------------------------------------------------

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        wall = time.time()
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return openai_error(
                413,
                f"request body is larger than {self.config.max_body_bytes} bytes",
                "invalid_request_error",
            )
        path = request.path
        parsed = _json_object(body) if path in GENERATION_PATHS and body else None
        domain = request_domain(parsed, path, request.headers.get(DOMAIN_HEADER))
        upstream_body = body
        stripper: UsageStripper | None = None
        if parsed is not None and parsed.get("stream") is True and self.config.exact_serving_usage:
            upstream_body, stripper = _with_usage(parsed, body)
        headers = _upstream_headers(request.headers)
        top = self.topology
        self._end_copies_for_swap()
        arm = top.arm_for(domain)
        pod = top.pick(arm)
        if pod is None:
            self.metrics.requests.labels(arm, "serving", "no_pod").inc()
            return openai_error(
                502, f"no ready pod of the serving arm ({arm})", "service_unavailable"
            )
        if arm != top.serving_arm:
            self.metrics.routed.labels(domain_label(domain), arm).inc()
        pair = None
        if parsed is not None:
            pair = self._mirror(parsed, path, headers, domain, served_by=arm)
        measured = parsed is not None
        # Tool calls are checked on both arms of a mirrored pair (the guardrail compares
        # them); a request that is not copied has nothing to be compared with.
        tools = ToolCallCheck.for_request(parsed) if pair is not None else None
        # The dict (a second copy of the prompt) is not needed past this point: let it go
        # rather than hold it for the whole generation.
        del parsed
        tried: list[Pod] = []
        while True:
            try:
                return await self._forward(
                    request, pod=pod, body=upstream_body, headers=headers,
                    stripper=stripper, measured=measured, domain=domain,
                    pair=pair, started=started, wall=wall, tools=tools,
                )  # fmt: skip
            except (_PodUnreachableError, _PodRefusedError) as error:
                # Nothing reached the client: try each other ready pod once. A dead pod ends
                # with nothing in flight, so least-busy picking would choose it again; a pod
                # that refused (503: vLLM shutting down, or overloaded) started nothing.
                tried.append(pod)
                next_pod = top.pick(arm, exclude=tried)
                if next_pod is None:
                    status = error.status if isinstance(error, _PodRefusedError) else 502
                    if measured:  # the arm failed this request: the judge counts it
                        of = _SampleOf(pod.arm, "serving", pod.name, domain, 1, pair, wall)
                        self._record(_failed(started, time.perf_counter()), of, status)
                    if isinstance(error, _PodRefusedError):
                        return web.Response(
                            status=error.status, reason=error.reason, headers=error.headers,
                            body=error.body,
                        )  # fmt: skip
                    return openai_error(502, _unreachable(tried, arm), "service_unavailable")
                pod = next_pod

    async def _forward(
        self,
        request: web.Request,
        *,
        pod: Pod,
        body: bytes,
        headers: CIMultiDict[str],
        stripper: UsageStripper | None,
        measured: bool,
        domain: str,
        pair: _Pair | None,
        started: float,
        wall: float,
        tools: ToolCallCheck | None = None,
    ) -> web.StreamResponse:
        assert self._serving is not None
        arm = pod.arm
        top = self.topology
        begun = time.perf_counter()
        top.begin(pod, begun)
        concurrency = pod.in_flight
        gauge = self.metrics.in_flight.labels(arm, "serving")
        gauge.inc()
        result = _Outcome()
        sample_of = _SampleOf(arm, "serving", pod.name, domain, concurrency, pair, wall)
        # A serving request more raises the shadow's target: a queued copy may go now.
        self._release()
        try:
            url = pod.url + request.raw_path
            try:
                upstream = await self._serving.request(
                    request.method, url, data=body, headers=headers, allow_redirects=False
                )
            except aiohttp.ClientConnectorError as exc:
                log.warning("serving pod %s unreachable: %s", pod.name, type(exc).__name__)
                raise _PodUnreachableError from exc
            except TimeoutError:
                result.value = "timeout"
                if measured:
                    self._record(_failed(started, time.perf_counter()), sample_of, 504)
                return openai_error(504, f"serving pod {pod.name} timed out", "timeout")
            except aiohttp.ClientError as exc:
                log.warning("serving pod %s failed: %s", pod.name, type(exc).__name__)
                if measured:
                    self._record(_failed(started, time.perf_counter()), sample_of, 502)
                return openai_error(502, f"serving pod {pod.name} failed", "upstream_error")
            if upstream.status == 503 or await _drain_refusal(upstream):
                # Refused before anything started: a pod being removed may get a request
                # before the router sees it go (vLLM 0.32 draining answers 500 "cannot
                # schedule new futures after shutdown"; 503 from other servers and releases).
                try:
                    body = await _bounded_read(upstream) if upstream.status == 503 else (
                        await upstream.read())  # fmt: skip
                finally:
                    upstream.close()
                result.value = "refused"
                raise _PodRefusedError(
                    upstream.status, upstream.reason, _downstream_headers(upstream), body
                )
            try:
                if _is_event_stream(upstream.headers):
                    return await self._relay_stream(
                        request, upstream, result, stripper=stripper, measured=measured,
                        sample_of=sample_of, started=started, tools=tools,
                    )  # fmt: skip
                return await self._relay_body(
                    upstream, result, measured, sample_of, started, tools=tools
                )
            finally:
                upstream.close()
        except asyncio.CancelledError:
            if not result.completed:
                result.value = "client_closed"
            raise
        finally:
            ended = time.perf_counter()
            top.end(pod, ended, ended - begun if result.completed else None)
            gauge.dec()
            self.metrics.requests.labels(arm, "serving", result.value).inc()

    async def _relay_stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        result: _Outcome,
        *,
        stripper: UsageStripper | None,
        measured: bool,
        sample_of: _SampleOf,
        started: float,
        tools: ToolCallCheck | None = None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=_downstream_headers(upstream)
        )
        try:
            await response.prepare(request)
        except ConnectionResetError:
            # The client left while the router waited for the pod's answer, and its
            # connection closed before the handler was cancelled. Not a fault of the router
            # or the pod (INFO, no traceback); counted as client_closed, not recorded.
            result.value = "client_closed"
            log.info(
                "client closed its connection before the response headers (serving pod %s, "
                "%.1f s after the request)", sample_of.pod, time.perf_counter() - started,
            )  # fmt: skip
            return response
        meter = StreamMeter(started, tools) if measured else None
        clock = time.perf_counter
        # Every byte of the upstream's stream has been handed to the client's connection:
        # its whole body, or (measured) everything up to and including ``data: [DONE]``.
        # A client that closes after that (guidellm closes right after [DONE]) completed
        # its request; only the end-of-body marker or the upstream's own close is left.
        delivered = False
        # When the last bytes were handed to the client's connection: the response ends
        # there for the client, who may send its next request at once, while this task may
        # resume only much later on a busy event loop (the sample's end must not come after
        # that next request's start: judge.client_loop reads the order).
        handed = clock()
        try:
            if stripper is not None:
                # The stripper frames and parses each event once and feeds the meter.
                stripper.attach(meter)
                async for data in upstream.content.iter_any():
                    out = stripper.feed(data, clock())
                    if out:
                        handed = clock()
                        await response.write(out)
                        delivered = meter is not None and meter.done
                rest = stripper.finish(clock())
                if rest:
                    handed = clock()
                    await response.write(rest)
            else:
                async for data in upstream.content.iter_any():
                    now = handed = clock()
                    await response.write(data)
                    if meter is not None:
                        meter.feed(data, now)
                        delivered = meter.done
            delivered = True
            await response.write_eof()
        except ConnectionResetError:
            if not delivered:
                # The client went away: stop reading (closing upstream cancels generation).
                result.value = "client_closed"
                return response
        except asyncio.CancelledError:
            # The client's close cancelled the handler; after the last byte it is complete.
            if delivered:
                self._complete(result, meter, sample_of, upstream.status, handed)
            raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            # The upstream broke mid-stream: record it, and cut the client's stream too
            # rather than end it cleanly, as a direct connection would have been cut.
            log.warning("serving stream broke: %s", type(exc).__name__)
            if meter is not None:
                self._record(meter.finish(clock()), sample_of, 502)
            if request.transport is not None:
                request.transport.close()
            result.value = "upstream_error"
            return response
        self._complete(result, meter, sample_of, upstream.status, handed)
        return response

    def _complete(
        self,
        result: _Outcome,
        meter: StreamMeter | None,
        sample_of: _SampleOf,
        status: int,
        now: float,
    ) -> None:
        if meter is not None:
            self._record(meter.finish(now), sample_of, status)
        result.value = str(status)
        result.completed = True

    async def _relay_body(
        self,
        upstream: aiohttp.ClientResponse,
        result: _Outcome,
        measured: bool,
        sample_of: _SampleOf,
        started: float,
        *,
        tools: ToolCallCheck | None = None,
    ) -> web.StreamResponse:
        data = await upstream.read()
        if measured:
            self._record(
                measure_json(data, started, time.perf_counter(), tools),
                sample_of,
                upstream.status,
            )
        result.value = str(upstream.status)
        result.completed = True
        return web.Response(
            body=data,
            status=upstream.status,
            reason=upstream.reason,
            headers=_downstream_headers(upstream),
        )

    def _record(self, measured: Measured, of: _SampleOf | None, status: int) -> None:
        if of is None:  # ballast: never a sample
            return
        sample = to_sample(
            measured,
            arm=of.arm,
            role=of.role,
            pod=of.pod,
            domain=of.domain,
            concurrency=of.concurrency,
            status=status,
            pair_id=None if of.pair is None or of.pair.dropped else of.pair.id,
            started_at=of.wall,
        )
        if of.role == "shadow" and of.pair is not None:
            of.pair.copied = True
        if len(self.feed) == self.config.samples_capacity:
            self.metrics.samples_evicted.inc()
        self.feed.add(sample)
        self.metrics.observe(sample)
        if sample.tool_call is not None:
            self.metrics.tool_calls.labels(sample.arm, sample.role, sample.tool_call).inc()

    # -- mirroring ---------------------------------------------------------------------

    def _mirror(
        self,
        parsed: dict[str, Any],
        path: str,
        headers: CIMultiDict[str],
        domain: str,
        served_by: Arm | None = None,
    ) -> _Pair | None:
        """Copy the request to the other arm than ``served_by`` (default the serving arm: the
        shadow) if ``Topology.mirror_decision`` says so, now or once the shadow has room
        (queued: ``_release`` sends it); its pair, or None."""
        top = self.topology
        served = top.serving_arm if served_by is None else served_by
        now = time.perf_counter()
        while self._ballast and top.load_match == "in_flight" and served == top.serving_arm and (
            not top.shadow_has_room(served, routing=1)
        ):
            if not self._end_ballast(now):  # the room ballast holds goes to the real copy
                break
        decision = top.mirror_decision(served, now)
        if decision == "share":
            return None
        if decision == "defer":
            self.metrics.mirror_deferred.inc()
            return None
        if decision == "drain":  # by arrivals, the shadow's earlier copies must end first
            self.metrics.mirror_dropped.labels(decision).inc()
            return None
        copy = _Copy(_Pair(uuid.uuid4().hex), served, parsed, path, headers, domain)
        ballast_may_be_due = top.load_match == "in_flight" and top.mirror_share >= 1.0
        if served == top.serving_arm and ballast_may_be_due and now - self._replayed_at >= (
            REPLAY_EVERY_S
        ):
            body = json.dumps(_shadow_body(parsed)).encode()
            self._recent.append(_Replay(served, body, path, headers))
            self._replayed_at = now
        if decision == "queue":
            top.enqueue(copy, served, now)
            self.metrics.mirror_queued.inc()
            self.metrics.mirror_queue.set(top.queued)
            self._schedule(now)
            return copy.pair
        return copy.pair if self._send(copy) else None

    def _send(self, copy: _Copy | _Replay) -> bool:
        """Start the copy's shadow task (fire and forget); False when it was dropped (the
        copy budget is full, or no pod of its arm is ready). A ``_Replay`` is ballast: it
        only holds the shadow's in-flight count (``Topology.ballast_due``): no sample, no
        pair, no drop counted."""
        top = self.topology
        ballast = isinstance(copy, _Replay)
        arm = other_arm(copy.served_by)
        if self.shadow_in_flight >= self.config.shadow_max_in_flight:
            if isinstance(copy, _Replay):
                return False
            self.metrics.mirror_dropped.labels("budget").inc()
            top.budget_full()
            copy.pair.dropped = True
            return False
        pod = top.pick(arm)
        if pod is None:
            if isinstance(copy, _Replay):
                return False
            self.metrics.mirror_dropped.labels("no_pod").inc()
            copy.pair.dropped = True
            return False
        # Counted now, not when the task first runs: the next request's room check (maybe
        # before this task starts) must see this copy.
        begun = time.perf_counter()
        top.begin(pod, begun)
        gauge = self.metrics.in_flight.labels(pod.arm, "shadow")
        gauge.inc()
        sample_of = None if isinstance(copy, _Replay) else _SampleOf(
            pod.arm, "shadow", pod.name, copy.domain, pod.in_flight, copy.pair, time.time()
        )
        flight = _Flight(pod, begun)
        task = asyncio.get_running_loop().create_task(
            self._shadow_request(copy, flight, of=sample_of)
        )
        self._shadow_tasks[task] = None if isinstance(copy, _Replay) else copy.pair
        if isinstance(copy, _Replay):
            self._ballast[task] = flight

        def done(task: asyncio.Task[None]) -> None:
            self._shadow_tasks.pop(task, None)
            self._ballast.pop(task, None)
            self._land(flight, None)  # a task cancelled before it ran
            gauge.dec()

        task.add_done_callback(done)
        (self.metrics.mirror_ballast if ballast else self.metrics.mirrored.labels(arm)).inc()
        return True

    def _end_ballast(self, now: float) -> bool:
        """A real copy is due and the shadow has no room: end the ballast copy started last
        and count it off its pod at once (False: none was in flight); the caller repeats
        until the copy can be sent now in their place. Ballast only holds the shadow at the
        serving pods' count where real copies cannot; it must never keep a real copy
        waiting — behind ballast, copies arriving together (a closed loop's streams
        answered in one engine step) queued, and past the queue's limit the next
        requests' turns passed uncopied: at 192 aiperf streams with the drafter serving, 1,085
        of 1,086 requests are judged in pairs, where 577 of 1,079 were (597 turns passed
        while 1,111 ballast copies ran; bench/serving_swap_aiperf.py). The youngest goes: it
        has done the least work. Its upstream request ends as a client's that left (vLLM
        aborts it); it is no sample. The count comes off at once, not when the task runs:
        requests arriving in one tick each see the room their copy takes."""
        for task, flight in reversed(self._ballast.items()):
            if flight.ended:
                continue
            flight.ended = True
            self.topology.end(flight.pod, now, None)
            task.cancel()
            self.metrics.mirror_ballast_ended.inc()
            return True
        return False

    def _end_copies_for_swap(self) -> None:
        """At a swap's first request, end the shadow copies still in flight (each ends its
        upstream request: vLLM aborts a request whose client left). Nothing judges a copy
        during a swap, and the clients are then answered from both arms' pods: a shadow
        pod still busy with copies — by the in-flight rule as many as the serving pods hold,
        thousands behind a drafter that ran away — would make them wait behind work no one
        reads, just when the arm they are moving to should take them. An ended copy's pair
        is dropped, as for a copy never sent: its serving half, if still running, is then
        recorded unpaired rather than held by the window source for a half that never
        comes (unless the copy's own sample was recorded already). Checked on the event
        loop at each request (discovery may change the roles from a thread)."""
        if not self.topology.swapping:
            self._copies_ended_for_swap = False
            return
        if self._copies_ended_for_swap:
            return
        self._copies_ended_for_swap = True
        ending = list(self._shadow_tasks.items())
        for task, pair in ending:
            if pair is not None and not pair.copied:
                pair.dropped = True
            task.cancel()
        if ending:
            log.info("swap: ended %d shadow copies in flight (nothing judges them now)",
                     len(ending))  # fmt: skip

    def _land(self, flight: _Flight, took: float | None) -> None:
        """A copy's request is over (once): count it off its pod at once, not a loop turn
        later in the task's done callback (on a busy loop the count would run ahead of what
        the pod holds), and send a queued copy if that made room."""
        if flight.ended:
            return
        flight.ended = True
        self.topology.end(flight.pod, time.perf_counter(), took)
        self._release()

    def _release(self) -> None:
        """Send the queued copies the shadow now has room for (``Topology.take_copy``),
        count the ones dropped on the way, and wake up again when time alone may open room
        or end a copy's wait."""
        top = self.topology
        if top.queued:
            now = time.perf_counter()
            while True:
                copy, dropped = top.take_copy(now)
                for pending, reason in dropped:
                    assert isinstance(pending.payload, _Copy)
                    pending.payload.pair.dropped = True
                    self.metrics.mirror_dropped.labels(reason).inc()
                if copy is None:
                    break
                assert isinstance(copy.payload, _Copy)
                self._send(copy.payload)
            self.metrics.mirror_queue.set(top.queued)
            self._schedule(now)
        # Real copies first; then ballast while a faster shadow has room they cannot fill.
        while not self._closing and self._recent and top.ballast_due(time.perf_counter()):
            self._ballast_turn += 1
            replay = self._recent[self._ballast_turn % len(self._recent)]
            if replay.served_by != top.serving_arm:  # kept before a swap: for the other arm
                self._recent.clear()
                break
            if not self._send(replay):
                break

    def _schedule(self, now: float) -> None:
        """(Re)arm the one timer that calls ``_release`` at ``Topology.next_check``."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        when = self.topology.next_check(now)
        if when is not None and not self._closing:
            # A millisecond late: the wait has then surely run out, the deficit reached 0.
            delay = max(when - now, 0.0) + 0.001
            self._timer = asyncio.get_running_loop().call_later(delay, self._release)

    async def _shadow_request(
        self, copy: _Copy | _Replay, flight: _Flight, *, of: _SampleOf | None
    ) -> None:
        """One shadow copy (``of``: the sample it becomes, None for ballast; the pod's
        in-flight count was raised by ``_send`` and is lowered when the request ends, however
        it ends)."""
        assert self._shadow is not None
        pod = flight.pod
        started = time.perf_counter()
        # Counted from _send, at the pod only from now: the time-average takes the gap back.
        self.topology.arrived(pod, flight.begun, started)
        took: float | None = None
        sample_of = None if of is None else replace(of, wall=time.time())
        outcome = "upstream_error"
        if isinstance(copy, _Replay):
            body, tools = copy.body, None
        else:
            body = json.dumps(_shadow_body(copy.parsed)).encode()
            tools = ToolCallCheck.for_request(copy.parsed)
        path, headers = copy.path, copy.headers
        # The bytes are all the copy needs: do not keep the prompt twice until it ends.
        del copy
        shadow_headers = CIMultiDict(headers)
        shadow_headers["Content-Type"] = "application/json"
        clock = time.perf_counter
        try:
            async with self._shadow.post(
                pod.url + path, data=body, headers=shadow_headers
            ) as upstream:
                meter = StreamMeter(started, tools)
                if _is_event_stream(upstream.headers):
                    async for data in upstream.content.iter_any():
                        meter.feed(data, clock())
                    measured = meter.finish(clock())
                else:
                    measured = measure_json(await upstream.read(), started, clock(), tools)
                outcome = str(upstream.status)
                self._record(measured, sample_of, upstream.status)
                if 200 <= upstream.status < 300:
                    took = measured.e2e_s
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except TimeoutError:
            outcome = "timeout"
            self._record(_failed(started, clock()), sample_of, 504)
        except aiohttp.ClientError as exc:
            log.info("shadow pod %s failed: %s", pod.name, type(exc).__name__)
            self._record(_failed(started, clock()), sample_of, 502)
        except Exception:  # the shadow must never take the router down
            log.exception("shadow request failed")
        finally:
            self.metrics.requests.labels(pod.arm, "shadow", outcome).inc()
            self._land(flight, took)


@dataclass(frozen=True, slots=True)
class _SampleOf:
    arm: Arm
    role: Role
    pod: str
    domain: str
    concurrency: int
    pair: _Pair | None
    wall: float


@dataclass(slots=True)
class _Pair:
    """The pair id both halves of a mirrored request carry. ``dropped``: the copy was never
    sent (it waited too long, or the roles changed) or a swap ended it before its sample
    was recorded, so the serving half, if it has not ended yet, is recorded without it.
    ``copied``: the copy's sample is recorded (with the id: ending its task then drops
    nothing)."""

    id: str
    dropped: bool = False
    copied: bool = False


@dataclass(slots=True)
class _Flight:
    """A copy counted on ``pod`` since ``begun`` (perf_counter), until ``ended``."""

    pod: Pod
    begun: float
    ended: bool = False


@dataclass(slots=True)
class _Copy:
    """A request to copy to the arm other than ``served_by``: what the shadow task needs."""

    pair: _Pair
    served_by: Arm
    parsed: dict[str, Any]
    path: str
    headers: CIMultiDict[str]
    domain: str


@dataclass(frozen=True, slots=True)
class _Replay:
    """A recent request as the shadow gets it, kept for ballast (``Topology.ballast_due``)."""

    served_by: Arm
    body: bytes
    path: str
    headers: CIMultiDict[str]


class _Outcome:
    """How a serving request ended, as counted in ``specguard_router_requests_total``."""

    __slots__ = ("completed", "value")

    def __init__(self) -> None:
        self.value = "upstream_error"
        # The response was complete (and recorded): a cancellation after it is no failure.
        self.completed = False


class _PodUnreachableError(Exception):
    pass


class _PodRefusedError(Exception):
    """A serving pod answered 503 before starting the request; another pod may take it.
    Carries the response as it was, for the client when no pod is left to try."""

    def __init__(
        self, status: int, reason: str | None, headers: CIMultiDict[str], body: bytes
    ) -> None:
        super().__init__(status)
        self.status, self.reason, self.headers, self.body = status, reason, headers, body


# vLLM 0.32.0's answer to a request that reaches it while it drains (--shutdown-timeout):
# 500, InternalServerError, this message (recorded on the real server, tests/realvllm).
DRAIN_REFUSAL = b"cannot schedule new futures after shutdown"


async def _drain_refusal(upstream: aiohttp.ClientResponse) -> bool:
    """A 500 JSON error that is vLLM's drain refusal. The body read here stays cached on the
    response (aiohttp), so a 500 that is not one is relayed whole afterwards."""
    if upstream.status != 500 or _is_event_stream(upstream.headers):
        return False
    try:
        return DRAIN_REFUSAL in await upstream.read()
    except aiohttp.ClientError:
        return False


async def _bounded_read(upstream: aiohttp.ClientResponse, limit: int = 64 * 1024) -> bytes:
    """An error body, at most ``limit`` bytes (a refusal is a small JSON object)."""
    chunks: list[bytes] = []
    size = 0
    try:
        while size < limit:
            chunk = await upstream.content.read(limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except aiohttp.ClientError:
        pass
    return b"".join(chunks)


def _unreachable(tried: list[Pod], arm: Arm) -> str:
    if len(tried) == 1:
        return f"serving pod {tried[0].name} is unreachable"
    return f"all {len(tried)} serving pods of the {arm} arm are unreachable"


def _failed(started: float, now: float) -> Measured:
    return Measured(
        started_at=started,
        e2e_s=max(now - started, 0.0),
        ttft_s=None,
        output_tokens=0,
        tpot_s=None,
        chunk_tpot_s=None,
        measurement="stream_chunks",
        prompt_tokens=None,
        usage_seen=False,
        token_chunks=0,
        complete=False,
        error_seen=False,
    )


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _with_usage(parsed: dict[str, Any], body: bytes) -> tuple[bytes, UsageStripper | None]:
    """The upstream body asking for continuous usage, and the stripper that undoes it."""
    options = parsed.get("stream_options")
    options = options if isinstance(options, dict) else {}
    if options.get("continuous_usage_stats") is True:
        return body, None  # the client asked for everything itself
    asked_total = options.get("include_usage") is True
    changed = dict(parsed)
    changed["stream_options"] = {**options, "include_usage": True, "continuous_usage_stats": True}
    return json.dumps(changed).encode(), UsageStripper(keep_final=asked_total)


def _shadow_body(parsed: Mapping[str, Any]) -> dict[str, Any]:
    """The shadow copy always streams with continuous usage: exact per-token timing."""
    body = dict(parsed)
    options = body.get("stream_options")
    options = dict(options) if isinstance(options, dict) else {}
    options.update(include_usage=True, continuous_usage_stats=True)
    body["stream"] = True
    body["stream_options"] = options
    return body


def _upstream_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    connection_named = _connection_tokens(headers)
    for name, value in headers.items():
        lower = name.lower()
        if lower in _NOT_FORWARDED_UP or lower in connection_named:
            continue
        out.add(name, value)
    # The router reads the stream to measure it: ask for it uncompressed.
    out["Accept-Encoding"] = "identity"
    return out


def _downstream_headers(upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    connection_named = _connection_tokens(upstream.headers)
    for name, value in upstream.headers.items():
        lower = name.lower()
        if lower in _NOT_FORWARDED_DOWN or lower in connection_named:
            continue
        out.add(name, value)
    return out


def _connection_tokens(headers: Mapping[str, str]) -> frozenset[str]:
    value = headers.get("Connection")
    if not value:
        return frozenset()
    return frozenset(token.strip().lower() for token in value.split(","))


def _is_event_stream(headers: Mapping[str, str]) -> bool:
    return headers.get("Content-Type", "").startswith("text/event-stream")
