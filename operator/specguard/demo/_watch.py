"""What the demo watches while the schedule runs: the resource's status (mode, swap, each
window's verdict), its Events as they are posted, every vLLM pod's running requests, and the
routers' sample feed (both halves of every mirrored request), plus the live status line.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from specguard._objects import router_urls
from specguard._times import parse_time
from specguard.api import constants as c
from specguard.demo._stage import vllm_pods
from specguard.judge import Sample
from specguard.sources import RouterFeed, parse_reading
from specguard_testkit import LocalCluster


@dataclass(frozen=True, slots=True)
class Snapshot:
    t: float
    mode: str
    target: str
    swapping: bool
    share: float | None
    load_match: str = "in_flight"  # status.arms.loadMatch: how the routers copy
    clients: str = ""  # status.clients.loop: closed, open or unknown ("" before any)


@dataclass(frozen=True, slots=True)
class VerdictMark:
    end: float  # epoch seconds: the window's end
    outcome: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    concurrency: Mapping[str, float | None]
    reason: str


@dataclass(frozen=True, slots=True)
class EventRecord:
    t: float  # when the demo saw it
    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PodLoad:
    t: float
    pod: str
    arm: str
    running: float
    waiting: float


@dataclass(frozen=True, slots=True)
class TransitionRecord:
    t: float
    from_mode: str
    to_mode: str
    reason: str
    message: str


def pct(ratio: float | None) -> str:
    """1.31 → '+31%', 0.45 → '−55%'."""
    if ratio is None or not math.isfinite(ratio):
        return "?"
    change = (ratio - 1.0) * 100.0
    sign = "+" if change >= 0 else "−"
    return f"{sign}{abs(change):.0f}%"


def verdict_text(v: VerdictMark | None) -> str:
    if v is None:
        return "no verdict yet"
    if v.ratio is None or v.ci_low is None or v.ci_high is None:
        reason = v.reason if len(v.reason) <= 48 else v.reason[:47] + "…"
        return f"{v.outcome} ({reason})" if reason else v.outcome
    return f"{v.outcome} {pct(v.ratio)} (CI {pct(v.ci_low)}..{pct(v.ci_high)})"


@dataclass
class Monitor:
    """Polls the cluster while the schedule runs; everything seen is kept for the end."""

    cluster: LocalCluster
    namespace: str
    name: str
    port: int
    on_event: Callable[[EventRecord], None]
    snapshots: list[Snapshot] = field(default_factory=list)
    verdicts: dict[float, VerdictMark] = field(default_factory=dict)
    events: list[EventRecord] = field(default_factory=list)
    transitions: list[TransitionRecord] = field(default_factory=list)
    loads: list[PodLoad] = field(default_factory=list)
    samples: dict[str, Sample] = field(default_factory=dict)
    feed_failures: int = 0
    _seen_events: set[str] = field(default_factory=set)
    _latest_load: dict[str, PodLoad] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event) -> None:
        async with (
            self.cluster.access.async_client(timeout=10) as api,
            httpx.AsyncClient(timeout=5) as http,
        ):
            feed = RouterFeed(client=http)
            loops = [
                self._every(1.0, stop, lambda: self._status(api)),
                self._every(1.0, stop, lambda: self._events(api)),
                self._every(2.0, stop, lambda: self._pods(api, http, feed)),
            ]
            await asyncio.gather(*loops)
            # The last requests' samples: one more read after the traffic stopped.
            with contextlib.suppress(httpx.HTTPError):
                await self._pods(api, http, feed)
            await self._events(api)

    async def _every(self, period: float, stop: asyncio.Event, what: Callable[[], Any]) -> None:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                await what()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period)

    # -- the resource --------------------------------------------------------------------

    async def _status(self, api: httpx.AsyncClient) -> None:
        path = f"/apis/{c.API_VERSION}/namespaces/{self.namespace}/{c.PLURAL}/{self.name}"
        response = await api.get(path)
        response.raise_for_status()
        status = response.json().get("status") or {}
        now = _now()
        arms = status.get("arms") or {}
        mode = str(status.get("mode") or c.ARM_SPECULATIVE)
        self.snapshots.append(
            Snapshot(
                now,
                mode,
                str(status.get("targetMode") or mode),
                bool(arms.get("swapping")),
                arms.get("mirrorShare"),
                str(arms.get("loadMatch") or "in_flight"),
                str((status.get("clients") or {}).get("loop") or ""),
            )
        )
        verdict = status.get("lastVerdict") or {}
        end = parse_time(verdict.get("windowEnd"))
        if end is not None and end not in self.verdicts:
            self.verdicts[end] = VerdictMark(
                end,
                str(verdict.get("outcome")),
                verdict.get("ratio"),
                verdict.get("ciLower"),
                verdict.get("ciUpper"),
                dict(verdict.get("concurrency") or {}),
                str(verdict.get("reason") or ""),
            )
        for item in status.get("transitions") or []:
            t = parse_time(item.get("time"))
            if t is None or any(x.t == t and x.to_mode == item.get("to") for x in self.transitions):
                continue
            self.transitions.append(
                TransitionRecord(
                    t,
                    str(item.get("from")),
                    str(item.get("to")),
                    str(item.get("reason")),
                    str(item.get("message") or ""),
                )
            )

    async def _events(self, api: httpx.AsyncClient) -> None:
        response = await api.get(
            f"/api/v1/namespaces/{self.namespace}/events",
            params={
                "fieldSelector": f"involvedObject.name={self.name},involvedObject.kind={c.KIND}"
            },
        )
        response.raise_for_status()
        items = response.json().get("items") or []
        items.sort(
            key=lambda e: (
                e.get("lastTimestamp") or e.get("eventTime") or "",
                e["metadata"].get("resourceVersion", ""),
            )
        )
        for item in items:
            key = f"{item['metadata']['uid']}/{item.get('count', 1)}"
            if key in self._seen_events:
                continue
            self._seen_events.add(key)
            record = EventRecord(
                _now(),
                str(item.get("type")),
                str(item.get("reason")),
                str(item.get("message") or ""),
            )
            self.events.append(record)
            self.on_event(record)

    # -- pods and the feed ---------------------------------------------------------------

    async def _pods(
        self, api: httpx.AsyncClient, http: httpx.AsyncClient, feed: RouterFeed
    ) -> None:
        response = await api.get(f"/api/v1/namespaces/{self.namespace}/pods")
        response.raise_for_status()
        pods = response.json().get("items") or []
        feed.set_urls(router_urls(self.name, pods) or feed.urls)
        vllm = vllm_pods(self.name, pods, self.port)
        scraped, read = await asyncio.gather(
            asyncio.gather(*(self._scrape(http, *pod) for pod in vllm)), feed.poll()
        )
        self._latest_load = {load.pod: load for load in scraped if load is not None}
        self.loads.extend(self._latest_load.values())
        for key, sample in zip(read.ids, read.samples, strict=True):
            self.samples.setdefault(key, sample)
        self.feed_failures += len(read.failed)

    async def _scrape(
        self, http: httpx.AsyncClient, pod: str, arm: str, url: str
    ) -> PodLoad | None:
        try:
            response = await http.get(f"{url}/metrics")
            reading = parse_reading(response.text)
        except (httpx.HTTPError, ValueError):
            return None
        return PodLoad(_now(), pod, arm, reading.running or 0.0, reading.waiting or 0.0)

    # -- the live line -------------------------------------------------------------------

    def latest(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else None

    def last_verdict(self) -> VerdictMark | None:
        return self.verdicts[max(self.verdicts)] if self.verdicts else None

    def pod_concurrency(self) -> str:
        by_arm: dict[str, list[str]] = {}
        for load in sorted(self._latest_load.values(), key=lambda x: x.pod):
            by_arm.setdefault(load.arm, []).append(f"{load.running + load.waiting:.0f}")
        parts = [
            f"{'drafter' if arm == c.ARM_SPECULATIVE else 'baseline'} {' '.join(v)}"
            for arm, v in sorted(by_arm.items(), reverse=True)
        ]
        return ", ".join(parts) or "no pod answers yet"

    def mode_text(self) -> str:
        snap = self.latest()
        if snap is None:
            return "mode ?"
        if snap.swapping or snap.target != snap.mode:
            return f"mode {snap.mode} → {snap.target} (swapping)"
        share = "" if snap.share is None else f", mirror {snap.share:.2f}"
        rule = ", by arrivals" if snap.load_match == "arrivals" else ""
        return f"mode {snap.mode}{share}{rule}"


def _now() -> float:
    return time.time()


__all__ = [
    "EventRecord",
    "Monitor",
    "PodLoad",
    "Snapshot",
    "TransitionRecord",
    "VerdictMark",
    "pct",
    "verdict_text",
]
