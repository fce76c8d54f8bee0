"""One SpeculativeDeployment's loop: reconcile, swap, collect, judge, decide, report.

``ResourceLoop.tick`` runs every ``TICK_S`` (all that the resource's task in _handlers.py
does). It reads the cluster from the operator's watch caches (kopf indexes), so a tick makes
no API request; it writes only when something must change: an owned object differs from the
desired one (missing, scaled, edited: drift), a swap step, or a status that differs from the
one stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specguard.api import PolicyMemory, SpecError, SpeculativeDeployment, Status, parse_resource
from specguard.api import constants as c
from specguard.controller import _conditions as cond
from specguard.controller._kube import Kube, KubeError
from specguard.controller._metrics import OperatorMetrics
from specguard.controller._mirror import mirror_share
from specguard.controller._observe import (
    drafter_startup,
    observe_arms,
    parse_time,
    rfc3339,
    router_urls,
    vllm_urls,
)
from specguard.controller._schedule import shadow_active, shadow_replicas
from specguard.controller._settings import judge_settings
from specguard.controller._source import Collector, WindowEvidence
from specguard.controller._speculation import draft_counters, speculation_guardrail
from specguard.controller._swap import SwapPlan, other, plan_swap
from specguard.controller._window import (
    Decided,
    Degraded,
    Evaluating,
    EventSpec,
    build_status,
    current_target,
    decide,
    invalid_status,
    pinned_mode,
)
from specguard.render import (
    desired_arm_deployment,
    desired_arm_service,
    desired_front_service,
    desired_router_deployment,
    desired_router_role,
    desired_router_role_binding,
    desired_router_service_account,
)
from specguard.sources import Reading, ScrapeSource

log = logging.getLogger("specguard.controller")

TICK_S = 1.0
POLL_S = 3.0  # router feed polls between window ends
APPLY_BACKOFF_S = (1.0, 300.0)  # after a failed apply: first retry, longest wait (doubling)


@dataclass
class Observed:
    """The cluster as the watch caches show it, for one resource."""

    deployments: list[Mapping[str, Any]] = field(default_factory=list)
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    services: list[Mapping[str, Any]] = field(default_factory=list)


def desired_objects(sd: SpeculativeDeployment, replicas: Mapping[str, int]) -> list[dict[str, Any]]:
    """Every owned object, with the arms' replica counts the swap planner chose."""
    return [
        desired_router_service_account(sd),
        desired_router_role(sd),
        desired_router_role_binding(sd),
        desired_front_service(sd),
        *(desired_arm_service(sd, arm) for arm in c.ARMS),
        *(desired_arm_deployment(sd, arm, replicas[arm]) for arm in c.ARMS),
        desired_router_deployment(sd),
    ]


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


def _name_of(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


class ResourceLoop:
    def __init__(self, kube: Kube, metrics: OperatorMetrics, namespace: str, name: str) -> None:
        self.kube = kube
        self.metrics = metrics
        self.namespace = namespace
        self.name = name
        self.collector = Collector(name, namespace)
        self._generation: int | None = None
        self._sd: SpeculativeDeployment | None = None
        self._invalid_reported: int | None = None
        self._applied: dict[str, int] = {}  # Deployment name → generation after our apply
        self._static_applied = False
        self._static_done: set[tuple[str, str]] = set()  # RBAC objects and Services applied
        self._apply_error: str | None = None  # the last failed apply, until one succeeds
        self._apply_failures = 0
        self._apply_retry_at = 0.0
        self._apply_reported: str | None = None  # the failure the last Warning Event named
        self._window_start: float | None = None
        self._last_poll = 0.0
        self._status_cache: dict[str, Any] | None = None
        self._stale_rv: str | None = None  # the body's resourceVersion when we last wrote
        self._body_rv: str | None = None
        self.trace: list[tuple[float, dict[str, int]]] = []
        self._draft_start: dict[str, Reading] | None = None
        self._speculation: tuple[str, str] | None = None

    async def aclose(self) -> None:
        await self.collector.aclose()
        self.metrics.forget(self.namespace, self.name)

    # -- one tick ----------------------------------------------------------------------

    async def tick(
        self, body: Mapping[str, Any], observed: Observed, now: float | None = None
    ) -> None:
        now = time.time() if now is None else now
        meta = body.get("metadata", {})
        raw_status = dict(body.get("status") or {})
        self._body_rv = meta.get("resourceVersion")
        if self._status_cache is not None and self._body_rv == self._stale_rv:
            # The watch has not brought our last status write yet: decide from what we wrote,
            # not from the older copy (or a decision would be taken twice or undone).
            raw_status = dict(self._status_cache)
        generation = meta.get("generation")
        if generation != self._generation or (self._sd is None and self._invalid_reported is None):
            self._generation = generation
            try:
                self._sd = parse_resource(_without_status(body))
                self._static_applied = False
                self._static_done.clear()
                self._apply_failures, self._apply_retry_at = 0, 0.0
                self._window_start = None
                self._speculation = None
                self.collector.reset()
            except SpecError as error:
                self._sd = None
                await self._report_invalid(body, raw_status, error, generation, now)
                return
        if self._sd is None:
            return
        sd = self._sd
        try:
            prev = Status.model_validate(raw_status)
        except ValueError:
            prev = Status()
        await self._tick_valid(
            body, sd=sd, prev=prev, raw_status=raw_status, observed=observed, now=now
        )

    async def _report_invalid(
        self,
        body: Mapping[str, Any],
        raw_status: Mapping[str, Any],
        error: SpecError,
        generation: int | None,
        now: float,
    ) -> None:
        if self._invalid_reported == generation:
            return
        message = "; ".join(f"{p.path}: {p.message}" for p in error.problems)
        try:
            prev = Status.model_validate(raw_status)
        except ValueError:
            prev = Status()
        new = invalid_status(prev, generation, message, rfc3339(now))
        await self._write_status(raw_status, new)
        await self.kube.event(body, "Warning", "SpecInvalid", message)
        self._invalid_reported = generation
        log.warning("%s/%s: invalid spec: %s", self.namespace, self.name, message)

    async def _tick_valid(
        self,
        body: Mapping[str, Any],
        *,
        sd: SpeculativeDeployment,
        prev: Status,
        raw_status: Mapping[str, Any],
        observed: Observed,
        now: float,
    ) -> None:
        spec = sd.spec
        annotations = body.get("metadata", {}).get("annotations") or {}
        created = parse_time(body.get("metadata", {}).get("creationTimestamp")) or now
        arms = observe_arms(self.name, observed.deployments, observed.pods)
        startup = drafter_startup(self.name, observed.pods)
        active = shadow_active(spec, created, now)
        swapping = bool(prev.arms and prev.arms.swapping)
        mode = prev.mode or current_target(prev)
        routers = router_urls(self.name, observed.pods)
        pods = vllm_urls(self.name, observed.pods, spec.runtime.port)

        # -- evidence: a window ends? --------------------------------------------------
        evidence: WindowEvidence | None = None
        judging = active and not swapping and mode == current_target(prev)
        if self._window_start is None or not judging:
            if not judging:
                self.collector.reset()
                self._draft_start = None
                self._speculation = None
            elif self._window_start is None:
                self._draft_start = await read_drafters(pods)
            self._window_start = now
        elif now - self._window_start >= spec.evaluation.window:
            # The samples and the drafters' counters at once: the decision waits for both.
            closed, draft_end = await asyncio.gather(
                self.collector.close_window(
                    spec,
                    judge_settings(spec),
                    routers,
                    pods,
                    start=self._window_start,
                    end=now,
                ),
                read_drafters(pods),
            )
            evidence = closed
            self._window_start = now
            counters = (
                None if self._draft_start is None else draft_counters(self._draft_start, draft_end)
            )
            self._draft_start = draft_end
            self._speculation = speculation_guardrail(
                counters,
                evidence.verdict.requests.get(c.ARM_SPECULATIVE, 0),
                spec.evaluation.min_requests_per_arm,
            )
        elif now - self._last_poll >= POLL_S:
            self._last_poll = now
            await self.collector.poll(spec, routers, pods)

        verdict = evidence.verdict if evidence is not None else None
        decided = decide(
            spec=spec,
            status=prev,
            annotations=annotations,
            verdict=verdict,
            startup=startup,
            now=now,
            now_iso=rfc3339(now),
            speculation=self._speculation if evidence is not None else None,
        )
        if verdict is not None:
            log.info(
                "%s/%s: window judged %.2fs after its end: %s, ratio %s, n %s, target %s",
                self.namespace, self.name, time.time() - now, verdict.outcome,
                "-" if verdict.ratio is None else f"{verdict.ratio:.3f}",
                verdict.n_pairs if verdict.method == "paired" else dict(verdict.n),
                decided.target,
            )  # fmt: skip
        memory = decided.memory
        plan = plan_swap(
            target=decided.target,
            mode=mode,
            swapping=swapping,
            serving_replicas=spec.replicas,
            shadow_replicas=shadow_replicas(spec, created, now),
            max_pods=spec.replicas + spec.shadow.replicas,
            observed=arms,
            now=now,
            swap_since=memory.swap_since,
        )
        if plan.swapping and memory.swap_since is None:
            memory = memory.model_copy(update={"swap_since": now})
        if not plan.swapping:
            memory = memory.model_copy(update={"swap_since": None})

        if now >= self._apply_retry_at:
            await self._reconcile(sd, plan, observed, now)

        # -- status --------------------------------------------------------------------
        share = mirror_share(
            shadow_ready=arms[other(plan.mode)].ready,
            serving_ready=arms[plan.mode].ready,
            judging=active and not plan.swapping,
        )
        last_verdict = prev.last_verdict
        degraded: Degraded | None = None
        if evidence is not None:
            assert verdict is not None
            last_verdict = _keep_idle(prev, cond.status_verdict(verdict, rfc3339(now)))
            degraded = _degraded(evidence, spec.evaluation.window)
            self._count_verdict(verdict.outcome, verdict.ratio, (verdict.ci_low, verdict.ci_high))
            up = 0.0 if evidence.error is not None else 1.0  # JudgeDegraded SourceUnavailable
            self.metrics.source_up.labels(self.namespace, self.name).set(up)
        evaluating = _evaluating(sd, plan, active, pinned_mode(annotations), swapping)
        new = build_status(
            prev,
            name=self.name,
            spec=spec,
            generation=self._generation,
            plan=plan,
            target=decided.target,
            observed=arms,
            share=share,
            memory=memory,
            transition=decided.transition,
            last_verdict=last_verdict,
            evaluating=evaluating,
            degraded=degraded,
            now_iso=rfc3339(now),
            speculation=self._speculation if mode == c.ARM_SPECULATIVE else None,
            apply_error=self._apply_error,
        )
        await self._write_status(raw_status, new)
        await self._post_events(body, decided, plan, mode)
        if self._apply_error is not None and self._apply_error != self._apply_reported:
            self._apply_reported = self._apply_error
            await self._event(body, EventSpec("Warning", "ApplyFailed", self._apply_error))
        self.metrics.set_mode(self.namespace, self.name, plan.mode)

    # -- writes ------------------------------------------------------------------------

    async def _reconcile(
        self, sd: SpeculativeDeployment, plan: SwapPlan, obs: Observed, now: float
    ) -> None:
        deployments = {_name_of(d): d for d in obs.deployments}
        services = {_name_of(s) for s in obs.services}
        todo: list[dict[str, Any]] = []
        for obj in desired_objects(sd, plan.replicas):
            kind, name = obj["kind"], obj["metadata"]["name"]
            if kind == "Deployment":
                live = deployments.get(name)
                if live is not None and not self._drifted(obj, live):
                    continue
            elif (kind, name) in self._static_done and (kind != "Service" or name in services):
                continue  # applied (a Service the watch no longer shows is re-created)
            todo.append(obj)
        # The ServiceAccount, Role and Services first (a pod's ServiceAccount must exist),
        # then the RoleBinding (the API server reads the Role it binds, to check that the
        # binding grants no more than the operator holds: created together, it may find no
        # Role yet), then the Deployments; each group at once. What was applied is kept; a
        # failure waits, doubling, before the rest is tried again (never a hot retry loop),
        # and is shown in Ready.
        for group in (
            [o for o in todo if o["kind"] not in ("RoleBinding", "Deployment")],
            [o for o in todo if o["kind"] == "RoleBinding"],
            [o for o in todo if o["kind"] == "Deployment"],
        ):
            if not group:
                continue
            results = await asyncio.gather(
                *(self.kube.apply(o) for o in group), return_exceptions=True
            )
            failed: list[str] = []
            for obj, result in zip(group, results, strict=True):
                kind, name = obj["kind"], obj["metadata"]["name"]
                if isinstance(result, BaseException):
                    failed.append(f"apply {kind} {name}: {result}")
                elif kind == "Deployment":
                    self._applied[name] = int(result.get("metadata", {}).get("generation") or 0)
                    self.trace.append((time.time(), dict(plan.replicas)))
                else:
                    self._static_done.add((kind, name))
            if failed:
                self._apply_failures += 1
                first, longest = APPLY_BACKOFF_S
                wait = min(longest, first * 2 ** (self._apply_failures - 1))
                self._apply_retry_at = now + wait
                self._apply_error = "; ".join(failed)[:1000]
                log.warning("%s/%s: %s (retry in %.0fs)", self.namespace, self.name,
                            self._apply_error, wait)  # fmt: skip
                return
        self._static_applied = True
        self._apply_failures, self._apply_error = 0, None

    def _drifted(self, desired: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
        """Does the live Deployment differ from what the operator wants now?

        Its generation says whose view is newer: below the one our last apply returned,
        the watch cache has not caught up yet (nothing to do); above it, someone else
        changed the Deployment's spec (drift)."""
        if not self._static_applied:
            return True
        name = _name_of(desired)
        ours = self._applied.get(name)
        generation = live.get("metadata", {}).get("generation")
        if ours is None or not isinstance(generation, int):
            return True
        if generation < ours:
            return False
        return (
            generation > ours or live.get("spec", {}).get("replicas") != desired["spec"]["replicas"]
        )

    async def _write_status(self, raw: Mapping[str, Any], new: Status) -> None:
        wire = new.to_wire()
        patch = status_patch(raw, wire)
        if not patch:
            return
        try:
            await self.kube.patch_status(self.namespace, self.name, patch)
        except KubeError as exc:
            log.warning("%s/%s: status patch failed: %s", self.namespace, self.name, exc)
            return
        self._status_cache = wire
        self._stale_rv = self._body_rv
        self.metrics.status_writes.labels(self.namespace, self.name).inc()

    async def _post_events(
        self, body: Mapping[str, Any], decided: Decided, plan: SwapPlan, mode: str
    ) -> None:
        events: list[EventSpec] = list(decided.events)
        if decided.transition is not None:
            counter = (
                self.metrics.rollbacks
                if decided.transition.to_mode == c.ARM_BASELINE
                else self.metrics.promotions
            )
            counter.labels(self.namespace, self.name).inc()
        if plan.done and plan.mode != mode:
            events.append(
                EventSpec(
                    "Normal",
                    "SwapComplete",
                    f"{mode} → {plan.mode}: {plan.replicas[plan.mode]} serving pods ready",
                )
            )
        for event in events:
            await self._event(body, event)

    async def _event(self, body: Mapping[str, Any], event: EventSpec) -> None:
        try:
            await self.kube.event(body, event.type, event.reason, event.message)
        except KubeError as exc:
            log.warning("%s/%s: event failed: %s", self.namespace, self.name, exc)

    def _count_verdict(
        self, outcome: str, ratio: float | None, ci: tuple[float | None, float | None]
    ) -> None:
        self.metrics.verdicts.labels(self.namespace, self.name, outcome).inc()
        if ratio is not None:
            self.metrics.tpot_ratio.labels(self.namespace, self.name).set(ratio)
        for bound, value in zip(("lower", "upper"), ci, strict=True):
            if ratio is not None and value is not None:
                self.metrics.tpot_ratio_ci.labels(self.namespace, self.name, bound).set(value)


async def read_drafters(pods: Mapping[str, list[str]]) -> dict[str, Reading]:
    """The drafter arm's spec-decode counters now (pods that answer)."""
    urls = pods.get(c.ARM_SPECULATIVE, [])
    if not urls:
        return {}
    async with ScrapeSource({c.ARM_SPECULATIVE: urls}) as scrape:
        reading = await scrape.read()
    return dict(reading.readings.get(c.ARM_SPECULATIVE, {}))


def _without_status(body: Mapping[str, Any]) -> dict[str, Any]:
    # Status is the operator's own; a status from an older operator must not make the
    # user's spec invalid.
    return {k: v for k, v in body.items() if k != "status"}


def _keep_idle(prev: Status, new: Any) -> Any:
    """An idle window (no samples on either arm) after an idle window changes nothing."""
    old = prev.last_verdict
    if old is None:
        return new
    idle = not (new.samples.speculative or new.samples.baseline)
    was_idle = not (old.samples.speculative or old.samples.baseline)
    if idle and was_idle and new.reason == old.reason:
        return old
    return new


def _degraded(evidence: WindowEvidence, window_s: int) -> Degraded:
    if evidence.error is not None:
        return Degraded(True, "SourceUnavailable", evidence.error)
    n = evidence.verdict.n
    if not any(n.values()) and not any(evidence.verdict.requests.values()):
        return Degraded(True, "NoSamples", f"no samples in the last window ({window_s}s)")
    return Degraded(False, "SamplesFlowing", "samples from both arms arrive")


def _evaluating(
    sd: SpeculativeDeployment, plan: SwapPlan, active: bool, pin: str | None, swapping: bool
) -> Evaluating:
    if plan.swapping or swapping:
        return Evaluating(False, "Swapping", "no judging while the arms swap")
    if not active:
        return Evaluating(False, "ShadowInactive", "periodic shadow: between active periods")
    policy = sd.spec.rollback.policy
    window = sd.spec.evaluation.window
    if pin is not None:
        return Evaluating(True, "Pinned", f"judging every {window}s; mode pinned to {pin}")
    if policy == "off":
        return Evaluating(True, "MeasureOnly", f"judging every {window}s; rollback.policy off")
    if policy == "notify":
        return Evaluating(True, "DryRun", f"judging every {window}s; rollback.policy notify")
    return Evaluating(True, "Judging", f"judging every {window}s")


def keep_memory(memory: PolicyMemory | None) -> PolicyMemory:
    return memory or PolicyMemory()


def index_values(index: Any, key: Any) -> Iterable[Mapping[str, Any]]:
    try:
        return list(index.get(key, ()))
    except AttributeError:
        return []
