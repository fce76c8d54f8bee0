"""Cross-field rules of the spec, each written twice: in Python and in CEL.

The Python check is the real guard (the operator runs it on every cluster, and it can say
exactly which value is wrong). The CEL twin goes into the CRD as an
``x-kubernetes-validations`` entry at ``scope`` so that a current API server refuses the
same objects at admission; tests evaluate every CEL rule against the same valid and
invalid objects as the Python check.

Three rules have no CEL twin: the keys of ``spec.drafter.extraConfig`` (an object that
preserves unknown fields, which the API server does not expose to CEL); requests not above
limits in ``spec.runtime.resources`` (comparing "64Gi" with "96Gi" needs CEL's quantity
library, which Kubernetes before 1.29 and cel-python lack); and a pipeline-parallel size
with adaptive verification (``-pp 2`` spreads over two list items, and CEL on a list sees
one item at a time).

CEL rules are written for Kubernetes' CEL (cel-go) and only use what cel-python also
evaluates: ``has()``, ``size()``, ``in``, ``all``/``exists``/``exists_one``, ``matches``
and ``duration()`` on Go-style strings ("1h30m"). Optional fields without a default are
guarded with ``has()``; fields with a CRD default are present after defaulting, but the
rules guard them too so they hold on objects written before a default existed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from specguard.api.constants import RESERVED_MOUNT_PATHS
from specguard.api.durations import format_duration, parse_duration
from specguard.api.errors import Problem
from specguard.api.spec import (
    METHODS_WITHOUT_MODEL,
    METHODS_WITHOUT_REQUIRED_MODEL,
    Spec,
)
from specguard.api.wire import quantity_value

Check = Callable[[Spec], Iterator[Problem]]


@dataclass(frozen=True)
class Rule:
    name: str
    scope: str  # schema node the CEL rule sits on; ``self`` is that node
    cel: str | None  # None: Python only (the API server's CEL cannot see the data)
    message: str  # static message for the API server (CEL cannot format values in 1.25)
    field_path: str  # JSONPath relative to scope, for fieldPath (Kubernetes >= 1.28)
    sections: frozenset[str]  # top-level spec fields the Python check reads
    check: Check


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


# --- drafter -------------------------------------------------------------------------


def _adaptive_only_dspark(spec: Spec) -> Iterator[Problem]:
    drafter = spec.drafter
    if drafter.adaptive_verification and drafter.method != "dspark":
        yield Problem(
            "spec.drafter.adaptiveVerification",
            f"only supported with method dspark, got {drafter.method}",
        )


def _model_required(spec: Spec) -> Iterator[Problem]:
    drafter = spec.drafter
    if drafter.method not in METHODS_WITHOUT_REQUIRED_MODEL and drafter.model is None:
        yield Problem(
            "spec.drafter.model",
            f"method {drafter.method} needs a drafter model (only "
            f"{', '.join(METHODS_WITHOUT_REQUIRED_MODEL)} run without one)",
        )


def _model_refused(spec: Spec) -> Iterator[Problem]:
    drafter = spec.drafter
    if drafter.method in METHODS_WITHOUT_MODEL and drafter.model is not None:
        yield Problem(
            "spec.drafter.model",
            f"method {drafter.method} takes no drafter model; remove it",
        )


def _draft_tp(spec: Spec) -> Iterator[Problem]:
    draft_tp = spec.drafter.draft_tensor_parallel_size
    target_tp = spec.runtime.tensor_parallel_size
    if draft_tp is not None and draft_tp not in (1, target_tp):
        yield Problem(
            "spec.drafter.draftTensorParallelSize",
            f"must be 1 or spec.runtime.tensorParallelSize ({target_tp}), got {draft_tp}",
        )


def _per_batch_starts_at_one(spec: Spec) -> Iterator[Problem]:
    ranges = spec.drafter.per_batch_size
    if ranges and not any(r.min_batch_size == 1 for r in ranges):
        first = min(r.min_batch_size for r in ranges)
        yield Problem(
            "spec.drafter.perBatchSize",
            f"the first range must start at batch size 1, got {first}",
        )


def _per_batch_ordered(spec: Spec) -> Iterator[Problem]:
    for index, r in enumerate(spec.drafter.per_batch_size or []):
        if r.min_batch_size > r.max_batch_size:
            yield Problem(
                f"spec.drafter.perBatchSize[{index}]",
                f"minBatchSize ({r.min_batch_size}) is above maxBatchSize ({r.max_batch_size})",
            )


def _per_batch_no_overlap(spec: Spec) -> Iterator[Problem]:
    ranges = spec.drafter.per_batch_size or []
    for i, a in enumerate(ranges):
        for j in range(i + 1, len(ranges)):
            b = ranges[j]
            if a.min_batch_size <= b.max_batch_size and b.min_batch_size <= a.max_batch_size:
                yield Problem(
                    "spec.drafter.perBatchSize",
                    f"ranges {i} ({a.min_batch_size}-{a.max_batch_size}) and {j} "
                    f"({b.min_batch_size}-{b.max_batch_size}) overlap",
                )


def _per_batch_needs_k(spec: Spec) -> Iterator[Problem]:
    drafter = spec.drafter
    if drafter.per_batch_size and drafter.num_speculative_tokens is None:
        yield Problem(
            "spec.drafter.numSpeculativeTokens",
            "required when spec.drafter.perBatchSize is set (it is the largest draft length)",
        )


def _per_batch_k_bounded(spec: Spec) -> Iterator[Problem]:
    drafter = spec.drafter
    k = drafter.num_speculative_tokens
    if k is None:
        return
    for index, r in enumerate(drafter.per_batch_size or []):
        if r.num_speculative_tokens > k:
            yield Problem(
                f"spec.drafter.perBatchSize[{index}].numSpeculativeTokens",
                f"{r.num_speculative_tokens} is above spec.drafter.numSpeculativeTokens ({k})",
            )


# --speculative-config keys specguard writes from typed fields.
OWNED_CONFIG_KEYS: Final[dict[str, str]] = {
    "method": "spec.drafter.method",
    "model": "spec.drafter.model",
    "num_speculative_tokens": "spec.drafter.numSpeculativeTokens",
    "enable_adaptive_verification": "spec.drafter.adaptiveVerification",
    "draft_tensor_parallel_size": "spec.drafter.draftTensorParallelSize",
    "num_speculative_tokens_per_batch_size": "spec.drafter.perBatchSize",
}


def _extra_config_owned(spec: Spec) -> Iterator[Problem]:
    for key in spec.drafter.extra_config:
        if key in OWNED_CONFIG_KEYS:
            yield Problem(
                "spec.drafter.extraConfig",
                f"key {key} is owned by specguard; set {OWNED_CONFIG_KEYS[key]} instead",
            )


# --- runtime -------------------------------------------------------------------------


@dataclass(frozen=True)
class OwnedFlags:
    """`vllm serve` flags specguard sets itself, and where the user says what they want."""

    name: str
    flags: tuple[str, ...]
    instead: str  # the field to use, or why there is none

    @property
    def pattern(self) -> str:
        return flag_pattern(*self.flags)


def flag_pattern(*flags: str) -> str:
    """A regex matching an extraArgs item that is one of ``flags``, alone or with a value.

    vLLM's parser takes --a-b and --a_b alike, "--flag=value", and for JSON flags
    "--flag.key=value"; short forms only as written. No backslashes: the pattern is
    embedded in a CEL string literal as it is.
    """
    alternatives = []
    for flag in flags:
        if not re.fullmatch(r"--?[a-z0-9-]+", flag):
            raise ValueError(f"flag {flag!r} would need escaping in CEL")
        if flag.startswith("--"):
            alternatives.append("--" + "[-_]".join(flag[2:].split("-")))
        else:
            alternatives.append(flag)
    return "^(" + "|".join(alternatives) + ")([=.].*)?$"


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
        "histogram-buckets",
        ("--custom-histogram-buckets",),
        "specguard sets fine inter-token-latency buckets",
    ),
)


def owned_flag(arg: str) -> tuple[str, OwnedFlags] | None:
    """The flag as written in ``arg`` and its group, if specguard owns it."""
    for group in OWNED_FLAGS:
        if re.fullmatch(group.pattern, arg):
            return re.split(r"[=.]", arg, maxsplit=1)[0], group
    return None


def _extra_args_check(group: OwnedFlags) -> Check:
    def check(spec: Spec) -> Iterator[Problem]:
        for arg in spec.runtime.extra_args:
            found = owned_flag(arg)
            if found is not None and found[1] is group:
                yield Problem(
                    "spec.runtime.extraArgs",
                    f"{found[0]} is owned by specguard; {group.instead}",
                )

    return check


def _gpu_in_resources(spec: Spec) -> Iterator[Problem]:
    runtime = spec.runtime
    for kind in ("requests", "limits"):
        if runtime.gpu_resource in getattr(runtime.resources, kind):
            yield Problem(
                f"spec.runtime.resources.{kind}",
                f"{runtime.gpu_resource} is set from spec.runtime.tensorParallelSize; remove it",
            )


def _hf_token_env(spec: Spec) -> Iterator[Problem]:
    runtime = spec.runtime
    if runtime.hf_token_secret is not None:
        for index, env in enumerate(runtime.env):
            if env.name == "HF_TOKEN":
                yield Problem(
                    f"spec.runtime.env[{index}].name",
                    "HF_TOKEN is set from spec.runtime.hfTokenSecret; remove one of them",
                )


ENV_SOURCES: Final = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


def _env_one_source(spec: Spec) -> Iterator[Problem]:
    for index, env in enumerate(spec.runtime.env):
        source = env.value_from
        if source is None:
            continue
        wire = source.to_wire()
        if len(wire) != 1:
            found = ", ".join(wire) or "none"
            yield Problem(
                f"spec.runtime.env[{index}].valueFrom",
                f"set exactly one of {', '.join(ENV_SOURCES)}, got {found}",
            )


def _env_value_or_source(spec: Spec) -> Iterator[Problem]:
    for index, env in enumerate(spec.runtime.env):
        if env.value and env.value_from is not None:
            yield Problem(
                f"spec.runtime.env[{index}].value",
                "set value or valueFrom, not both",
            )


def _toleration_key_or_exists(spec: Spec) -> Iterator[Problem]:
    for index, toleration in enumerate(spec.runtime.tolerations):
        if not toleration.key and toleration.operator != "Exists":
            yield Problem(
                f"spec.runtime.tolerations[{index}].operator",
                "must be Exists when key is empty (a toleration of every taint)",
            )


def _toleration_exists_no_value(spec: Spec) -> Iterator[Problem]:
    for index, toleration in enumerate(spec.runtime.tolerations):
        if toleration.operator == "Exists" and toleration.value:
            yield Problem(
                f"spec.runtime.tolerations[{index}].value",
                "must be empty when operator is Exists",
            )


def _toleration_seconds_no_execute(spec: Spec) -> Iterator[Problem]:
    for index, toleration in enumerate(spec.runtime.tolerations):
        if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
            yield Problem(
                f"spec.runtime.tolerations[{index}].tolerationSeconds",
                f"only with effect NoExecute, got {toleration.effect or 'no effect'}",
            )


def _gpu_resource_extended(spec: Spec) -> Iterator[Problem]:
    name = spec.runtime.gpu_resource
    if name.startswith("requests.") or "kubernetes.io/" in name:
        yield Problem(
            "spec.runtime.gpuResource",
            f"{name} is not an extended resource name (the kubernetes.io domains and the "
            "requests. prefix are Kubernetes' own)",
        )


def _mount_path_pattern(path: str) -> str:
    # "/dev/shm" -> ^/+dev/+shm/*$: the same directory however many slashes it is spelt with.
    return "^/+" + "/+".join(part for part in path.split("/") if part) + "/*$"


RESERVED_MOUNT_PATTERN: Final = "|".join(
    f"({_mount_path_pattern(path)})" for path in RESERVED_MOUNT_PATHS
)


def _cache_mount_path(spec: Spec) -> Iterator[Problem]:
    cache = spec.runtime.model_cache
    if cache is not None and re.search(RESERVED_MOUNT_PATTERN, cache.mount_path):
        yield Problem(
            "spec.runtime.modelCache.mountPath",
            f"{cache.mount_path} is mounted by specguard "
            f"({', '.join(RESERVED_MOUNT_PATHS)}); choose another path",
        )


def _requests_within_limits(spec: Spec) -> Iterator[Problem]:
    resources = spec.runtime.resources
    for name, request in resources.requests.items():
        limit = resources.limits.get(name)
        if limit is not None and quantity_value(request) > quantity_value(limit):
            yield Problem(
                f"spec.runtime.resources.requests.{name}",
                f"{request} is above the limit {limit} (spec.runtime.resources.limits.{name})",
            )


# vLLM refuses enable_adaptive_verification with eager mode or pipeline parallelism > 1.
ENFORCE_EAGER_PATTERN: Final = flag_pattern("--enforce-eager")
_PIPELINE_PATTERN: Final = flag_pattern("--pipeline-parallel-size", "-pp")


def _adaptive_no_eager(spec: Spec) -> Iterator[Problem]:
    if not spec.drafter.adaptive_verification:
        return
    for arg in spec.runtime.extra_args:
        if re.search(ENFORCE_EAGER_PATTERN, arg):
            yield Problem(
                "spec.drafter.adaptiveVerification",
                f"vLLM cannot combine it with {arg.split('=', 1)[0]} in spec.runtime.extraArgs",
            )


def _pipeline_size(args: list[str], index: int) -> tuple[str, int] | None:
    """(flag, size) when ``args[index]`` sets the pipeline-parallel size to an integer."""
    arg = args[index]
    if not re.fullmatch(_PIPELINE_PATTERN, arg):
        return None
    flag, eq, value = arg.partition("=")
    if not eq:
        value = args[index + 1] if index + 1 < len(args) else ""
    try:
        return flag, int(value)
    except ValueError:
        return None  # not a number: vLLM's own parser says so


def _adaptive_no_pipeline(spec: Spec) -> Iterator[Problem]:
    if not spec.drafter.adaptive_verification:
        return
    args = spec.runtime.extra_args
    for index in range(len(args)):
        found = _pipeline_size(args, index)
        if found is not None and found[1] > 1:
            yield Problem(
                "spec.drafter.adaptiveVerification",
                f"vLLM cannot combine it with {found[0]} {found[1]} (pipeline parallelism "
                "above 1) in spec.runtime.extraArgs",
            )


# --- shadow and timing ---------------------------------------------------------------


def _shadow_not_above_replicas(spec: Spec) -> Iterator[Problem]:
    if spec.shadow.replicas > spec.replicas:
        yield Problem(
            "spec.shadow.replicas",
            f"{spec.shadow.replicas} is above spec.replicas ({spec.replicas}); the shadow arm "
            "gets at most the whole traffic",
        )


def _periodic_needs_times(spec: Spec) -> Iterator[Problem]:
    shadow = spec.shadow
    if shadow.schedule == "periodic":
        for field, value in (("every", shadow.every), ("activeFor", shadow.active_for)):
            if value is None:
                yield Problem(f"spec.shadow.{field}", "required when schedule is periodic")


def _continuous_refuses_times(spec: Spec) -> Iterator[Problem]:
    shadow = spec.shadow
    if shadow.schedule == "continuous":
        for field, value in (("every", shadow.every), ("activeFor", shadow.active_for)):
            if value is not None:
                yield Problem(f"spec.shadow.{field}", "only used when schedule is periodic")


def _active_shorter_than_every(spec: Spec) -> Iterator[Problem]:
    shadow = spec.shadow
    every, active = shadow.every, shadow.active_for
    if every is not None and active is not None and active >= every:
        yield Problem(
            "spec.shadow.activeFor",
            f"must be shorter than spec.shadow.every ({format_duration(every)}), "
            f"got {format_duration(active)}",
        )


def _active_covers_window(spec: Spec) -> Iterator[Problem]:
    active = spec.shadow.active_for
    window = spec.evaluation.window
    if active is not None and active < window:
        yield Problem(
            "spec.shadow.activeFor",
            f"must be at least spec.evaluation.window ({format_duration(window)}), got "
            f"{format_duration(active)}",
        )


def _prometheus_url(spec: Spec) -> Iterator[Problem]:
    source = spec.metrics_source
    if source.type == "prometheus" and source.prometheus_url is None:
        yield Problem("spec.metricsSource.prometheusUrl", "required when type is prometheus")


@dataclass(frozen=True)
class DurationBounds:
    path: str  # wire path of the field
    attribute: tuple[str, str]  # (section, python attribute)
    low: str
    high: str


# shadow.activeFor needs no bounds of its own: it is at least one window and below every.
DURATION_BOUNDS: Final = (
    DurationBounds("spec.evaluation.window", ("evaluation", "window"), "10s", "24h"),
    DurationBounds("spec.rollback.cooldown", ("rollback", "cooldown"), "0s", "168h"),
    DurationBounds("spec.rollback.startupDeadline", ("rollback", "startup_deadline"), "1m", "24h"),
    DurationBounds("spec.shadow.every", ("shadow", "every"), "1m", "168h"),
)


def _duration_check(bounds: DurationBounds) -> Check:
    low, high = parse_duration(bounds.low), parse_duration(bounds.high)

    def check(spec: Spec) -> Iterator[Problem]:
        value = getattr(getattr(spec, bounds.attribute[0]), bounds.attribute[1])
        if value is not None and not low <= value <= high:
            yield Problem(
                bounds.path,
                f"must be between {bounds.low} and {bounds.high}, got {format_duration(value)}",
            )

    return check


def _duration_rules() -> list[Rule]:
    return [
        Rule(
            name=f"duration-{bounds.path.rsplit('.', 1)[1]}",
            scope=bounds.path,
            cel=f"duration(self) >= duration('{bounds.low}') && "
            f"duration(self) <= duration('{bounds.high}')",
            message=f"{bounds.path}: must be between {bounds.low} and {bounds.high}",
            field_path="",
            sections=frozenset({bounds.attribute[0]}),
            check=_duration_check(bounds),
        )
        for bounds in DURATION_BOUNDS
    ]


def _flag_rules() -> list[Rule]:
    return [
        Rule(
            name=f"extra-args-{group.name}",
            scope="spec.runtime.extraArgs",
            cel=f"self.all(a, !a.matches('{group.pattern}'))",
            message=f"spec.runtime.extraArgs: {'/'.join(group.flags)} "
            f"{'is' if len(group.flags) == 1 else 'are'} owned by specguard; {group.instead}",
            field_path="",
            sections=frozenset({"runtime"}),
            check=_extra_args_check(group),
        )
        for group in OWNED_FLAGS
    ]


_TP = (
    "(has(self.runtime) && has(self.runtime.tensorParallelSize) ? "
    "self.runtime.tensorParallelSize : 1)"
)
_REPLICAS = "(has(self.replicas) ? self.replicas : 1)"
_WINDOW = "(has(self.evaluation) && has(self.evaluation.window) ? self.evaluation.window : '60s')"
_GPU = "(has(self.gpuResource) ? self.gpuResource : 'nvidia.com/gpu')"

RULES: Final[tuple[Rule, ...]] = (
    Rule(
        name="adaptive-only-dspark",
        scope="spec.drafter",
        cel="!has(self.adaptiveVerification) || !self.adaptiveVerification || "
        "self.method == 'dspark'",
        message="spec.drafter.adaptiveVerification: only supported with method dspark",
        field_path=".adaptiveVerification",
        sections=frozenset({"drafter"}),
        check=_adaptive_only_dspark,
    ),
    Rule(
        name="model-required",
        scope="spec.drafter",
        cel=f"self.method in {_cel_list(METHODS_WITHOUT_REQUIRED_MODEL)} || has(self.model)",
        message="spec.drafter.model: required for methods other than "
        + ", ".join(METHODS_WITHOUT_REQUIRED_MODEL),
        field_path=".model",
        sections=frozenset({"drafter"}),
        check=_model_required,
    ),
    Rule(
        name="model-refused",
        scope="spec.drafter",
        cel=f"!(self.method in {_cel_list(METHODS_WITHOUT_MODEL)}) || !has(self.model)",
        message="spec.drafter.model: methods "
        + ", ".join(METHODS_WITHOUT_MODEL)
        + " take no drafter model",
        field_path=".model",
        sections=frozenset({"drafter"}),
        check=_model_refused,
    ),
    Rule(
        name="draft-tp",
        scope="spec",
        cel="!has(self.drafter.draftTensorParallelSize) || "
        "self.drafter.draftTensorParallelSize == 1 || "
        f"self.drafter.draftTensorParallelSize == {_TP}",
        message="spec.drafter.draftTensorParallelSize: must be 1 or "
        "spec.runtime.tensorParallelSize",
        field_path=".drafter.draftTensorParallelSize",
        sections=frozenset({"drafter", "runtime"}),
        check=_draft_tp,
    ),
    Rule(
        name="per-batch-ordered",
        scope="spec.drafter.perBatchSize[]",
        cel="self.minBatchSize <= self.maxBatchSize",
        message="spec.drafter.perBatchSize: minBatchSize must not be above maxBatchSize",
        field_path=".minBatchSize",
        sections=frozenset({"drafter"}),
        check=_per_batch_ordered,
    ),
    Rule(
        name="per-batch-starts-at-one",
        scope="spec.drafter.perBatchSize",
        cel="self.exists(r, r.minBatchSize == 1)",
        message="spec.drafter.perBatchSize: the first range must start at batch size 1",
        field_path="",
        sections=frozenset({"drafter"}),
        check=_per_batch_starts_at_one,
    ),
    Rule(
        name="per-batch-no-overlap",
        scope="spec.drafter.perBatchSize",
        # Each range overlaps exactly one range: itself (an inverted range overlaps
        # nothing, not even itself; per-batch-ordered reports it).
        cel="self.all(a, a.minBatchSize > a.maxBatchSize || self.exists_one(b, "
        "a.minBatchSize <= b.maxBatchSize && b.minBatchSize <= a.maxBatchSize))",
        message="spec.drafter.perBatchSize: ranges must not overlap",
        field_path="",
        sections=frozenset({"drafter"}),
        check=_per_batch_no_overlap,
    ),
    Rule(
        name="per-batch-needs-k",
        scope="spec.drafter",
        cel="!has(self.perBatchSize) || has(self.numSpeculativeTokens)",
        message="spec.drafter.numSpeculativeTokens: required when spec.drafter.perBatchSize is set",
        field_path=".numSpeculativeTokens",
        sections=frozenset({"drafter"}),
        check=_per_batch_needs_k,
    ),
    Rule(
        name="per-batch-k-bounded",
        scope="spec.drafter",
        cel="!has(self.perBatchSize) || !has(self.numSpeculativeTokens) || "
        "self.perBatchSize.all(r, r.numSpeculativeTokens <= self.numSpeculativeTokens)",
        message="spec.drafter.perBatchSize: numSpeculativeTokens of a range must not be above "
        "spec.drafter.numSpeculativeTokens",
        field_path=".perBatchSize",
        sections=frozenset({"drafter"}),
        check=_per_batch_k_bounded,
    ),
    Rule(
        name="extra-config-owned",
        scope="spec.drafter.extraConfig",
        # spec.drafter.extraConfig preserves unknown fields: CEL sees none of its keys.
        cel=None,
        message="spec.drafter.extraConfig: "
        + ", ".join(OWNED_CONFIG_KEYS)
        + " are owned by specguard; set the spec.drafter fields instead",
        field_path="",
        sections=frozenset({"drafter"}),
        check=_extra_config_owned,
    ),
    *_flag_rules(),
    Rule(
        name="gpu-in-resources",
        scope="spec.runtime",
        cel="!has(self.resources) || "
        f"((!has(self.resources.requests) || !({_GPU} in self.resources.requests)) && "
        f"(!has(self.resources.limits) || !({_GPU} in self.resources.limits)))",
        message="spec.runtime.resources: the GPU resource is set from "
        "spec.runtime.tensorParallelSize; remove it",
        field_path=".resources",
        sections=frozenset({"runtime"}),
        check=_gpu_in_resources,
    ),
    Rule(
        name="hf-token-env",
        scope="spec.runtime",
        cel="!has(self.hfTokenSecret) || !has(self.env) || self.env.all(e, e.name != 'HF_TOKEN')",
        message="spec.runtime.env: HF_TOKEN is set from spec.runtime.hfTokenSecret; remove one "
        "of them",
        field_path=".env",
        sections=frozenset({"runtime"}),
        check=_hf_token_env,
    ),
    Rule(
        name="env-one-source",
        scope="spec.runtime.env[].valueFrom",
        cel=" + ".join(f"(has(self.{source}) ? 1 : 0)" for source in ENV_SOURCES) + " == 1",
        message="spec.runtime.env[].valueFrom: set exactly one of " + ", ".join(ENV_SOURCES),
        field_path="",
        sections=frozenset({"runtime"}),
        check=_env_one_source,
    ),
    Rule(
        name="env-value-or-source",
        scope="spec.runtime.env[]",
        cel="!has(self.valueFrom) || !has(self.value) || self.value == ''",
        message="spec.runtime.env[]: set value or valueFrom, not both",
        field_path=".value",
        sections=frozenset({"runtime"}),
        check=_env_value_or_source,
    ),
    Rule(
        name="toleration-key-or-exists",
        scope="spec.runtime.tolerations[]",
        cel="(has(self.key) && self.key != '') || "
        "(has(self.operator) && self.operator == 'Exists')",
        message="spec.runtime.tolerations[].operator: must be Exists when key is empty",
        field_path=".operator",
        sections=frozenset({"runtime"}),
        check=_toleration_key_or_exists,
    ),
    Rule(
        name="toleration-exists-no-value",
        scope="spec.runtime.tolerations[]",
        cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
        "self.value == ''",
        message="spec.runtime.tolerations[].value: must be empty when operator is Exists",
        field_path=".value",
        sections=frozenset({"runtime"}),
        check=_toleration_exists_no_value,
    ),
    Rule(
        name="toleration-seconds-no-execute",
        scope="spec.runtime.tolerations[]",
        cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        message="spec.runtime.tolerations[].tolerationSeconds: only with effect NoExecute",
        field_path=".tolerationSeconds",
        sections=frozenset({"runtime"}),
        check=_toleration_seconds_no_execute,
    ),
    Rule(
        name="gpu-resource-extended",
        scope="spec.runtime",
        cel=f"!{_GPU}.startsWith('requests.') && !{_GPU}.contains('kubernetes.io/')",
        message="spec.runtime.gpuResource: must be an extended resource name, outside the "
        "kubernetes.io domains and without the requests. prefix",
        field_path=".gpuResource",
        sections=frozenset({"runtime"}),
        check=_gpu_resource_extended,
    ),
    Rule(
        name="cache-mount-path",
        scope="spec.runtime.modelCache",
        cel=f"!has(self.mountPath) || !self.mountPath.matches('{RESERVED_MOUNT_PATTERN}')",
        message="spec.runtime.modelCache.mountPath: "
        + ", ".join(RESERVED_MOUNT_PATHS)
        + " is mounted by specguard; choose another path",
        field_path=".mountPath",
        sections=frozenset({"runtime"}),
        check=_cache_mount_path,
    ),
    Rule(
        name="requests-within-limits",
        scope="spec.runtime.resources",
        # Quantities ("64Gi" vs "96Gi") compare only with CEL's quantity library, which
        # Kubernetes < 1.29 and cel-python lack: the operator checks this one.
        cel=None,
        message="spec.runtime.resources.requests: must not be above the limits",
        field_path="",
        sections=frozenset({"runtime"}),
        check=_requests_within_limits,
    ),
    Rule(
        name="adaptive-no-eager",
        scope="spec",
        cel="!has(self.drafter.adaptiveVerification) || !self.drafter.adaptiveVerification || "
        "!has(self.runtime) || !has(self.runtime.extraArgs) || "
        f"!self.runtime.extraArgs.exists(a, a.matches('{ENFORCE_EAGER_PATTERN}'))",
        message="spec.drafter.adaptiveVerification: vLLM cannot combine it with "
        "--enforce-eager in spec.runtime.extraArgs",
        field_path=".drafter.adaptiveVerification",
        sections=frozenset({"drafter", "runtime"}),
        check=_adaptive_no_eager,
    ),
    Rule(
        name="adaptive-no-pipeline",
        scope="spec",
        # "-pp 2" is two list items; CEL's list macros see one item at a time.
        cel=None,
        message="spec.drafter.adaptiveVerification: vLLM cannot combine it with "
        "--pipeline-parallel-size/-pp above 1 in spec.runtime.extraArgs",
        field_path=".drafter.adaptiveVerification",
        sections=frozenset({"drafter", "runtime"}),
        check=_adaptive_no_pipeline,
    ),
    Rule(
        name="shadow-not-above-replicas",
        scope="spec",
        cel="!has(self.shadow) || !has(self.shadow.replicas) || "
        f"self.shadow.replicas <= {_REPLICAS}",
        message="spec.shadow.replicas: must not be above spec.replicas",
        field_path=".shadow.replicas",
        sections=frozenset({"shadow", "replicas"}),
        check=_shadow_not_above_replicas,
    ),
    Rule(
        name="periodic-needs-times",
        scope="spec.shadow",
        cel="!has(self.schedule) || self.schedule != 'periodic' || "
        "(has(self.every) && has(self.activeFor))",
        message="spec.shadow: every and activeFor are required when schedule is periodic",
        field_path="",
        sections=frozenset({"shadow"}),
        check=_periodic_needs_times,
    ),
    Rule(
        name="continuous-refuses-times",
        scope="spec.shadow",
        cel="(has(self.schedule) && self.schedule == 'periodic') || "
        "(!has(self.every) && !has(self.activeFor))",
        message="spec.shadow: every and activeFor are only used when schedule is periodic",
        field_path="",
        sections=frozenset({"shadow"}),
        check=_continuous_refuses_times,
    ),
    Rule(
        name="active-shorter-than-every",
        scope="spec.shadow",
        cel="!has(self.every) || !has(self.activeFor) || "
        "duration(self.activeFor) < duration(self.every)",
        message="spec.shadow.activeFor: must be shorter than spec.shadow.every",
        field_path=".activeFor",
        sections=frozenset({"shadow"}),
        check=_active_shorter_than_every,
    ),
    Rule(
        name="active-covers-window",
        scope="spec",
        cel="!has(self.shadow) || !has(self.shadow.activeFor) || "
        f"duration(self.shadow.activeFor) >= duration({_WINDOW})",
        message="spec.shadow.activeFor: must be at least spec.evaluation.window",
        field_path=".shadow.activeFor",
        sections=frozenset({"shadow", "evaluation"}),
        check=_active_covers_window,
    ),
    Rule(
        name="prometheus-url",
        scope="spec.metricsSource",
        cel="!has(self.type) || self.type != 'prometheus' || has(self.prometheusUrl)",
        message="spec.metricsSource.prometheusUrl: required when type is prometheus",
        field_path=".prometheusUrl",
        sections=frozenset({"metricsSource"}),
        check=_prometheus_url,
    ),
    *_duration_rules(),
)
