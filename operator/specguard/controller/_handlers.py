"""kopf registration: watch caches (indexes) of the owned objects and one task per
SpeculativeDeployment that runs its :class:`~specguard.controller._loop.ResourceLoop`.

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
from dataclasses import dataclass
from typing import Any

import kopf

from specguard.api import constants as c
from specguard.controller._kube import Kube
from specguard.controller._loop import TICK_S, Observed, ResourceLoop
from specguard.controller._metrics import OperatorMetrics

log = logging.getLogger("specguard.controller")

MANAGED = {c.LABEL_APP_MANAGED_BY: c.MANAGED_BY}


@dataclass
class Context:
    kube: Kube
    metrics: OperatorMetrics
    tick_s: float = TICK_S


CONTEXT: Context | None = None  # set by `specguard run` before kopf starts


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


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
def sg_deployments(*, namespace: str | None, labels: Mapping[str, str], body: Any, **_: Any) -> Any:
    return {_key(namespace, labels): _pick(body, _DEPLOYMENT_FIELDS)}


@kopf.index("v1", "pods", labels=MANAGED)
def sg_pods(*, namespace: str | None, labels: Mapping[str, str], body: Any, **_: Any) -> Any:
    return {_key(namespace, labels): _pick(body, _POD_FIELDS)}


@kopf.index("v1", "services", labels=MANAGED)
def sg_services(*, namespace: str | None, labels: Mapping[str, str], body: Any, **_: Any) -> Any:
    return {_key(namespace, labels): _pick(body, _SERVICE_FIELDS)}


def _values(index: Any, key: Any) -> list[Mapping[str, Any]]:
    store = None if index is None else index.get(key)
    return list(store) if store is not None else []


@dataclass
class _Running:
    body: Any  # the newest body the resource's watch events brought
    task: asyncio.Task[None] | None = None


_LOOPS: dict[str, _Running] = {}  # by the resource's uid


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def speculative_deployment(
    *,
    type: str | None,
    body: Any,
    uid: str,
    namespace: str | None,
    name: str,
    sg_deployments: Any = None,
    sg_pods: Any = None,
    sg_services: Any = None,
    **_: Any,
) -> None:
    running = _LOOPS.get(uid)
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        if running is not None:
            del _LOOPS[uid]
            if running.task is not None:
                running.task.cancel()
            log.info("%s/%s: deleted, its loop stopped", namespace, name)
        return
    if running is not None:
        running.body = body
        return
    ctx = CONTEXT
    if ctx is None:
        raise kopf.PermanentError("specguard run did not set up the controller context")
    holder = _LOOPS[uid] = _Running(body)
    indexes = (sg_deployments, sg_pods, sg_services)
    holder.task = asyncio.create_task(_run(ctx, holder, namespace or "default", name, indexes))

    def forget(_: object) -> None:  # a loop that ended by itself starts again on the next event
        if _LOOPS.get(uid) is holder:
            del _LOOPS[uid]

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


@kopf.on.cleanup()
async def stop_loops(**_: Any) -> None:
    """The operator exits: stop every loop (they continue where they were in the next
    operator, from what the cluster and the status show)."""
    tasks = [running.task for running in _LOOPS.values() if running.task is not None]
    _LOOPS.clear()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Only warnings of kopf's own become Events; ours are posted by the loop with numbers.
    settings.posting.level = logging.WARNING
    # No dynamic scanning of CRDs and namespaces: the operator serves the CRD it finds at
    # start, in the namespaces it was given, and needs no cluster-wide read of either (the
    # chart grants none). With scanning on and no grant, kopf retried the namespace list for
    # about a minute before a namespaced operator acted at all.
    settings.scanning.disabled = True
    # kopf logs every handled watch event at INFO ("Handler ... succeeded"): a line per
    # status write. Its warnings and errors stay.
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
