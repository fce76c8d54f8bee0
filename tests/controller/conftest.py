from __future__ import annotations

from typing import Any

import pytest

from specguard.api._resource import SpeculativeDeployment, parse_resource


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
