"""Labels and metadata shared by every object rendered for one SpeculativeDeployment."""

from __future__ import annotations

from typing import Any

from specguard import __version__
from specguard.api import SpeculativeDeployment
from specguard.api import constants as c


def common_labels(sd: SpeculativeDeployment, component: str) -> dict[str, str]:
    return {
        c.LABEL_APP_NAME: "specguard",
        c.LABEL_APP_INSTANCE: sd.name,
        c.LABEL_APP_COMPONENT: component,
        c.LABEL_APP_PART_OF: "specguard",
        c.LABEL_APP_MANAGED_BY: c.MANAGED_BY,
    }


def arm_selector(sd: SpeculativeDeployment, arm: str) -> dict[str, str]:
    """What picks the vLLM pods of one arm (a Deployment's selector is immutable: keep it small)."""
    return {c.LABEL_DEPLOYMENT: sd.name, c.LABEL_ARM: arm}


def arm_labels(sd: SpeculativeDeployment, arm: str) -> dict[str, str]:
    return {**common_labels(sd, arm), **arm_selector(sd, arm)}


def router_selector(sd: SpeculativeDeployment) -> dict[str, str]:
    return {c.LABEL_ROUTER: sd.name}


def router_labels(sd: SpeculativeDeployment) -> dict[str, str]:
    return {**common_labels(sd, "router"), **router_selector(sd)}


def object_meta(sd: SpeculativeDeployment, name: str, labels: dict[str, str]) -> dict[str, Any]:
    """metadata of an owned object; owner references only when the resource has a uid
    (it came from the API server, not from a file)."""
    # The version label goes on objects, never on pod templates: an operator upgrade must
    # not restart every vLLM pod.
    meta: dict[str, Any] = {
        "name": name,
        "namespace": sd.namespace,
        "labels": {**labels, c.LABEL_APP_VERSION: __version__},
    }
    if sd.metadata.uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": c.API_VERSION,
                "kind": c.KIND,
                "name": sd.name,
                "uid": sd.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta
