"""The operator's writes to the API server: server-side apply of owned objects, status
patches, Events. One field manager, ``specguard``; the spec of a SpeculativeDeployment is
never written.

The official ``kubernetes`` client runs in worker threads (it loads in-cluster and
KUBECONFIG credentials of every kind); every request is counted in the operator's metrics
(``specguard_api_requests_total{verb}``), which the scale benchmark reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from specguard.api import constants as c

FIELD_MANAGER = "specguard"
API_THREADS = 16  # worker threads (and pooled connections) for API requests

Counter = Callable[[str], None]


class KubeError(RuntimeError):
    """An API request failed; ``status`` is the HTTP status (0 when none came back)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def load_api_client() -> Any:
    """An ApiClient from the pod's service account, else KUBECONFIG / ~/.kube/config."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = API_THREADS
    return client.ApiClient(configuration)


def object_path(obj: Mapping[str, Any]) -> str:
    """The API path of an owned object (``api.constants.OWNED_KINDS``)."""
    version, plural = c.OWNED_KINDS[obj["kind"]]
    prefix = "api/v1" if version == "v1" else f"apis/{version}"
    meta = obj["metadata"]
    return f"/{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"


def resource_path(namespace: str, name: str) -> str:
    return f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{namespace}/{c.PLURAL}/{name}"


class Kube:
    def __init__(self, api: Any, count: Counter | None = None) -> None:
        self.api = api
        self._count = count or (lambda _verb: None)

    def _call(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        from kubernetes.client.rest import ApiException

        self._count(verb)
        try:
            return self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                response_type="object",
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=True,
            )
        except ApiException as exc:
            detail = exc.body if isinstance(exc.body, str) else exc.reason
            with contextlib.suppress(ValueError, AttributeError):
                detail = json.loads(detail).get("message") or detail  # the Status' message
            raise KubeError(f"{method} {path}: {exc.status} {detail}"[:500], exc.status) from exc
        except Exception as exc:  # connection errors and the like
            raise KubeError(f"{method} {path}: {type(exc).__name__}: {exc}"[:500]) from exc

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply under field manager ``specguard`` (force: the operator owns
        these objects; another manager's change to a field it sets is drift)."""
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        result: dict[str, Any] = await asyncio.to_thread(
            self._call, "apply", "PATCH", object_path(obj), body=dict(obj), query=query,
            content_type="application/apply-patch+yaml",
        )  # fmt: skip
        return result

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """A merge patch of the status subresource (the only way the operator writes the
        resource; ``null`` removes a field the new status no longer has)."""
        await asyncio.to_thread(
            self._call, "status", "PATCH", resource_path(namespace, name) + "/status",
            body={"status": dict(status)}, content_type="application/merge-patch+json",
        )  # fmt: skip

    async def get_resource(self, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await asyncio.to_thread(
            self._call, "get", "GET", resource_path(namespace, name)
        )
        return result

    async def event(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        component: str = "specguard",
    ) -> None:
        """A core/v1 Event about ``involved`` (a SpeculativeDeployment body)."""
        meta = involved.get("metadata", {})
        namespace = meta.get("namespace", "default")
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'sd')}.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": c.API_VERSION,
                "kind": c.KIND,
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await asyncio.to_thread(
            self._call, "event", "POST", f"/api/v1/namespaces/{namespace}/events", body=body
        )
