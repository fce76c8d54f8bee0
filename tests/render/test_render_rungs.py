"""Each rung of the ladder rendered as flags vLLM 0.33 accepts, and only on the drafter arm."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard.api import BatchSizeRange, DrafterRung, parse_resource
from specguard.render import render_all, rung_drafter, speculative_config, vllm_args
from specguard.sim._options import parse_options

SCHEDULE = [
    BatchSizeRange(min_batch_size=1, max_batch_size=20, num_speculative_tokens=7),
    BatchSizeRange(min_batch_size=21, max_batch_size=1024, num_speculative_tokens=0),
]


def resource(drafter: dict[str, Any], rungs: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "dsv4", "namespace": "llm"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4"},
            "runtime": {"tensorParallelSize": 4},
            "replicas": 2,
            "drafter": drafter,
            "ladder": {"rungs": rungs},
        },
    }


DSPARK = {
    "method": "dspark",
    "model": "RedHatAI/DeepSeek-V4-speculator.dspark",
    "numSpeculativeTokens": 7,
    "extraConfig": {"dspark_draft_topk": 2},
}
NGRAM = {"method": "ngram", "numSpeculativeTokens": 4, "extraConfig": {"prompt_lookup_max": 5}}


def test_each_rung_is_the_configured_drafter_with_one_field_more() -> None:
    sd = parse_resource(resource(DSPARK, ["adaptive", "schedule"]))
    drafter = sd.spec.drafter
    model = "RedHatAI/DeepSeek-V4-speculator.dspark"
    assert speculative_config(rung_drafter(drafter, DrafterRung())) == {
        "method": "dspark",
        "model": model,
        "num_speculative_tokens": 7,
        "dspark_draft_topk": 2,
    }
    assert speculative_config(rung_drafter(drafter, DrafterRung(name="adaptive"))) == {
        "method": "dspark",
        "model": model,
        "num_speculative_tokens": 7,
        "enable_adaptive_verification": True,
        "dspark_draft_topk": 2,
    }
    assert speculative_config(
        rung_drafter(drafter, DrafterRung(name="schedule", schedule=SCHEDULE))
    ) == {
        "method": "dspark",
        "model": model,
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 20, 7], [21, 1024, 0]],
        "dspark_draft_topk": 2,
    }
    # The spec itself is left as it is.
    assert drafter.adaptive_verification is False
    assert drafter.per_batch_size is None


def test_a_schedule_rung_without_its_schedule_is_a_caller_error() -> None:
    sd = parse_resource(resource(NGRAM, ["schedule"]))
    with pytest.raises(ValueError, match="derived schedule"):
        rung_drafter(sd.spec.drafter, DrafterRung(name="schedule"))


def test_the_rung_changes_only_the_drafter_arm() -> None:
    sd = parse_resource(resource(DSPARK, ["adaptive"]))
    plain = render_all(sd, "speculative")
    adaptive = render_all(sd, "speculative", rung=DrafterRung(name="adaptive"))
    changed = [i for i, (a, b) in enumerate(zip(plain, adaptive, strict=True)) if a != b]
    assert [plain[i]["metadata"]["name"] for i in changed] == ["dsv4-spec"]
    assert vllm_args(sd.spec, "baseline", DrafterRung(name="adaptive")) == vllm_args(
        sd.spec, "baseline"
    )


def _sim_accepts(args: list[str]) -> None:
    """The simulator checks --speculative-config as vLLM 0.33 does (sim/_specconfig.py)."""
    parse_options(args)


@pytest.mark.parametrize(
    ("drafter", "rung"),
    [
        (DSPARK, DrafterRung()),
        (DSPARK, DrafterRung(name="adaptive")),
        (DSPARK, DrafterRung(name="schedule", schedule=SCHEDULE)),
        (NGRAM, DrafterRung(name="schedule", schedule=SCHEDULE[:1])),
    ],
    ids=["configured", "adaptive", "schedule", "ngram-schedule"],
)
def test_every_rung_renders_flags_vllm_accepts(drafter: dict[str, Any], rung: DrafterRung) -> None:
    rungs = ["adaptive", "schedule"] if drafter is DSPARK else ["schedule"]
    sd = parse_resource(resource({**drafter, "numSpeculativeTokens": 7}, rungs))
    args = vllm_args(sd.spec, "speculative", rung)
    _sim_accepts(args)
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config.get("enable_adaptive_verification", False) == (rung.name == "adaptive")


@settings(max_examples=60, deadline=None)
@given(
    cut=st.integers(1, 1023),
    k=st.integers(1, 32),
    low_k=st.integers(0, 32),
)
def test_any_derived_two_range_schedule_is_accepted(cut: int, k: int, low_k: int) -> None:
    schedule = [
        BatchSizeRange(min_batch_size=cut + 1, max_batch_size=1024, num_speculative_tokens=0),
        BatchSizeRange(min_batch_size=1, max_batch_size=cut, num_speculative_tokens=min(k, low_k)),
    ]
    sd = parse_resource(resource({**DSPARK, "numSpeculativeTokens": k}, ["schedule"]))
    _sim_accepts(vllm_args(sd.spec, "speculative", DrafterRung(name="schedule", schedule=schedule)))
