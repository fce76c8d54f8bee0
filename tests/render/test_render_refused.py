"""Specs that once passed validation and rendered Deployments the API server refuses.

Each case is a spec specguard used to accept, the field its error must now name, and a
corrected twin. The twin must render objects that strict kubernetes-validate accepts, so
the case proves the refusal is about the bad value, not the rest of the spec; where the
bad value is a schema error in the rendered Deployment, the test also puts it there and
shows kubernetes-validate refusing it (what rendering the old acceptance produced).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest

from specguard.api import SpecError, parse_resource
from specguard.render import render_all

from .test_render_golden import KUBE_VERSION
from .test_render_objects import BASE

Pod = dict[str, Any]
Inject = Callable[[Pod], None] | None


def _container(pod: Pod) -> Pod:
    first: Pod = pod["containers"][0]
    return first


def _set(section: str, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        spec.setdefault(section, {})[key] = value

    return apply


# (id, change making the spec bad, field named, fragment, change making it good, injection)
CASES: list[
    tuple[
        str,
        Callable[[dict[str, Any]], None],
        str,
        str,
        Callable[[dict[str, Any]], None],
        Inject,
    ]
] = [
    (
        "toleration key not a string",
        _set("runtime", "tolerations", [{"key": 5, "operator": "Exists"}]),
        "spec.runtime.tolerations[0].key",
        "valid string",
        _set("runtime", "tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists"}]),
        lambda pod: pod.__setitem__("tolerations", [{"key": 5, "operator": "Exists"}]),
    ),
    (
        "affinity part not a mapping",
        _set("runtime", "affinity", {"nodeAffinity": "x"}),
        "spec.runtime.affinity.nodeAffinity",
        "dictionary",
        _set("runtime", "affinity", {"nodeAffinity": {}}),
        lambda pod: pod.__setitem__("affinity", {"nodeAffinity": "x"}),
    ),
    (
        "unknown env source",
        _set("runtime", "env", [{"name": "A", "valueFrom": {"x": 1}}]),
        "spec.runtime.env[0].valueFrom.x",
        "unknown field",
        _set("runtime", "env", [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "a"}}}]),
        lambda pod: _container(pod)["env"].append({"name": "A", "valueFrom": {"x": 1}}),
    ),
    (
        "two env sources",
        _set(
            "runtime",
            "env",
            [
                {
                    "name": "A",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "status.podIP"},
                        "secretKeyRef": {"name": "s", "key": "k"},
                    },
                }
            ],
        ),
        "spec.runtime.env[0].valueFrom",
        "exactly one",
        _set(
            "runtime",
            "env",
            [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        ),
        None,
    ),
    (
        "env name with =",
        _set("runtime", "env", [{"name": "A=B", "value": "1"}]),
        "spec.runtime.env[0].name",
        "pattern",
        _set("runtime", "env", [{"name": "A_B", "value": "1"}]),
        None,
    ),
    (
        "gpu resource without domain",
        _set("runtime", "gpuResource", "gpu"),
        "spec.runtime.gpuResource",
        "pattern",
        _set("runtime", "gpuResource", "amd.com/gpu"),
        None,
    ),
    (
        "cache on /dev/shm",
        _set("runtime", "modelCache", {"claimName": "cache", "mountPath": "/dev/shm"}),
        "spec.runtime.modelCache.mountPath",
        "mounted by specguard",
        _set("runtime", "modelCache", {"claimName": "cache", "mountPath": "/models"}),
        None,
    ),
    (
        "claim name not DNS-1123",
        _set("runtime", "modelCache", {"claimName": "HF_Cache"}),
        "spec.runtime.modelCache.claimName",
        "pattern",
        _set("runtime", "modelCache", {"claimName": "hf-cache"}),
        None,
    ),
    (
        "secret name not DNS-1123",
        _set("runtime", "hfTokenSecret", {"name": "HF Token"}),
        "spec.runtime.hfTokenSecret.name",
        "pattern",
        _set("runtime", "hfTokenSecret", {"name": "hf-token"}),
        None,
    ),
    (
        "negative shm size",
        _set("runtime", "shmSize", "-1Gi"),
        "spec.runtime.shmSize",
        "non-negative",
        _set("runtime", "shmSize", "1Gi"),
        None,
    ),
    (
        "memory request above limit",
        _set(
            "runtime", "resources", {"requests": {"memory": "96Gi"}, "limits": {"memory": "64Gi"}}
        ),
        "spec.runtime.resources.requests.memory",
        "above the limit 64Gi",
        _set(
            "runtime", "resources", {"requests": {"memory": "64Gi"}, "limits": {"memory": "64Gi"}}
        ),
        None,
    ),
    (
        "adaptive verification in eager mode",
        _set("runtime", "extraArgs", ["--enforce-eager"]),
        "spec.drafter.adaptiveVerification",
        "--enforce-eager",
        _set("runtime", "extraArgs", ["--max-num-seqs=64"]),
        None,
    ),
    (
        "adaptive verification with pipeline parallelism",
        _set("runtime", "extraArgs", ["--pipeline-parallel-size", "2"]),
        "spec.drafter.adaptiveVerification",
        "--pipeline-parallel-size 2",
        _set("runtime", "extraArgs", ["--pipeline-parallel-size", "1"]),
        None,
    ),
]


def _resource(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    change(obj["spec"])
    return obj


def _valid(obj: dict[str, Any]) -> bool:
    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    ("bad", "path", "fragment", "good", "inject"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_spec_refused_naming_the_field(
    bad: Callable[[dict[str, Any]], None],
    path: str,
    fragment: str,
    good: Callable[[dict[str, Any]], None],
    inject: Inject,
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_resource(_resource(bad))
    messages = [str(problem) for problem in caught.value.problems]
    assert any(m.startswith(f"{path}: ") and fragment in m for m in messages), messages

    objects = render_all(parse_resource(_resource(good)))
    for obj in objects:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    if inject is not None:
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        inject(deployment["spec"]["template"]["spec"])
        assert not _valid(deployment)


def test_every_typed_pod_field_renders_valid_objects() -> None:
    # The typed tolerations, env sources and affinity, all at once, as the API wants them.
    obj = copy.deepcopy(BASE)
    obj["spec"]["runtime"].update(
        tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "a", "value": "b"},
            {"key": "c", "operator": "Equal", "effect": "NoExecute", "tolerationSeconds": 30},
        ],
        env=[
            {
                "name": "S",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}},
            },
            {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a.b"}}},
            {
                "name": "IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            },
            {
                "name": "MEM",
                "valueFrom": {
                    "resourceFieldRef": {
                        "containerName": "vllm",
                        "resource": "limits.memory",
                        "divisor": "1Mi",
                    }
                },
            },
        ],
        affinity={
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"specguard.io/deployment": "qwen"}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
        resources={
            "requests": {"cpu": "1500m", "memory": "64Gi"},
            "limits": {"cpu": 2, "memory": "64Gi"},
        },
    )
    objects = render_all(parse_resource(obj))
    assert all(_valid(o) for o in objects)
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["tolerations"] == obj["spec"]["runtime"]["tolerations"]
    assert pod["affinity"] == obj["spec"]["runtime"]["affinity"]
    assert _container(pod)["env"][1:] == obj["spec"]["runtime"]["env"]
