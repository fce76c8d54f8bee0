"""The SpeculativeDeployment resource: models, validation, CRD generation.

Pure: no I/O. Other rooms import from here::

    from specguard.api import SpecError, SpeculativeDeployment, parse_resource
"""

from specguard.api._crd import DEFAULT_KUBE_VERSION, crd, parse_kube_version
from specguard.api._durations import format_duration
from specguard.api._errors import Problem, SpecError, shown
from specguard.api._loading import MAX_INPUT_BYTES, LoadError, decode, load_documents
from specguard.api._resource import SpeculativeDeployment, parse_resource, validate_spec
from specguard.api._spec import (
    LADDER_RUNGS,
    RUNG_CONFIGURED,
    BatchSizeRange,
    Drafter,
    Evaluation,
    Guard,
    Guards,
    Rollback,
    RungName,
    Spec,
)
from specguard.api._status import (
    ArmFigures,
    Arms,
    ArmStatus,
    ClientsStatus,
    Condition,
    DomainRoute,
    DrafterRung,
    GuardFigures,
    LadderStatus,
    LevelVerdict,
    RoutingStatus,
    RungLoss,
    Status,
    StatusVerdict,
    ToolCallFigures,
    Transition,
    append_transition,
)

__all__ = [
    "DEFAULT_KUBE_VERSION",
    "LADDER_RUNGS",
    "MAX_INPUT_BYTES",
    "RUNG_CONFIGURED",
    "ArmFigures",
    "ArmStatus",
    "Arms",
    "BatchSizeRange",
    "ClientsStatus",
    "Condition",
    "DomainRoute",
    "Drafter",
    "DrafterRung",
    "Evaluation",
    "Guard",
    "GuardFigures",
    "Guards",
    "LadderStatus",
    "LevelVerdict",
    "LoadError",
    "Problem",
    "Rollback",
    "RoutingStatus",
    "RungLoss",
    "RungName",
    "Spec",
    "SpecError",
    "SpeculativeDeployment",
    "Status",
    "StatusVerdict",
    "ToolCallFigures",
    "Transition",
    "append_transition",
    "crd",
    "decode",
    "format_duration",
    "load_documents",
    "parse_kube_version",
    "parse_resource",
    "shown",
    "validate_spec",
]
