"""The two vLLM Deployments: `<name>-spec` (drafter on) and `<name>-base` (drafter off)."""

from __future__ import annotations

import math
from typing import Any, Final

from specguard.api import DrafterRung, Spec, SpeculativeDeployment
from specguard.api import constants as c
from specguard.render._meta import arm_labels, arm_selector, object_meta
from specguard.render._vllm import vllm_args

STARTUP_PERIOD_SECONDS: Final = 10
SHM_VOLUME: Final = "dshm"
CACHE_VOLUME: Final = "model-cache"


def arm_replicas(spec: Spec, mode: str) -> dict[str, int]:
    """Pods per arm in ``mode``: the serving arm gets spec.replicas, the other the shadow's.

    Swapping modes swaps the two counts, so the GPUs in use stay the same.
    """
    serving, shadow = spec.replicas, spec.shadow.replicas
    if mode == c.ARM_SPECULATIVE:
        return {c.ARM_SPECULATIVE: serving, c.ARM_BASELINE: shadow}
    if mode == c.ARM_BASELINE:
        return {c.ARM_SPECULATIVE: shadow, c.ARM_BASELINE: serving}
    raise ValueError(f"mode must be speculative or baseline, got {mode!r}")


def startup_failure_threshold(startup_deadline_s: int) -> int:
    """Probe failures allowed so that threshold × period covers the startup deadline:
    vLLM binds its port before loading the model and answers nothing until it has."""
    return max(1, math.ceil(startup_deadline_s / STARTUP_PERIOD_SECONDS))


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _env(spec: Spec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    secret = spec.runtime.hf_token_secret
    if secret is not None:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            }
        )
    env.extend(var.to_wire() for var in spec.runtime.env)
    return env


def _resources(spec: Spec) -> dict[str, Any]:
    runtime = spec.runtime
    gpus = {runtime.gpu_resource: runtime.tensor_parallel_size}
    return {
        "requests": {**runtime.resources.requests, **gpus},
        "limits": {**runtime.resources.limits, **gpus},
    }


def _volumes(spec: Spec) -> list[dict[str, Any]]:
    runtime = spec.runtime
    volumes: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": runtime.shm_size}}
    ]
    cache = runtime.model_cache
    if cache is not None:
        claim = {"claimName": cache.claim_name, "readOnly": cache.read_only}
        volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": claim})
    return volumes


def _volume_mounts(spec: Spec) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": c.SHM_MOUNT_PATH}]
    cache = spec.runtime.model_cache
    if cache is not None:
        mounts.append(
            {"name": CACHE_VOLUME, "mountPath": cache.mount_path, "readOnly": cache.read_only}
        )
    return mounts


def vllm_container(spec: Spec, arm: str, rung: DrafterRung | None = None) -> dict[str, Any]:
    runtime = spec.runtime
    container: dict[str, Any] = {
        "name": "vllm",
        "image": runtime.image,
        "command": ["vllm", "serve"],
        "args": vllm_args(spec, arm, rung),
        "ports": [{"name": "http", "containerPort": runtime.port, "protocol": "TCP"}],
    }
    env = _env(spec)
    if env:
        container["env"] = env
    container.update(
        {
            "resources": _resources(spec),
            "volumeMounts": _volume_mounts(spec),
            "startupProbe": _probe(
                "/health",
                STARTUP_PERIOD_SECONDS,
                startup_failure_threshold(spec.rollback.startup_deadline),
            ),
            "readinessProbe": _probe("/health", 5, 3),
            # /health answers 503 once the engine died: restart the pod then.
            "livenessProbe": _probe("/health", 10, 6),
        }
    )
    return container


SHUTDOWN_MARGIN_S = 30  # after vLLM's drain: stopping the engine and freeing the GPUs


def termination_grace_seconds(shutdown_timeout: float) -> int:
    """A vLLM pod's grace period: its drain (``runtime.shutdownTimeout``) plus the margin."""
    return int(shutdown_timeout) + SHUTDOWN_MARGIN_S


def desired_arm_deployment(
    sd: SpeculativeDeployment, arm: str, replicas: int, rung: DrafterRung | None = None
) -> dict[str, Any]:
    """The Deployment of one arm with ``replicas`` pods (see :func:`arm_replicas`); the
    speculative arm runs the drafter of ``rung`` (default: spec.drafter as configured)."""
    spec = sd.spec
    runtime = spec.runtime
    labels = arm_labels(sd, arm)
    pod_spec: dict[str, Any] = {
        "containers": [vllm_container(spec, arm, rung)],
        "volumes": _volumes(spec),
        # Service links put <SERVICE>_PORT variables in the environment; a Service named
        # "vllm" would set VLLM_PORT, which vLLM reads as its own setting.
        "enableServiceLinks": False,
        # vLLM drains for runtime.shutdownTimeout after SIGTERM, then frees the GPUs.
        "terminationGracePeriodSeconds": termination_grace_seconds(runtime.shutdown_timeout),
    }
    if runtime.node_selector:
        pod_spec["nodeSelector"] = dict(runtime.node_selector)
    if runtime.tolerations:
        pod_spec["tolerations"] = [t.to_wire() for t in runtime.tolerations]
    if runtime.affinity is not None:
        pod_spec["affinity"] = runtime.affinity.to_wire()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(sd, c.arm_deployment_name(sd.name, arm), labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": arm_selector(sd, arm)},
            # GPU-neutral: never start a new pod before an old one is gone.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(runtime.port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod_spec,
            },
        },
    }
