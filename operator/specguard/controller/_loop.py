"""One SpeculativeDeployment's loop: the I/O shell around the decision core (``_decide``).

``ResourceLoop.tick`` runs every ``TICK_S`` (all that the resource's task in _handlers.py
does):

1. the resource: parsed again when its generation changes (an invalid spec gets SpecValid
   False and one Event per generation, nothing else);
2. the cluster: what the watch caches (kopf indexes) hold — no API request;
3. the window: while windows are judged, when one ends, the source's samples and the
   drafter pods' counters (HTTP to the routers and pods, never to the API server);
4. :func:`~specguard.controller._decide.decide` — pure: target, swap plan, status, Events;
5. the owned objects that differ from what the decision wants (missing, scaled, edited),
   by server-side apply, with a doubling wait after a refusal (``Applier``);
6. the status where it differs (one merge patch, ``StatusWriter``), the Events, metrics.

So an idle resource makes no API request at all: it writes only when an object must
change, a swap steps, or the status differs from the stored one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from specguard._objects import arm_of, lookup, router_urls, vllm_urls
from specguard._times import parse_time, rfc3339
from specguard.api import (
    DrafterRung,
    Spec,
    SpecError,
    SpeculativeDeployment,
    Status,
    parse_resource,
)
from specguard.api import constants as c
from specguard.controller._clients import SETTINGS as CLIENTS
from specguard.controller._clients import SETTLE_S, rule_in_force, settled_after
from specguard.controller._decide import (
    Disturbance,
    EventSpec,
    Observation,
    Outcome,
    Window,
    decide,
    invalid_status,
    judging,
    paused,
    pods_changed,
)
from specguard.controller._kube import KubeError
from specguard.controller._metrics import OperatorMetrics
from specguard.controller._observe import drafter_startup, observe_arms
from specguard.controller._rungs import rolled_out
from specguard.controller._settings import judge_settings
from specguard.controller._swap import ArmObserved
from specguard.judge import (
    ArmLoad,
    JudgeSettings,
    Level,
    LevelPairs,
    LoadMatch,
    LoopEvidence,
    Sample,
    client_loop_over,
)
from specguard.render import render_all, vllm_args
from specguard.sources import (
    Reading,
    ScrapeSource,
    Source,
    Targets,
    WindowSamples,
    arm_load,
    draft_counters,
    open_source,
)

log = logging.getLogger("specguard.controller")

TICK_S = 1.0
APPLY_BACKOFF_S = (1.0, 300.0)  # after a refused apply: first wait, longest wait (doubling)


class KubeWrites(Protocol):
    """The API requests the loop makes (``_kube.Kube``; a fake in the unit tests)."""

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None: ...

    async def event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None: ...


OpenSource = Callable[[SpeculativeDeployment], Source]
# The vLLM pods' /metrics now, per arm (arm → pod URL → Reading; pods that answer).
Readings = Mapping[c.Arm, Mapping[str, Reading]]
ReadCounters = Callable[[Mapping[c.Arm, Sequence[str]]], Awaitable[Readings]]


@dataclass
class Observed:
    """The cluster as the watch caches show it, for one resource."""

    deployments: list[Mapping[str, Any]] = field(default_factory=list)
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    services: list[Mapping[str, Any]] = field(default_factory=list)


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) from ``old`` to ``new``: changed keys, null for
    removed ones, at every depth. A merge patch merges objects key by key, so a key that
    ``new`` lacks inside an object it changes (an inconclusive verdict has no ``ratio``)
    must be sent as null, or the stored object keeps the old value. Lists are replaced."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            inner = status_patch(before, value)
            if inner:
                patch[key] = inner
        elif key not in old or before != value:
            patch[key] = value
    patch.update({k: None for k in old if k not in new})
    return patch


async def read_pods(urls: Mapping[c.Arm, Sequence[str]]) -> Readings:
    """The vLLM pods' counters and gauges now: the drafter arm's spec-decode counters, both
    arms' requests running and waiting (arm → pod URL → reading; pods that answer)."""
    if not any(urls.values()):
        return {}
    async with ScrapeSource({arm: list(u) for arm, u in urls.items()}) as scrape:
        reading = await scrape.read()
    return {arm: dict(reading.readings.get(arm, {})) for arm in urls}


def _settled(window: WindowSamples, cutoff: float | None, rule: LoadMatch) -> WindowSamples:
    """``window`` without the requests that started before ``cutoff`` (the routers may still
    have copied them by the previous load match), saying how many were left out."""
    why = f"the load match turned to {rule} (and {SETTLE_S:g}s for the routers to see it)"
    return _started_from(window, cutoff, why)


def _after_disturbance(
    window: WindowSamples, disturbed: Disturbance | None, start: float
) -> WindowSamples:
    """``window`` without the requests that started at or before the last disturbance, when
    it came before the window opened or at the tick it opened (the first window after a
    swap, an operator restart or a change in the pods; a window restarted at a change in
    the pods): the requests that started after it are judged, so the window counts on them
    (``window_spans``) instead of being thrown away whole for the second or so of requests
    still in flight from before. With none left, it still spans the disturbance."""
    if disturbed is None or disturbed.at > start:
        return window
    return _started_from(window, math.nextafter(disturbed.at, math.inf),
                         f"{disturbed.what} ended")  # fmt: skip


def _started_from(window: WindowSamples, cutoff: float | None, why: str) -> WindowSamples:
    """``window`` without the requests that started before ``cutoff``, and a note of how
    many were left out (``why``: what they started before)."""
    if cutoff is None:
        return window
    # A pair goes with its earlier half (the serving one starts before its copy).
    early = {s.pair_id for s in window.samples if s.started_at < cutoff and s.pair_id}
    kept = tuple(s for s in window.samples if s.started_at >= cutoff and s.pair_id not in early)
    if len(kept) == len(window.samples):
        return window
    note = f"{len(window.samples) - len(kept)} requests that started before {why} are left out"
    return replace(window, samples=kept, notes=(*window.notes, note))


def _load_rule(spec: Spec, prev: Status, start: float) -> LoadMatch:
    """The rule the engines' load since ``start`` speaks for (``ArmLoad.rule``): the rule in
    force when it held, and the routers had seen it, from ``start`` on, and no routes by
    domain split the arms' arrivals; else ``in_flight`` (the overload guardrail then reads
    what the engines finished, not their counts alone)."""
    cutoff = settled_after(prev)
    if (cutoff is not None and cutoff > start) or _split(prev):
        return "in_flight"
    return rule_in_force(spec, prev)


def _split(prev: Status) -> bool:
    """Routes by domain give the arms different traffic (``ArmLoad.split``)."""
    return bool(prev.arms and prev.arms.routes)


def _disturbed_since(disturbed: Disturbance | None, start: float | None) -> bool:
    """Was the last disturbance seen after the window opened at ``start``? One seen at the
    tick it opened is before it: the pods' counters at the start were read after it."""
    return disturbed is not None and start is not None and disturbed.at > start


def source_for(sd: SpeculativeDeployment) -> Source:
    source = sd.spec.metrics_source
    return open_source(source.type, deployment=sd.metadata.name,
                       namespace=sd.metadata.namespace or "default",
                       prometheus_url=source.prometheus_url)  # fmt: skip


_NONE = object()
# What the owned objects are rendered from besides the spec: the replicas, the drafter rung.
_RenderKey = tuple[tuple[tuple[str, int], ...], DrafterRung]


@dataclass
class _Resource:
    """The parsed resource of one generation, and what belongs to it."""

    sd: SpeculativeDeployment
    generation: int | None
    source: Source
    window_start: float | None = None
    readings_at_start: Readings | None = None
    # While a disturbance's restarts run: when the window the first one cut short had
    # opened (they postpone its end by less than one window; ``ResourceLoop._restarts``).
    cut_from: float | None = None
    load_read_at: float | None = None  # the last look between window ends (overload)
    load_last: Readings | None = None  # the pods' readings at that look, in this window
    _rendered: tuple[_RenderKey, list[dict[str, Any]]] | None = None
    # (start, serving requests) of the last judged windows, oldest first, as far back as
    # the clients' classification looks (judge.client_loop_over: two windows, or a minute).
    previous: tuple[tuple[float, tuple[Sample, ...]], ...] = ()
    # The configured drafter's mirrored pairs per in-flight band, across windows (the
    # ladder's schedule evidence; only with the schedule rung). Operator memory: a new
    # operator starts from status.ladder.levels and new pairs.
    levels: LevelPairs | None = None
    # The window just ended judged on ``levels`` with its pairs: kept as ``levels`` only
    # when the decision counts the window (Outcome.counted).
    levels_pending: LevelPairs | None = None

    def objects(self, replicas: Mapping[c.Arm, int], rung: DrafterRung) -> list[dict[str, Any]]:
        """The owned objects with these replicas and the drafter arm's rung (rendered again
        only when they change: an idle tick renders nothing)."""
        key = (tuple(sorted(replicas.items())), rung)
        if self._rendered is None or self._rendered[0] != key:
            self._rendered = (key, render_all(self.sd, replicas=replicas, rung=rung))
        return self._rendered[1]


class ResourceLoop:
    def __init__(
        self,
        kube: KubeWrites,
        metrics: OperatorMetrics,
        namespace: str,
        name: str,
        *,
        open_source: OpenSource = source_for,
        read_counters: ReadCounters = read_pods,
        admission: asyncio.Semaphore | None = None,
    ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.namespace = namespace
        self.name = name
        self._open_source = open_source
        self._read_counters = read_counters
        self._resource: _Resource | None = None
        self._invalid: object = _NONE  # the generation whose invalid spec was reported
        self._arms_seen: dict[c.Arm, ArmObserved] | None = None  # at the last tick
        self._disturbed: Disturbance | None = None  # the last swap, restart, change in pods
        self.applier = Applier(kube, f"{namespace}/{name}", admission)
        self.status = StatusWriter(kube, metrics, namespace, name, admission)

    async def aclose(self) -> None:
        if self._resource is not None:
            await self._resource.source.aclose()
        self.metrics.forget(self.namespace, self.name)

    async def tick(
        self, body: Mapping[str, Any], observed: Observed, now: float | None = None
    ) -> Outcome | None:
        """One tick (see the module docstring); the decision's outcome, None for an invalid
        spec."""
        now = time.time() if now is None else now
        raw_status = self.status.stored(body)
        resource = await self._parse(body, raw_status, now)
        if resource is None:
            return None
        try:
            prev = Status.model_validate(raw_status)
        except ValueError:
            prev = Status()
        created = parse_time(lookup(body, "metadata", "creationTimestamp")) or now
        arms = observe_arms(self.name, observed.deployments, observed.pods)
        drafter_ready = self._rolled_out(resource, prev, observed)
        disturbed = self._disturbance(resource, prev, arms, created, now, rolled_out=drafter_ready)
        window = await self._window(
            resource, prev, observed, created, now, rolled_out=drafter_ready, disturbed=disturbed
        )
        if window is not None and _disturbed_since(disturbed, window.start):
            # A change in the pods, a restart: per-pod counts across it say nothing.
            window = replace(window, load=None)
        load = None if window is not None else await self._load_between(
            resource, prev, observed, now, disturbed
        )
        obs = Observation(
            name=self.name,
            spec=resource.sd.spec,
            generation=resource.generation,
            status=prev,
            now=now,
            created=created,
            annotations=lookup(body, "metadata", "annotations") or {},
            arms=arms,
            startup=drafter_startup(self.name, observed.pods),
            window=window,
            load=load,
            apply_error=self.applier.error,
            disturbed=disturbed,
            drafter_rolled_out=drafter_ready,
        )
        outcome = decide(obs)
        if obs.window is not None:
            self._record_window(obs.window, outcome, now)
        # A window that does not count (it spans a disturbance, or the drafter arm did not
        # do what its rung asks) leaves its pairs out of the bands' evidence.
        pending, resource.levels_pending = resource.levels_pending, None
        if pending is not None and outcome.counted:
            resource.levels = pending
        if outcome.rung_changed:
            self.applier.reset()  # the drafter arm's pod template changes
            if resource.levels is not None:
                resource.levels.clear()
        await self.applier.apply(resource.objects(outcome.plan.replicas, outcome.rung), observed,
                                 now)  # fmt: skip
        await self.status.write(raw_status, outcome.status)
        events = list(outcome.events)
        if self.applier.error is not None and self.applier.error != self.applier.reported:
            self.applier.reported = self.applier.error
            events.append(EventSpec("Warning", "ApplyFailed", self.applier.error))
        for event in events:
            await self._event(body, event)
        if outcome.transition is not None:
            rollback = outcome.transition.to_mode == c.ARM_BASELINE
            counter = self.metrics.rollbacks if rollback else self.metrics.promotions
            counter.labels(self.namespace, self.name).inc()
        self.metrics.set_mode(self.namespace, self.name, outcome.plan.mode)
        self.metrics.set_beyond(self.namespace, self.name, outcome.status)
        return outcome

    def _rolled_out(self, resource: _Resource, prev: Status, observed: Observed) -> bool:
        """Do the drafter arm's pods all run status.ladder's rung? Always true without a
        ladder (the configuration then only changes with the spec)."""
        spec = resource.sd.spec
        if not spec.ladder.rungs:
            return True
        rung = prev.ladder.rung if prev.ladder is not None else None
        drafters = [p for p in observed.pods if arm_of(p, self.name) == c.ARM_SPECULATIVE]
        return rolled_out(drafters, vllm_args(spec, c.ARM_SPECULATIVE, rung))

    # -- the resource --------------------------------------------------------------------

    async def _parse(
        self, body: Mapping[str, Any], raw_status: Mapping[str, Any], now: float
    ) -> _Resource | None:
        generation = lookup(body, "metadata", "generation")
        current = self._resource
        if current is not None and current.generation == generation:
            return current
        if current is None and self._invalid == generation:
            return None  # reported once per generation
        if current is not None:
            await current.source.aclose()
            self._resource = None
        try:
            sd = parse_resource({k: v for k, v in body.items() if k != "status"})
        except SpecError as error:
            await self._report_invalid(body, raw_status, error, generation, now)
            return None
        self._invalid = _NONE
        self.applier.reset()
        self._resource = _Resource(sd, generation, self._open_source(sd))
        return self._resource

    async def _report_invalid(
        self,
        body: Mapping[str, Any],
        raw_status: Mapping[str, Any],
        error: SpecError,
        generation: int | None,
        now: float,
    ) -> None:
        self._invalid = generation
        message = "; ".join(f"{p.path}: {p.message}" for p in error.problems)
        try:
            prev = Status.model_validate(raw_status)
        except ValueError:
            prev = Status()
        await self.status.write(raw_status, invalid_status(prev, generation, message, rfc3339(now)))
        await self._event(body, EventSpec("Warning", "SpecInvalid", message))
        log.warning("%s/%s: invalid spec: %s", self.namespace, self.name, message)

    # -- windows -------------------------------------------------------------------------

    def _disturbance(
        self,
        resource: _Resource,
        prev: Status,
        arms: Mapping[c.Arm, ArmObserved],
        created: float,
        now: float,
        *,
        rolled_out: bool = True,
    ) -> Disturbance | None:
        """The last change no counted window may span, as of this tick: this loop's start
        when an operator ran before it (a restart), a change in either arm's pods, and each
        tick of a swap, a paused shadow or a new drafter configuration rolling out."""
        if self._arms_seen is None:
            if prev.policy is not None:
                self._disturbed = Disturbance(now, "an operator restart")
        else:
            changed = pods_changed(self._arms_seen, arms)
            if changed is not None:
                self._disturbed = Disturbance(now, changed)
        self._arms_seen = dict(arms)
        why = paused(resource.sd.spec, prev, created, now, rolled_out)
        if why is not None:
            self._disturbed = Disturbance(now, why)
        return self._disturbed

    async def _window(
        self,
        resource: _Resource,
        prev: Status,
        observed: Observed,
        created: float,
        now: float,
        *,
        rolled_out: bool = True,
        disturbed: Disturbance | None = None,
    ) -> Window | None:
        """The window that ends now, if one does. Windows run only while judged; a swap,
        a paused shadow, a drafter arm changing its configuration or a new spec starts the
        next one afresh, and a change in the pods inside an open window restarts it at this
        tick (``_restarts``)."""
        spec = resource.sd.spec
        if not judging(spec, prev, created, now, rolled_out):
            resource.window_start, resource.readings_at_start = None, None
            resource.load_read_at, resource.load_last = None, None
            resource.previous, resource.cut_from = (), None
            return None
        pods = vllm_urls(self.name, observed.pods, spec.runtime.port)
        if resource.window_start is None or self._restarts(resource, disturbed, now):
            resource.window_start = now
            resource.readings_at_start = await self._read_counters(pods)
            resource.load_read_at, resource.load_last = None, None
            return None
        start = resource.window_start
        resource.source.set_targets(Targets(
            routers=tuple(router_urls(self.name, observed.pods)),
            pods={arm: tuple(urls) for arm, urls in pods.items()},
        ))  # fmt: skip
        if now - start < spec.evaluation.window:
            # Between window ends the source reads ahead (in the background): the routers'
            # feeds every second, so the read at the end holds only its last second.
            resource.source.read_ahead()
            return None
        # The samples and the pods' readings at once: the decision waits for both.
        window, at_end = await asyncio.gather(
            resource.source.collect(start, now), self._read_counters(pods)
        )
        if window.state == "down":
            log.warning("%s/%s: window not judged, %s unavailable: %s", self.namespace,
                        self.name, window.source, window.problem)  # fmt: skip
        before, last = resource.readings_at_start, resource.load_last
        resource.window_start, resource.readings_at_start = now, at_end
        resource.load_last, resource.cut_from = None, None
        clients = self._clients(resource, window, start, now)
        rule = rule_in_force(spec, prev)
        spec_arm: c.Arm = c.ARM_SPECULATIVE
        settled = _after_disturbance(_settled(window, settled_after(prev), rule), disturbed, start)
        settings = judge_settings(spec, rule)
        return Window(
            verdict=settled.verdict(settings),
            source_down=f"{window.source} unavailable: {window.problem}"
            if window.state == "down" else None,
            drafts=None if before is None
            else draft_counters(before.get(spec_arm, {}), at_end.get(spec_arm, {})),
            load=None if before is None
            else arm_load(before, at_end, _load_rule(spec, prev, start), last,
                          split=_split(prev)),
            start=start,
            first_started=min((x.started_at for x in settled.samples), default=None),
            clients=clients,
            samples=settled.samples,
            levels=self._levels(resource, prev, settled.samples, settings, now),
        )  # fmt: skip

    @staticmethod
    def _restarts(resource: _Resource, disturbed: Disturbance | None, now: float) -> bool:
        """Does the open window restart at this tick? Yes when a disturbance (a change in
        either arm's pods) came after it opened: the window opens again now, its counters
        read afresh (no per-pod count spans the change) and the requests that started
        before left out (``_after_disturbance``), so the next verdict comes one window
        after the change instead of at the end of the spoiled window plus a whole one. The
        part before is not judged (its requests would span the change, or ran before it).

        Restarts postpone the end of the window the first one cut short by less than one
        window: a disturbance later than that (pods that keep changing), or one seen at
        the tick the window ends, leaves the window to end as before — judged, shown, and
        not counted (``window_spans``) — so windows keep ending (the error guardrail
        judges them) however often the pods change."""
        start = resource.window_start
        if start is None or not _disturbed_since(disturbed, start):
            return False
        first = start if resource.cut_from is None else resource.cut_from
        if now - first >= resource.sd.spec.evaluation.window:
            return False
        resource.cut_from = first
        return True

    async def _load_between(
        self,
        resource: _Resource,
        prev: Status,
        observed: Observed,
        now: float,
        disturbed: Disturbance | None,
    ) -> ArmLoad | None:
        """Between window ends, every quarter window: the arms' engines now against the
        window's start and the last look, for the overload guardrail, which then need not
        wait for the window's end (a drafter past its throughput peak adds requests by the
        second); the window's first look only records (None). Only where it
        can act at once: the drafter serving under ``rollback.policy: auto`` with the
        guardrail on, no routes by domain (their arms' arrivals differ by design) and nothing
        disturbed since the window opened; by either load-match rule (by the in-flight rule
        the guardrail reads what the engines finished: ``judge._guardrails``)."""
        spec, start = resource.sd.spec, resource.window_start
        before = resource.readings_at_start
        if start is None or before is None or not spec.rollback.overload_guardrail:
            return None
        serving = prev.mode == c.ARM_SPECULATIVE and not (prev.arms and prev.arms.swapping)
        if not serving or spec.rollback.policy != "auto":
            return None
        if _split(prev) or _disturbed_since(disturbed, start):
            return None
        # Looks at the window's quarters (start + k·window/4, k = 1..3), not a quarter after
        # the last one: with one-second ticks that would put the last look a second before
        # the window's end, whose check against it would then need a climb within a second.
        every = spec.evaluation.window / 4
        quarter = min(3, math.floor((now - start) / every))
        due = start + quarter * every
        if quarter < 1 or (resource.load_read_at is not None and resource.load_read_at >= due):
            return None
        resource.load_read_at = now
        pods = vllm_urls(self.name, observed.pods, spec.runtime.port)
        last, resource.load_last = resource.load_last, await self._read_counters(pods)
        if last is None:
            return None  # the window's first look only records: a trip needs two
        return arm_load(before, resource.load_last, _load_rule(spec, prev, start), last)

    @staticmethod
    def _clients(
        resource: _Resource, window: WindowSamples, start: float, now: float
    ) -> LoopEvidence | None:
        """The clients behind this window's serving requests and the windows' before it
        (``judge.client_loop_over``; None for sources without per-request samples)."""
        # By when they ended, held halves of pairs too (WindowSamples.served).
        serving = window.served or tuple(s for s in window.samples if s.role == "serving")
        if window.source != "router" or window.state == "down" or not serving:
            resource.previous = ()  # an idle window tells nothing, and changes no status
            return None
        horizon = now - CLIENTS.history_s
        windows = (*(w for w in resource.previous if w[0] >= horizon), (start, serving))
        resource.previous = windows
        return client_loop_over(windows, now, CLIENTS)

    @staticmethod
    def _levels(
        resource: _Resource,
        prev: Status,
        samples: Sequence[Sample],
        settings: JudgeSettings,
        now: float,
    ) -> tuple[Level, ...]:
        """The configured drafter's verdicts per in-flight band, with this window's pairs
        (only with the schedule rung, and while the drafter arm runs the configured rung).
        The pairs are kept across windows only once the decision counts this window
        (``levels_pending``, see tick)."""
        spec = resource.sd.spec
        running = prev.ladder.rung.name if prev.ladder is not None else "configured"
        resource.levels_pending = None
        if "schedule" not in spec.ladder.rungs or running != "configured" or not samples:
            return ()
        if resource.levels is None:
            resource.levels = LevelPairs(per_band=2 * spec.evaluation.min_requests_per_arm)
        resource.levels_pending = resource.levels.with_pairs(samples)
        return tuple(resource.levels_pending.verdicts(settings, now))

    def _record_window(self, window: Window, outcome: Outcome, now: float) -> None:
        verdict = window.verdict
        log.info(
            "%s/%s: window judged %.2fs after its end: %s, ratio %s, n %s, target %s",
            self.namespace, self.name, time.time() - now, verdict.outcome,
            "-" if verdict.ratio is None else f"{verdict.ratio:.3f}",
            verdict.n_pairs if verdict.method == "paired" else dict(verdict.n), outcome.target,
        )  # fmt: skip
        labels = (self.namespace, self.name)
        self.metrics.verdicts.labels(*labels, verdict.outcome).inc()
        self.metrics.source_up.labels(*labels).set(0.0 if window.source_down else 1.0)
        if verdict.ratio is not None:
            self.metrics.tpot_ratio.labels(*labels).set(verdict.ratio)
            for bound, value in (("lower", verdict.ci_low), ("upper", verdict.ci_high)):
                if value is not None:
                    self.metrics.tpot_ratio_ci.labels(*labels, bound).set(value)
        self.metrics.set_guards(*labels, verdict)

    async def _event(self, body: Mapping[str, Any], event: EventSpec) -> None:
        try:
            await self.kube.event(body, event.type, event.reason, event.message)
        except KubeError as exc:
            log.warning("%s/%s: event failed: %s", self.namespace, self.name, exc)


class Applier:
    """Server-side apply of the owned objects that differ from the cluster's, with a
    doubling wait after a refusal (never a hot retry loop).

    Deployments are compared with the watch cache (a missing, scaled or edited Deployment
    is applied again); RBAC objects and Services are applied once per spec generation (and
    a Service again when the watch no longer shows it). Two rounds, each round's objects at
    once: first everything that needs nothing else, then what needs an object of the first
    round — a RoleBinding its Role (else the API server refuses it as an escalation: the
    operator may not grant a role that is not there yet) and a Deployment whose pods run as
    a ServiceAccount (else the first pods are refused until it exists). What was applied is
    kept; after a refusal the rest waits.

    ``admission`` (shared by every resource's applier) lets a few resources apply at a
    time, first come first served: when many resources arrive at once, the first ones
    finish first instead of every one waiting for the last one's objects (the API server's
    throughput is the same either way)."""

    def __init__(
        self, kube: KubeWrites, who: str, admission: asyncio.Semaphore | None = None
    ) -> None:
        self.kube = kube
        self.who = who
        self.admission = admission
        self.error: str | None = None  # the last refusal, until an apply goes through
        self.reported: str | None = None  # the refusal the last ApplyFailed Event named
        # What was applied for the current spec: Deployment → the generation our apply
        # returned; RBAC objects and Services.
        self._generations: dict[str, int] = {}
        self._done: set[tuple[str, str]] = set()
        self._failures = 0
        self._retry_at = 0.0

    def reset(self) -> None:
        """A new spec: everything is applied again."""
        self._done.clear()
        self._generations.clear()
        self._failures, self._retry_at = 0, 0.0

    async def apply(
        self, objects: Sequence[Mapping[str, Any]], observed: Observed, now: float
    ) -> None:
        if now < self._retry_at:
            return
        deployments = {lookup(d, "metadata", "name"): d for d in observed.deployments}
        services = {lookup(s, "metadata", "name") for s in observed.services}
        todo = []
        for obj in objects:
            kind, name = obj["kind"], obj["metadata"]["name"]
            if kind == "Deployment":
                live = deployments.get(name)
                if live is not None and not self._drifted(obj, live):
                    continue
            elif (kind, name) in self._done and (kind != "Service" or name in services):
                continue
            todo.append(obj)
        if todo:
            async with self.admission or contextlib.nullcontext():
                for group in (
                    [o for o in todo if not _needs_first_round(o)],
                    [o for o in todo if _needs_first_round(o)],
                ):
                    if group and not await self._apply_group(group, now):
                        return
        self._failures, self.error = 0, None

    async def _apply_group(self, group: Sequence[Mapping[str, Any]], now: float) -> bool:
        results = await asyncio.gather(*(self.kube.apply(o) for o in group),
                                       return_exceptions=True)  # fmt: skip
        failed = []
        for obj, result in zip(group, results, strict=True):
            kind, name = obj["kind"], obj["metadata"]["name"]
            if isinstance(result, BaseException):
                failed.append(f"apply {kind} {name}: {result}")
            elif kind == "Deployment":
                self._generations[name] = int(lookup(result, "metadata", "generation") or 0)
            else:
                self._done.add((kind, name))
        if not failed:
            return True
        self._failures += 1
        first, longest = APPLY_BACKOFF_S
        wait = min(longest, first * 2 ** (self._failures - 1))
        self._retry_at = now + wait
        self.error = "; ".join(failed)[:1000]
        log.warning("%s: %s (retry in %.0fs)", self.who, self.error, wait)
        return False

    def _drifted(self, desired: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
        """Does the live Deployment differ from what the operator wants now?

        Not applied for this spec yet: yes. Else its generation says whose view is newer:
        below the one our last apply returned, the watch cache has not caught up yet
        (nothing to do); above it, someone else changed the Deployment's spec (drift)."""
        ours = self._generations.get(desired["metadata"]["name"])
        generation = lookup(live, "metadata", "generation")
        if ours is None or not isinstance(generation, int):
            return True
        if generation < ours:
            return False
        return generation > ours or lookup(live, "spec", "replicas") != desired["spec"]["replicas"]


def _needs_first_round(obj: Mapping[str, Any]) -> bool:
    """A RoleBinding (its Role first), a Deployment whose pods run as a ServiceAccount."""
    account = lookup(obj, "spec", "template", "spec", "serviceAccountName")
    return obj["kind"] == "RoleBinding" or (obj["kind"] == "Deployment" and bool(account))


class StatusWriter:
    """Writes the status where it differs from the stored one, as one merge patch; until
    the watch brings that write back, the next tick decides from what was written (or a
    decision would be taken twice, or undone). Through the same ``admission`` as the
    applies: while many resources wait to apply their objects, a status write waits its
    turn behind them (the API server has the same work, done in arrival order)."""

    def __init__(
        self,
        kube: KubeWrites,
        metrics: OperatorMetrics,
        namespace: str,
        name: str,
        admission: asyncio.Semaphore | None = None,
    ) -> None:
        self.kube = kube
        self.admission = admission
        self.metrics = metrics
        self.namespace = namespace
        self.name = name
        self._written: dict[str, Any] | None = None
        self._written_over: str | None = None  # the body's resourceVersion when we wrote
        self._body_rv: str | None = None

    def stored(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The status to decide from: the body's, or our last write if the watch lags."""
        self._body_rv = lookup(body, "metadata", "resourceVersion")
        if self._written is not None and self._body_rv == self._written_over:
            return dict(self._written)
        return dict(body.get("status") or {})

    async def write(self, raw: Mapping[str, Any], new: Status) -> None:
        wire = new.to_wire()
        patch = status_patch(raw, wire)
        if not patch:
            return
        try:
            async with self.admission or contextlib.nullcontext():
                await self.kube.patch_status(self.namespace, self.name, patch)
        except KubeError as exc:
            log.warning("%s/%s: status patch failed: %s", self.namespace, self.name, exc)
            return
        self._written, self._written_over = wire, self._body_rv
        self.metrics.status_writes.labels(self.namespace, self.name).inc()
