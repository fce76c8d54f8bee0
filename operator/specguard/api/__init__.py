"""The SpeculativeDeployment resource: models, validation, CRD generation.

Pure: no I/O. Other rooms import from here::

    from specguard.api import SpecError, SpeculativeDeployment, parse_resource
"""

from specguard.api.errors import Problem, SpecError
from specguard.api.resource import SpeculativeDeployment, parse_resource, validate_spec
from specguard.api.spec import Spec
from specguard.api.status import Status

__all__ = [
    "Problem",
    "Spec",
    "SpecError",
    "SpeculativeDeployment",
    "Status",
    "parse_resource",
    "validate_spec",
]
