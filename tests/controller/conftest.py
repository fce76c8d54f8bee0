from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from specguard.api._resource import SpeculativeDeployment, parse_resource
from specguard_testkit._cluster import LocalCluster
from specguard_testkit._kubelet import ProcessKubelet

from .kit import install_crd

# What the process kubelet runs as the vLLM image for the ``cluster`` fixture's tests.
SIM_ARGS = ("--profile", "deepseek-v4", "--time-scale", "2")


def resource(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "qwen", "namespace": "llm", "uid": "u-1", "generation": 1},
        "spec": {
            "model": {"name": "Qwen/Qwen3-8B"},
            "replicas": 2,
            "drafter": {"method": "ngram", "numSpeculativeTokens": 4},
            "shadow": {"replicas": 1},
            "evaluation": {"window": "10s", "minRequestsPerArm": 20, "consecutiveWindows": 2},
            "rollback": {"cooldown": "60s", "startupDeadline": "1m"},
        },
    }
    for key, value in spec.items():
        body["spec"][key] = value
    return body


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 applied, as the API server applies a merge patch to the status."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@pytest.fixture
def sd() -> SpeculativeDeployment:
    return parse_resource(resource())


@pytest.fixture(scope="module")
def cluster(local_cluster: LocalCluster, kubelet: ProcessKubelet) -> Iterator[LocalCluster]:
    """The local control plane with the CRD installed, its kubelet running SIM_ARGS (the
    cluster tier's operator scenarios)."""
    install_crd(local_cluster)
    before = kubelet.config.sim_args
    kubelet.config.sim_args = SIM_ARGS
    yield local_cluster
    kubelet.config.sim_args = before
