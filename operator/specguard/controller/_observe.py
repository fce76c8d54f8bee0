"""Cluster objects (plain dicts, as the watch caches hold them) → what the decision needs.

Pure. Pod rules (readiness, URLs, arms) are ``specguard._objects``'.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from specguard._objects import arm_of, lookup, pod_ready
from specguard.api import constants as c
from specguard.controller._swap import ArmObserved
from specguard.judge import Startup


def parse_time(value: Any) -> float | None:
    """RFC 3339 (as the API server writes timestamps) → Unix seconds."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def observe_arms(
    name: str, deployments: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[c.Arm, ArmObserved]:
    """Per arm: the Deployment's replicas, the pods that exist and the ready ones."""
    replicas = dict.fromkeys(c.ARMS, 0)
    for dep in deployments:
        for arm in c.ARMS:
            if lookup(dep, "metadata", "name") == c.arm_deployment_name(name, arm):
                value = lookup(dep, "spec", "replicas")
                replicas[arm] = value if isinstance(value, int) else 1
    count = dict.fromkeys(c.ARMS, 0)
    ready = dict.fromkeys(c.ARMS, 0)
    for pod in pods:
        pod_arm = arm_of(pod, name)
        if pod_arm is None or lookup(pod, "status", "phase") in ("Succeeded", "Failed"):
            continue
        count[pod_arm] += 1
        ready[pod_arm] += pod_ready(pod)
    return {arm: ArmObserved(replicas[arm], count[arm], ready[arm]) for arm in c.ARMS}


def drafter_startup(name: str, pods: Iterable[Mapping[str, Any]]) -> Startup:
    """The drafter arm's startup: not ready while some drafter pod (not being deleted) has
    never become ready, since the creation of the oldest such pod."""
    waiting: list[float] = []
    restarts = 0
    seen = False
    for pod in pods:
        if arm_of(pod, name) != c.ARM_SPECULATIVE or lookup(pod, "metadata", "deletionTimestamp"):
            continue
        seen = True
        if pod_ready(pod):
            continue
        created = parse_time(lookup(pod, "metadata", "creationTimestamp"))
        if created is not None:
            waiting.append(created)
        for status in lookup(pod, "status", "containerStatuses") or []:
            count = lookup(status, "restartCount")
            restarts += count if isinstance(count, int) else 0
    if not seen:
        return Startup(None, None)
    if not waiting:
        return Startup(True, None)
    return Startup(False, min(waiting), restarts)
