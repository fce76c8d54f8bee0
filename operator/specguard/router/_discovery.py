"""Kubernetes discovery: ready pods by label, roles and mirror share from the resource.

Pure part (`endpoints_from_pods`, `roles_from_resource`) turns API objects (plain dicts,
camelCase as the API server sends them) into what `Topology` needs, and is unit-tested
alone. I/O part (`KubeDiscovery`) uses the official `kubernetes` client in one worker
thread: a list-then-watch of pods by label selector, re-listing when the watch expires or
the resource version is too old, and a poll of the SpeculativeDeployment every few seconds.

Why the sync client in a thread rather than raw aiohttp: it already loads in-cluster and
KUBECONFIG credentials (tokens, client certificates, exec plugins) and decodes watch
streams; the router's event loop only receives finished snapshots through
``call_soon_threadsafe``, so the proxy path never waits on the API server. Why poll the
resource: its status changes a few times an hour; a 2-second poll is cheap and has no
watch-expiry edge cases, and a role swap is preceded by a slow rolling swap of pods anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from specguard._objects import arm_of, lookup, pod_port, pod_ready, pod_url
from specguard.api import constants as c
from specguard.judge import Arm, LoadMatch
from specguard.router._pool import Endpoint, Topology

log = logging.getLogger("specguard.router._discovery")


def endpoints_from_pods(pods: Iterable[Mapping[str, Any]], deployment: str) -> list[Endpoint]:
    """Ready vLLM pods of this deployment with an arm label and an IP, as endpoints."""
    out: list[Endpoint] = []
    for pod in pods:
        arm = arm_of(pod, deployment)
        url = pod_url(pod, pod_port(pod))
        if arm is None or url is None or not pod_ready(pod):
            continue
        out.append(Endpoint(lookup(pod, "metadata", "name") or url.removeprefix("http://"),
                            url, arm))  # fmt: skip
    return out


def roles_from_resource(resource: Mapping[str, Any] | None) -> tuple[Arm, float]:
    """(serving arm, mirror share) from a SpeculativeDeployment: ``status.mode`` and
    ``status.arms.mirrorShare`` as the operator wrote them.

    The share is the operator's alone (controller/_mirror.py: the routers' ceiling, 1 while
    the shadow is judged, 0 otherwise). Before the operator has written it (no status yet,
    or no operator running) nothing is judged, so nothing is mirrored: share 0."""
    mode: Arm = (
        c.ARM_BASELINE if lookup(resource, "status", "mode") == c.ARM_BASELINE
        else c.ARM_SPECULATIVE
    )  # fmt: skip
    share = lookup(resource, "status", "arms", "mirrorShare")
    if isinstance(share, int | float) and not isinstance(share, bool):
        return mode, min(max(float(share), 0.0), 1.0)
    return mode, 0.0


def swapping_from_resource(resource: Mapping[str, Any] | None) -> bool:
    """``status.arms.swapping``: the operator is swapping the arms, serve from both."""
    return lookup(resource, "status", "arms", "swapping") is True


def load_match_from_resource(resource: Mapping[str, Any] | None) -> LoadMatch:
    """``status.arms.loadMatch``: how the shadow is loaded (the operator detects it from
    the traffic); ``in_flight`` until it says otherwise."""
    arrivals = lookup(resource, "status", "arms", "loadMatch") == "arrivals"
    return "arrivals" if arrivals else "in_flight"


def routes_from_resource(resource: Mapping[str, Any] | None) -> dict[str, Arm]:
    """``status.arms.routes``: request domains served by the other arm (routing by domain);
    entries that are not a domain and an arm are ignored."""
    routes = lookup(resource, "status", "arms", "routes")
    if not isinstance(routes, Mapping):
        return {}
    return {
        domain: arm
        for domain, arm in routes.items()
        if isinstance(domain, str) and arm in ("speculative", "baseline")
    }


class KubeDiscovery:
    """Keeps a `Topology` in step with the cluster."""

    def __init__(
        self,
        deployment: str,
        namespace: str,
        topology: Topology,
        *,
        on_change: Callable[[], None] | None = None,
        poll_interval: float = 2.0,
        watch_timeout_s: int = 30,
    ) -> None:
        self.deployment = deployment
        self.namespace = namespace
        self.topology = topology
        self._on_change = on_change
        self._poll_interval = poll_interval
        self._watch_timeout = watch_timeout_s
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._poller: asyncio.Task[None] | None = None
        self._api: Any = None
        self.synced = asyncio.Event()
        self.lists = 0  # full pod lists: one at start, again only after an expired watch
        self.bookmarks = 0  # BOOKMARK events the watch resumed from

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._api = await asyncio.to_thread(_api_client)
        self._thread = threading.Thread(target=self._watch_pods, name="pod-watch", daemon=True)
        self._thread.start()
        self._poller = self._loop.create_task(self._poll_resource())

    async def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        # The watch thread is a daemon and leaves at its next event or timeout.

    # -- the SpeculativeDeployment -----------------------------------------------------

    async def _poll_resource(self) -> None:
        from kubernetes import client

        custom = client.CustomObjectsApi(self._api)
        while not self._stop.is_set():
            try:
                resource = await asyncio.to_thread(
                    custom.get_namespaced_custom_object,
                    c.GROUP, c.VERSION, self.namespace, c.PLURAL, self.deployment,
                )  # fmt: skip
            except Exception as exc:
                status = getattr(exc, "status", None)
                log.warning("reading %s/%s failed (%s)", c.PLURAL, self.deployment, status or exc)
                resource = None if status == 404 else _KEEP
            if resource is not _KEEP:
                mode, share = roles_from_resource(resource)
                swapping = swapping_from_resource(resource)
                rule = load_match_from_resource(resource)
                routes = {d: a for d, a in routes_from_resource(resource).items() if a != mode}
                top = self.topology
                now = (top.mode, top.mirror_share, top.swapping, top.load_match, top.routes)
                if (mode, share, swapping, rule, routes) != now:
                    log.info("roles: serving %s, mirror share %.3f, load match %s%s%s", mode,
                             share, rule,
                             ", swapping: serving from both arms" if swapping else "",
                             "".join(f", {d} to {a}" for d, a in sorted(routes.items())),
                             )  # fmt: skip
                    top.set_roles(mode, share, swapping, rule, routes)
                    self._changed()
            await asyncio.sleep(self._poll_interval)

    # -- pods (worker thread) ----------------------------------------------------------

    def _watch_pods(self) -> None:
        from kubernetes import client, watch

        core = client.CoreV1Api(self._api)
        selector = f"{c.LABEL_DEPLOYMENT}={self.deployment}"
        pods: dict[str, dict[str, Any]] = {}
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    self.lists += 1
                    listed = core.list_namespaced_pod(self.namespace, label_selector=selector)
                    pods = {
                        item.metadata.name: self._api.sanitize_for_serialization(item)
                        for item in listed.items
                    }
                    version = listed.metadata.resource_version
                    self._publish(list(pods.values()))
                stream = watch.Watch().stream(
                    core.list_namespaced_pod, self.namespace, label_selector=selector,
                    resource_version=version, timeout_seconds=self._watch_timeout,
                    allow_watch_bookmarks=True,
                )  # fmt: skip
                for event in stream:
                    if self._stop.is_set():
                        return
                    obj = event["object"]
                    kind = event["type"]
                    if kind == "ERROR":
                        version = None  # usually 410 Gone: list again
                        break
                    if kind == "BOOKMARK":
                        # Only a resourceVersion to resume from; the client leaves the
                        # object undecoded (a dict), unlike every other event's.
                        self.bookmarks += 1
                        version = lookup(obj, "metadata", "resourceVersion") or version
                        continue
                    version = obj.metadata.resource_version
                    if kind == "DELETED":
                        pods.pop(obj.metadata.name, None)
                    else:
                        pods[obj.metadata.name] = self._api.sanitize_for_serialization(obj)
                    self._publish(list(pods.values()))
            except Exception as exc:
                status = getattr(exc, "status", None)
                log.warning("pod watch failed (%s); listing again", status or type(exc).__name__)
                version = None
                self._stop.wait(1.0)

    def _publish(self, pods: list[dict[str, Any]]) -> None:
        endpoints = endpoints_from_pods(pods, self.deployment)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._apply, endpoints)

    def _apply(self, endpoints: list[Endpoint]) -> None:
        self.topology.set_endpoints(endpoints)
        self.synced.set()
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


_KEEP: Any = object()


class DiscoveryError(RuntimeError):
    """No way to reach the API server; the message says why."""


def _api_client() -> Any:
    """An API client from the service account in a pod, else from KUBECONFIG / ~/.kube."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as exc:
            raise DiscoveryError(
                f"no Kubernetes credentials: not in a pod, and no usable KUBECONFIG ({exc})"
            ) from exc
    return client.ApiClient()
