"""Hypothesis strategies for SpeculativeDeployments: valid ones, and mutations of them that
a user (or a fuzzer) could write: wrong types, unknown and snake_case fields, nulls,
boundary and out-of-range numbers, huge quantities, long and odd strings."""

from __future__ import annotations

import copy
import re
from typing import Any

from hypothesis import strategies as st

from specguard.api._spec import DRAFTER_METHODS, METHODS_WITHOUT_MODEL

from .conftest import resource

Obj = dict[str, Any]

QUANTITIES = ["1", "500m", "1.5", "16Gi", "64Gi", "1Ti", "64Ti", "2k", "1e3", "1E+6", ".5", "+1"]
SAFE_ARGS = [
    "--max-model-len=32768",
    "--gpu-memory-utilization=0.9",
    "--enable-prefix-caching",
    "--model-impl=vllm",
    "--tp",
    "--seed=1",
    "--max-num-seqs",
    "256",
    "--enforce-eager",
    "-pp",
    "1",
]


@st.composite
def valid_specs(draw: st.DrawFn) -> Obj:
    """A spec that both Python and the API server accept."""
    method = draw(st.sampled_from(DRAFTER_METHODS))
    drafter: Obj = {"method": method}
    needs_model = method not in ("ngram", "suffix", "mtp", "dspark")
    if method not in METHODS_WITHOUT_MODEL and (needs_model or draw(st.booleans())):
        drafter["model"] = draw(st.sampled_from(["org/drafter", "RedHatAI/q.speculator.dspark"]))
    k = draw(st.none() | st.integers(1, 32))
    if k is not None:
        drafter["numSpeculativeTokens"] = k
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    if draw(st.booleans()):
        drafter["draftTensorParallelSize"] = draw(st.sampled_from([1, tp]))
    if k is not None and draw(st.booleans()) and draw(st.booleans()):
        cut = draw(st.integers(1, 100))
        small = draw(st.integers(0, k))
        drafter["perBatchSize"] = [
            {"minBatchSize": cut + 1, "maxBatchSize": 4096, "numSpeculativeTokens": 0},
            {"minBatchSize": 1, "maxBatchSize": cut, "numSpeculativeTokens": small},
        ]
    if draw(st.booleans()):
        drafter["extraConfig"] = {"prompt_lookup_max": 5, "note": "x", "nested": {"a": [1, 2.5]}}
    args = draw(st.lists(st.sampled_from(SAFE_ARGS), max_size=4))
    ladder = draw(st.booleans())  # a ladder wants the configured drafter at a fixed length
    if method == "dspark" and "--enforce-eager" not in args and not ladder and draw(st.booleans()):
        drafter["adaptiveVerification"] = True
    runtime: Obj = {"tensorParallelSize": tp}
    if args:
        runtime["extraArgs"] = args
    if draw(st.booleans()):
        request = draw(st.sampled_from(QUANTITIES))
        runtime["resources"] = {
            "requests": {"cpu": request, "memory": "64Gi"},
            "limits": {"memory": "64Gi"},
        }
    if draw(st.booleans()):
        runtime["shmSize"] = draw(st.sampled_from([*QUANTITIES, 1024]))
    if draw(st.booleans()):
        runtime["env"] = [
            {"name": "A", "value": "1"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
        ]
    if draw(st.booleans()):
        seconds = draw(st.integers(0, 10**6))
        runtime["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "a", "value": "b", "effect": "NoExecute", "tolerationSeconds": seconds},
        ]
    if draw(st.booleans()):
        runtime["nodeSelector"] = {"gpu": "h100"}
        runtime["modelCache"] = {"claimName": "cache", "readOnly": True}
        runtime["hfTokenSecret"] = {"name": "hf"}
        runtime["port"] = draw(st.integers(1, 65535))
    # The ladder's rungs, each only where its rules allow it (a mutation breaks them).
    metrics: Obj | None = None
    if draw(st.booleans()):
        metrics = {"type": "prometheus", "prometheusUrl": "http://prom:9090"}
    periodic = draw(st.booleans())
    rungs: list[str] = []
    adaptive_ok = (
        method == "dspark"
        and not drafter.get("adaptiveVerification")
        and "--enforce-eager" not in args
    )
    if ladder and adaptive_ok:
        rungs.append("adaptive")
    fixed = (
        k is not None and "perBatchSize" not in drafter and "adaptiveVerification" not in drafter
    )
    if ladder and fixed and metrics is None:
        rungs.insert(draw(st.integers(0, len(rungs))), "schedule")
    replicas = draw(st.integers(1, 20))
    spec: Obj = {
        "model": {"name": "Qwen/Qwen3.6-35B-A3B"},
        "runtime": runtime,
        "replicas": replicas,
        "drafter": drafter,
        "shadow": {"replicas": draw(st.integers(1, replicas))},
    }
    if periodic:
        spec["shadow"].update({"schedule": "periodic", "every": "6h", "activeFor": "30m"})
    if bool(rungs) or draw(st.booleans()):
        ladder_obj: Obj = {"rungs": rungs}
        if draw(st.booleans()):
            ladder_obj["retryAfter"] = draw(st.sampled_from(["1m", "6h", "168h", "1h30m"]))
        spec["ladder"] = ladder_obj
    if not periodic and metrics is None and draw(st.booleans()):
        spec["routing"] = {"byDomain": True}
    elif draw(st.booleans()):
        spec["routing"] = {"byDomain": False}
    if draw(st.booleans()):
        spec["evaluation"] = {"window": "2m", "tolerance": 0.05, "confidence": 0.95}
        if draw(st.booleans()):
            budget = draw(st.sampled_from([0, 1, 9, 10, 11, 10_000, 10**12, 10**12 + 1]))
            spec["evaluation"]["windowsPerFalseAlarm"] = budget
    if draw(st.booleans()):
        spec["rollback"] = {"policy": "notify", "cooldown": "0s", "startupDeadline": "1h"}
        if draw(st.booleans()):
            spec["rollback"]["toolCallGuardrail"] = draw(st.booleans())
    if metrics is not None:
        spec["metricsSource"] = metrics
    return spec


ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2, 3, 33, 65536, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63,
    2**70, -(2**63), -(2**64), 4.0, 0.5, -0.0, 1e23, 1.5, 1e308, "", " ", "x", "4", "true",
    "16Gi", "64Ti", "65Ti", "1e99", "1e999999999", "-1Gi", "9" * 40, "a" * 300, "a" * 5000,
    "60s", "1h30m", "0s", "25h", " 60s", "Bad_NS!", "é", "nvidia.com/gpu", "dspark", "ngram",
    "Exists", "NoExecute", "periodic", "prometheus", "--tensor-parallel=4", "/dev/shm",
    "adaptive", "schedule", ["adaptive"], ["schedule", "schedule"], ["adaptive", "schedule"],
    [], {}, [1], ["x"], {"a": 1}, {"name": "x"},
]  # fmt: skip

UNKNOWN_KEYS = ["foo", "numSpeculativeToken", "x-y", "", "Spec", "a" * 300]


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (dict keys and list indexes)."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _places(item, (*path, index))
    return found


def _parent(obj: Obj, path: tuple[Any, ...]) -> Any:
    node: Any = obj
    for part in path[:-1]:
        node = node[part]
    return node


def snake_case(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


@st.composite
def mutations(draw: st.DrawFn, obj: Obj) -> Obj:
    """``obj`` (a whole resource) with one to three changes somewhere in spec or metadata."""
    obj = copy.deepcopy(obj)
    for _ in range(draw(st.integers(1, 3))):
        places = [p for p in _places(obj) if p[:1] in (("spec",), ("metadata",)) and len(p) > 1]
        path = draw(st.sampled_from(places))
        parent = _parent(obj, path)
        key = path[-1]
        kind = draw(st.sampled_from(["replace", "replace", "replace", "add", "snake", "delete"]))
        if kind == "replace":
            parent[key] = draw(
                st.sampled_from(ODD_VALUES)
                | st.integers(-(2**65), 2**65)
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.text(max_size=12)
            )
        elif kind == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.sampled_from(UNKNOWN_KEYS))] = draw(st.sampled_from(ODD_VALUES))
        elif kind == "snake" and isinstance(parent, dict) and isinstance(key, str):
            snake = snake_case(key)
            parent[snake] = parent.pop(key)
        elif kind == "delete" and isinstance(parent, dict):
            del parent[key]
    return obj


def resources(name: str = "qwen") -> st.SearchStrategy[Obj]:
    """Valid resources, and about three in four of them mutated."""
    valid = valid_specs().map(lambda spec: resource(spec, name=name))
    return st.one_of(valid, valid.flatmap(mutations), valid.flatmap(mutations))
