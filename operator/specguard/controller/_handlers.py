"""kopf wiring: watch caches (indexes) of the owned objects and one task per
SpeculativeDeployment that runs its :class:`~specguard.controller._loop.ResourceLoop`.

Nothing is registered by importing this module: ``specguard run`` builds the handlers into
an explicit registry (:func:`build_registry`), the settings (:func:`operator_settings`) and
the memo that carries the operator's context (:func:`operator_memo`), and passes the three
to ``kopf.operator``. Handlers find the context in ``memo.controller``; nothing lives in
module globals.

Why a loop and indexes rather than on.create/on.update handlers: kopf's change handlers
keep their bookkeeping in annotations on the resource (a write per change, on an object a
GitOps tool owns), and a drift or a swap needs the cluster's state between changes anyway.
The loop starts when the resource appears (created, or listed when the operator starts),
sees every change of its spec and annotations at its next tick (the newest body its watch
events brought), and is cancelled when the resource goes.

Why not ``kopf.daemon``: kopf puts a finalizer on every resource a daemon serves, with no
option to leave it out (nolar/kopf#896), so that it can stop the daemon before the object
disappears. Here nothing must happen before it disappears (what the loop made goes by owner
reference, with the garbage collector), and a finalizer makes ``kubectl delete`` hang
whenever no operator runs: after ``helm uninstall``, or with the operator scaled to 0. So the
resource carries no finalizer; its loop stops on the resource's ``DELETED`` event, or as soon
as a ``deletionTimestamp`` appears (a foreground or orphan deletion), before it could put
back an owned object the garbage collector removes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from specguard.api import constants as c
from specguard.controller._kube import Kube
from specguard.controller._loop import TICK_S, Observed, ResourceLoop
from specguard.controller._metrics import OperatorMetrics

log = logging.getLogger("specguard.controller")

MANAGED = {c.LABEL_APP_MANAGED_BY: c.MANAGED_BY}


@dataclass
class _Running:
    body: Any  # the newest body the resource's watch events brought
    task: asyncio.Task[None] | None = None


@dataclass
class Context:
    """The operator's context, in ``memo.controller``: the API client, the metrics, the tick
    and the running loops by resource uid."""

    kube: Kube
    metrics: OperatorMetrics
    tick_s: float = TICK_S
    loops: dict[str, _Running] = field(default_factory=dict)


def _key(namespace: str | None, labels: Mapping[str, str]) -> tuple[str | None, str | None]:
    return namespace, labels.get(c.LABEL_APP_INSTANCE)


def _pick(obj: Mapping[str, Any], paths: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sub in paths.items():
        if key not in obj:
            continue
        value = obj[key]
        out[key] = (
            _pick(value, sub) if isinstance(sub, dict) and isinstance(value, Mapping) else value
        )
    return out


# What the indexes keep of each object: what the loop reads, nothing more (memory).
_POD_FIELDS = {
    "metadata": {
        "name": 1, "labels": 1, "creationTimestamp": 1, "deletionTimestamp": 1,
    },
    "spec": {"containers": 1},
    "status": {"phase": 1, "podIP": 1, "conditions": 1, "containerStatuses": 1},
}  # fmt: skip
_DEPLOYMENT_FIELDS = {
    "metadata": {"name": 1, "generation": 1, "labels": 1},
    "spec": {"replicas": 1},
    "status": {"readyReplicas": 1, "replicas": 1},
}
_SERVICE_FIELDS = {"metadata": {"name": 1}}


def index_deployments(
    *, namespace: str | None, labels: Mapping[str, str], body: Any, **_: Any
) -> Any:
    return {_key(namespace, labels): _pick(body, _DEPLOYMENT_FIELDS)}


def index_pods(*, namespace: str | None, labels: Mapping[str, str], body: Any, **_: Any) -> Any:
    return {_key(namespace, labels): _pick(body, _POD_FIELDS)}


def index_services(*, namespace: str | None, labels: Mapping[str, str], body: Any, **_: Any) -> Any:
    return {_key(namespace, labels): _pick(body, _SERVICE_FIELDS)}


def _values(index: Any, key: Any) -> list[Mapping[str, Any]]:
    store = None if index is None else index.get(key)
    return list(store) if store is not None else []


async def on_resource_event(
    *,
    type: str | None,
    body: Any,
    uid: str,
    namespace: str | None,
    name: str,
    memo: Any,
    sg_deployments: Any = None,
    sg_pods: Any = None,
    sg_services: Any = None,
    **_: Any,
) -> None:
    """Start the resource's loop on its first event, hand it every newer body, stop it when
    the resource goes (or is being deleted)."""
    ctx: Context = memo.controller
    running = ctx.loops.get(uid)
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        if running is not None:
            del ctx.loops[uid]
            if running.task is not None:
                running.task.cancel()
            log.info("%s/%s: deleted, its loop stopped", namespace, name)
        return
    if running is not None:
        running.body = body
        return
    holder = ctx.loops[uid] = _Running(body)
    indexes = (sg_deployments, sg_pods, sg_services)
    holder.task = asyncio.create_task(_run(ctx, holder, namespace or "default", name, indexes))

    def forget(_: object) -> None:  # a loop that ended by itself starts again on the next event
        if ctx.loops.get(uid) is holder:
            del ctx.loops[uid]

    holder.task.add_done_callback(forget)


async def _run(
    ctx: Context, holder: _Running, namespace: str, name: str, indexes: tuple[Any, Any, Any]
) -> None:
    deployments, pods, services = indexes
    loop = ResourceLoop(ctx.kube, ctx.metrics, namespace, name)
    key = (namespace, name)
    try:
        while True:
            observed = Observed(
                deployments=_values(deployments, key),
                pods=_values(pods, key),
                services=_values(services, key),
            )
            try:
                await loop.tick(holder.body, observed)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s/%s: tick failed", namespace, name)
            await asyncio.sleep(ctx.tick_s)
    finally:
        await loop.aclose()


async def stop_loops(*, memo: Any, **_: Any) -> None:
    """The operator exits: stop every loop (they continue where they were in the next
    operator, from what the cluster and the status show)."""
    ctx: Context = memo.controller
    tasks = [running.task for running in ctx.loops.values() if running.task is not None]
    ctx.loops.clear()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def build_registry() -> kopf.OperatorRegistry:
    """The operator's handlers, in a registry of their own (not kopf's default one)."""
    registry = kopf.OperatorRegistry()
    # Credentials as the official client finds them (the pod's service account, else
    # KUBECONFIG): kopf's default registry adds this itself, an explicit one does not.
    kopf.on.login(id="login_via_client", registry=registry)(kopf.login_via_client)
    for resource, fn, index_id in (
        (("apps", "v1", "deployments"), index_deployments, "sg_deployments"),
        (("v1", "pods"), index_pods, "sg_pods"),
        (("v1", "services"), index_services, "sg_services"),
    ):
        kopf.index(*resource, id=index_id, labels=MANAGED, registry=registry)(fn)
    kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, id="speculative_deployment",
                  registry=registry)(on_resource_event)  # fmt: skip
    kopf.on.cleanup(id="stop_loops", registry=registry)(stop_loops)
    return registry


def operator_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    # Only warnings of kopf's own become Events; ours are posted by the loop with numbers.
    settings.posting.level = logging.WARNING
    # No dynamic scanning of CRDs and namespaces: the operator serves the CRD it finds at
    # start, in the namespaces it was given, and needs no cluster-wide read of either (the
    # chart grants none). With scanning on and no grant, kopf retried the namespace list for
    # about a minute before a namespaced operator acted at all.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    return settings


def operator_memo(kube: Kube, metrics: OperatorMetrics, tick_s: float = TICK_S) -> kopf.Memo:
    return kopf.Memo(controller=Context(kube=kube, metrics=metrics, tick_s=tick_s))
