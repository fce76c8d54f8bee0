"""A container's environment and credentials, resolved the way a kubelet does.

- ``envFrom`` first, then ``env`` (later entries win); ``valueFrom`` reads Secrets,
  ConfigMaps, the downward API (``fieldRef``) and ``resourceFieldRef``; ``$(VAR)``
  references to earlier variables are expanded, ``$$`` escapes.
- The pod's service-account token becomes a kubeconfig file (``KUBECONFIG``), so the
  process talks to the apiserver with exactly the pod's RBAC. The token is a bound
  token from the TokenRequest API (bound to the pod, asked for as the pod's node), as the
  projected ``kube-api-access-*`` volume gives a real pod.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import httpx

SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


class ContainerConfigError(Exception):
    """A referenced Secret/ConfigMap/key is missing: the container waits and retries."""


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: unknown references stay as written."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REF.sub(replace, value)


class ObjectCache:
    """Secrets and ConfigMaps of one namespace, read once per container start."""

    def __init__(self, client: httpx.AsyncClient, namespace: str) -> None:
        self._client = client
        self._namespace = namespace
        self._objects: dict[tuple[str, str], dict[str, str] | None] = {}

    async def data(self, kind: str, name: str) -> dict[str, str] | None:
        """Decoded data of secret/configmap ``name``; None when it does not exist."""
        key = (kind, name)
        if key not in self._objects:
            plural = "secrets" if kind == "secret" else "configmaps"
            response = await self._client.get(
                f"/api/v1/namespaces/{self._namespace}/{plural}/{name}"
            )
            if response.status_code == 404:
                self._objects[key] = None
            else:
                response.raise_for_status()
                body = response.json()
                raw: dict[str, str] = body.get("data") or {}
                if kind == "secret":
                    decoded = {k: base64.b64decode(v).decode() for k, v in raw.items()}
                else:
                    decoded = {**raw, **(body.get("binaryData") or {})}
                self._objects[key] = decoded
        return self._objects[key]


def _field_ref(pod: dict[str, Any], path: str) -> str:
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.podIPs": status.get("podIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"unsupported fieldRef {path!r}")


def _resource_ref(container: dict[str, Any], resource: str) -> str:
    kind, _, name = resource.partition(".")
    values = (container.get("resources") or {}).get(kind) or {}
    return str(values.get(name, "0"))


async def _value_from(
    source: dict[str, Any], pod: dict[str, Any], container: dict[str, Any], cache: ObjectCache
) -> str | None:
    for kind, ref_key in (("secret", "secretKeyRef"), ("configmap", "configMapKeyRef")):
        ref = source.get(ref_key)
        if ref is None:
            continue
        data = await cache.data(kind, ref["name"])
        if data is None or ref["key"] not in data:
            if ref.get("optional"):
                return None
            where = f"{kind} {ref['name']!r}" + ("" if data is None else f" key {ref['key']!r}")
            raise ContainerConfigError(f"{where} not found")
        return data[ref["key"]]
    if "fieldRef" in source:
        return _field_ref(pod, source["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in source:
        return _resource_ref(container, source["resourceFieldRef"]["resource"])
    raise ContainerConfigError(f"unsupported valueFrom {sorted(source)}")


async def container_env(
    client: httpx.AsyncClient,
    pod: dict[str, Any],
    container: dict[str, Any],
    initial: dict[str, str] | None = None,
) -> dict[str, str]:
    """``initial`` plus the variables the pod spec gives ``container`` (which win)."""
    cache = ObjectCache(client, pod["metadata"]["namespace"])
    env: dict[str, str] = dict(initial or {})
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, ref_key in (("secret", "secretRef"), ("configmap", "configMapRef")):
            ref = source.get(ref_key)
            if ref is None:
                continue
            data = await cache.data(kind, ref["name"])
            if data is None:
                if ref.get("optional"):
                    continue
                raise ContainerConfigError(f"{kind} {ref['name']!r} not found")
            env.update({prefix + k: v for k, v in data.items()})
    for var in container.get("env") or []:
        if "valueFrom" in var:
            value = await _value_from(var["valueFrom"], pod, container, cache)
            if value is not None:
                env[var["name"]] = value
        else:
            env[var["name"]] = expand(var.get("value", ""), env)
    return env


async def service_account_token(
    client: httpx.AsyncClient, pod: dict[str, Any], container: dict[str, Any]
) -> str | None:
    """The token the pod would find at the service-account path; None when not mounted."""
    mounts = {m["name"]: m for m in container.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    for name, mount in mounts.items():
        if mount.get("mountPath") != SA_MOUNT_PATH or name not in volumes:
            continue
        if "projected" in volumes[name]:
            return await _request_token(client, pod)
    return None


async def _request_token(client: httpx.AsyncClient, pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    account = pod["spec"].get("serviceAccountName") or "default"
    response = await client.post(
        f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 24 * 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        },
    )
    if response.is_error:
        raise ContainerConfigError(f"token request for {account!r}: {response.status_code}")
    token: str = response.json()["status"]["token"]
    return token
