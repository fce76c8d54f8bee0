"""``--speculative-config``: parsed and checked the way vLLM 0.33 checks it.

The simulator refuses at startup what vLLM refuses at startup, so a manifest that the
simulator accepts is one that vLLM would accept too (for the fields specguard renders).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

METHODS: frozenset[str] = frozenset(
    {
        "ngram",
        "ngram_gpu",
        "draft_model",
        "suffix",
        "custom_class",
        "eagle",
        "eagle3",
        "mtp",
        "dflash",
        "dspark",
    }
)
REMOVED_METHODS: frozenset[str] = frozenset({"medusa", "mlp_speculator"})
# Methods that guess from the prompt, needing no draft model.
MODEL_FREE_METHODS: frozenset[str] = frozenset({"ngram", "ngram_gpu", "suffix"})

KNOWN_FIELDS: frozenset[str] = frozenset(
    {
        "method",
        "model",
        "num_speculative_tokens",
        "draft_tensor_parallel_size",
        "enable_adaptive_verification",
        "num_speculative_tokens_per_batch_size",
        "prompt_lookup_min",
        "prompt_lookup_max",
        "rejection_sample_method",
        "synthetic_acceptance_length",
        "draft_sample_method",
        "dspark_draft_topk",
        "quantization",
        "max_model_len",
        "revision",
        "code_revision",
        "disable_padded_drafter_batch",
        "parallel_drafting",
        "speculative_token_tree",
    }
)


class SpecConfigError(ValueError):
    """A ``--speculative-config`` vLLM would refuse; the message names the field."""


@dataclass(frozen=True, slots=True)
class BatchRange:
    start: int
    end: int
    k: int


@dataclass(frozen=True, slots=True)
class SpecConfig:
    method: str
    model: str | None
    num_speculative_tokens: int
    adaptive: bool
    per_batch: tuple[BatchRange, ...]
    synthetic_acceptance_length: float | None = None

    def k_for_batch(self, batch_size: int) -> int:
        """Draft length for this many running sequences (0: speculation off this step)."""
        for r in self.per_batch:
            if r.start <= batch_size <= r.end:
                return r.k
        if self.per_batch and batch_size > self.per_batch[-1].end:
            # Past the last range: vLLM keeps the last range's k.
            return self.per_batch[-1].k
        return self.num_speculative_tokens


def _infer_method(model: str | None) -> str:
    name = (model or "").lower()
    for needle, method in (
        ("dspark", "dspark"),
        ("dflash", "dflash"),
        ("eagle3", "eagle3"),
        ("eagle-3", "eagle3"),
        ("eagle", "eagle"),
        ("mtp", "mtp"),
    ):
        if needle in name:
            return method
    return "draft_model"


def _int_field(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecConfigError(f"{key}: Input should be a valid integer, got {value!r}")
    return int(value)


def _parse_ranges(value: Any, k_max: int) -> tuple[BatchRange, ...]:
    field = "num_speculative_tokens_per_batch_size"
    if not isinstance(value, list) or not value:
        raise SpecConfigError(f"{field}: must be a non-empty list of [start, end, k] ranges")
    ranges: list[BatchRange] = []
    for i, item in enumerate(value):
        if (
            not isinstance(item, list)
            or len(item) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in item)
        ):
            raise SpecConfigError(f"{field}[{i}]: must be [start, end, k] integers, got {item!r}")
        start, end, k = item
        if start > end:
            raise SpecConfigError(f"{field}[{i}]: start {start} is greater than end {end}")
        if k < 0 or k > k_max:
            raise SpecConfigError(
                f"{field}[{i}]: k={k} must be between 0 and num_speculative_tokens={k_max}"
            )
        if i == 0 and start != 1:
            raise SpecConfigError(f"{field}[0]: the first range must start at 1, got {start}")
        if ranges and start <= ranges[-1].end:
            raise SpecConfigError(
                f"{field}[{i}]: range [{start}, {end}] overlaps [{ranges[-1].start}, "
                f"{ranges[-1].end}]"
            )
        ranges.append(BatchRange(start, end, k))
    return tuple(ranges)


def parse_spec_config(text: str, *, default_k: int) -> SpecConfig:
    """Parse the JSON given to ``--speculative-config``; raise SpecConfigError if bad."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecConfigError(f"invalid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(raw, dict):
        raise SpecConfigError("must be a JSON object")
    unknown = sorted(set(raw) - KNOWN_FIELDS)
    if unknown:
        raise SpecConfigError(f"{unknown[0]}: Extra inputs are not permitted")
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        raise SpecConfigError(f"model: Input should be a valid string, got {model!r}")
    method = raw.get("method")
    if method is None:
        if model is None:
            raise SpecConfigError("method: either method or model must be given")
        method = _infer_method(model)
    if not isinstance(method, str):
        raise SpecConfigError(f"method: Input should be a valid string, got {method!r}")
    if method in REMOVED_METHODS:
        raise SpecConfigError(f"method: {method!r} is no longer supported")
    if method not in METHODS:
        raise SpecConfigError(
            f"method: unknown speculative method {method!r}; expected one of "
            + ", ".join(sorted(METHODS))
        )
    if model is None and method not in MODEL_FREE_METHODS:
        raise SpecConfigError(f"model: a draft model is required for method {method!r}")
    k = _int_field(raw, "num_speculative_tokens")
    if k is None:
        if method in MODEL_FREE_METHODS:
            raise SpecConfigError(f"num_speculative_tokens: required for method {method!r}")
        k = default_k
    if k <= 0:
        raise SpecConfigError(f"num_speculative_tokens: must be > 0, got {k}")
    adaptive = raw.get("enable_adaptive_verification", False)
    if not isinstance(adaptive, bool):
        raise SpecConfigError(
            f"enable_adaptive_verification: Input should be a valid boolean, got {adaptive!r}"
        )
    if adaptive and method != "dspark":
        raise SpecConfigError(
            f"enable_adaptive_verification: only supported with method 'dspark', not {method!r}"
        )
    dtp = _int_field(raw, "draft_tensor_parallel_size")
    if dtp is not None and dtp < 1:
        raise SpecConfigError(f"draft_tensor_parallel_size: must be >= 1, got {dtp}")
    per_batch: tuple[BatchRange, ...] = ()
    if raw.get("num_speculative_tokens_per_batch_size") is not None:
        per_batch = _parse_ranges(raw["num_speculative_tokens_per_batch_size"], k)
    synthetic: float | None = None
    if raw.get("rejection_sample_method") == "synthetic":
        value = raw.get("synthetic_acceptance_length")
        if not isinstance(value, int | float) or isinstance(value, bool) or not 1 <= value <= k + 1:
            raise SpecConfigError(
                f"synthetic_acceptance_length: must be a number in [1, {k + 1}], got {value!r}"
            )
        synthetic = float(value)
    return SpecConfig(method, model, k, adaptive, per_batch, synthetic)
