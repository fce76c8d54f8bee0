"""Cross-field rules of the spec, each written once: its message, its CEL twin for the CRD
and its Python check side by side.

A rule sits on a schema node (``scope``, as a wire path; ``[]`` means each item of a list).
The CEL twin goes into the CRD as an ``x-kubernetes-validations`` entry there, with
``self`` bound to that node; the Python check is called with the same node (the model, or a
:class:`Partial` view of it) and yields what is wrong. Both say the same ``message``: the
CRD prefixes it with the field's path, Python adds the concrete value (``, got eagle3``).

The Python check is the real guard (the operator runs it on every cluster, and it can say
which value is wrong); tests evaluate every CEL twin against the same objects.

A shape error does not hide the rules about the rest: when the spec does not validate, the
rules see a :class:`Partial` view in which each field that validated on its own reads as
usual and reading one that did not skips just the rules that read it.

Three rules have no CEL twin: the keys of ``spec.drafter.extraConfig`` (an object that
preserves unknown fields, which the API server does not expose to CEL) and a
pipeline-parallel size with adaptive verification, configured or as a ladder rung (``-pp 2``
spreads over two list items, and CEL on a list sees one at a time). The differential test
against a real API server allows exactly these.

CEL rules use only what cel-python also evaluates (``has()``, ``size()``, ``in``,
``all``/``exists``/``exists_one``, ``matches``, ``duration()``), except the quantity bounds,
which need Kubernetes' quantity library (servers from :data:`QUANTITY_SINCE`; the tests give
cel-python the same functions).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import UnionType
from typing import Annotated, Any, Final, Union, get_args, get_origin

from pydantic import TypeAdapter, ValidationError

from specguard.api._durations import format_duration, parse_duration
from specguard.api._errors import Problem, shown
from specguard.api._spec import METHODS_WITHOUT_MODEL, METHODS_WITHOUT_REQUIRED_MODEL, Spec
from specguard.api._wire import MAX_QUANTITY, SpecModel, quantity_value
from specguard.api.constants import RESERVED_MOUNT_PATHS

CEL_SINCE: Final = (1, 25)
QUANTITY_SINCE: Final = (1, 30)


@dataclass(frozen=True)
class At:
    """A problem at another field than the rule's own: ``field`` is relative to the scope
    node (".perBatchSize[2].numSpeculativeTokens")."""

    field: str
    detail: str = ""


Finding = str | At  # a str: the detail (may be empty) at the rule's own field
Check = Callable[[Any], Iterator[Finding]]


@dataclass(frozen=True)
class Rule:
    name: str
    scope: str  # schema node the rule sits on, e.g. "spec.runtime.tolerations[]"
    field: str  # the field it is about, relative to scope (also the CRD's fieldPath)
    message: str  # what must hold, said once for the CRD and for Python
    cel: str | None  # None: Python only (the API server's CEL cannot see the data)
    check: Check
    since: tuple[int, int] = CEL_SINCE  # oldest server whose CEL has what ``cel`` uses

    @property
    def cel_message(self) -> str:
        """The CRD's message: the field's path, then the message."""
        return f"{self.scope}{self.field}: {self.message}"

    def problems(self, spec: Any) -> Iterator[Problem]:
        """What the rule finds in ``spec`` (a Spec or a Partial of one)."""
        for path, node in _nodes(spec, self.scope):
            try:
                findings = list(self.check(node))
            except UnreadableError:
                continue  # the rule reads a field that did not validate
            for finding in findings:
                where, detail = (
                    (self.field, finding) if isinstance(finding, str) else
                    (finding.field, finding.detail)
                )  # fmt: skip
                message = f"{self.message}, {detail}" if detail else self.message
                yield Problem(path + where, message)


RULES_BY_DEFINITION: list[Rule] = []


def rule(
    name: str,
    *,
    scope: str,
    field: str,
    message: str,
    cel: str | None,
    since: tuple[int, int] = CEL_SINCE,
) -> Callable[[Check], Check]:
    """Register the decorated check as the Python side of a rule."""

    def register(check: Check) -> Check:
        RULES_BY_DEFINITION.append(Rule(name, scope, field, message, cel, check, since))
        return check

    return register


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


# --- Partial views: rules over a spec that did not validate ----------------------------


class UnreadableError(Exception):
    """Raised by a Partial view when a rule reads a field that did not validate."""


class Partial:
    """A section of the spec that did not validate as a whole. Reading a field gives its
    validated value (or default); a nested section that did not validate reads as another
    Partial; a field whose own value is invalid raises :class:`UnreadableError`."""

    def __init__(self, model: type[SpecModel], raw: Mapping[str, Any]) -> None:
        self._model = model
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        info = self._model.model_fields.get(name)
        if info is None:
            raise AttributeError(name)
        wire = info.alias or name
        annotation = _field_type(self._model, name)
        if wire not in self._raw:
            if info.is_required():
                raise UnreadableError(wire)
            return read(annotation, info.get_default(call_default_factory=True))
        return read(annotation, self._raw[wire])


@cache
def _field_type(model: type[SpecModel], name: str) -> Any:
    info = model.model_fields[name]
    return Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


_ADAPTERS: dict[int, tuple[Any, TypeAdapter[Any]]] = {}


def _adapter(annotation: Any) -> TypeAdapter[Any]:
    # Keyed by identity: the types are the models' own, alive as long as the module.
    cached = _ADAPTERS.get(id(annotation))
    if cached is None or cached[0] is not annotation:
        cached = (annotation, TypeAdapter(annotation))
        _ADAPTERS[id(annotation)] = cached
    return cached[1]


def _options(annotation: Any) -> tuple[Any, ...]:
    """The types a field may hold: ``X | None`` and ``Annotated[X, ...]`` unwrapped."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):
        return get_args(annotation)
    return (annotation,)


def read(annotation: Any, value: Any) -> Any:
    """``value`` validated as ``annotation`` (strictly, camelCase only, as the CRD), a
    Partial view of it, or UnreadableError."""
    try:
        return _adapter(annotation).validate_python(value, strict=True, by_name=False)
    except ValidationError:
        pass
    for option in _options(annotation):
        if isinstance(option, type) and issubclass(option, SpecModel):
            if isinstance(value, Mapping):
                return Partial(option, value)
        elif get_origin(option) is list and isinstance(value, list):
            item = get_args(option)[0]
            return [read(item, entry) for entry in value]
    raise UnreadableError(str(annotation))


def _child(node: Any, wire: str) -> Any:
    model = node._model if isinstance(node, Partial) else type(node)
    for name, info in model.model_fields.items():
        if (info.alias or name) == wire:
            return getattr(node, name)
    raise KeyError(wire)


def _nodes(spec: Any, scope: str) -> Iterator[tuple[str, Any]]:
    """(path, node) of each present node at ``scope``, as the API server binds ``self``."""
    current: list[tuple[str, Any]] = [("spec", spec)]
    for part in scope.split(".")[1:]:
        wire = part.removesuffix("[]")
        found: list[tuple[str, Any]] = []
        for path, node in current:
            try:
                child = _child(node, wire)
            except UnreadableError:
                continue
            if child is None:
                continue
            if part.endswith("[]"):
                if isinstance(child, list):
                    found += [(f"{path}.{wire}[{i}]", item) for i, item in enumerate(child)]
            else:
                found.append((f"{path}.{wire}", child))
        current = found
    yield from current


# --- drafter -------------------------------------------------------------------------


@rule(
    "adaptive-only-dspark",
    scope="spec.drafter",
    field=".adaptiveVerification",
    message="only supported with method dspark",
    cel="!has(self.adaptiveVerification) || !self.adaptiveVerification || self.method == 'dspark'",
)
def _adaptive_only_dspark(drafter: Any) -> Iterator[Finding]:
    if drafter.adaptive_verification and drafter.method != "dspark":
        yield f"got {drafter.method}"


@rule(
    "model-required",
    scope="spec.drafter",
    field=".model",
    message="required for every method but " + ", ".join(METHODS_WITHOUT_REQUIRED_MODEL),
    cel=f"self.method in {_cel_list(METHODS_WITHOUT_REQUIRED_MODEL)} || has(self.model)",
)
def _model_required(drafter: Any) -> Iterator[Finding]:
    if drafter.method not in METHODS_WITHOUT_REQUIRED_MODEL and drafter.model is None:
        yield f"method {drafter.method} needs a drafter model"


@rule(
    "model-refused",
    scope="spec.drafter",
    field=".model",
    message="methods " + ", ".join(METHODS_WITHOUT_MODEL) + " take no drafter model",
    cel=f"!(self.method in {_cel_list(METHODS_WITHOUT_MODEL)}) || !has(self.model)",
)
def _model_refused(drafter: Any) -> Iterator[Finding]:
    if drafter.method in METHODS_WITHOUT_MODEL and drafter.model is not None:
        yield f"got method {drafter.method} with a model; remove it"


_TP = (
    "(has(self.runtime) && has(self.runtime.tensorParallelSize) ? "
    "self.runtime.tensorParallelSize : 1)"
)


@rule(
    "draft-tp",
    scope="spec",
    field=".drafter.draftTensorParallelSize",
    message="must be 1 or spec.runtime.tensorParallelSize",
    cel="!has(self.drafter.draftTensorParallelSize) || "
    "self.drafter.draftTensorParallelSize == 1 || "
    f"self.drafter.draftTensorParallelSize == {_TP}",
)
def _draft_tp(spec: Any) -> Iterator[Finding]:
    draft_tp = spec.drafter.draft_tensor_parallel_size
    if draft_tp is not None and draft_tp != 1:
        target_tp = spec.runtime.tensor_parallel_size
        if draft_tp != target_tp:
            yield f"got {draft_tp} with spec.runtime.tensorParallelSize {target_tp}"


@rule(
    "per-batch-ordered",
    scope="spec.drafter.perBatchSize[]",
    field=".minBatchSize",
    message="must not be above maxBatchSize",
    cel="self.minBatchSize <= self.maxBatchSize",
)
def _per_batch_ordered(r: Any) -> Iterator[Finding]:
    if r.min_batch_size > r.max_batch_size:
        yield f"got {r.min_batch_size} above {r.max_batch_size}"


@rule(
    "per-batch-starts-at-one",
    scope="spec.drafter.perBatchSize",
    field="",
    message="the first range must start at batch size 1",
    cel="self.exists(r, r.minBatchSize == 1)",
)
def _per_batch_starts_at_one(ranges: list[Any]) -> Iterator[Finding]:
    if ranges and not any(r.min_batch_size == 1 for r in ranges):
        yield f"got {min(r.min_batch_size for r in ranges)}"


@rule(
    "per-batch-no-overlap",
    scope="spec.drafter.perBatchSize",
    field="",
    message="ranges must not overlap",
    # Each range overlaps exactly one range: itself (an inverted range overlaps nothing,
    # not even itself; per-batch-ordered reports it).
    cel="self.all(a, a.minBatchSize > a.maxBatchSize || self.exists_one(b, "
    "a.minBatchSize <= b.maxBatchSize && b.minBatchSize <= a.maxBatchSize))",
)
def _per_batch_no_overlap(ranges: list[Any]) -> Iterator[Finding]:
    for i, a in enumerate(ranges):
        for j in range(i + 1, len(ranges)):
            b = ranges[j]
            if a.min_batch_size <= b.max_batch_size and b.min_batch_size <= a.max_batch_size:
                yield (
                    f"got ranges {i} ({a.min_batch_size}-{a.max_batch_size}) and {j} "
                    f"({b.min_batch_size}-{b.max_batch_size})"
                )


@rule(
    "per-batch-needs-k",
    scope="spec.drafter",
    field=".numSpeculativeTokens",
    message="required when spec.drafter.perBatchSize is set (it is the largest draft length)",
    cel="!has(self.perBatchSize) || has(self.numSpeculativeTokens)",
)
def _per_batch_needs_k(drafter: Any) -> Iterator[Finding]:
    if drafter.per_batch_size and drafter.num_speculative_tokens is None:
        yield ""


@rule(
    "per-batch-k-bounded",
    scope="spec.drafter",
    field=".perBatchSize",
    message="numSpeculativeTokens of a range must not be above spec.drafter.numSpeculativeTokens",
    cel="!has(self.perBatchSize) || !has(self.numSpeculativeTokens) || "
    "self.perBatchSize.all(r, r.numSpeculativeTokens <= self.numSpeculativeTokens)",
)
def _per_batch_k_bounded(drafter: Any) -> Iterator[Finding]:
    k = drafter.num_speculative_tokens
    if k is None:
        return
    for index, r in enumerate(drafter.per_batch_size or []):
        if r.num_speculative_tokens > k:
            yield At(
                f".perBatchSize[{index}].numSpeculativeTokens",
                f"got {r.num_speculative_tokens} above {k}",
            )


# --- ladder and routing ---------------------------------------------------------------


@rule(
    "ladder-rungs-unique",
    scope="spec.ladder.rungs",
    field="",
    message="each rung at most once",
    cel="self.all(r, self.exists_one(s, s == r))",
)
def _ladder_rungs_unique(rungs: list[Any]) -> Iterator[Finding]:
    seen: set[str] = set()
    for index, rung in enumerate(rungs):
        if rung in seen:
            yield At(f"[{index}]", f"got {rung} twice")
        seen.add(rung)


_LADDER_HAS = "has(self.ladder) && has(self.ladder.rungs) && '{rung}' in self.ladder.rungs"


def _ladder_has(rung: str) -> str:
    return _LADDER_HAS.format(rung=rung)


def _rung_index(spec: Any, rung: str) -> int | None:
    rungs = list(spec.ladder.rungs)
    return rungs.index(rung) if rung in rungs else None


@rule(
    "ladder-adaptive-dspark",
    scope="spec",
    field=".ladder.rungs",
    message="adaptive is only supported with spec.drafter.method dspark",
    cel=f"!({_ladder_has('adaptive')}) || self.drafter.method == 'dspark'",
)
def _ladder_adaptive_dspark(spec: Any) -> Iterator[Finding]:
    index = _rung_index(spec, "adaptive")
    if index is not None and spec.drafter.method != "dspark":
        yield At(f".ladder.rungs[{index}]", f"got method {spec.drafter.method}")


@rule(
    "ladder-adaptive-configured",
    scope="spec",
    field=".ladder.rungs",
    message="adaptive is the configured drafter already (spec.drafter.adaptiveVerification "
    "is true); remove one of them",
    cel=f"!({_ladder_has('adaptive')}) || !has(self.drafter.adaptiveVerification) || "
    "!self.drafter.adaptiveVerification",
)
def _ladder_adaptive_configured(spec: Any) -> Iterator[Finding]:
    index = _rung_index(spec, "adaptive")
    if index is not None and spec.drafter.adaptive_verification:
        yield At(f".ladder.rungs[{index}]")


@rule(
    "ladder-schedule-needs-k",
    scope="spec",
    field=".drafter.numSpeculativeTokens",
    message="required when spec.ladder.rungs has schedule (the schedule's draft length)",
    cel=f"!({_ladder_has('schedule')}) || has(self.drafter.numSpeculativeTokens)",
)
def _ladder_schedule_needs_k(spec: Any) -> Iterator[Finding]:
    if "schedule" in spec.ladder.rungs and spec.drafter.num_speculative_tokens is None:
        yield ""


@rule(
    "ladder-schedule-fixed",
    scope="spec",
    field=".ladder.rungs",
    message="schedule needs spec.drafter at a fixed draft length (no adaptiveVerification, "
    "no perBatchSize): its verdicts per in-flight level are the schedule's evidence",
    cel=f"!({_ladder_has('schedule')}) || (!has(self.drafter.perBatchSize) && "
    "(!has(self.drafter.adaptiveVerification) || !self.drafter.adaptiveVerification))",
)
def _ladder_schedule_fixed(spec: Any) -> Iterator[Finding]:
    index = _rung_index(spec, "schedule")
    if index is None:
        return
    drafter = spec.drafter
    if drafter.adaptive_verification:
        yield At(f".ladder.rungs[{index}]", "got spec.drafter.adaptiveVerification true")
    if drafter.per_batch_size:
        yield At(f".ladder.rungs[{index}]", "got spec.drafter.perBatchSize")


_ROUTER_SOURCE = (
    "(!has(self.metricsSource) || !has(self.metricsSource.type) || "
    "self.metricsSource.type == 'router')"
)


@rule(
    "ladder-schedule-router",
    scope="spec",
    field=".ladder.rungs",
    message="schedule needs spec.metricsSource.type router (the verdicts per in-flight "
    "level come from the router's samples)",
    cel=f"!({_ladder_has('schedule')}) || {_ROUTER_SOURCE}",
)
def _ladder_schedule_router(spec: Any) -> Iterator[Finding]:
    index = _rung_index(spec, "schedule")
    if index is not None and spec.metrics_source.type != "router":
        yield At(f".ladder.rungs[{index}]", f"got metricsSource.type {spec.metrics_source.type}")


_BY_DOMAIN = "has(self.routing) && has(self.routing.byDomain) && self.routing.byDomain"


@rule(
    "routing-router",
    scope="spec",
    field=".routing.byDomain",
    message="needs spec.metricsSource.type router (the verdicts per domain come from the "
    "router's samples)",
    cel=f"!({_BY_DOMAIN}) || {_ROUTER_SOURCE}",
)
def _routing_router(spec: Any) -> Iterator[Finding]:
    if spec.routing.by_domain and spec.metrics_source.type != "router":
        yield f"got metricsSource.type {spec.metrics_source.type}"


@rule(
    "routing-continuous",
    scope="spec",
    field=".routing.byDomain",
    message="needs spec.shadow.schedule continuous (a routed domain is served by the shadow "
    "arm, which a periodic schedule scales to 0)",
    cel=f"!({_BY_DOMAIN}) || !has(self.shadow) || !has(self.shadow.schedule) || "
    "self.shadow.schedule == 'continuous'",
)
def _routing_continuous(spec: Any) -> Iterator[Finding]:
    if spec.routing.by_domain and spec.shadow.schedule != "continuous":
        yield f"got schedule {spec.shadow.schedule}"


# --speculative-config keys specguard writes from typed fields.
OWNED_CONFIG_KEYS: Final[dict[str, str]] = {
    "method": "spec.drafter.method",
    "model": "spec.drafter.model",
    "num_speculative_tokens": "spec.drafter.numSpeculativeTokens",
    "enable_adaptive_verification": "spec.drafter.adaptiveVerification",
    "draft_tensor_parallel_size": "spec.drafter.draftTensorParallelSize",
    "num_speculative_tokens_per_batch_size": "spec.drafter.perBatchSize",
}


@rule(
    "extra-config-owned",
    scope="spec.drafter",
    field=".extraConfig",
    message=", ".join(OWNED_CONFIG_KEYS) + " are owned by specguard",
    # spec.drafter.extraConfig preserves unknown fields: CEL sees none of its keys.
    cel=None,
)
def _extra_config_owned(drafter: Any) -> Iterator[Finding]:
    for key in drafter.extra_config:
        if key in OWNED_CONFIG_KEYS:
            yield f"got key {key}; set {OWNED_CONFIG_KEYS[key]} instead"


# --- runtime: vllm serve flags -------------------------------------------------------


def _long_flag(flag: str, *, abbreviations: bool) -> str:
    """--a-b as a regex: '-' or '_' between words (vLLM's parser takes both), and with
    ``abbreviations`` every prefix too (vLLM's parser is argparse with allow_abbrev on, so
    --tensor-parallel=4 sets --tensor-parallel-size when no other flag starts so)."""
    characters = ["[-_]" if char == "-" else char for char in flag[2:]]
    if not abbreviations:
        return "--" + "".join(characters)
    # "--t(e(n(...)?)?)?": any non-empty prefix, in a pattern that stays linear.
    return (
        "--"
        + characters[0]
        + "".join(f"({char}" for char in characters[1:])
        + (")?" * (len(characters) - 1))
    )


def flag_pattern(*flags: str, abbreviations: bool = True) -> str:
    """A regex matching an extraArgs item that is one of ``flags``, alone or with a value.

    vLLM's parser takes --a-b and --a_b alike, "--flag=value", for JSON flags
    "--flag.key=value", and unambiguous prefixes of long flags; short forms only as
    written. No backslashes: the pattern is embedded in a CEL string literal as it is.
    """
    alternatives = []
    for flag in flags:
        if not re.fullmatch(r"--?[a-z0-9-]+", flag):
            raise ValueError(f"flag {flag!r} would need escaping in CEL")
        if flag.startswith("--"):
            alternatives.append(_long_flag(flag, abbreviations=abbreviations))
        else:
            alternatives.append(flag)
    return "^(" + "|".join(alternatives) + ")([=.].*)?$"


@dataclass(frozen=True)
class OwnedFlags:
    """`vllm serve` flags specguard sets itself, and where the user says what they want."""

    name: str
    flags: tuple[str, ...]
    instead: str  # the field to use, or why there is none
    pattern: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", flag_pattern(*self.flags))


OWNED_FLAGS: Final = (
    OwnedFlags(
        "tensor-parallel",
        ("--tensor-parallel-size", "-tp"),
        "set spec.runtime.tensorParallelSize instead",
    ),
    OwnedFlags("speculative-config", ("--speculative-config", "-sc"), "set spec.drafter instead"),
    OwnedFlags("spec-method", ("--spec-method",), "set spec.drafter.method instead"),
    OwnedFlags("spec-model", ("--spec-model",), "set spec.drafter.model instead"),
    OwnedFlags("spec-tokens", ("--spec-tokens",), "set spec.drafter.numSpeculativeTokens instead"),
    OwnedFlags("port", ("--port",), "set spec.runtime.port instead"),
    OwnedFlags(
        "served-model-name", ("--served-model-name",), "set spec.model.servedModelName instead"
    ),
    OwnedFlags("model", ("--model",), "set spec.model.name instead"),
    OwnedFlags("revision", ("--revision",), "set spec.model.revision instead"),
    OwnedFlags("host", ("--host",), "vLLM must listen on the pod's addresses"),
    OwnedFlags(
        "shutdown-timeout", ("--shutdown-timeout",), "set spec.runtime.shutdownTimeout instead"
    ),
    OwnedFlags(
        "histogram-buckets",
        ("--custom-histogram-buckets",),
        "specguard sets fine inter-token-latency buckets",
    ),
)


def owned_flag(arg: str) -> tuple[str, OwnedFlags] | None:
    """The flag as written in ``arg`` and its group, if specguard owns it (or it is an
    abbreviation vLLM would read as one specguard owns)."""
    for group in OWNED_FLAGS:
        if re.fullmatch(group.pattern, arg):
            return re.split(r"[=.]", arg, maxsplit=1)[0], group
    return None


def _owned_flag_check(group: OwnedFlags) -> Check:
    def check(runtime: Any) -> Iterator[Finding]:
        for arg in runtime.extra_args:
            found = owned_flag(arg)
            if found is not None and found[1] is group:
                written = found[0]
                full = [f for f in group.flags if f.replace("_", "-") == written.replace("_", "-")]
                what = written if full else f"{written} (read by vLLM as {group.flags[0]})"
                yield f"got {shown(what, quote=False)}"

    return check


for _group in OWNED_FLAGS:
    rule(
        f"extra-args-{_group.name}",
        scope="spec.runtime",
        field=".extraArgs",
        message=f"{'/'.join(_group.flags)} "
        f"{'is' if len(_group.flags) == 1 else 'are'} owned by specguard (abbreviations "
        f"too); {_group.instead}",
        cel=f"!has(self.extraArgs) || self.extraArgs.all(a, !a.matches('{_group.pattern}'))",
    )(_owned_flag_check(_group))


# --- runtime: resources, env, scheduling ---------------------------------------------

_GPU = "(has(self.gpuResource) ? self.gpuResource : 'nvidia.com/gpu')"


@rule(
    "gpu-in-resources",
    scope="spec.runtime",
    field=".resources",
    message="the GPU resource is set from spec.runtime.tensorParallelSize; remove it",
    cel="!has(self.resources) || "
    f"((!has(self.resources.requests) || !({_GPU} in self.resources.requests)) && "
    f"(!has(self.resources.limits) || !({_GPU} in self.resources.limits)))",
)
def _gpu_in_resources(runtime: Any) -> Iterator[Finding]:
    for kind in ("requests", "limits"):
        if runtime.gpu_resource in getattr(runtime.resources, kind):
            yield At(f".resources.{kind}", f"got {runtime.gpu_resource}")


@rule(
    "hf-token-env",
    scope="spec.runtime",
    field=".env",
    message="HF_TOKEN is set from spec.runtime.hfTokenSecret; remove one of them",
    cel="!has(self.hfTokenSecret) || !has(self.env) || self.env.all(e, e.name != 'HF_TOKEN')",
)
def _hf_token_env(runtime: Any) -> Iterator[Finding]:
    if runtime.hf_token_secret is not None:
        for index, env in enumerate(runtime.env):
            if env.name == "HF_TOKEN":
                yield At(f".env[{index}].name")


ENV_SOURCES: Final = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


@rule(
    "env-one-source",
    scope="spec.runtime.env[].valueFrom",
    field="",
    message="set exactly one of " + ", ".join(ENV_SOURCES),
    cel=" + ".join(f"(has(self.{source}) ? 1 : 0)" for source in ENV_SOURCES) + " == 1",
)
def _env_one_source(source: Any) -> Iterator[Finding]:
    names = ("secret_key_ref", "config_map_key_ref", "field_ref", "resource_field_ref")
    found = [
        wire
        for wire, name in zip(ENV_SOURCES, names, strict=True)
        if getattr(source, name) is not None
    ]
    if len(found) != 1:
        yield f"got {', '.join(found) or 'none'}"


@rule(
    "env-value-or-source",
    scope="spec.runtime.env[]",
    field=".value",
    message="set value or valueFrom, not both",
    cel="!has(self.valueFrom) || !has(self.value) || self.value == ''",
)
def _env_value_or_source(env: Any) -> Iterator[Finding]:
    if env.value and env.value_from is not None:
        yield ""


@rule(
    "toleration-key-or-exists",
    scope="spec.runtime.tolerations[]",
    field=".operator",
    message="must be Exists when key is empty (a toleration of every taint)",
    cel="(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
)
def _toleration_key_or_exists(toleration: Any) -> Iterator[Finding]:
    if not toleration.key and toleration.operator != "Exists":
        yield f"got {toleration.operator or 'none'}"


@rule(
    "toleration-exists-no-value",
    scope="spec.runtime.tolerations[]",
    field=".value",
    message="must be empty when operator is Exists",
    cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
)
def _toleration_exists_no_value(toleration: Any) -> Iterator[Finding]:
    if toleration.operator == "Exists" and toleration.value:
        yield f"got {shown(toleration.value)}"


@rule(
    "toleration-seconds-no-execute",
    scope="spec.runtime.tolerations[]",
    field=".tolerationSeconds",
    message="only with effect NoExecute",
    cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
)
def _toleration_seconds_no_execute(toleration: Any) -> Iterator[Finding]:
    if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
        yield f"got {toleration.effect or 'no effect'}"


@rule(
    "gpu-resource-extended",
    scope="spec.runtime",
    field=".gpuResource",
    message="must be an extended resource name, outside the kubernetes.io domains and "
    "without the requests. prefix",
    cel=f"!{_GPU}.startsWith('requests.') && !{_GPU}.contains('kubernetes.io/')",
)
def _gpu_resource_extended(runtime: Any) -> Iterator[Finding]:
    name = runtime.gpu_resource
    if name.startswith("requests.") or "kubernetes.io/" in name:
        yield f"got {shown(name)}"


def _mount_path_pattern(path: str) -> str:
    # "/dev/shm" -> ^/+dev/+shm/*$: the same directory however many slashes it is spelt with.
    return "^/+" + "/+".join(part for part in path.split("/") if part) + "/*$"


RESERVED_MOUNT_PATTERN: Final = "|".join(
    f"({_mount_path_pattern(path)})" for path in RESERVED_MOUNT_PATHS
)


@rule(
    "cache-mount-path",
    scope="spec.runtime.modelCache",
    field=".mountPath",
    message=", ".join(RESERVED_MOUNT_PATHS) + " is mounted by specguard; choose another path",
    cel=f"!has(self.mountPath) || !self.mountPath.matches('{RESERVED_MOUNT_PATTERN}')",
)
def _cache_mount_path(cache: Any) -> Iterator[Finding]:
    if re.search(RESERVED_MOUNT_PATTERN, cache.mount_path):
        yield f"got {shown(cache.mount_path)}"


# Quantities are bounded so that no value makes the API server or the kubelet work on a
# number with a billion digits ("1e999999999" once made the API server time out).
# The CEL twin first checks the text is short and has a small exponent (the schema's
# pattern, which does not stop CEL from running, says so too), then compares.
_QUANTITY_SHAPE = "^[+]?[0-9.]{1,32}([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?$"


def _quantity_compare(left: str, operator: str, right: str) -> str:
    """CEL: ``left operator right`` as quantities; true when either is not a short quantity
    (the schema's pattern refuses those)."""
    texts = [f"string({side})" if side.startswith("self") else side for side in (left, right)]
    shapes = " || ".join(f"!{t}.matches('{_QUANTITY_SHAPE}')" for t in texts if t[0] != "'")
    quantities = [f"quantity({t})" for t in texts]
    return f"({shapes} || {quantities[0]}.compareTo({quantities[1]}) {operator} 0)"


def _quantity_cel(expression: str) -> str:
    return _quantity_compare(expression, "<=", f"'{MAX_QUANTITY}'")


def _bounded(value: Any) -> bool:
    return quantity_value(value) <= quantity_value(MAX_QUANTITY)


def _quantity_map_check(kind: str) -> Check:
    def check(resources: Any) -> Iterator[Finding]:
        for name, value in getattr(resources, kind).items():
            if not _bounded(value):
                yield At(f".{kind}.{shown(name, quote=False)}", f"got {shown(value)}")

    return check


for _kind in ("requests", "limits"):
    rule(
        f"quantity-{_kind}",
        scope="spec.runtime.resources",
        field=f".{_kind}",
        message=f"every quantity must be at most {MAX_QUANTITY}",
        cel=f"!has(self.{_kind}) || self.{_kind}.all(k, {_quantity_cel(f'self.{_kind}[k]')})",
        since=QUANTITY_SINCE,
    )(_quantity_map_check(_kind))


@rule(
    "requests-within-limits",
    scope="spec.runtime.resources",
    field=".requests",
    message="must not be above the limits",
    cel="!has(self.requests) || !has(self.limits) || self.requests.all(k, "
    "!(k in self.limits) || " + _quantity_compare("self.requests[k]", "<=", "self.limits[k]") + ")",
    since=QUANTITY_SINCE,
)
def _requests_within_limits(resources: Any) -> Iterator[Finding]:
    for name, request in resources.requests.items():
        limit = resources.limits.get(name)
        if limit is not None and quantity_value(request) > quantity_value(limit):
            yield At(
                f".requests.{name}",
                f"got {request} above the limit {limit} (spec.runtime.resources.limits.{name})",
            )


@rule(
    "quantity-shm-size",
    scope="spec.runtime",
    field=".shmSize",
    message=f"must be at most {MAX_QUANTITY}",
    cel="!has(self.shmSize) || " + _quantity_cel("self.shmSize"),
    since=QUANTITY_SINCE,
)
def _shm_size_bounded(runtime: Any) -> Iterator[Finding]:
    if not _bounded(runtime.shm_size):
        yield f"got {shown(runtime.shm_size)}"


@rule(
    "quantity-divisor",
    scope="spec.runtime.env[].valueFrom.resourceFieldRef",
    field=".divisor",
    message=f"must be at most {MAX_QUANTITY}",
    cel="!has(self.divisor) || " + _quantity_cel("self.divisor"),
    since=QUANTITY_SINCE,
)
def _divisor_bounded(ref: Any) -> Iterator[Finding]:
    if ref.divisor is not None and not _bounded(ref.divisor):
        yield f"got {shown(ref.divisor)}"


# vLLM refuses enable_adaptive_verification with eager mode or pipeline parallelism > 1.
ENFORCE_EAGER_PATTERN: Final = flag_pattern("--enforce-eager")
_PIPELINE_PATTERN: Final = flag_pattern("--pipeline-parallel-size", "-pp")


@rule(
    "adaptive-no-eager",
    scope="spec",
    field=".drafter.adaptiveVerification",
    message="vLLM cannot combine it with --enforce-eager in spec.runtime.extraArgs",
    cel="!has(self.drafter.adaptiveVerification) || !self.drafter.adaptiveVerification || "
    "!has(self.runtime) || !has(self.runtime.extraArgs) || "
    f"!self.runtime.extraArgs.exists(a, a.matches('{ENFORCE_EAGER_PATTERN}'))",
)
def _adaptive_no_eager(spec: Any) -> Iterator[Finding]:
    if spec.drafter.adaptive_verification:
        yield from _eager_flags(spec.runtime.extra_args)


def _eager_flags(args: list[str]) -> Iterator[str]:
    """Findings for each --enforce-eager in ``args``."""
    for arg in args:
        if re.search(ENFORCE_EAGER_PATTERN, arg):
            yield f"got {shown(arg.split('=', 1)[0], quote=False)}"


@rule(
    "ladder-adaptive-no-eager",
    scope="spec",
    field=".ladder.rungs",
    message="adaptive: vLLM cannot combine adaptive verification with --enforce-eager in "
    "spec.runtime.extraArgs",
    cel=f"!({_ladder_has('adaptive')}) || "
    "!has(self.runtime) || !has(self.runtime.extraArgs) || "
    f"!self.runtime.extraArgs.exists(a, a.matches('{ENFORCE_EAGER_PATTERN}'))",
)
def _ladder_adaptive_no_eager(spec: Any) -> Iterator[Finding]:
    index = _rung_index(spec, "adaptive")
    if index is not None:
        for detail in _eager_flags(spec.runtime.extra_args):
            yield At(f".ladder.rungs[{index}]", detail)


def _pipeline_size(args: list[str], index: int) -> tuple[str, int] | None:
    """(flag, size) when ``args[index]`` sets the pipeline-parallel size to an integer."""
    arg = args[index]
    if not re.fullmatch(_PIPELINE_PATTERN, arg):
        return None
    flag, eq, value = arg.partition("=")
    if not eq:
        value = args[index + 1] if index + 1 < len(args) else ""
    if not re.fullmatch(r"[+-]?[0-9]{1,18}", value.strip()):
        return None  # not a number: vLLM's own parser says so
    return flag, int(value)


@rule(
    "adaptive-no-pipeline",
    scope="spec",
    field=".drafter.adaptiveVerification",
    message="vLLM cannot combine it with --pipeline-parallel-size/-pp above 1 in "
    "spec.runtime.extraArgs",
    # "-pp 2" is two list items; CEL's list macros see one item at a time.
    cel=None,
)
def _adaptive_no_pipeline(spec: Any) -> Iterator[Finding]:
    if spec.drafter.adaptive_verification:
        yield from _pipeline_flags(spec.runtime.extra_args)


def _pipeline_flags(args: list[str]) -> Iterator[str]:
    """Findings for each pipeline-parallel size above 1 in ``args``."""
    for index in range(len(args)):
        found = _pipeline_size(args, index)
        if found is not None and found[1] > 1:
            yield f"got {shown(found[0], quote=False)} {found[1]}"


@rule(
    "ladder-adaptive-no-pipeline",
    scope="spec",
    field=".ladder.rungs",
    message="adaptive: vLLM cannot combine adaptive verification with "
    "--pipeline-parallel-size/-pp above 1 in spec.runtime.extraArgs",
    # "-pp 2" is two list items; CEL's list macros see one item at a time.
    cel=None,
)
def _ladder_adaptive_no_pipeline(spec: Any) -> Iterator[Finding]:
    index = _rung_index(spec, "adaptive")
    if index is not None:
        for detail in _pipeline_flags(spec.runtime.extra_args):
            yield At(f".ladder.rungs[{index}]", detail)


# --- shadow and timing ---------------------------------------------------------------


@rule(
    "shadow-not-above-replicas",
    scope="spec",
    field=".shadow.replicas",
    message="must not be above spec.replicas (the shadow arm gets at most the whole traffic)",
    cel="!has(self.shadow) || !has(self.shadow.replicas) || "
    "self.shadow.replicas <= (has(self.replicas) ? self.replicas : 1)",
)
def _shadow_not_above_replicas(spec: Any) -> Iterator[Finding]:
    if spec.shadow.replicas > spec.replicas:
        yield f"got {spec.shadow.replicas} above {spec.replicas}"


@rule(
    "periodic-needs-times",
    scope="spec.shadow",
    field="",
    message="every and activeFor are required when schedule is periodic",
    cel="!has(self.schedule) || self.schedule != 'periodic' || "
    "(has(self.every) && has(self.activeFor))",
)
def _periodic_needs_times(shadow: Any) -> Iterator[Finding]:
    if shadow.schedule == "periodic":
        for wire, value in (("every", shadow.every), ("activeFor", shadow.active_for)):
            if value is None:
                yield At(f".{wire}", f"{wire} is missing")


@rule(
    "continuous-refuses-times",
    scope="spec.shadow",
    field="",
    message="every and activeFor are only used when schedule is periodic",
    cel="(has(self.schedule) && self.schedule == 'periodic') || "
    "(!has(self.every) && !has(self.activeFor))",
)
def _continuous_refuses_times(shadow: Any) -> Iterator[Finding]:
    if shadow.schedule == "continuous":
        for wire, value in (("every", shadow.every), ("activeFor", shadow.active_for)):
            if value is not None:
                yield At(f".{wire}", f"got {wire} with schedule continuous")


@rule(
    "active-shorter-than-every",
    scope="spec.shadow",
    field=".activeFor",
    message="must be shorter than spec.shadow.every",
    cel="!has(self.every) || !has(self.activeFor) || "
    "duration(self.activeFor) < duration(self.every)",
)
def _active_shorter_than_every(shadow: Any) -> Iterator[Finding]:
    every, active = shadow.every, shadow.active_for
    if every is not None and active is not None and active >= every:
        yield f"got {format_duration(active)} with every {format_duration(every)}"


_WINDOW = "(has(self.evaluation) && has(self.evaluation.window) ? self.evaluation.window : '60s')"


@rule(
    "active-covers-window",
    scope="spec",
    field=".shadow.activeFor",
    message="must be at least spec.evaluation.window",
    cel="!has(self.shadow) || !has(self.shadow.activeFor) || "
    f"duration(self.shadow.activeFor) >= duration({_WINDOW})",
)
def _active_covers_window(spec: Any) -> Iterator[Finding]:
    active = spec.shadow.active_for
    if active is not None:
        window = spec.evaluation.window
        if active < window:
            yield f"got {format_duration(active)} with window {format_duration(window)}"


@rule(
    "prometheus-url",
    scope="spec.metricsSource",
    field=".prometheusUrl",
    message="required when type is prometheus",
    cel="!has(self.type) || self.type != 'prometheus' || has(self.prometheusUrl)",
)
def _prometheus_url(source: Any) -> Iterator[Finding]:
    if source.type == "prometheus" and source.prometheus_url is None:
        yield ""


@rule(
    "false-alarm-budget",
    scope="spec.evaluation",
    field=".windowsPerFalseAlarm",
    message="must be 0 (off) or at least 10",
    cel="!has(self.windowsPerFalseAlarm) || self.windowsPerFalseAlarm == 0 || "
    "self.windowsPerFalseAlarm >= 10",
)
def _false_alarm_budget(evaluation: Any) -> Iterator[Finding]:
    budget = evaluation.windows_per_false_alarm
    if 0 < budget < 10:
        yield f"got {budget}"


# shadow.activeFor needs no bounds of its own: it is at least one window and below every.
DURATION_BOUNDS: Final = (
    ("spec.evaluation", "window", "10s", "24h"),
    ("spec.rollback", "cooldown", "0s", "168h"),
    ("spec.rollback", "startupDeadline", "1m", "24h"),
    ("spec.shadow", "every", "1m", "168h"),
    ("spec.runtime", "shutdownTimeout", "0s", "1h"),
    ("spec.ladder", "retryAfter", "1m", "168h"),
)


def _duration_check(wire: str, low: str, high: str) -> Check:
    def check(section: Any) -> Iterator[Finding]:
        value = _child(section, wire)
        if value is not None and not parse_duration(low) <= value <= parse_duration(high):
            yield f"got {format_duration(value)}"

    return check


for _scope, _wire, _low, _high in DURATION_BOUNDS:
    rule(
        f"duration-{_wire}",
        scope=_scope,
        field=f".{_wire}",
        message=f"must be between {_low} and {_high}",
        cel=f"!has(self.{_wire}) || (duration(self.{_wire}) >= duration('{_low}') && "
        f"duration(self.{_wire}) <= duration('{_high}'))",
    )(_duration_check(_wire, _low, _high))


RULES: Final[tuple[Rule, ...]] = tuple(RULES_BY_DEFINITION)


def check_rules(spec: Spec | Partial) -> list[Problem]:
    """Problems the cross-field rules find in a validated spec or a Partial view of one."""
    return [problem for rule_ in RULES for problem in rule_.problems(spec)]
