"""ResourceLoop, the I/O shell, over a fake API client and a fake sample source: what it
applies and when, the back-off, the status writer, the window's timing and targets. The
cluster tier (test_operator_cluster.py) runs the same loop against a real API server."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from specguard.api import SpeculativeDeployment
from specguard.controller._kube import KubeError
from specguard.controller._loop import Observed, ResourceLoop
from specguard.controller._metrics import OperatorMetrics
from specguard.judge import DraftCounters, Sample
from specguard.sources import Reading, Targets, WindowSamples

from .conftest import merge_patch, resource

T0 = 1_800_000_000.0
CREATED = "2027-01-15T08:00:00Z"  # before T0


class FakeKube:
    """The API server as the loop sees it: applies (Deployments get a generation), status
    merge patches (stored, resourceVersion bumped) and Events, each one recorded."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, ...]] = []
        self.refuse: dict[str, str] = {}  # kind → the error to answer
        self.status: dict[str, Any] = {}
        self.rv = 1
        self.deployments: dict[str, dict[str, Any]] = {}

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        kind, name = obj["kind"], obj["metadata"]["name"]
        self.requests.append(("apply", kind, name))
        if kind in self.refuse:
            raise KubeError(self.refuse[kind], 422)
        if kind == "Deployment":
            old = self.deployments.get(name)
            generation = 1 if old is None else old["metadata"]["generation"] + (
                old["spec"]["replicas"] != obj["spec"]["replicas"]
            )
            self.deployments[name] = {
                "metadata": {"name": name, "generation": generation},
                "spec": {"replicas": obj["spec"]["replicas"]},
            }
            return copy.deepcopy(self.deployments[name])
        return {"metadata": {"name": name}}

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.requests.append(("status",))
        self.status = merge_patch(self.status, status)
        self.rv += 1

    async def event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None:
        self.requests.append(("event", type_, reason))

    def writes(self) -> list[tuple[str, ...]]:
        out, self.requests = self.requests, []
        return out


class FakeSource:
    def __init__(self, window: WindowSamples | None = None) -> None:
        self.window = window
        self.targets: list[Targets] = []
        self.collected: list[tuple[float, float]] = []
        self.closed = False

    def set_targets(self, targets: Targets) -> None:
        self.targets.append(targets)

    async def collect(self, start: float, end: float) -> WindowSamples:
        self.collected.append((start, end))
        if self.window is not None:
            return self.window
        return WindowSamples("router", start, end, "empty", "no request ended in the window")

    async def aclose(self) -> None:
        self.closed = True


def body(kube: FakeKube, *, generation: int = 1, **spec: Any) -> dict[str, Any]:
    """The resource as the watch brings it: the fake API server's status and version."""
    b = resource(**spec)
    b["metadata"].update(generation=generation, resourceVersion=str(kube.rv),
                         creationTimestamp=CREATED)  # fmt: skip
    b["status"] = copy.deepcopy(kube.status)
    return b


def pod(name: str, ip: str, labels: dict[str, str], *, ready: bool = True,
        deleting: bool = False) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": name, "labels": labels, "creationTimestamp": CREATED}
    if deleting:
        meta["deletionTimestamp"] = CREATED
    return {"metadata": meta, "status": {"phase": "Running", "podIP": ip, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}  # fmt: skip


def vllm(arm: str, ip: str) -> dict[str, Any]:
    return pod(f"qwen-{arm}-{ip}", ip, {"specguard.io/deployment": "qwen", "specguard.io/arm": arm})


def router(ip: str, **kw: Any) -> dict[str, Any]:
    return pod(f"qwen-router-{ip}", ip, {"specguard.io/router": "qwen"}, **kw)


PODS = [vllm("speculative", "10.0.0.1"), vllm("speculative", "10.0.0.2"),
        vllm("baseline", "10.0.0.3")]  # fmt: skip


def cluster(kube: FakeKube, pods: Sequence[dict[str, Any]] = PODS) -> Observed:
    """What the watch caches hold: the Deployments as applied, the pods, the Services."""
    return Observed(
        deployments=[copy.deepcopy(d) for d in kube.deployments.values()],
        pods=list(pods),
        services=[{"metadata": {"name": n}} for n in ("qwen", "qwen-spec", "qwen-base")],
    )


class Loop:
    """A ResourceLoop with its fakes."""

    def __init__(self, window: WindowSamples | None = None) -> None:
        self.kube = FakeKube()
        self.sources: list[FakeSource] = []
        self.counters: list[tuple[str, ...]] = []
        self.readings: Mapping[str, Reading] = {}
        self.window = window
        self.loop = ResourceLoop(self.kube, OperatorMetrics(), "llm", "qwen",
                                 open_source=self._open, read_counters=self._read)  # fmt: skip

    def _open(self, sd: SpeculativeDeployment) -> FakeSource:
        self.sources.append(FakeSource(self.window))
        return self.sources[-1]

    async def _read(self, urls: Sequence[str]) -> Mapping[str, Reading]:
        self.counters.append(tuple(urls))
        return self.readings

    async def tick(self, now: float, observed: Observed | None = None, **spec: Any) -> None:
        b = body(self.kube, **spec)
        await self.loop.tick(b, observed or cluster(self.kube), now)


OWNED = [
    ("apply", "ServiceAccount", "qwen-router"),
    ("apply", "Role", "qwen-router"),
    ("apply", "Service", "qwen"),
    ("apply", "Service", "qwen-spec"),
    ("apply", "Service", "qwen-base"),
    ("apply", "RoleBinding", "qwen-router"),
    ("apply", "Deployment", "qwen-spec"),
    ("apply", "Deployment", "qwen-base"),
    ("apply", "Deployment", "qwen-router"),
]


async def test_first_tick_applies_everything_then_an_idle_resource_makes_no_request() -> None:
    loop = Loop()
    await loop.tick(T0)
    assert loop.kube.writes() == [*OWNED, ("status",)]
    writes = []
    for second in range(1, 120):
        await loop.tick(T0 + second)
        writes.append((second, loop.kube.writes()))
    # Windows of 10 s: the first one (empty) says NoSamples once; then nothing changes.
    assert [(s, w) for s, w in writes if w] == [(10, [("status",)])]
    assert len(loop.sources[0].collected) == 11  # every window was collected all the same
    assert loop.kube.status["conditions"][-1]["reason"] == "NoSamples"


async def test_a_refused_apply_waits_doubling_and_is_reported_once() -> None:
    loop = Loop()
    loop.kube.refuse["RoleBinding"] = "RoleBinding qwen-router: 422 forbidden"
    applied: list[float] = []
    for tenth in range(0, 80):
        now = T0 + tenth / 10
        await loop.tick(now)
        requests = loop.kube.writes()
        if ("apply", "RoleBinding", "qwen-router") in requests:
            applied.append(round(now - T0, 1))
        if tenth == 0:
            assert ("event", "Warning", "ApplyFailed") in requests
            assert not any(r[:2] == ("apply", "Deployment") for r in requests)  # the rest waits
        else:
            assert ("event", "Warning", "ApplyFailed") not in requests  # said once
    assert applied == [0.0, 1.0, 3.0, 7.0]  # 1 s, 2 s, 4 s: never a hot loop
    ready = next(c for c in loop.kube.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert "422 forbidden" in ready["message"]
    del loop.kube.refuse["RoleBinding"]
    await loop.tick(T0 + 15)
    await loop.tick(T0 + 16)
    assert [r for r in loop.kube.writes() if r[0] == "apply"] == [
        ("apply", "RoleBinding", "qwen-router"),
        ("apply", "Deployment", "qwen-spec"),
        ("apply", "Deployment", "qwen-base"),
        ("apply", "Deployment", "qwen-router"),
    ]
    ready = next(c for c in loop.kube.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "Serving"


async def test_drift_is_applied_again_and_a_lagging_cache_is_not() -> None:
    loop = Loop()
    await loop.tick(T0)
    loop.kube.writes()
    scaled = cluster(loop.kube)
    scaled.deployments[0]["spec"]["replicas"] = 5  # someone scaled qwen-spec
    scaled.deployments[0]["metadata"]["generation"] = 2
    await loop.tick(T0 + 1, scaled)
    assert loop.kube.writes() == [("apply", "Deployment", "qwen-spec")]
    lagging = cluster(loop.kube)
    lagging.deployments[0]["metadata"]["generation"] = 0  # the watch has not caught up
    lagging.deployments[0]["spec"]["replicas"] = 7
    await loop.tick(T0 + 2, lagging)
    assert loop.kube.writes() == []
    gone = cluster(loop.kube)
    gone.services = gone.services[1:]  # the front Service deleted by hand
    await loop.tick(T0 + 3, gone)
    assert loop.kube.writes() == [("apply", "Service", "qwen")]


async def test_until_the_watch_brings_our_write_the_loop_decides_from_it() -> None:
    """A rollback written at one tick must not be taken again (or undone) at the next
    tick, when the watch still shows the older status."""
    loop = Loop()
    startup = [pod("qwen-spec-x", "10.0.0.9",
                   {"specguard.io/deployment": "qwen", "specguard.io/arm": "speculative"},
                   ready=False)]  # fmt: skip
    startup[0]["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"  # long past deadline
    stale = body(loop.kube)
    await loop.loop.tick(stale, cluster(loop.kube, startup), T0)
    assert ("event", "Warning", "RolledBack") in loop.kube.writes()
    await loop.loop.tick(stale, cluster(loop.kube, startup), T0 + 1)  # the same old body
    assert loop.kube.writes() == [("status",)]  # the swap's next step; no second rollback
    assert loop.kube.status["targetMode"] == "baseline"
    assert loop.kube.status["policy"]["flapTimes"] == [T0]
    assert len(loop.kube.status["transitions"]) == 1


async def test_an_invalid_spec_is_reported_once_per_generation() -> None:
    loop = Loop()
    await loop.tick(T0, replicas=0)
    first = loop.kube.writes()
    assert first == [("status",), ("event", "Warning", "SpecInvalid")]
    for second in range(1, 5):
        await loop.tick(T0 + second, replicas=0)
    assert loop.kube.writes() == []
    await loop.tick(T0 + 5, generation=2, replicas=0)
    assert loop.kube.writes() == [("status",), ("event", "Warning", "SpecInvalid")]
    spec_valid = next(c for c in loop.kube.status["conditions"] if c["type"] == "SpecValid")
    assert spec_valid["status"] == "False" and "spec.replicas" in spec_valid["message"]
    await loop.tick(T0 + 6, generation=3)
    assert loop.kube.writes()[:1] == [OWNED[0]]  # valid again: everything applied


async def test_a_window_reads_every_running_router_and_the_drafter_counters() -> None:
    sample = Sample(arm="speculative", role="serving", pod="p", domain="chat",
                    started_at=T0 + 1, concurrency=1, output_tokens=32, e2e_s=1.0,
                    ttft_s=0.1, tpot_s=0.03)  # fmt: skip
    loop = Loop(WindowSamples("router", T0, T0 + 10, "ok", samples=(sample,)))
    pods = [*PODS, router("10.0.1.1"), router("10.0.1.2", deleting=True),
            router("10.0.1.3", ready=False)]  # fmt: skip
    loop.readings = {"http://10.0.0.1:8000": Reading(drafts=10.0, accepted=5.0)}
    await loop.tick(T0, cluster(loop.kube, pods))
    loop.readings = {"http://10.0.0.1:8000": Reading(drafts=110.0, accepted=305.0)}
    for second in range(1, 11):
        await loop.tick(T0 + second, cluster(loop.kube, pods))
    (source,) = loop.sources
    assert source.collected == [(T0, T0 + 10)]
    assert source.targets == [Targets(
        routers=("http://10.0.1.1:8080", "http://10.0.1.2:8080", "http://10.0.1.3:8080"),
        pods={"speculative": ("http://10.0.0.1:8000", "http://10.0.0.2:8000"),
              "baseline": ("http://10.0.0.3:8000",)},
    )]  # fmt: skip
    drafters = ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
    assert loop.counters == [drafters, drafters]  # at the window's start and its end
    verdict = loop.kube.status["lastVerdict"]
    assert verdict["samples"] == {"speculative": 1.0, "baseline": 0.0}
    assert verdict["outcome"] == "inconclusive"
    assert "windowEnd" in verdict


async def test_window_evidence_carries_the_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    from specguard.controller import _loop

    seen: list[Any] = []
    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        if obs.window is not None:
            seen.append(obs.window.drafts)
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    loop = Loop()
    loop.readings = {"http://10.0.0.1:8000": Reading(drafts=10.0, accepted=5.0)}
    await loop.tick(T0)
    loop.readings = {"http://10.0.0.1:8000": Reading(drafts=110.0, accepted=305.0)}
    await loop.tick(T0 + 10)
    assert seen == [DraftCounters(pods=1, exporting=1, drafts=100.0, accepted=300.0)]


async def test_a_new_spec_closes_the_old_source_and_starts_a_new_window() -> None:
    loop = Loop()
    await loop.tick(T0)
    await loop.tick(T0 + 5)
    await loop.tick(T0 + 6, generation=2, replicas=3)
    assert len(loop.sources) == 2 and loop.sources[0].closed and not loop.sources[1].closed
    await loop.tick(T0 + 12, generation=2, replicas=3)
    assert loop.sources[1].collected == []  # its window started at T0 + 6
    await loop.tick(T0 + 16, generation=2, replicas=3)
    assert loop.sources[1].collected == [(T0 + 6, T0 + 16)]
    await loop.loop.aclose()
    assert loop.sources[1].closed


async def test_a_source_that_is_down_is_named_in_judge_degraded() -> None:
    down = WindowSamples("prometheus", T0, T0 + 10, "down", "query failed: connection refused")
    loop = Loop(down)
    for second in (0, 10):
        await loop.tick(T0 + second)
    degraded = next(c for c in loop.kube.status["conditions"] if c["type"] == "JudgeDegraded")
    assert (degraded["status"], degraded["reason"], degraded["message"]) == (
        "True", "SourceUnavailable", "prometheus unavailable: query failed: connection refused",
    )  # fmt: skip
    assert loop.kube.status["lastVerdict"]["outcome"] == "inconclusive"
