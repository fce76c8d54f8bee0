"""The router Deployment and the RBAC it needs to find pods and read the mode."""

from __future__ import annotations

from typing import Any

from specguard.api import SpeculativeDeployment
from specguard.api import constants as c
from specguard.render._meta import object_meta, router_labels, router_selector


def router_command(sd: SpeculativeDeployment) -> list[str]:
    return [
        "specguard",
        "router",
        "--deployment",
        sd.name,
        "--namespace",
        sd.namespace,
        "--port",
        str(c.ROUTER_PORT),
        # The pod's own address rather than 0.0.0.0: the same on a real cluster, and
        # replicas sharing one network namespace (the local process kubelet) don't collide.
        # The router adds a localhost listener for a non-loopback pod IP (port-forward).
        "--host",
        "$(POD_IP)",
    ]


def desired_router_deployment(sd: SpeculativeDeployment) -> dict[str, Any]:
    labels = router_labels(sd)
    name = c.router_name(sd.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(sd, name, labels),
        "spec": {
            "replicas": c.ROUTER_REPLICAS,
            "selector": {"matchLabels": router_selector(sd)},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "enableServiceLinks": False,
                    # Pod Security "restricted": the router needs no privilege at all.
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": c.SPECGUARD_UID,
                        "runAsGroup": c.SPECGUARD_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "router",
                            "image": c.specguard_image(),
                            "command": router_command(sd),
                            "env": [
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                }
                            ],
                            "ports": [
                                {"name": "http", "containerPort": c.ROUTER_PORT, "protocol": "TCP"}
                            ],
                            "readinessProbe": {
                                "httpGet": {"path": "/health", "port": "http"},
                                "periodSeconds": 5,
                            },
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "128Mi"},
                                "limits": {"memory": "512Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def desired_router_service_account(sd: SpeculativeDeployment) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(sd, c.router_name(sd.name), router_labels(sd)),
    }


def desired_router_role(sd: SpeculativeDeployment) -> dict[str, Any]:
    read = ["get", "list", "watch"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(sd, c.router_name(sd.name), router_labels(sd)),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": read},
            {"apiGroups": [c.GROUP], "resources": [c.PLURAL], "verbs": read},
        ],
    }


def desired_router_role_binding(sd: SpeculativeDeployment) -> dict[str, Any]:
    name = c.router_name(sd.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(sd, name, router_labels(sd)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": sd.namespace}],
    }
