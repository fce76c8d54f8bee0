"""The `vllm serve` command line of one arm: the only place vLLM flags are spelled.

Facts from vLLM 0.33: ``--speculative-config`` takes JSON
with snake_case keys and turns the drafter on; without it there is no drafter.
``--custom-histogram-buckets`` takes JSON mapping a metric family to its bucket bounds;
specguard asks for fine buckets on the ``inter_token_latency`` family because the default
ones (10 ms, 25 ms, 50 ms, ...) are too coarse to see a few percent of per-step change.
"""

from __future__ import annotations

import json
from typing import Any, Final

from specguard.api import Drafter, DrafterRung, Spec
from specguard.api.constants import ARM_SPECULATIVE

HISTOGRAM_FAMILY: Final = "inter_token_latency"
# Seconds. 1 ms steps up to 20 ms (a decode step of a memory-bound model), then 2.5 ms to
# 50 ms, 10 ms to 100 ms, then coarse up to the default top of 80 s.
INTER_TOKEN_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    *(round(0.001 * i, 3) for i in range(1, 21)),
    *(round(0.02 + 0.0025 * i, 4) for i in range(1, 13)),
    *(round(0.05 + 0.01 * i, 2) for i in range(1, 6)),
    0.125, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def rung_drafter(drafter: Drafter, rung: DrafterRung) -> Drafter:
    """The drafter a ladder rung runs: ``spec.drafter`` as configured, with adaptive
    verification (``enable_adaptive_verification``, DSpark only), or with the derived
    ``num_speculative_tokens_per_batch_size`` schedule. The rules on spec.ladder make each
    variant one vLLM 0.33 accepts (docs/resource.md)."""
    if rung.name == "adaptive":
        return drafter.model_copy(update={"adaptive_verification": True})
    if rung.name == "schedule":
        if not rung.schedule:
            raise ValueError("the schedule rung needs its derived schedule")
        return drafter.model_copy(update={"per_batch_size": list(rung.schedule)})
    return drafter


def speculative_config(drafter: Drafter) -> dict[str, Any]:
    """``--speculative-config`` as a dict: typed fields first, then extraConfig as given."""
    config: dict[str, Any] = {"method": drafter.method}
    if drafter.model is not None:
        config["model"] = drafter.model
    if drafter.num_speculative_tokens is not None:
        config["num_speculative_tokens"] = drafter.num_speculative_tokens
    if drafter.draft_tensor_parallel_size is not None:
        config["draft_tensor_parallel_size"] = drafter.draft_tensor_parallel_size
    if drafter.adaptive_verification:
        # vLLM's default is False; only DSpark accepts it (a rule enforces that).
        config["enable_adaptive_verification"] = True
    if drafter.per_batch_size:
        ranges = sorted(drafter.per_batch_size, key=lambda r: r.min_batch_size)
        config["num_speculative_tokens_per_batch_size"] = [
            [r.min_batch_size, r.max_batch_size, r.num_speculative_tokens] for r in ranges
        ]
    config.update(drafter.extra_config)
    return config


def histogram_buckets() -> dict[str, list[float]]:
    return {HISTOGRAM_FAMILY: list(INTER_TOKEN_LATENCY_BUCKETS)}


def vllm_args(spec: Spec, arm: str, rung: DrafterRung | None = None) -> list[str]:
    """Arguments after ``vllm serve``; the drafter (of ``rung``, default the configured
    one) only on the speculative arm."""
    args = [
        spec.model.name,
        "--served-model-name",
        spec.model.effective_served_name,
        "--tensor-parallel-size",
        str(spec.runtime.tensor_parallel_size),
        "--port",
        str(spec.runtime.port),
    ]
    if spec.model.revision is not None:
        args += ["--revision", spec.model.revision]
    if arm == ARM_SPECULATIVE:
        drafter = spec.drafter if rung is None else rung_drafter(spec.drafter, rung)
        args += ["--speculative-config", _compact(speculative_config(drafter))]
    args += ["--custom-histogram-buckets", _compact(histogram_buckets())]
    if spec.runtime.shutdown_timeout > 0:
        args += ["--shutdown-timeout", str(int(spec.runtime.shutdown_timeout))]
    args += spec.runtime.extra_args
    return args
