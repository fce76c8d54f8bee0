"""Services: `<name>` in front of the router, `<name>-spec` and `<name>-base` per arm."""

from __future__ import annotations

from typing import Any

from specguard.api import SpeculativeDeployment
from specguard.api import constants as c
from specguard.render._meta import (
    arm_labels,
    arm_selector,
    object_meta,
    router_labels,
    router_selector,
)


def _service(
    sd: SpeculativeDeployment, name: str, labels: dict[str, str], selector: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(sd, name, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            # Clients use the port vLLM itself would have: the router is a drop-in.
            "ports": [
                {
                    "name": "http",
                    "port": sd.spec.runtime.port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }


def desired_front_service(sd: SpeculativeDeployment) -> dict[str, Any]:
    return _service(sd, sd.name, router_labels(sd), router_selector(sd))


def desired_arm_service(sd: SpeculativeDeployment, arm: str) -> dict[str, Any]:
    return _service(
        sd, c.arm_deployment_name(sd.name, arm), arm_labels(sd, arm), arm_selector(sd, arm)
    )
