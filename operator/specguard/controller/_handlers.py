"""kopf registration: watch caches (indexes) of the owned objects and one daemon per
SpeculativeDeployment that runs its :class:`~specguard.controller._loop.ResourceLoop`.

Why a daemon and indexes rather than on.create/on.update handlers: kopf's change handlers
keep their bookkeeping in annotations on the resource (a write per change, on an object a
GitOps tool owns), and a drift or a swap needs the cluster's state between changes anyway.
The daemon starts when the resource appears (create, or resume after an operator restart),
sees every change of its spec and annotations at its next tick through kopf's live ``body``,
and is cancelled when the resource goes (its owned objects go by owner reference).
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


@kopf.daemon(c.GROUP, c.VERSION, c.PLURAL, cancellation_timeout=10.0)
async def speculative_deployment(
    *,
    body: Any,
    namespace: str | None,
    name: str,
    stopped: Any,
    sg_deployments: Any = None,
    sg_pods: Any = None,
    sg_services: Any = None,
    **_: Any,
) -> None:
    ctx = CONTEXT
    if ctx is None:
        raise kopf.PermanentError("specguard run did not set up the controller context")
    namespace = namespace or "default"
    loop = ResourceLoop(ctx.kube, ctx.metrics, namespace, name)
    key = (namespace, name)
    try:
        while not stopped:
            observed = Observed(
                deployments=_values(sg_deployments, key),
                pods=_values(sg_pods, key),
                services=_values(sg_services, key),
            )
            try:
                await loop.tick(body, observed)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s/%s: tick failed", namespace, name)
            await asyncio.sleep(ctx.tick_s)
    finally:
        await loop.aclose()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Only warnings of kopf's own become Events; ours are posted by the loop with numbers.
    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = "specguard.io/finalizer"
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
