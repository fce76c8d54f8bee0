"""Cluster objects (plain dicts, as the API server sends them) → what the controller needs.

Pure: the kopf indexes hand these functions the Deployments and pods they hold.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specguard._objects import lookup
from specguard.api import constants as c
from specguard.controller._swap import ArmObserved
from specguard.router import pod_ready


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


def arm_of(pod: Mapping[str, Any], name: str) -> str | None:
    labels = lookup(pod, "metadata", "labels") or {}
    if labels.get(c.LABEL_DEPLOYMENT) != name:
        return None
    arm = labels.get(c.LABEL_ARM)
    return str(arm) if arm in c.ARMS else None


def observe_arms(
    name: str, deployments: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, ArmObserved]:
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


@dataclass(frozen=True, slots=True)
class DrafterStartup:
    """The drafter arm's startup: ``ready`` False while some drafter pod has never become
    ready; ``since`` is the creation time of the oldest such pod."""

    ready: bool | None
    since: float | None
    restarts: int = 0


def drafter_startup(name: str, pods: Iterable[Mapping[str, Any]]) -> DrafterStartup:
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
        return DrafterStartup(None, None)
    if not waiting:
        return DrafterStartup(True, None)
    return DrafterStartup(False, min(waiting), restarts)


def router_urls(name: str, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Base URLs of the resource's ready router pods."""
    urls = []
    for pod in pods:
        labels = lookup(pod, "metadata", "labels") or {}
        ip = lookup(pod, "status", "podIP")
        if labels.get(c.LABEL_ROUTER) != name or not ip or not pod_ready(pod):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        urls.append(f"http://{host}:{c.ROUTER_PORT}")
    return sorted(urls)


def vllm_urls(name: str, pods: Iterable[Mapping[str, Any]], port: int) -> dict[str, list[str]]:
    """Ready vLLM pods' base URLs per arm (the scrape source)."""
    out: dict[str, list[str]] = {arm: [] for arm in c.ARMS}
    for pod in pods:
        arm = arm_of(pod, name)
        ip = lookup(pod, "status", "podIP")
        if arm is None or not ip or not pod_ready(pod):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        out[arm].append(f"http://{host}:{port}")
    return {arm: sorted(urls) for arm, urls in out.items()}
