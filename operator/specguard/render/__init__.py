"""Pure rendering: a SpeculativeDeployment and the effective mode → Kubernetes objects.

No I/O and no cluster state: the same input always gives the same objects in the same
order, so the operator can diff them against the cluster and tests can compare them with
committed YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specguard.api import DrafterRung, SpeculativeDeployment
from specguard.api import constants as c
from specguard.render._router import (
    desired_router_deployment,
    desired_router_role,
    desired_router_role_binding,
    desired_router_service_account,
)
from specguard.render._services import desired_arm_service, desired_front_service
from specguard.render._vllm import rung_drafter, speculative_config, vllm_args
from specguard.render._workloads import arm_replicas, desired_arm_deployment


def desired_arm_deployments(
    sd: SpeculativeDeployment,
    mode: str,
    replicas: Mapping[c.Arm, int] | None = None,
    rung: DrafterRung | None = None,
) -> list[dict[str, Any]]:
    counts = arm_replicas(sd.spec, mode) if replicas is None else replicas
    return [desired_arm_deployment(sd, arm, counts[arm], rung) for arm in c.ARMS]


def render_all(
    sd: SpeculativeDeployment,
    mode: str = c.ARM_SPECULATIVE,
    *,
    replicas: Mapping[c.Arm, int] | None = None,
    rung: DrafterRung | None = None,
) -> list[dict[str, Any]]:
    """Every object specguard owns for ``sd`` (the kinds of ``api.constants.OWNED_KINDS``),
    in a stable order: RBAC first (what pods need before they start), then Services, then
    Deployments. The arms' Deployments have the replicas of ``mode`` settled, or
    ``replicas`` (per arm) where given: the operator's swap planner chooses them. ``rung``:
    the drafter configuration of the speculative arm (spec.ladder; default as configured)."""
    return [
        desired_router_service_account(sd),
        desired_router_role(sd),
        desired_router_role_binding(sd),
        desired_front_service(sd),
        *(desired_arm_service(sd, arm) for arm in c.ARMS),
        *desired_arm_deployments(sd, mode, replicas, rung),
        desired_router_deployment(sd),
    ]


__all__ = [
    "arm_replicas",
    "desired_arm_deployment",
    "desired_arm_deployments",
    "desired_arm_service",
    "desired_front_service",
    "desired_router_deployment",
    "desired_router_role",
    "desired_router_role_binding",
    "desired_router_service_account",
    "render_all",
    "rung_drafter",
    "speculative_config",
    "vllm_args",
]
