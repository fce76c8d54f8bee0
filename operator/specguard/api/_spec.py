"""`spec` of a SpeculativeDeployment: what the user asks for.

Field descriptions become the CRD's descriptions (``kubectl explain sd.spec.drafter``),
so they say what a field does, its default and its unit. Rules that tie two fields
together live in :mod:`specguard.api._rules`, where each has a CEL twin for the CRD.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, get_args

from pydantic import BeforeValidator, Field, StringConstraints
from pydantic_core import PydanticUndefined

from specguard.api._durations import Duration, Seconds
from specguard.api._wire import (
    CONFIG_KEY_PATTERN,
    DNS1123_SUBDOMAIN_PATTERN,
    EXTENDED_RESOURCE_PATTERN,
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_PATTERN,
    Passthrough,
    Quantity,
    SpecModel,
)

DrafterMethod = Literal[
    "dspark", "dflash", "eagle3", "eagle", "mtp", "draft_model", "ngram", "suffix"
]
DRAFTER_METHODS: tuple[str, ...] = get_args(DrafterMethod)
# Methods that find their draft tokens without a separate drafter checkpoint (n-gram and
# suffix lookup, the target's own MTP heads) or that vLLM resolves from the target (DSpark).
METHODS_WITHOUT_REQUIRED_MODEL: tuple[str, ...] = ("ngram", "suffix", "mtp", "dspark")
# Methods that take no draft model at all.
METHODS_WITHOUT_MODEL: tuple[str, ...] = ("ngram", "suffix")


def _not_a_boolean(value: Any) -> Any:
    # A Literal of integers takes True for 1 (True == 1); the CRD's schema does not.
    if isinstance(value, bool):
        raise ValueError(f"Input should be 1, 2, 4 or 8, not a boolean ({str(value).lower()})")
    return value


TensorParallelSize = Annotated[Literal[1, 2, 4, 8], BeforeValidator(_not_a_boolean)]

# Drafter configurations the ladder may try after spec.drafter as configured regresses
# (each a variant of it), before it gives up the drafter; "configured" is the first rung.
LadderRung = Literal["adaptive", "schedule"]
LADDER_RUNGS: tuple[str, ...] = get_args(LadderRung)
RungName = Literal["configured", "adaptive", "schedule"]
RUNG_CONFIGURED: Final = "configured"
MAX_SPECULATIVE_TOKENS = 32
MAX_PER_BATCH_RANGES = 16
MAX_EXTRA_ARGS = 64
MAX_ARG_LENGTH = 1024
MAX_RESOURCES = 16  # resource names in requests or limits
MAX_SHORT = 256  # names and paths inside core/v1 selectors
MAX_ENV_VALUE = 32 * 1024
DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
MAX_NAME = 253  # Secret, ConfigMap and PersistentVolumeClaim names; Secret keys
# Printable ASCII but '=': what the API server takes as an environment variable name.
ENV_NAME_PATTERN = r"^[ -<>-~]+$"


class ModelSpec(SpecModel):
    name: str = Field(
        min_length=1,
        max_length=512,
        description="Model to serve: a Hugging Face repository id (e.g. Qwen/Qwen3.6-35B-A3B) or "
        "a path inside the pod. First argument of `vllm serve`.",
    )
    served_model_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Name clients use in the OpenAI API `model` field (--served-model-name). "
        "Defaults to spec.model.name.",
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Model revision (branch, tag or commit) passed as --revision. "
        "Defaults to the repository's default branch.",
    )

    @property
    def effective_served_name(self) -> str:
        return self.served_model_name or self.name


def _object_name(what: str) -> Any:
    return Field(
        min_length=1,
        max_length=MAX_NAME,
        pattern=DNS1123_SUBDOMAIN_PATTERN,
        description=f"{what} name, in the resource's namespace (lowercase DNS-1123 subdomain).",
    )


def _config_key(default: Any = PydanticUndefined) -> Any:
    return Field(
        default=default,
        min_length=1,
        max_length=MAX_NAME,
        pattern=CONFIG_KEY_PATTERN,
        description="Key inside the object (letters, digits, '-', '_' and '.').",
    )


class SecretKeySelector(SpecModel):
    """core/v1 SecretKeySelector."""

    name: str = _object_name("Secret")
    key: str = _config_key()
    optional: bool | None = Field(default=None, description="Start even if it is missing.")


class ConfigMapKeySelector(SpecModel):
    """core/v1 ConfigMapKeySelector."""

    name: str = _object_name("ConfigMap")
    key: str = _config_key()
    optional: bool | None = Field(default=None, description="Start even if it is missing.")


class ObjectFieldSelector(SpecModel):
    """core/v1 ObjectFieldSelector."""

    api_version: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SHORT,
        description="Version of fieldPath's schema (v1).",
    )
    field_path: str = Field(
        min_length=1,
        max_length=MAX_SHORT,
        description="Field of the pod to read, e.g. status.podIP.",
    )


class ResourceFieldSelector(SpecModel):
    """core/v1 ResourceFieldSelector."""

    container_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SHORT,
        description="Container whose resources to read.",
    )
    resource: str = Field(
        min_length=1, max_length=MAX_SHORT, description="Resource to read, e.g. limits.memory."
    )
    divisor: Quantity | None = Field(default=None, description="Unit of the value (e.g. 1Mi).")


class EnvVarSource(SpecModel):
    """core/v1 EnvVarSource; exactly one source is set (a rule checks it)."""

    secret_key_ref: SecretKeySelector | None = Field(
        default=None, description="A key of a Secret in the resource's namespace."
    )
    config_map_key_ref: ConfigMapKeySelector | None = Field(
        default=None, description="A key of a ConfigMap in the resource's namespace."
    )
    field_ref: ObjectFieldSelector | None = Field(
        default=None, description="A field of the pod (metadata.name, status.podIP, ...)."
    )
    resource_field_ref: ResourceFieldSelector | None = Field(
        default=None, description="A resource request or limit of a container."
    )


class EnvVar(SpecModel):
    name: str = Field(
        min_length=1,
        max_length=256,
        pattern=ENV_NAME_PATTERN,
        description="Environment variable name (printable ASCII without '=').",
    )
    value: str | None = Field(
        default=None, max_length=MAX_ENV_VALUE, description="Literal value (at most 32 KiB)."
    )
    value_from: EnvVarSource | None = Field(
        default=None,
        description="Source for the value (a core/v1 EnvVarSource: exactly one of "
        "secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef); not with value.",
    )


class Toleration(SpecModel):
    """core/v1 Toleration."""

    key: str | None = Field(
        default=None,
        max_length=317,
        pattern=QUALIFIED_NAME_PATTERN,
        description="Taint key the toleration applies to; unset: all keys (operator Exists).",
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None,
        description="Exists (any value) or Equal (the value below). Default Equal.",
    )
    value: str | None = Field(
        default=None,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="Taint value to match with operator Equal (a label value).",
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; unset: all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        description="With effect NoExecute: how long the pod stays bound after the taint "
        "appears; unset: forever.",
    )


class Affinity(SpecModel):
    """core/v1 Affinity. Its three parts are passed through as given (kubernetes-validate
    and the API server check their insides); only their names and kinds are typed here."""

    node_affinity: Passthrough | None = Field(
        default=None, description="Node affinity (core/v1 NodeAffinity)."
    )
    pod_affinity: Passthrough | None = Field(
        default=None, description="Pod affinity (core/v1 PodAffinity)."
    )
    pod_anti_affinity: Passthrough | None = Field(
        default=None, description="Pod anti-affinity (core/v1 PodAntiAffinity)."
    )


class Resources(SpecModel):
    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        # Bounded, as every map and list a CEL rule walks: the API server estimates the
        # rules' cost from the largest object the schema allows.
        max_length=MAX_RESOURCES,
        description="Resource requests of the vLLM container (cpu, memory, ...). The GPU "
        "resource is set from spec.runtime.tensorParallelSize and may not appear here.",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_RESOURCES,
        description="Resource limits of the vLLM container. The GPU resource is set from "
        "spec.runtime.tensorParallelSize and may not appear here.",
    )


class ModelCache(SpecModel):
    claim_name: str = Field(
        min_length=1,
        max_length=MAX_NAME,
        pattern=DNS1123_SUBDOMAIN_PATTERN,
        description="PersistentVolumeClaim holding downloaded model weights, shared by the pods "
        "of both arms (use a ReadWriteMany claim when pods run on several nodes).",
    )
    mount_path: str = Field(
        default="/root/.cache/huggingface",
        # Bounded so that the API server's cost estimate of the CEL rule on it stays small.
        max_length=1024,
        pattern=r"^/",
        description="Where the claim is mounted in the vLLM container (not /dev/shm, which "
        "specguard mounts). The default is the Hugging Face cache of the vllm/vllm-openai "
        "image.",
    )
    read_only: bool = Field(
        default=False, description="Mount the claim read-only (weights must already be there)."
    )


class SecretKey(SpecModel):
    name: str = _object_name("Secret")
    key: str = _config_key(default="token")


class Runtime(SpecModel):
    image: str = Field(
        default=DEFAULT_IMAGE,
        min_length=1,
        max_length=1024,
        description="vLLM container image. Its entrypoint is replaced by `vllm serve`.",
    )
    tensor_parallel_size: TensorParallelSize = Field(
        default=1,
        description="GPUs per vLLM pod (--tensor-parallel-size): 1, 2, 4 or 8. Each pod "
        "requests and limits this many of spec.runtime.gpuResource.",
    )
    gpu_resource: str = Field(
        default=DEFAULT_GPU_RESOURCE,
        min_length=1,
        max_length=317,
        pattern=EXTENDED_RESOURCE_PATTERN,
        description="Extended resource name of a GPU on the nodes, <domain>/<name> "
        "(nvidia.com/gpu, amd.com/gpu, ...).",
    )
    extra_args: list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_ARG_LENGTH)]] = (
        Field(
            default_factory=list,
            max_length=MAX_EXTRA_ARGS,
            description="Further `vllm serve` arguments, appended after the ones specguard sets "
            "(e.g. --max-model-len=32768). Flags specguard owns (model, port, host, tensor "
            "parallelism, speculative decoding, histogram buckets) are refused with the field to "
            "use instead.",
        )
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        description="Extra environment variables of the vLLM container.",
    )
    resources: Resources = Field(
        default_factory=Resources,
        description="CPU and memory requests and limits of the vLLM container; GPUs come from "
        "tensorParallelSize.",
    )
    node_selector: dict[str, Annotated[str, StringConstraints(max_length=63)]] = Field(
        default_factory=dict, max_length=64, description="Node labels the vLLM pods must match."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        # Bounded, as env: the API server estimates CEL rules' cost per list item.
        max_length=64,
        description="Tolerations of the vLLM pods (core/v1 Toleration).",
    )
    affinity: Affinity | None = Field(
        default=None, description="Affinity of the vLLM pods (core/v1 Affinity)."
    )
    model_cache: ModelCache | None = Field(
        default=None, description="PersistentVolumeClaim to keep downloaded weights across pods."
    )
    hf_token_secret: SecretKey | None = Field(
        default=None,
        description="Secret key whose value becomes HF_TOKEN in the vLLM container (gated or "
        "private models).",
    )
    port: int = Field(
        default=8000,
        ge=1,
        le=65535,
        description="Port vLLM listens on (--port), also the port of the Services.",
    )
    shm_size: Quantity = Field(
        default="16Gi",
        description="Size limit of the memory-backed /dev/shm volume (NCCL needs shared "
        "memory for tensor parallelism).",
    )
    shutdown_timeout: Duration = Field(
        default=Seconds(60),
        description="How long a vLLM pod being removed (a swap step, a scale-down) keeps "
        "serving the requests it already has, while the routers send it nothing new "
        "(vLLM's --shutdown-timeout; the pod's grace period is 30s longer). 0s to 1h. 0s "
        "passes no flag: vLLM then aborts them at once (as do vLLM releases older than the "
        "flag, which need 0s). Default 60s.",
    )


class BatchSizeRange(SpecModel):
    min_batch_size: int = Field(
        ge=1, description="First batch size (number of running requests) of this range."
    )
    max_batch_size: int = Field(ge=1, description="Last batch size of this range, inclusive.")
    num_speculative_tokens: int = Field(
        ge=0,
        le=MAX_SPECULATIVE_TOKENS,
        description="Draft tokens per step for batch sizes in this range; 0 turns speculation "
        "off there.",
    )


class Drafter(SpecModel):
    method: DrafterMethod = Field(
        description="Speculative-decoding method (--speculative-config `method`): dspark, "
        "dflash, eagle3, eagle, mtp, draft_model, ngram or suffix."
    )
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Drafter checkpoint (`model`). Required for every method but ngram, "
        "suffix, mtp and dspark; ngram and suffix take none.",
    )
    num_speculative_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SPECULATIVE_TOKENS,
        description="Draft tokens proposed per step (`num_speculative_tokens`), 1 to 32. "
        "Unset: vLLM's default for the method.",
    )
    adaptive_verification: bool = Field(
        default=False,
        description="Let the engine shorten verification as batches grow "
        "(`enable_adaptive_verification`). DSpark only. Off by default, as in vLLM.",
    )
    draft_tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        le=8,
        description="Tensor parallelism of the drafter (`draft_tensor_parallel_size`): 1 or "
        "spec.runtime.tensorParallelSize. Unset: vLLM's default (the target's).",
    )
    per_batch_size: list[BatchSizeRange] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PER_BATCH_RANGES,
        description="Draft length by batch size (`num_speculative_tokens_per_batch_size`): "
        "ranges that start at batch size 1 and do not overlap; each k is at most "
        "numSpeculativeTokens.",
    )
    # Kept as an opaque object in the CRD: a current API server cannot see the keys of a
    # preserve-unknown-fields map from CEL, so the owned-keys rule is checked by the operator.
    extra_config: Passthrough = Field(
        default_factory=dict,
        max_length=64,
        description="Further --speculative-config keys passed through as given (snake_case, "
        "e.g. prompt_lookup_max). Keys specguard sets from other fields are refused.",
    )


class Shadow(SpecModel):
    replicas: int = Field(
        default=1,
        ge=1,
        description="Pods of the shadow arm, which gets copies of the serving requests "
        "while it holds no more requests in flight per pod than a serving pod. At most "
        "spec.replicas.",
    )
    schedule: Literal["continuous", "periodic"] = Field(
        default="continuous",
        description="continuous: the shadow arm always runs. periodic: it runs for `activeFor` "
        "every `every`, and specguard judges only then.",
    )
    every: Duration | None = Field(
        default=None,
        description="Periodic schedule: time between the starts of two shadow periods (e.g. 6h).",
    )
    active_for: Duration | None = Field(
        default=None,
        description="Periodic schedule: how long each shadow period lasts (e.g. 30m); "
        "shorter than `every`, at least one evaluation window.",
    )


class Evaluation(SpecModel):
    window: Duration = Field(
        default=Seconds(60),
        description="Length of one evaluation window (10s to 24h). Default 60s.",
    )
    min_requests_per_arm: int = Field(
        default=200,
        ge=2,
        description="Usable requests (or mirrored pairs) each arm needs in a window for a "
        "verdict; fewer is inconclusive. At least 2.",
    )
    min_output_tokens: int = Field(
        default=16,
        ge=2,
        description="Requests with fewer output tokens are ignored (per-token latency needs at "
        "least two tokens).",
    )
    tolerance: float = Field(
        default=0.03,
        ge=0.0,
        le=0.5,
        description="Relative band around 1.0 of the per-token latency ratio (speculative / "
        "baseline) treated as no change: regressed needs the confidence interval above "
        "1 + tolerance. 0 to 0.5.",
    )
    confidence: float = Field(
        default=0.99,
        ge=0.5,
        le=0.999,
        description="Confidence level of the interval on the latency ratio, 0.5 to 0.999.",
    )
    consecutive_windows: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Windows of evidence before specguard acts: this many regressed (or, to "
        "re-promote, one more improved) windows in a row; and the fewest windows the "
        "cumulative evidence (windowsPerFalseAlarm) acts on, each counting for at most 1/K of "
        "it. This many windows in a row without a verdict clear the cumulative evidence.",
    )
    windows_per_false_alarm: int = Field(
        default=10000,
        ge=0,
        le=10**12,
        description="Evidence across windows: each window's estimate and interval add to "
        "the evidence of a loss beyond the tolerance (a CUSUM of log-likelihood ratios), so a "
        "sustained loss that no single window shows is rolled back within a bounded number "
        "of windows. This is its error budget: a drafter exactly at the tolerance is rolled "
        "back on average at most once per this many windows (an unchanged one practically "
        "never); re-promotion needs 10 times more. Larger is stricter and slower on small "
        "losses. 0 turns it off (only consecutiveWindows in a row act); else at least 10. "
        "Default 10000.",
    )
    concurrency_match: float = Field(
        default=0.25,
        gt=0.0,
        le=1.0,
        description="Load check: largest relative difference between the arms, of in-flight "
        "requests per pod (load match in_flight; at least 2 requests apart) or of arrivals "
        "per pod (arrivals), for a window to count. An arm that ran lighter with as many "
        "requests per pod is faster at that load, one that got fewer requests yet held more "
        "in flight is slower at a lighter one: both are judged; an arm that got fewer and ran "
        "lighter was underfed and the window is inconclusive.",
    )
    load_match: Literal["auto", "in_flight", "arrivals"] = Field(
        default="auto",
        description="How the shadow is loaded. in_flight: at the serving pods' in-flight count "
        "(clients that keep a fixed number of requests open: agents, benchmark streams). "
        "arrivals: each shadow pod gets a serving pod's arrivals (clients that arrive at "
        "their own pace). auto: the operator tells them apart from the traffic (arrivals that "
        "follow completions) and switches after two windows of evidence; it starts on "
        "in_flight.",
    )


class Guard(SpecModel):
    """One guard beside the median per-token latency (docs/judge.md, "Guards")."""

    enabled: bool | None = Field(
        default=None,
        description="Judge this guard. Unset: the guard's default (on for tpotP99 and e2eP99, "
        "off for ttftP50 and ttftP99: a drafter lengthens every engine step, so at load a new "
        "request's first token waits longer by design; turn them on where a TTFT SLO holds).",
    )
    tolerance: float | None = Field(
        default=None,
        ge=0.0,
        le=5.0,
        description="Relative band above 1.0 of the arms' quantile ratio (speculative / "
        "baseline) treated as no change: regressed needs its lower confidence bound above "
        "1 + tolerance. Unset: the guard's default (tpotP99 0.10, ttftP50 0.20, ttftP99 "
        "0.25, e2eP99 0.10).",
    )
    min_pairs: int | None = Field(
        default=None,
        ge=20,
        le=1_000_000,
        description="Mirrored pairs with the figure on both arms a window needs before the "
        "guard can act; fewer: too few pairs, no action. Unset: 500 for a p99, 200 for a "
        "p50.",
    )


class Guards(SpecModel):
    tpot_p99: Guard = Field(
        default_factory=Guard, description="p99 per-token latency (TPOT). Default tolerance 0.10."
    )
    ttft_p50: Guard = Field(
        default_factory=Guard,
        description="Time to first token, p50. Default off; tolerance 0.20 when on.",
    )
    ttft_p99: Guard = Field(
        default_factory=Guard,
        description="Time to first token, p99. Default off; tolerance 0.25 when on.",
    )
    # to_camel would spell it e2EP99; docs, status and metrics say e2eP99.
    e2e_p99: Guard = Field(
        default_factory=Guard,
        alias="e2eP99",
        description="End-to-end time, p99. Default tolerance 0.10.",
    )


class Rollback(SpecModel):
    policy: Literal["auto", "notify", "off"] = Field(
        default="auto",
        description="auto: swap to the baseline arm on a regression. notify: judge and report "
        "only (dry run). off: do not judge.",
    )
    repromote: Literal["auto", "manual"] = Field(
        default="auto",
        description="auto: bring the drafter back when it is judged better again (after "
        "cooldown). manual: only on the specguard.io/retry annotation.",
    )
    cooldown: Duration = Field(
        default=Seconds(1800),
        description="Least time between two automatic transitions (0s to 7 days). Default 30m.",
    )
    startup_deadline: Duration = Field(
        default=Seconds(1200),
        description="Time drafter pods may take to become ready before specguard rolls back "
        "(1m to 24h); also the budget of the pods' startup probe. Default 20m.",
    )
    max_flaps: int = Field(
        default=3,
        ge=1,
        le=100,
        description="Automatic changes back and forth on the same traffic (the same load "
        "within 25% and the same mix of request domains) within 24h after which specguard "
        "stops changing the mode by itself (the Halted condition) until the "
        "specguard.io/retry annotation (kubectl specguard retry). Changes that follow the "
        "traffic (rolled back at a high load, re-promoted at a low one) never count toward "
        "it. Default 3: rolled back, re-promoted, rolled back on one traffic.",
    )
    tool_call_guardrail: bool = Field(
        default=True,
        description="Roll the drafter back at once when, on mirrored requests that carry "
        "tools, its arm returns invalid tool calls (arguments that are empty, not JSON, or "
        "not what the request's tool schema asks) confidently more often than the arm "
        "without it, whatever the latency. Needs metricsSource router. Default true.",
    )
    overload_guardrail: bool = Field(
        default=True,
        description="Roll the drafter back at once when the drafter arm falls behind its "
        "arrivals while the baseline keeps up: requests in its engines (vLLM's running + "
        "waiting) climb over a window while, by the arrivals rule (status.arms.loadMatch "
        "arrivals), the baseline's hold steady at the same arrivals and are passed, or, by "
        "the in-flight rule, the baseline finished what arrived at a drafter pod and the "
        "drafter did not. Its per-token latency follows a window or two later, with a "
        "longer queue to drain. It also holds a re-promotion back. Default true.",
    )
    guards: Guards = Field(
        default_factory=Guards,
        description="Guards beside the median per-token latency, judged per window on the "
        "same mirrored pairs: p99 per-token latency, TTFT p50 and p99, end-to-end p99. A "
        "guard whose arm ratio is confidently above 1 + its tolerance counts as a regressed "
        "window (consecutiveWindows of them roll back; the transition's reason names it), "
        "holds a re-promotion back, and a ladder rung shadowed against no drafter loses on "
        "it. Needs metricsSource router (mirrored pairs).",
    )


class Ladder(SpecModel):
    rungs: list[LadderRung] = Field(
        default_factory=list,
        max_length=len(LADDER_RUNGS),
        description="Drafter configurations to try, in this order, when spec.drafter as "
        "configured regresses, before giving up the drafter: adaptive (the same drafter "
        "with enable_adaptive_verification; DSpark only) and schedule (the same drafter with "
        "a num_speculative_tokens_per_batch_size schedule derived from the configured "
        "drafter's verdicts per in-flight level). Each at most once. Empty (default): the "
        "drafter as configured or none.",
    )
    retry_after: Duration = Field(
        default=Seconds(6 * 3600),
        description="How long a rung that lost stays out before the ladder may try it "
        "again (1m to 168h). Default 6h.",
    )


class Routing(SpecModel):
    by_domain: bool = Field(
        default=False,
        description="Route each request domain (tool_call, math, ...: the X-Specguard-Domain "
        "header, or tool_call for a request with tools) to the arm that wins for it when "
        "the domains' verdicts differ with confidence, both arms serving and both still "
        "compared on mirrored copies; the arms' pod counts follow the split's traffic "
        "shares (GPU-neutral). Needs metricsSource router and a continuous shadow. "
        "Default false: one arm serves every request.",
    )


class MetricsSource(SpecModel):
    type: Literal["router", "prometheus", "scrape"] = Field(
        default="router",
        description="Where per-token latency comes from: router (per-request samples from "
        "specguard's router), prometheus (vLLM histograms through PromQL), scrape (the pods' "
        "/metrics read directly).",
    )
    prometheus_url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://",
        description="Prometheus base URL; required when type is prometheus.",
    )


class Spec(SpecModel):
    model: ModelSpec = Field(description="The target model vLLM serves.")
    runtime: Runtime = Field(
        default_factory=Runtime, description="How each vLLM pod runs (both arms)."
    )
    replicas: int = Field(
        default=1, ge=1, le=1000, description="Pods of the serving arm (clients' capacity)."
    )
    drafter: Drafter = Field(
        description="The speculative-decoding drafter, rendered into --speculative-config on "
        "the speculative arm only."
    )
    shadow: Shadow = Field(
        default_factory=Shadow,
        description="The shadow arm: the other configuration, fed a mirrored share of traffic.",
    )
    evaluation: Evaluation = Field(
        default_factory=Evaluation,
        description="How the two arms' per-token latencies are compared.",
    )
    rollback: Rollback = Field(
        default_factory=Rollback, description="What specguard does with a verdict."
    )
    metrics_source: MetricsSource = Field(
        default_factory=MetricsSource, description="Where the measurements come from."
    )
    ladder: Ladder = Field(
        default_factory=Ladder,
        description="Drafter configurations to try before no drafter (configured, then "
        "adaptive verification or a per-batch-size schedule).",
    )
    routing: Routing = Field(
        default_factory=Routing,
        description="How the routers split requests between the arms.",
    )
