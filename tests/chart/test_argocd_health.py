"""The Argo CD health check (charts/specguard/argocd/health.lua) run by a real Lua (lupa)
against status objects built with the operator's own status models."""

from __future__ import annotations

from typing import Any

import pytest
from lupa import LuaRuntime

from specguard.api import constants as c
from specguard.api._status import Arms, ArmStatus, Condition, Status

from .conftest import CHART

SCRIPT = (CHART / "argocd" / "health.lua").read_text()
NOW = "2026-12-01T05:00:00Z"


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """What Argo CD shows for ``obj``: the script runs with ``obj`` as a global, as there."""
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(SCRIPT)
    return str(result["status"]), str(result["message"])


def condition(kind: str, status: str, reason: str, message: str = "") -> Condition:
    return Condition(type=kind, status=status, reason=reason, message=message,
                     last_transition_time=NOW, observed_generation=3)  # fmt: skip


def arms(serving: str, *, ready: int = 4, swapping: bool | None = None) -> Arms:
    shadow = c.ARM_BASELINE if serving == c.ARM_SPECULATIVE else c.ARM_SPECULATIVE
    wire: dict[str, Any] = Arms(
        serving=ArmStatus(arm=serving, deployment=f"qwen-{c.ARM_SUFFIX[serving]}",
                          replicas=4, ready_replicas=ready),
        shadow=ArmStatus(arm=shadow, deployment=f"qwen-{c.ARM_SUFFIX[shadow]}",
                         replicas=1, ready_replicas=1),
        mirror_share=0.2,
    ).to_wire()  # fmt: skip
    if swapping is not None:
        wire["swapping"] = swapping
    return Arms.model_validate(wire)


def resource(status: Status | dict[str, Any] | None, generation: int = 3) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": c.API_VERSION, "kind": c.KIND,
        "metadata": {"name": "qwen", "namespace": "llm", "generation": generation},
        "spec": {"replicas": 4},
    }  # fmt: skip
    if status is not None:
        obj["status"] = status.to_wire() if isinstance(status, Status) else status
    return obj


READY = condition(c.CONDITION_READY, "True", "Serving", "4/4 speculative pods ready")
SPEC_VALID = condition(c.CONDITION_SPEC_VALID, "True", "Valid")
# The status verdict's wire form (its class is being renamed; Status validates the dict).
IMPROVED = {"outcome": "improved", "ratio": 0.62, "ciLower": 0.58, "ciUpper": 0.66}


def healthy_status(**changes: Any) -> Status:
    base: dict[str, Any] = {
        "observed_generation": 3, "mode": c.ARM_SPECULATIVE,
        "conditions": [READY, SPEC_VALID,
                       condition(c.CONDITION_ROLLED_BACK, "False", "DrafterPays"),
                       condition(c.CONDITION_JUDGE_DEGRADED, "False", "SamplesFlowing")],
        "last_verdict": IMPROVED, "arms": arms(c.ARM_SPECULATIVE),
    }  # fmt: skip
    return Status(**{**base, **changes})


def replace_condition(status: Status, new: Condition) -> Status:
    kept = [cond for cond in status.conditions if cond.type != new.type]
    return status.model_copy(update={"conditions": [*kept, new]})


def test_healthy_when_ready_and_speculating() -> None:
    assert health(resource(healthy_status())) == ("Healthy", "4/4 speculative pods ready")


def test_progressing_without_status_or_on_a_new_generation() -> None:
    assert health(resource(None))[0] == "Progressing"
    status, message = health(resource(healthy_status(), generation=4))
    assert status == "Progressing" and "generation 4" in message


def test_progressing_while_swapping() -> None:
    swapping = healthy_status(arms=arms(c.ARM_SPECULATIVE, ready=3, swapping=True))
    status, message = health(resource(swapping))
    assert status == "Progressing" and "Swapping" in message
    # A swap that ends in a rollback is Progressing until it is done, then Degraded.
    rolled = replace_condition(
        swapping, condition(c.CONDITION_ROLLED_BACK, "True", "Regressed", "+27% per token")
    )
    assert health(resource(rolled))[0] == "Progressing"
    done = rolled.model_copy(update={"arms": arms(c.ARM_BASELINE), "mode": c.ARM_BASELINE})
    assert health(resource(done)) == ("Degraded", "Rolled back to no drafter: +27% per token")


def test_a_swap_is_its_own_condition_and_ready_stays_true() -> None:
    """Clients are served through a swap (Ready True); the Swapping condition says it runs."""
    swap = condition(
        c.CONDITION_SWAPPING, "True", "RollingSwap", "speculative → baseline: 1 pod left"
    )
    swapping = replace_condition(healthy_status(arms=arms(c.ARM_SPECULATIVE, swapping=True)), swap)
    assert health(resource(swapping)) == (
        "Progressing",
        "Swapping the arms: speculative → baseline: 1 pod left",
    )
    settled = replace_condition(
        healthy_status(), condition(c.CONDITION_SWAPPING, "False", "Settled", "no swap running")
    )
    assert health(resource(settled)) == ("Healthy", "4/4 speculative pods ready")


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (condition(c.CONDITION_ROLLED_BACK, "True", "DrafterStartupFailed",
                   "drafter pods not ready within 10m"),
         "Rolled back to no drafter: drafter pods not ready within 10m"),
        (condition(c.CONDITION_HALTED, "True", "FlapLimit",
                   "automatic changes stopped after 3 changes back and forth on the same "
                   "traffic within 24h; `kubectl specguard retry qwen` resumes them"),
         "Halted: automatic changes stopped after 3 changes back and forth on the same "
         "traffic within 24h; `kubectl specguard retry qwen` resumes them"),
        (condition(c.CONDITION_HALTED, "False", "Allowed", "automatic changes allowed"),
         None),
        (condition(c.CONDITION_JUDGE_DEGRADED, "True", "SourceUnavailable"),
         "Judge degraded: SourceUnavailable"),
        (condition(c.CONDITION_SPEC_VALID, "False", "InvalidSpec",
                   "spec.replicas: must be at least 1"),
         "Invalid spec: spec.replicas: must be at least 1"),
    ],
)  # fmt: skip
def test_degraded(new: Condition, expected: str | None) -> None:
    found = health(resource(replace_condition(healthy_status(), new)))
    if expected is None:  # the condition False: nothing degraded
        assert found == ("Healthy", "4/4 speculative pods ready")
    else:
        assert found == ("Degraded", expected)


def test_an_idle_window_is_healthy_not_degraded() -> None:
    """No traffic in the last window (JudgeDegraded NoSamples): nothing is wrong."""
    quiet = "no samples in the last window (60s)"
    idle = replace_condition(
        healthy_status(), condition(c.CONDITION_JUDGE_DEGRADED, "True", "NoSamples", quiet)
    )
    expected = f"4/4 speculative pods ready; nothing judged: {quiet}"
    assert health(resource(idle)) == ("Healthy", expected)


def test_progressing_while_pods_start() -> None:
    starting = replace_condition(
        healthy_status(), condition(c.CONDITION_READY, "False", "PodsStarting", "1/4 ready")
    )
    assert health(resource(starting)) == ("Progressing", "1/4 ready")
