"""Names every room shares: the API group, the resource's names, labels and annotations.

Import these instead of spelling the strings: a typo in a label selector finds no pods and
fails silently.
"""

from __future__ import annotations

from typing import Final

# The arms and roles, re-exported: specguard._arms is their one home (the judge shares them).
from specguard._arms import (
    ARM_BASELINE as ARM_BASELINE,
)
from specguard._arms import (
    ARM_SPECULATIVE as ARM_SPECULATIVE,
)
from specguard._arms import (
    ARMS as ARMS,
)
from specguard._arms import (
    ROLES as ROLES,
)
from specguard._arms import (
    Arm as Arm,
)
from specguard._arms import (
    Role as Role,
)
from specguard._arms import (
    other_arm as other_arm,
)

GROUP: Final = "specguard.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "SpeculativeDeployment"
LIST_KIND: Final = "SpeculativeDeploymentList"
PLURAL: Final = "speculativedeployments"
SINGULAR: Final = "speculativedeployment"
SHORT_NAMES: Final = ("sd",)
CATEGORIES: Final = ("specguard", "all")
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

Mode = Arm  # status.mode names the arm that serves
ARM_SUFFIX: Final[dict[str, str]] = {ARM_SPECULATIVE: "spec", ARM_BASELINE: "base"}

# The kinds of object specguard owns for each resource (render makes them, the operator
# applies them, the chart's RBAC lets it): kind → (apiVersion, plural).
OWNED_KINDS: Final[dict[str, tuple[str, str]]] = {
    "ServiceAccount": ("v1", "serviceaccounts"),
    "Role": ("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    "Service": ("v1", "services"),
    "Deployment": ("apps/v1", "deployments"),
}

# Labels on the vLLM pods of each arm.
LABEL_DEPLOYMENT: Final = "specguard.io/deployment"  # <name> of the SpeculativeDeployment
LABEL_ARM: Final = "specguard.io/arm"  # speculative | baseline
# Router pods carry this instead of LABEL_DEPLOYMENT, so that a selector on
# specguard.io/deployment=<name> finds vLLM pods only.
LABEL_ROUTER: Final = "specguard.io/router"  # <name> of the SpeculativeDeployment

LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_APP_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_APP_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_APP_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_APP_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_APP_VERSION: Final = "app.kubernetes.io/version"
MANAGED_BY: Final = "specguard"

# Manual overrides (the operator never writes the user's spec).
ANNOTATION_PIN_MODE: Final = "specguard.io/pin-mode"  # "speculative" | "baseline"
ANNOTATION_RETRY: Final = "specguard.io/retry"  # any new value: clear the flap stop, re-evaluate

# Condition types (metav1.Condition.type) the operator sets.
CONDITION_READY: Final = "Ready"
CONDITION_SWAPPING: Final = "Swapping"
CONDITION_SPEC_VALID: Final = "SpecValid"
CONDITION_SPECULATING: Final = "Speculating"
CONDITION_EVALUATING: Final = "Evaluating"
CONDITION_ROLLED_BACK: Final = "RolledBack"
CONDITION_JUDGE_DEGRADED: Final = "JudgeDegraded"
CONDITION_HALTED: Final = "Halted"  # automatic changes stopped after flaps (status.policy.halted)
CONDITION_TYPES: Final = (
    CONDITION_READY,
    CONDITION_SWAPPING,
    CONDITION_SPEC_VALID,
    CONDITION_SPECULATING,
    CONDITION_EVALUATING,
    CONDITION_ROLLED_BACK,
    CONDITION_HALTED,
    CONDITION_JUDGE_DEGRADED,
)

# Paths specguard mounts in the vLLM container (a memory-backed /dev/shm for NCCL); a
# model cache there would collide with it.
SHM_MOUNT_PATH: Final = "/dev/shm"
RESERVED_MOUNT_PATHS: Final = (SHM_MOUNT_PATH,)

# specguard's own image and the port its router listens on inside the pod.
SPECGUARD_IMAGE_REPOSITORY: Final = "ghcr.io/specguard/specguard"
ROUTER_PORT: Final = 8080
ROUTER_REPLICAS: Final = 2
# The non-root user of the specguard image (Dockerfile): router and operator pods run as it.
SPECGUARD_UID: Final = 65532

# status.transitions keeps only the most recent entries so the object stays small.
MAX_TRANSITIONS: Final = 20
# Request domains routed or reported per resource, and in-flight bands of ladder evidence.
MAX_DOMAINS: Final = 16
MAX_LEVELS: Final = 24


def arm_deployment_name(name: str, arm: str) -> str:
    """`<name>-spec` for the speculative arm, `<name>-base` for the baseline arm."""
    return f"{name}-{ARM_SUFFIX[arm]}"


def router_name(name: str) -> str:
    return f"{name}-router"


def specguard_image(version: str | None = None) -> str:
    if version is None:
        from specguard import __version__

        version = __version__
    return f"{SPECGUARD_IMAGE_REPOSITORY}:{version}"
