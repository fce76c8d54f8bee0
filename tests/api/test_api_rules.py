"""Every cross-field rule, in Python and as the CRD's CEL, on valid and invalid specs.

Each case breaks exactly one rule (or none). The Python check must name the field path
in its message; the CEL twin, evaluated with cel-python, must refuse exactly the same
objects (both as written and after defaulting, as the API server would see them).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from specguard.api import SpecError, parse_resource
from specguard.api._rules import RULES, check_rules
from specguard.api._spec import Spec

from .conftest import BASE_SPEC, CelRules, resource


def patched(**sections: Any) -> dict[str, Any]:
    """BASE_SPEC with the given sections merged in (None deletes a key)."""
    spec = copy.deepcopy(BASE_SPEC)
    for section, value in sections.items():
        if isinstance(value, dict) and isinstance(spec.get(section), dict):
            for key, item in value.items():
                if item is None:
                    spec[section].pop(key, None)
                else:
                    spec[section][key] = item
        else:
            spec[section] = value
    return spec


EAGLE = {"method": "eagle3", "model": "org/eagle3", "adaptiveVerification": False}
NGRAM = {"method": "ngram", "model": None, "adaptiveVerification": False}
PERIODIC = {"schedule": "periodic", "every": "6h", "activeFor": "30m"}

# (rule that must fail, spec, path the Python message names, fragment of that message)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "adaptive-only-dspark",
        patched(drafter={**EAGLE, "adaptiveVerification": True}),
        "spec.drafter.adaptiveVerification",
        "only supported with method dspark, got eagle3",
    ),
    ("model-required", patched(drafter={**EAGLE, "model": None}), "spec.drafter.model", "eagle3"),
    (
        "model-required",
        patched(drafter={"method": "draft_model", "model": None, "adaptiveVerification": False}),
        "spec.drafter.model",
        "needs a drafter model",
    ),
    ("model-refused", patched(drafter={**NGRAM, "model": "x/y"}), "spec.drafter.model", "ngram"),
    (
        "model-refused",
        patched(drafter={"method": "suffix", "model": "x/y", "adaptiveVerification": False}),
        "spec.drafter.model",
        "take no drafter model",
    ),
    (
        "draft-tp",
        patched(drafter={"draftTensorParallelSize": 4}),
        "spec.drafter.draftTensorParallelSize",
        "must be 1 or spec.runtime.tensorParallelSize, got 4 with "
        "spec.runtime.tensorParallelSize 2",
    ),
    (
        "per-batch-ordered",
        patched(
            drafter={
                "perBatchSize": [
                    {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                    {"minBatchSize": 20, "maxBatchSize": 10, "numSpeculativeTokens": 2},
                ]
            }
        ),
        "spec.drafter.perBatchSize[1].minBatchSize",
        "must not be above maxBatchSize, got 20 above 10",
    ),
    (
        "per-batch-starts-at-one",
        patched(
            drafter={
                "perBatchSize": [{"minBatchSize": 2, "maxBatchSize": 8, "numSpeculativeTokens": 4}]
            }
        ),
        "spec.drafter.perBatchSize",
        "must start at batch size 1, got 2",
    ),
    (
        "per-batch-no-overlap",
        patched(
            drafter={
                "perBatchSize": [
                    {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                    {"minBatchSize": 8, "maxBatchSize": 16, "numSpeculativeTokens": 2},
                ]
            }
        ),
        "spec.drafter.perBatchSize",
        "ranges must not overlap, got ranges 0 (1-8) and 1 (8-16)",
    ),
    (
        "per-batch-no-overlap",
        patched(
            drafter={
                "perBatchSize": [
                    {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                    {"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4},
                ]
            }
        ),
        "spec.drafter.perBatchSize",
        "overlap",
    ),
    (
        "per-batch-needs-k",
        patched(
            drafter={
                "numSpeculativeTokens": None,
                "perBatchSize": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4}],
            }
        ),
        "spec.drafter.numSpeculativeTokens",
        "required when spec.drafter.perBatchSize is set",
    ),
    (
        "per-batch-k-bounded",
        patched(
            drafter={
                "perBatchSize": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 9}]
            }
        ),
        "spec.drafter.perBatchSize[0].numSpeculativeTokens",
        "must not be above spec.drafter.numSpeculativeTokens, got 9 above 8",
    ),
    (
        "extra-config-owned",
        patched(drafter={"extraConfig": {"num_speculative_tokens": 3}}),
        "spec.drafter.extraConfig",
        "got key num_speculative_tokens; set spec.drafter.numSpeculativeTokens instead",
    ),
    (
        "gpu-in-resources",
        patched(runtime={"resources": {"requests": {"nvidia.com/gpu": 2}}}),
        "spec.runtime.resources.requests",
        "is set from spec.runtime.tensorParallelSize; remove it, got nvidia.com/gpu",
    ),
    (
        "gpu-in-resources",
        patched(
            runtime={"gpuResource": "amd.com/gpu", "resources": {"limits": {"amd.com/gpu": 1}}}
        ),
        "spec.runtime.resources.limits",
        "got amd.com/gpu",
    ),
    (
        "hf-token-env",
        patched(
            runtime={"hfTokenSecret": {"name": "hf"}, "env": [{"name": "HF_TOKEN", "value": "x"}]}
        ),
        "spec.runtime.env[0].name",
        "HF_TOKEN is set from spec.runtime.hfTokenSecret",
    ),
    (
        "shadow-not-above-replicas",
        patched(replicas=2, shadow={"replicas": 3}),
        "spec.shadow.replicas",
        "must not be above spec.replicas (the shadow arm gets at most the whole traffic), "
        "got 3 above 2",
    ),
    (
        "periodic-needs-times",
        patched(shadow={"schedule": "periodic", "every": "6h"}),
        "spec.shadow.activeFor",
        "required when schedule is periodic",
    ),
    (
        "continuous-refuses-times",
        patched(shadow={"every": "6h"}),
        "spec.shadow.every",
        "only used when schedule is periodic",
    ),
    (
        "active-shorter-than-every",
        patched(shadow={**PERIODIC, "every": "1h", "activeFor": "1h"}),
        "spec.shadow.activeFor",
        "must be shorter than spec.shadow.every, got 1h with every 1h",
    ),
    (
        "active-covers-window",
        patched(shadow={**PERIODIC, "activeFor": "2m"}, evaluation={"window": "5m"}),
        "spec.shadow.activeFor",
        "must be at least spec.evaluation.window, got 2m with window 5m",
    ),
    (
        "prometheus-url",
        {**BASE_SPEC, "metricsSource": {"type": "prometheus"}},
        "spec.metricsSource.prometheusUrl",
        "required when type is prometheus",
    ),
    ("duration-window", patched(evaluation={"window": "5s"}), "spec.evaluation.window", "10s"),
    ("duration-window", patched(evaluation={"window": "25h"}), "spec.evaluation.window", "25h"),
    ("duration-cooldown", patched(rollback={"cooldown": "200h"}), "spec.rollback.cooldown", "168h"),
    (
        "duration-shutdownTimeout",
        patched(runtime={"shutdownTimeout": "2h"}),
        "spec.runtime.shutdownTimeout",
        "between 0s and 1h, got 2h",
    ),
    (
        "duration-startupDeadline",
        patched(rollback={"startupDeadline": "30s"}),
        "spec.rollback.startupDeadline",
        "between 1m and 24h, got 30s",
    ),
    (
        "duration-every",
        patched(
            shadow={**PERIODIC, "every": "30s", "activeFor": "10s"}, evaluation={"window": "10s"}
        ),
        "spec.shadow.every",
        "between 1m and 168h",
    ),
    (
        "false-alarm-budget",
        patched(evaluation={"windowsPerFalseAlarm": 9}),
        "spec.evaluation.windowsPerFalseAlarm",
        "must be 0 (off) or at least 10, got 9",
    ),
]

# Cases of the rules that keep rendered pods acceptable to the API server.
FIELD_REF = {"fieldRef": {"fieldPath": "status.podIP"}}
INVALID += [
    (
        "env-one-source",
        patched(runtime={"env": [{"name": "A", "valueFrom": {}}]}),
        "spec.runtime.env[0].valueFrom",
        "set exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef, got none",
    ),
    (
        "env-one-source",
        patched(
            runtime={
                "env": [
                    {"name": "A", "value": "1"},
                    {
                        "name": "B",
                        "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}, **FIELD_REF},
                    },
                ]
            }
        ),
        "spec.runtime.env[1].valueFrom",
        "got secretKeyRef, fieldRef",
    ),
    (
        "env-value-or-source",
        patched(runtime={"env": [{"name": "A", "value": "1", "valueFrom": FIELD_REF}]}),
        "spec.runtime.env[0].value",
        "set value or valueFrom, not both",
    ),
    (
        "toleration-key-or-exists",
        patched(runtime={"tolerations": [{"operator": "Equal", "value": "v"}]}),
        "spec.runtime.tolerations[0].operator",
        "must be Exists when key is empty",
    ),
    (
        "toleration-key-or-exists",
        patched(runtime={"tolerations": [{"key": "a"}, {"effect": "NoSchedule"}]}),
        "spec.runtime.tolerations[1].operator",
        "must be Exists when key is empty",
    ),
    (
        "toleration-exists-no-value",
        patched(runtime={"tolerations": [{"key": "a", "operator": "Exists", "value": "b"}]}),
        "spec.runtime.tolerations[0].value",
        "must be empty when operator is Exists",
    ),
    (
        "toleration-seconds-no-execute",
        patched(
            runtime={
                "tolerations": [
                    {
                        "key": "a",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                        "tolerationSeconds": 9,
                    }
                ]
            }
        ),
        "spec.runtime.tolerations[0].tolerationSeconds",
        "only with effect NoExecute, got NoSchedule",
    ),
    (
        "toleration-seconds-no-execute",
        patched(runtime={"tolerations": [{"key": "a", "tolerationSeconds": 9}]}),
        "spec.runtime.tolerations[0].tolerationSeconds",
        "got no effect",
    ),
    (
        "gpu-resource-extended",
        patched(runtime={"gpuResource": "kubernetes.io/gpu"}),
        "spec.runtime.gpuResource",
        "without the requests. prefix, got 'kubernetes.io/gpu'",
    ),
    (
        "gpu-resource-extended",
        patched(runtime={"gpuResource": "requests.nvidia.com/gpu"}),
        "spec.runtime.gpuResource",
        "must be an extended resource name",
    ),
    (
        "cache-mount-path",
        patched(runtime={"modelCache": {"claimName": "cache", "mountPath": "/dev/shm"}}),
        "spec.runtime.modelCache.mountPath",
        "/dev/shm is mounted by specguard",
    ),
    (
        "cache-mount-path",
        patched(runtime={"modelCache": {"claimName": "cache", "mountPath": "//dev//shm/"}}),
        "spec.runtime.modelCache.mountPath",
        "/dev/shm is mounted by specguard; choose another path, got '//dev//shm/'",
    ),
    (
        "requests-within-limits",
        patched(
            runtime={"resources": {"requests": {"memory": "64Gi"}, "limits": {"memory": "32Gi"}}}
        ),
        "spec.runtime.resources.requests.memory",
        "got 64Gi above the limit 32Gi (spec.runtime.resources.limits.memory)",
    ),
    (
        "requests-within-limits",
        patched(runtime={"resources": {"requests": {"cpu": 2}, "limits": {"cpu": "1500m"}}}),
        "spec.runtime.resources.requests.cpu",
        "got 2 above the limit 1500m",
    ),
    (
        "quantity-shm-size",
        patched(runtime={"shmSize": "65Ti"}),
        "spec.runtime.shmSize",
        "must be at most 64Ti, got '65Ti'",
    ),
    (
        "quantity-shm-size",
        patched(runtime={"shmSize": "1e99"}),
        "spec.runtime.shmSize",
        "must be at most 64Ti, got '1e99'",
    ),
    (
        "quantity-requests",
        patched(runtime={"resources": {"requests": {"memory": 70368744177665}}}),
        "spec.runtime.resources.requests.memory",
        "every quantity must be at most 64Ti, got 70368744177665",
    ),
    (
        "quantity-limits",
        patched(runtime={"resources": {"limits": {"memory": "99Ei"}}}),
        "spec.runtime.resources.limits.memory",
        "got '99Ei'",
    ),
    (
        "quantity-divisor",
        patched(
            runtime={
                "env": [
                    {
                        "name": "MEM",
                        "valueFrom": {
                            "resourceFieldRef": {"resource": "limits.memory", "divisor": "1Pi"}
                        },
                    }
                ]
            }
        ),
        "spec.runtime.env[0].valueFrom.resourceFieldRef.divisor",
        "must be at most 64Ti, got '1Pi'",
    ),
    (
        "adaptive-no-eager",
        patched(runtime={"extraArgs": ["--max-model-len=1024", "--enforce-eager"]}),
        "spec.drafter.adaptiveVerification",
        "vLLM cannot combine it with --enforce-eager",
    ),
    (
        "adaptive-no-eager",
        patched(runtime={"extraArgs": ["--enforce_eager"]}),
        "spec.drafter.adaptiveVerification",
        "in spec.runtime.extraArgs, got --enforce_eager",
    ),
    (
        "adaptive-no-pipeline",
        patched(runtime={"extraArgs": ["-pp", "2"]}),
        "spec.drafter.adaptiveVerification",
        "above 1 in spec.runtime.extraArgs, got -pp 2",
    ),
    (
        "adaptive-no-pipeline",
        patched(runtime={"extraArgs": ["--pipeline-parallel-size=4"]}),
        "spec.drafter.adaptiveVerification",
        "--pipeline-parallel-size 4",
    ),
    (
        "adaptive-no-pipeline",
        patched(runtime={"extraArgs": ["--pipeline_parallel_size", "2", "--max-model-len=1"]}),
        "spec.drafter.adaptiveVerification",
        "--pipeline_parallel_size 2",
    ),
]

# The ladder's rungs and routing by domain. BASE_SPEC's drafter is DSpark with adaptive
# verification: FIXED is the same drafter at a fixed length.
FIXED = {"adaptiveVerification": None}
INVALID += [
    (
        "ladder-rungs-unique",
        patched(drafter=FIXED, ladder={"rungs": ["schedule", "schedule"]}),
        "spec.ladder.rungs[1]",
        "each rung at most once, got schedule twice",
    ),
    (
        "ladder-adaptive-dspark",
        patched(drafter=EAGLE, ladder={"rungs": ["adaptive"]}),
        "spec.ladder.rungs[0]",
        "adaptive is only supported with spec.drafter.method dspark, got method eagle3",
    ),
    (
        "ladder-adaptive-configured",
        patched(ladder={"rungs": ["adaptive"]}),
        "spec.ladder.rungs[0]",
        "spec.drafter.adaptiveVerification is true",
    ),
    (
        "ladder-schedule-needs-k",
        patched(drafter={**FIXED, "numSpeculativeTokens": None}, ladder={"rungs": ["schedule"]}),
        "spec.drafter.numSpeculativeTokens",
        "required when spec.ladder.rungs has schedule",
    ),
    (
        "ladder-schedule-fixed",
        patched(ladder={"rungs": ["schedule"]}),
        "spec.ladder.rungs[0]",
        "got spec.drafter.adaptiveVerification true",
    ),
    (
        "ladder-schedule-fixed",
        patched(
            drafter={
                **FIXED,
                "perBatchSize": [{"minBatchSize": 1, "maxBatchSize": 8, "numSpeculativeTokens": 4}],
            },
            ladder={"rungs": ["adaptive", "schedule"]},
        ),
        "spec.ladder.rungs[1]",
        "got spec.drafter.perBatchSize",
    ),
    (
        "ladder-schedule-router",
        {
            **patched(drafter=FIXED, ladder={"rungs": ["schedule"]}),
            "metricsSource": {"type": "scrape"},
        },
        "spec.ladder.rungs[0]",
        "needs spec.metricsSource.type router",
    ),
    (
        "ladder-adaptive-no-eager",
        patched(
            drafter=FIXED,
            ladder={"rungs": ["adaptive"]},
            runtime={"extraArgs": ["--enforce-eager"]},
        ),
        "spec.ladder.rungs[0]",
        "with --enforce-eager in spec.runtime.extraArgs, got --enforce-eager",
    ),
    (
        "ladder-adaptive-no-pipeline",
        patched(
            drafter=FIXED,
            ladder={"rungs": ["schedule", "adaptive"]},
            runtime={"extraArgs": ["-pp", "2"]},
        ),
        "spec.ladder.rungs[1]",
        "above 1 in spec.runtime.extraArgs, got -pp 2",
    ),
    (
        "duration-retryAfter",
        patched(ladder={"retryAfter": "30s"}),
        "spec.ladder.retryAfter",
        "between 1m and 168h, got 30s",
    ),
    (
        "routing-router",
        {
            **patched(routing={"byDomain": True}),
            "metricsSource": {"type": "prometheus", "prometheusUrl": "http://p:9090"},
        },
        "spec.routing.byDomain",
        "needs spec.metricsSource.type router (the verdicts per domain come from the router's "
        "samples), got metricsSource.type prometheus",
    ),
    (
        "routing-continuous",
        patched(routing={"byDomain": True}, shadow=PERIODIC),
        "spec.routing.byDomain",
        "needs spec.shadow.schedule continuous",
    ),
]

# Owned `vllm serve` flags, each as users might write it, with the field to use instead.
OWNED_ARGS: list[tuple[str, str, str]] = [
    (
        "--tensor-parallel-size=4",
        "tensor-parallel",
        "--tensor-parallel-size/-tp are owned by specguard (abbreviations too); "
        "set spec.runtime.tensorParallelSize instead, got --tensor-parallel-size",
    ),
    ("--tensor_parallel_size", "tensor-parallel", "set spec.runtime.tensorParallelSize"),
    ("-tp", "tensor-parallel", "got -tp"),
    ("-tp=8", "tensor-parallel", "got -tp"),
    (
        "--speculative-config={}",
        "speculative-config",
        "are owned by specguard (abbreviations too); set spec.drafter instead, "
        "got --speculative-config",
    ),
    ("--speculative-config.method=ngram", "speculative-config", "set spec.drafter instead"),
    ("-sc", "speculative-config", "got -sc"),
    ("--spec-method=eagle3", "spec-method", "set spec.drafter.method instead"),
    ("--spec-model", "spec-model", "got --spec-model"),
    ("--spec-tokens=4", "spec-tokens", "set spec.drafter.numSpeculativeTokens"),
    ("--port=9000", "port", "--port is owned by specguard (abbreviations too); set spec."),
    ("--served-model-name", "served-model-name", "set spec.model.servedModelName instead"),
    ("--model=org/other", "model", "set spec.model.name instead"),
    ("--revision=main", "revision", "set spec.model.revision instead"),
    ("--host=0.0.0.0", "host", "got --host"),
    ("--custom-histogram-buckets={}", "histogram-buckets", "got --custom-histogram-buckets"),
    ("--shutdown-timeout=30", "shutdown-timeout", "set spec.runtime.shutdownTimeout instead"),
    ("--shutdown_timeout", "shutdown-timeout", "got --shutdown_timeout"),
    # vLLM's parser is argparse with allow_abbrev on: a unique prefix sets the flag.
    (
        "--tensor-parallel=4",
        "tensor-parallel",
        "got --tensor-parallel (read by vLLM as --tensor-parallel-size)",
    ),
    ("--tensor_para", "tensor-parallel", "read by vLLM as --tensor-parallel-size"),
    ("--speculative.method=ngram", "speculative-config", "got --speculative"),
    ("--served-model=x", "served-model-name", "got --served-model (read by vLLM as"),
    ("--custom-hist", "histogram-buckets", "got --custom-hist"),
    ("--por=1", "port", "got --por"),
]

VALID: list[tuple[str, dict[str, Any]]] = [
    ("base", copy.deepcopy(BASE_SPEC)),
    ("cumulative evidence off", patched(evaluation={"windowsPerFalseAlarm": 0})),
    ("cumulative evidence at its floor", patched(evaluation={"windowsPerFalseAlarm": 10})),
    ("eagle3 with model", patched(drafter=EAGLE)),
    (
        "mtp without model",
        patched(drafter={"method": "mtp", "model": None, "adaptiveVerification": False}),
    ),
    ("dspark without model", patched(drafter={"model": None})),
    ("ngram", patched(drafter={**NGRAM, "extraConfig": {"prompt_lookup_max": 5}})),
    ("draft tp 1", patched(drafter={"draftTensorParallelSize": 1})),
    ("draft tp = target", patched(drafter={"draftTensorParallelSize": 2})),
    (
        "per batch, unordered, k=0 above 64",
        patched(
            drafter={
                "perBatchSize": [
                    {"minBatchSize": 65, "maxBatchSize": 1024, "numSpeculativeTokens": 0},
                    {"minBatchSize": 1, "maxBatchSize": 16, "numSpeculativeTokens": 8},
                    {"minBatchSize": 17, "maxBatchSize": 64, "numSpeculativeTokens": 3},
                ]
            }
        ),
    ),
    (
        "single-point range",
        patched(
            drafter={
                "perBatchSize": [{"minBatchSize": 1, "maxBatchSize": 1, "numSpeculativeTokens": 8}]
            }
        ),
    ),
    (
        "other gpu resource in requests",
        patched(
            runtime={
                "gpuResource": "amd.com/gpu",
                "resources": {"requests": {"nvidia.com/gpu": 1, "cpu": "4"}},
            }
        ),
    ),
    ("HF_TOKEN env without secret", patched(runtime={"env": [{"name": "HF_TOKEN", "value": "x"}]})),
    (
        "secret without HF_TOKEN env",
        patched(runtime={"hfTokenSecret": {"name": "hf"}, "env": [{"name": "A", "value": "1"}]}),
    ),
    ("shadow = replicas", patched(replicas=2, shadow={"replicas": 2})),
    ("periodic", patched(shadow=PERIODIC)),
    (
        "periodic, active = window",
        patched(shadow={**PERIODIC, "activeFor": "2m"}, evaluation={"window": "2m"}),
    ),
    (
        "prometheus with url",
        {**BASE_SPEC, "metricsSource": {"type": "prometheus", "prometheusUrl": "http://p:9090"}},
    ),
    ("scrape", {**BASE_SPEC, "metricsSource": {"type": "scrape"}}),
    (
        "durations at bounds",
        patched(evaluation={"window": "24h"}, rollback={"cooldown": "0s", "startupDeadline": "1m"}),
    ),
    (
        "compound durations",
        patched(evaluation={"window": "1h30m"}, rollback={"cooldown": "1h0m30s"}),
    ),
    ("amd gpu", patched(runtime={"gpuResource": "amd.com/gpu"})),
    (
        "tolerations",
        patched(
            runtime={
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"operator": "Exists"},
                    {"key": "a", "value": "b"},
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Equal",
                        "value": "",
                        "effect": "NoExecute",
                        "tolerationSeconds": 30,
                    },
                ]
            }
        ),
    ),
    (
        "every env source",
        patched(
            runtime={
                "env": [
                    {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    {
                        "name": "C",
                        "valueFrom": {
                            "configMapKeyRef": {"name": "cfg.v1", "key": "a.b", "optional": True}
                        },
                    },
                    {"name": "IP", "value": "", "valueFrom": FIELD_REF},
                    {
                        "name": "MEM",
                        "valueFrom": {
                            "resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}
                        },
                    },
                    {"name": "my.var-1 x", "value": "ok"},
                ]
            }
        ),
    ),
    (
        "requests within limits",
        patched(
            runtime={
                "resources": {
                    "requests": {"cpu": "1500m", "memory": "64Gi", "ephemeral-storage": "1T"},
                    "limits": {"cpu": 2, "memory": "64Gi"},
                }
            }
        ),
    ),
    (
        "cache beside /dev/shm",
        patched(runtime={"modelCache": {"claimName": "cache", "mountPath": "/dev/shm-cache"}}),
    ),
    (
        "adaptive with pipeline 1",
        patched(runtime={"extraArgs": ["-pp", "1", "--pipeline-parallel-size=1", "-pp=01"]}),
    ),
    (
        "eager and pipeline without adaptive",
        patched(
            drafter={"adaptiveVerification": False},
            runtime={"extraArgs": ["--enforce-eager", "-pp", "2", "--no-enforce-eager"]},
        ),
    ),
    (
        "look-alike args",
        patched(
            runtime={
                "extraArgs": [
                    "--max-model-len=32768",
                    "--model-impl=vllm",
                    "--hostname-x",
                    "--portal",
                    "--tp",
                    "-tpx",
                    "--enable-expert-parallel",
                ]
            }
        ),
    ),
]


VALID += [
    (
        "ladder: adaptive then schedule",
        patched(drafter=FIXED, ladder={"rungs": ["adaptive", "schedule"], "retryAfter": "1h"}),
    ),
    ("ladder: schedule first", patched(drafter=FIXED, ladder={"rungs": ["schedule", "adaptive"]})),
    ("ladder: empty", patched(ladder={"rungs": []})),
    (
        "ladder: schedule for eagle3",
        patched(drafter={**EAGLE, "numSpeculativeTokens": 4}, ladder={"rungs": ["schedule"]}),
    ),
    (
        "ladder: eager without adaptive rung",
        patched(
            drafter=FIXED,
            ladder={"rungs": ["schedule"]},
            runtime={"extraArgs": ["--enforce-eager", "-pp", "2"]},
        ),
    ),
    ("routing by domain", patched(routing={"byDomain": True})),
    (
        "routing off with periodic shadow and scrape",
        {
            **patched(routing={"byDomain": False}, shadow=PERIODIC),
            "metricsSource": {"type": "scrape"},
        },
    ),
    ("tool-call guardrail off", patched(rollback={"toolCallGuardrail": False})),
]

RULE_BY_NAME = {rule.name: rule for rule in RULES}


def test_python_only_rules_are_the_documented_ones() -> None:
    # Each is listed, with why CEL cannot check it, in rules.py and docs/resource.md.
    assert [rule.name for rule in RULES if rule.cel is None] == [
        "extra-config-owned",
        "adaptive-no-pipeline",
        "ladder-adaptive-no-pipeline",
    ]


def python_failing(spec_obj: dict[str, Any]) -> set[str]:
    spec = Spec.model_validate(spec_obj)
    return {rule.name for rule in RULES if list(rule.problems(spec))}


@pytest.mark.parametrize(("rule", "spec", "path", "fragment"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_spec_names_field(
    rule: str, spec: dict[str, Any], path: str, fragment: str
) -> None:
    assert python_failing(spec) == {rule}
    with pytest.raises(SpecError) as caught:
        parse_resource(resource(spec))
    messages = [str(problem) for problem in caught.value.problems]
    assert any(m.startswith(f"{path}: ") and fragment in m for m in messages), messages


@pytest.mark.parametrize(("arg", "group", "fragment"), OWNED_ARGS, ids=[a[0] for a in OWNED_ARGS])
def test_owned_flag_refused_with_field_to_use(arg: str, group: str, fragment: str) -> None:
    spec = patched(runtime={"extraArgs": ["--max-model-len=1024", arg]})
    assert python_failing(spec) == {f"extra-args-{group}"}
    with pytest.raises(SpecError) as caught:
        parse_resource(resource(spec))
    assert [p.path for p in caught.value.problems] == ["spec.runtime.extraArgs"]
    assert fragment in caught.value.problems[0].message


@pytest.mark.parametrize(("label", "spec"), VALID, ids=[v[0] for v in VALID])
def test_valid_spec_passes(label: str, spec: dict[str, Any]) -> None:
    parsed = parse_resource(resource(spec))
    assert check_rules(parsed.spec) == []


@pytest.mark.parametrize(("rule", "spec", "path", "fragment"), INVALID, ids=[c[0] for c in INVALID])
def test_cel_refuses_what_python_refuses(
    cel: CelRules, rule: str, spec: dict[str, Any], path: str, fragment: str
) -> None:
    expected = {rule} if RULE_BY_NAME[rule].cel is not None else set()
    assert cel.failing(resource(spec)) == expected
    # After defaulting, as the API server evaluates it.
    assert cel.failing(resource(Spec.model_validate(spec).to_wire())) == expected


@pytest.mark.parametrize(("arg", "group", "fragment"), OWNED_ARGS, ids=[a[0] for a in OWNED_ARGS])
def test_cel_refuses_owned_flags(cel: CelRules, arg: str, group: str, fragment: str) -> None:
    spec = patched(runtime={"extraArgs": ["--max-model-len=1024", arg]})
    assert cel.failing(resource(spec)) == {f"extra-args-{group}"}


@pytest.mark.parametrize(("label", "spec"), VALID, ids=[v[0] for v in VALID])
def test_cel_accepts_what_python_accepts(cel: CelRules, label: str, spec: dict[str, Any]) -> None:
    assert cel.failing(resource(spec)) == set()
    assert cel.failing(resource(Spec.model_validate(spec).to_wire())) == set()


def test_every_rule_has_an_invalid_case() -> None:
    covered = {case[0] for case in INVALID} | {f"extra-args-{a[1]}" for a in OWNED_ARGS}
    assert covered == {rule.name for rule in RULES}


@pytest.mark.parametrize("name", ["Qwen", "qwen_1", "1qwen", "a" * 57, "qwen-"])
def test_bad_names_refused_by_python_and_cel(cel: CelRules, name: str) -> None:
    obj = resource(copy.deepcopy(BASE_SPEC), name=name)
    with pytest.raises(SpecError) as caught:
        parse_resource(obj)
    assert [p.path for p in caught.value.problems] == ["metadata.name"]
    assert cel.failing(obj) == {"metadata-name"}


@pytest.mark.parametrize("name", ["qwen", "q", "qwen-3-6", "a" * 56])
def test_good_names_accepted(cel: CelRules, name: str) -> None:
    obj = resource(copy.deepcopy(BASE_SPEC), name=name)
    assert parse_resource(obj).name == name
    assert cel.failing(obj) == set()


def test_a_shape_error_hides_only_the_rules_that_read_the_broken_field() -> None:
    # drafter.numSpeculativeTokens is out of range: the rules about the drafter's other
    # fields still run (adaptive verification with eagle3), and so do runtime's.
    spec = patched(
        drafter={**EAGLE, "adaptiveVerification": True, "numSpeculativeTokens": 99},
        runtime={"extraArgs": ["--port=1"], "tensorParallelSize": "2"},
    )
    with pytest.raises(SpecError) as caught:
        parse_resource(resource(spec))
    paths = [p.path for p in caught.value.problems]
    assert "spec.drafter.numSpeculativeTokens" in paths  # the shape error
    assert "spec.runtime.tensorParallelSize" in paths  # the other shape error
    assert "spec.drafter.adaptiveVerification" in paths  # same section, other field
    assert "spec.runtime.extraArgs" in paths  # same section as a shape error
    # draft-tp reads runtime.tensorParallelSize, which is broken: it is skipped, not guessed.
    assert "spec.drafter.draftTensorParallelSize" not in paths


@pytest.mark.parametrize(
    ("place", "key"),
    [
        ("drafter", "num_speculative_tokens"),
        ("drafter", "adaptive_verification"),
        ("runtime", "tensor_parallel_size"),
        (None, "metrics_source"),
    ],
)
def test_snake_case_fields_are_unknown_as_in_the_crd(place: str | None, key: str) -> None:
    spec = copy.deepcopy(BASE_SPEC)
    target = spec if place is None else spec[place]
    target[key] = {} if key == "metrics_source" else 4
    with pytest.raises(SpecError) as caught:
        parse_resource(resource(spec))
    prefix = "spec" if place is None else f"spec.{place}"
    assert f"{prefix}.{key}: unknown field" in str(caught.value)


def test_unknown_top_level_and_metadata_fields_are_refused() -> None:
    obj = resource(copy.deepcopy(BASE_SPEC))
    obj["spek"] = {}
    obj["metadata"]["lables"] = {}
    with pytest.raises(SpecError) as caught:
        parse_resource(obj)
    assert str(caught.value).splitlines() == [
        "spek: unknown field",
        "metadata.lables: unknown field",
    ]
