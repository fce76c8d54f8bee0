"""Fake GPU nodes: Node objects with nvidia.com/gpu capacity that the real scheduler uses.

A hand-made Node is tainted ``node.kubernetes.io/not-ready:NoSchedule`` by admission and,
with the node-lifecycle controller off, nothing removes the taint: we set the Ready
condition through the status subresource and then drop the taint ourselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specguard_testkit._access import ClusterAccess, raise_for_status

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class NodeSpec:
    gpus: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    cpu: str = "96"
    memory: str = "1024Gi"
    pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)


def node_manifest(name: str, spec: NodeSpec) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        GPU_PRODUCT_LABEL: spec.gpu_product,
        "nvidia.com/gpu.count": str(spec.gpus),
        "nvidia.com/gpu.present": "true",
        **spec.labels,
    }
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def ready_condition() -> dict[str, str]:
    now = now_rfc3339()
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "specguard process kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def node_status(spec: NodeSpec) -> dict[str, Any]:
    resources = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
        "ephemeral-storage": "1Ti",
        GPU_RESOURCE: str(spec.gpus),
    }
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [ready_condition()],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "nodeInfo": {
            "kubeletVersion": "v1.20.2-specguard",
            "kubeProxyVersion": "v1.20.2-specguard",
            "containerRuntimeVersion": "process://specguard",
            "operatingSystem": "linux",
            "architecture": "amd64",
            "osImage": "specguard process kubelet",
            "kernelVersion": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


def register_nodes(access: ClusterAccess, names: Iterable[str], spec: NodeSpec) -> None:
    """Create each node (or reuse it), make it Ready with GPU capacity, untaint it."""
    with access.client() as client:
        for name in names:
            response = client.post("/api/v1/nodes", json=node_manifest(name, spec))
            if response.status_code != 409:
                raise_for_status(response)
            raise_for_status(
                client.patch(
                    f"/api/v1/nodes/{name}/status",
                    json={"status": node_status(spec)},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
            )
            remove_not_ready_taint(access, name)


def remove_not_ready_taint(access: ClusterAccess, name: str) -> None:
    with access.client() as client:
        for _ in range(5):
            node = raise_for_status(client.get(f"/api/v1/nodes/{name}")).json()
            taints = node["spec"].get("taints") or []
            kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
            if len(kept) == len(taints):
                return
            # Replace with the resourceVersion we read: a concurrent writer makes us retry.
            node["spec"]["taints"] = kept
            response = client.put(f"/api/v1/nodes/{name}", json=node)
            if response.status_code != 409:
                raise_for_status(response)
                return
        raise RuntimeError(f"node {name}: could not remove the {NOT_READY_TAINT} taint")


def heartbeat_patch() -> dict[str, Any]:
    """Strategic-merge patch that renews the Ready condition (conditions merge by type)."""
    condition = ready_condition()
    del condition["lastTransitionTime"]  # unchanged while it stays Ready
    return {"status": {"conditions": [condition]}}
