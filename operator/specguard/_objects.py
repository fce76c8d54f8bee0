"""Reading Kubernetes objects as the API server sends them (plain nested dicts), and the one
home of specguard's rules for its pods: which pods take traffic, which answer reads, and the
URL of each. Pure.

Two readiness rules, on purpose:

- :func:`pod_ready` — the pod takes client traffic: phase Running, condition Ready True,
  and not being deleted. The routers send requests only to such pods, the swap planner
  counts only them, and the drafter's startup guardrail waits for them.
- :func:`pod_running` — the pod's processes run and it has an IP, ready or not, being
  deleted or not. Reads that lose data when skipped use it: a router being drained (its
  pod terminating, no longer Ready) still finishes its requests and holds their samples in
  its ring until it exits, so the operator reads ``/samples`` from every running router.
  Skipping it would drop the last seconds of every router that a rollout replaces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specguard.api import constants as c

# vLLM's default port, and the names a serving port goes by in pod specs.
VLLM_PORT = 8000
PORT_NAMES = ("http", "vllm", "serve")


def lookup(obj: Any, *path: str) -> Any:
    """The value at ``path`` in nested mappings (``lookup(pod, "status", "phase")``), or None
    where a key is missing or a level is not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def label(obj: Any, key: str) -> str | None:
    value = lookup(obj, "metadata", "labels", key)
    return value if isinstance(value, str) else None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Does the pod take client traffic? Running, Ready, not being deleted."""
    if lookup(pod, "metadata", "deletionTimestamp"):
        return False
    if lookup(pod, "status", "phase") != "Running":
        return False
    for condition in lookup(pod, "status", "conditions") or []:
        if lookup(condition, "type") == "Ready":
            return bool(lookup(condition, "status") == "True")
    return False


def pod_running(pod: Mapping[str, Any]) -> bool:
    """Do the pod's processes run at an IP (ready or not, being deleted or not)?"""
    return lookup(pod, "status", "phase") == "Running" and bool(lookup(pod, "status", "podIP"))


def pod_url(pod: Mapping[str, Any], port: int) -> str | None:
    """``http://<pod IP>:<port>`` (an IPv6 address in brackets), None without an IP."""
    ip = lookup(pod, "status", "podIP")
    if not isinstance(ip, str) or not ip:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}"


def pod_port(pod: Mapping[str, Any]) -> int:
    """The serving port a pod declares: a port named http (or vllm, serve), else 8000 if
    declared, else the first declared port, else vLLM's default 8000."""
    ports: list[Mapping[str, Any]] = []
    for container in lookup(pod, "spec", "containers") or []:
        ports.extend(p for p in (lookup(container, "ports") or []) if isinstance(p, Mapping))
    numbers = [p["containerPort"] for p in ports if isinstance(p.get("containerPort"), int)]
    for name in PORT_NAMES:
        for port in ports:
            number = port.get("containerPort")
            if port.get("name") == name and isinstance(number, int):
                return number
    if VLLM_PORT in numbers or not numbers:
        return VLLM_PORT
    return int(numbers[0])


def arm_of(pod: Mapping[str, Any], name: str) -> c.Arm | None:
    """The arm of a vLLM pod of SpeculativeDeployment ``name`` (None for any other pod)."""
    if label(pod, c.LABEL_DEPLOYMENT) != name:
        return None
    value = label(pod, c.LABEL_ARM)
    return next((arm for arm in c.ARMS if arm == value), None)


def router_urls(name: str, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Base URLs of ``name``'s router pods to read samples from: every running one
    (:func:`pod_running`: terminating routers still hold samples)."""
    urls = (
        pod_url(pod, c.ROUTER_PORT)
        for pod in pods
        if label(pod, c.LABEL_ROUTER) == name and pod_running(pod)
    )
    return sorted(u for u in urls if u is not None)


def ready_router_urls(name: str, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Base URLs of ``name``'s router pods that take client traffic (:func:`pod_ready`)."""
    urls = (
        pod_url(pod, c.ROUTER_PORT)
        for pod in pods
        if label(pod, c.LABEL_ROUTER) == name and pod_ready(pod)
    )
    return sorted(u for u in urls if u is not None)


def vllm_urls(
    name: str, pods: Iterable[Mapping[str, Any]], port: int | None = None
) -> dict[c.Arm, list[str]]:
    """Base URLs of ``name``'s ready vLLM pods per arm; ``port`` None: the one each pod
    declares (:func:`pod_port`)."""
    out: dict[c.Arm, list[str]] = {arm: [] for arm in c.ARMS}
    for pod in pods:
        arm = arm_of(pod, name)
        url = pod_url(pod, pod_port(pod) if port is None else port)
        if arm is not None and url is not None and pod_ready(pod):
            out[arm].append(url)
    return {arm: sorted(urls) for arm, urls in out.items()}


__all__ = [
    "PORT_NAMES",
    "VLLM_PORT",
    "arm_of",
    "label",
    "lookup",
    "pod_port",
    "pod_ready",
    "pod_running",
    "pod_url",
    "ready_router_urls",
    "router_urls",
    "vllm_urls",
]
