"""ResourceLoop, the I/O shell, over a fake API client and a fake sample source: what it
applies and when, the back-off, the status writer, the window's timing and targets. The
cluster tier (test_operator_cluster.py) runs the same loop against a real API server."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from specguard._arms import Arm
from specguard.api import SpeculativeDeployment
from specguard.controller._kube import KubeError
from specguard.controller._loop import Observed, ResourceLoop, _settled
from specguard.controller._metrics import OperatorMetrics
from specguard.judge import ArmLoad, DraftCounters, Role, Sample
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
        self.ahead = 0

    def set_targets(self, targets: Targets) -> None:
        self.targets.append(targets)

    def read_ahead(self) -> None:
        self.ahead += 1

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
        self.counters: list[dict[str, tuple[str, ...]]] = []
        self.readings: Mapping[Arm, Mapping[str, Reading]] = {}
        self.window = window
        # The arms' Deployments exist already, as the first tick applies them: their
        # appearing at the second tick would be a change in the pods (replicas 0→2), which
        # restarts the window open since the first.
        _running(self.kube)
        self.loop = ResourceLoop(self.kube, OperatorMetrics(), "llm", "qwen",
                                 open_source=self._open, read_counters=self._read)  # fmt: skip

    def _open(self, sd: SpeculativeDeployment) -> FakeSource:
        self.sources.append(FakeSource(self.window))
        return self.sources[-1]

    async def _read(
        self, urls: Mapping[Arm, Sequence[str]]
    ) -> Mapping[Arm, Mapping[str, Reading]]:
        self.counters.append({arm: tuple(u) for arm, u in urls.items()})
        return self.readings

    async def tick(self, now: float, observed: Observed | None = None, **spec: Any) -> None:
        b = body(self.kube, **spec)
        await self.loop.tick(b, observed or cluster(self.kube), now)


OWNED = [  # two rounds: the RoleBinding after its Role, the router after its ServiceAccount
    ("apply", "ServiceAccount", "qwen-router"),
    ("apply", "Role", "qwen-router"),
    ("apply", "Service", "qwen"),
    ("apply", "Service", "qwen-spec"),
    ("apply", "Service", "qwen-base"),
    ("apply", "Deployment", "qwen-spec"),
    ("apply", "Deployment", "qwen-base"),
    ("apply", "RoleBinding", "qwen-router"),
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
    retried: list[tuple[str, ...]] = []
    for tenth in range(0, 80):
        now = T0 + tenth / 10
        await loop.tick(now)
        requests = loop.kube.writes()
        if ("apply", "RoleBinding", "qwen-router") in requests:
            applied.append(round(now - T0, 1))
            if tenth:
                retried += [r for r in requests if r[0] == "apply"]
        if tenth == 0:
            assert ("event", "Warning", "ApplyFailed") in requests
            assert [r for r in requests if r[0] == "apply"] == OWNED
        else:
            assert ("event", "Warning", "ApplyFailed") not in requests  # said once
    assert applied == [0.0, 1.0, 3.0, 7.0]  # 1 s, 2 s, 4 s: never a hot loop
    assert retried == [("apply", "RoleBinding", "qwen-router")] * 3  # only what was refused
    ready = next(c for c in loop.kube.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert "422 forbidden" in ready["message"]
    del loop.kube.refuse["RoleBinding"]
    await loop.tick(T0 + 15)
    await loop.tick(T0 + 16)
    assert [r for r in loop.kube.writes() if r[0] == "apply"] == [
        ("apply", "RoleBinding", "qwen-router"),  # what went through before is kept
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
    assert loop.kube.status["policy"]["flapTimes"] == ["2027-01-15T08:00:00Z"]  # T0
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
    loop.readings = {"speculative": {"http://10.0.0.1:8000": Reading(drafts=10.0, accepted=5.0)}}
    await loop.tick(T0, cluster(loop.kube, pods))
    loop.readings = {
        "speculative": {"http://10.0.0.1:8000": Reading(drafts=110.0, accepted=305.0)}
    }
    for second in range(1, 11):
        await loop.tick(T0 + second, cluster(loop.kube, pods))
    (source,) = loop.sources
    assert source.collected == [(T0, T0 + 10)]
    # Read ahead at every tick between the window's ends, with the targets of the tick.
    assert source.ahead == 9 and len(source.targets) == 10
    assert source.targets[-1:] == [Targets(
        routers=("http://10.0.1.1:8080", "http://10.0.1.2:8080", "http://10.0.1.3:8080"),
        pods={"speculative": ("http://10.0.0.1:8000", "http://10.0.0.2:8000"),
              "baseline": ("http://10.0.0.3:8000",)},
    )]  # fmt: skip
    vllm = {"speculative": ("http://10.0.0.1:8000", "http://10.0.0.2:8000"),
            "baseline": ("http://10.0.0.3:8000",)}  # fmt: skip
    # At the window's start and end, and at its quarter looks (the drafter serving: the
    # overload guardrail reads the engines between window ends by either rule): the first
    # look falls at 3 s on one-second ticks, then 5 and 8 s.
    assert loop.counters == [vllm] * 5
    verdict = loop.kube.status["lastVerdict"]
    assert verdict["samples"] == {"speculative": 1.0, "baseline": 0.0}
    assert verdict["outcome"] == "inconclusive"
    assert "windowEnd" in verdict


async def test_window_evidence_carries_the_counters_and_the_arms_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from specguard.controller import _loop

    seen: list[Any] = []
    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        if obs.window is not None:
            seen.append((obs.window.drafts, obs.window.load))
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    loop = Loop()
    spec, spec2, base = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"
    loop.readings = {"speculative": {spec: Reading(drafts=0.0, accepted=0.0)}}
    # The first window spans a change in the pods seen at its end (a third vLLM pod
    # ready): its counters count, the engines' load across the change does not.
    await loop.tick(T0)
    await loop.tick(T0 + 1)
    loop.readings = {
        "speculative": {spec: Reading(drafts=10.0, accepted=5.0, running=8.0, waiting=0.0),
                        spec2: Reading(drafts=1.0, accepted=1.0, running=4.0, waiting=0.0)},
        "baseline": {base: Reading(running=12.0, waiting=2.0)},
    }  # fmt: skip
    await loop.tick(T0 + 10, cluster(loop.kube, [*PODS, vllm("baseline", "10.0.0.4")]))
    loop.readings = {
        # the second drafter pod answers only at the start: it counts for neither figure
        "speculative": {spec: Reading(drafts=110.0, accepted=305.0, running=64.0, waiting=36.0)},
        "baseline": {base: Reading(running=15.0, waiting=1.0)},
    }
    await loop.tick(T0 + 20, cluster(loop.kube, [*PODS, vllm("baseline", "10.0.0.4")]))
    assert seen == [
        (DraftCounters(pods=1, exporting=1, drafts=10.0, accepted=5.0), None),
        (
            DraftCounters(pods=1, exporting=1, drafts=100.0, accepted=300.0),
            ArmLoad(start={"speculative": 8.0, "baseline": 14.0},
                    end={"speculative": 100.0, "baseline": 16.0},
                    pods={"speculative": 1, "baseline": 1}, rule="in_flight"),
        ),
    ]  # fmt: skip


async def test_between_window_ends_the_engines_are_read_every_quarter_window_by_arrivals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clients that arrive at their own pace (loadMatch arrivals): the overload guardrail
    need not wait for the window's end. Every quarter window (2.5 s of 10) the arms' engines
    are read against the window's start; a drafter falling behind is rolled back at once."""
    from specguard.controller import _loop

    seen: list[tuple[float, bool, ArmLoad | None]] = []
    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        seen.append((obs.now - T0, obs.window is not None, obs.load))
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    loop = Loop()
    spec, base = "http://10.0.0.1:8000", "http://10.0.0.3:8000"

    def engines(drafter: float, baseline: float) -> Mapping[Arm, Mapping[str, Reading]]:
        return {"speculative": {spec: Reading(running=drafter, waiting=0.0)},
                "baseline": {base: Reading(running=min(baseline, 256), waiting=0.0)}}  # fmt: skip

    evaluation = {"window": "10s", "minRequestsPerArm": 20, "loadMatch": "arrivals"}
    loop.readings = engines(90, 185)
    # The first window opened as the routers were told the rule: it does not speak for it
    # (its look at 5 s reads the engines by the in-flight rule; no finished counts here).
    for at in (0.0, 2.5, 5.0, 10.0):
        await loop.tick(T0 + at, evaluation=evaluation)
    looks = [load for _, ended, load in seen if not ended]
    assert [load is not None and load.rule for load in looks] == [False, False, "in_flight"]
    seen.clear()
    loop.counters.clear()
    loop.readings = engines(95, 186)
    # A quarter window after the last look: read at 12.5 (the window's first look only
    # records), then at 15 against the window's start and that look.
    for at in (11.0, 12.0, 12.5, 14.0):
        await loop.tick(T0 + at, evaluation=evaluation)
    loop.readings = engines(300, 190)
    await loop.tick(T0 + 15.0, evaluation=evaluation)
    assert [(at, ended, load is not None) for at, ended, load in seen] == [
        (11.0, False, False), (12.0, False, False), (12.5, False, False), (14.0, False, False),
        (15.0, False, True),
    ]  # fmt: skip
    assert seen[-1][2] == ArmLoad(
        start={"speculative": 90.0, "baseline": 185.0},
        end={"speculative": 300.0, "baseline": 190.0},
        pods={"speculative": 1, "baseline": 1},
        rule="arrivals",
        last={"speculative": 95.0, "baseline": 186.0},
    )
    assert len(loop.counters) == 2  # at 12.5 s and 15 s: nothing else
    assert loop.kube.status["targetMode"] == "baseline"
    (transition,) = loop.kube.status["transitions"]
    assert transition["reason"] == "DrafterOverloaded", transition
    # Where a trip would only be reported (a dry run) the engines are not read between
    # window ends; by the in-flight rule they are (at every look), and steady engines trip
    # nothing.
    for rule, policy, reads in (("in_flight", "auto", 6), ("arrivals", "notify", 2)):
        other = Loop()
        other.readings = engines(90, 185)
        fields: dict[str, Any] = {"evaluation": {**evaluation, "loadMatch": rule},
                                  "rollback": {"cooldown": "60s", "policy": policy}}  # fmt: skip
        for at in (0.0, 2.5, 10.0, 12.5, 15.0, 17.5):
            await other.tick(T0 + at, **fields)
        # 0 and 10 s; in_flight also the looks at 2.5, 12.5, 15 and 17.5 s
        assert len(other.counters) == reads, (rule, policy, other.counters)
        assert other.kube.status["targetMode"] == "speculative"


@pytest.mark.parametrize("baseline_done", [300.0, 80.0])
async def test_by_the_in_flight_rule_the_overload_guardrail_reads_what_the_engines_finished(
    monkeypatch: pytest.MonkeyPatch, baseline_done: float
) -> None:
    """Clients the operator has not told open (loadMatch in_flight): the shadow is fed to
    the serving pods' count, so the baseline's count says nothing of it at these arrivals;
    what each arm's engines finished does. The drafter climbs 90 → 300 per pod while it
    finishes 100 (310 arrived); the baseline shadow finished 300 per pod (keeps up with
    the drafter pods' arrivals: rolled back at the look) or 80 (no better: held)."""
    from specguard.controller import _loop

    seen: list[ArmLoad | None] = []
    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        seen.append(obs.load)
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    loop = Loop()
    spec, base = "http://10.0.0.1:8000", "http://10.0.0.3:8000"

    def engines(drafter: float, baseline: float, finished: tuple[float, float]
                ) -> Mapping[Arm, Mapping[str, Reading]]:  # fmt: skip
        return {"speculative": {spec: Reading(running=drafter, waiting=0.0,
                                              tpot_count=finished[0])},
                "baseline": {base: Reading(running=baseline, waiting=0.0,
                                           tpot_count=finished[1])}}  # fmt: skip

    evaluation = {"window": "10s", "minRequestsPerArm": 20, "loadMatch": "in_flight"}
    loop.readings = engines(90, 90, (1000, 1000))
    for at in (0.0, 2.5, 10.0):
        await loop.tick(T0 + at, evaluation=evaluation)
    loop.readings = engines(95, 95, (1020, 1030))
    await loop.tick(T0 + 12.5, evaluation=evaluation)  # the window's first look records
    loop.readings = engines(300, 290, (1100, 1000 + baseline_done))
    await loop.tick(T0 + 15.0, evaluation=evaluation)
    assert seen[-1] == ArmLoad(
        start={"speculative": 90.0, "baseline": 90.0},
        end={"speculative": 300.0, "baseline": 290.0},
        pods={"speculative": 1, "baseline": 1},
        rule="in_flight",
        last={"speculative": 95.0, "baseline": 95.0},
        done={"speculative": 100.0, "baseline": baseline_done},
    )
    if baseline_done == 80.0:
        assert loop.kube.status["targetMode"] == "speculative"
        return
    assert loop.kube.status["targetMode"] == "baseline"
    (transition,) = loop.kube.status["transitions"]
    assert transition["reason"] == "DrafterOverloaded", transition


async def test_the_looks_fall_at_the_windows_quarters_on_one_second_ticks() -> None:
    """On the operator's one-second ticks the looks fall at the window's quarters (13, 15
    and 18 s of a window from 10 to 20 s), not a quarter window after the last look (13,
    16, 19): the window's end is then checked against a look about a quarter window old,
    not one a second old (a climb within one second would rarely pass the noise bound)."""
    loop = Loop()
    spec, base = "http://10.0.0.1:8000", "http://10.0.0.3:8000"
    loop.readings = {"speculative": {spec: Reading(running=100.0, waiting=0.0)},
                     "baseline": {base: Reading(running=150.0, waiting=0.0)}}  # fmt: skip
    evaluation = {"window": "10s", "minRequestsPerArm": 20, "loadMatch": "arrivals"}
    for at in range(11):  # the first window opened with the rule: it does not speak for it
        await loop.tick(T0 + at, evaluation=evaluation)
    read_at = []
    for at in range(11, 21):
        before = len(loop.counters)
        await loop.tick(T0 + at, evaluation=evaluation)
        if len(loop.counters) > before:
            read_at.append(at)
    assert read_at == [13, 15, 18, 20]
    assert loop.kube.status["targetMode"] == "speculative"  # the engines held steady


@pytest.mark.parametrize(
    "case", ["guardrail off", "baseline serving", "routes by domain", "pods changed"]
)
async def test_the_engines_are_not_read_between_window_ends_where_no_trip_could_act(
    case: str,
) -> None:
    """Only the drafter serving, with the guardrail on, no routes by domain and nothing
    disturbed since the window opened: otherwise only the window ends read the engines."""
    fields: dict[str, Any] = {
        "evaluation": {"window": "10s", "minRequestsPerArm": 20, "loadMatch": "arrivals"},
        "rollback": {"cooldown": "60s",
                     "overloadGuardrail": case != "guardrail off"},
    }  # fmt: skip
    loop = Loop()
    if case == "baseline serving":  # an operator that finds the baseline serving
        await loop.tick(T0 - 20, **fields)
        status = copy.deepcopy(loop.kube.status)
        status["mode"] = status["targetMode"] = status["policy"]["mode"] = "baseline"
        loop = Loop()
        loop.kube.status = status
        for name, replicas in (("qwen-spec", 1), ("qwen-base", 2)):  # as the baseline serves
            loop.kube.deployments[name]["spec"]["replicas"] = replicas
    loop.readings = {"speculative": {"http://10.0.0.1:8000": Reading(running=90.0, waiting=0.0)},
                     "baseline": {"http://10.0.0.3:8000": Reading(running=185.0, waiting=0.0)}}
    pods = list(PODS)
    if case == "pods changed":
        # A change at 12.5 s restarts the second window (read then); its first look at 15 s
        # reads; a change at 21 s falls inside it for good (restarts postpone the end of
        # the window they cut by less than one window): no look at 22 s, until it ends.
        for at in (0.0, 10.0, 12.5, 15.0, 21.0, 22.0, 22.5):
            if at in (12.5, 21.0):
                pods = [*pods, vllm("baseline", f"10.0.0.{int(at) + 10}")]
            await loop.tick(T0 + at, cluster(loop.kube, pods), **fields)
        assert len(loop.counters) == 5, loop.counters  # at 0, 10, 12.5, 15 and 22.5 s
        return
    for at in (0.0, 2.5, 10.0, 11.0, 12.5, 15.0, 17.5):
        if at >= 10.0 and case == "routes by domain":
            loop.kube.status["arms"]["routes"] = {"tool_call": "baseline"}
        await loop.tick(T0 + at, cluster(loop.kube, pods), **fields)
    # at 0 s and 10 s (and with routes, at the first window's look at 2.5 s, before them)
    reads = 3 if case == "routes by domain" else 2
    assert len(loop.counters) == reads, (case, loop.counters)


async def test_a_new_spec_closes_the_old_source_and_starts_a_new_window() -> None:
    loop = Loop()
    await loop.tick(T0)
    await loop.tick(T0 + 5)
    await loop.tick(T0 + 6, generation=2, replicas=3)
    assert len(loop.sources) == 2 and loop.sources[0].closed and not loop.sources[1].closed
    await loop.tick(T0 + 12, generation=2, replicas=3)
    assert loop.sources[1].collected == []  # its window started at T0 + 6
    # ... and restarted at T0 + 12, when the watch showed the new replicas (a change in
    # the pods inside it)
    await loop.tick(T0 + 16, generation=2, replicas=3)
    assert loop.sources[1].collected == []
    await loop.tick(T0 + 22, generation=2, replicas=3)
    assert loop.sources[1].collected == [(T0 + 12, T0 + 22)]
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


async def test_a_window_not_read_to_its_end_is_a_warning_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    problem = ("1 of 2 router(s) not read to the end of GET /samples (http://10.0.1.2:8080: "
               "ReadTimeout)")  # fmt: skip
    loop = Loop(WindowSamples("router", T0, T0 + 10, "down", problem))
    with caplog.at_level(logging.INFO, logger="specguard.controller"):
        for second in range(11):
            await loop.tick(T0 + second)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"llm/qwen: window not judged, router unavailable: {problem}"]
    degraded = next(c for c in loop.kube.status["conditions"] if c["type"] == "JudgeDegraded")
    assert (degraded["reason"], degraded["message"]) == (
        "SourceUnavailable", f"router unavailable: {problem}"
    )


def test_requests_from_before_a_rule_change_leave_with_their_pairs() -> None:
    """A copy starts a few ms after its serving request: a cut between the two takes the
    pair out whole, never one half."""
    cutoff = T0 + 5

    def half(role: str, started: float, pair: str | None) -> Sample:
        arm = "speculative" if role == "serving" else "baseline"
        return Sample(arm=arm, role=role, pod="p", domain="chat", started_at=started,  # type: ignore[arg-type]
                      concurrency=1, output_tokens=32, e2e_s=1.0, pair_id=pair)  # fmt: skip

    kept = (half("serving", cutoff + 1, "b"), half("shadow", cutoff + 1.01, "b"))
    window = WindowSamples("router", T0, T0 + 10, "ok", samples=(
        half("serving", cutoff - 0.005, "a"), half("shadow", cutoff + 0.005, "a"),
        half("serving", cutoff - 1, None), *kept,
    ))  # fmt: skip
    settled = _settled(window, cutoff, "arrivals")
    assert settled.samples == kept
    assert settled.notes[-1].startswith("3 requests that started before the load match")


async def test_an_idle_tick_renders_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from specguard.controller import _loop

    calls: list[object] = []
    real = _loop.render_all  # type: ignore[attr-defined]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(_loop, "render_all", counted)
    loop = Loop()
    for second in range(5):
        await loop.tick(T0 + second)
    assert len(calls) == 1  # rendered once; the same replicas again: the same objects


class SlowKube(FakeKube):
    """Every apply takes a while; the order in which applies finish is kept."""

    def __init__(self, finished: list[str]) -> None:
        super().__init__()
        self.finished = finished

    async def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        result = await super().apply(obj)
        self.finished.append(obj["metadata"]["namespace"])
        return result


async def test_resources_arriving_together_are_applied_first_come_first_served() -> None:
    finished: list[str] = []
    admission = asyncio.Semaphore(1)
    loops = []
    for ns in ("a", "b", "c"):
        kube = SlowKube(finished)
        loop = ResourceLoop(kube, OperatorMetrics(), ns, "qwen", admission=admission,
                            open_source=lambda sd: FakeSource(),
                            read_counters=lambda urls: _no_readings())  # fmt: skip
        b = body(kube)
        b["metadata"]["namespace"] = ns
        loops.append(loop.tick(b, cluster(kube), T0))
    await asyncio.gather(*loops)
    # each resource's nine objects before the next resource's first
    assert finished == ["a"] * 9 + ["b"] * 9 + ["c"] * 9


async def _no_readings() -> Mapping[Arm, Mapping[str, Reading]]:
    return {}


# -- windows that span a swap, an operator restart or a change in the pods ------------------


def _sample(started: float, e2e: float = 2.0) -> Sample:
    return Sample(arm="speculative", role="serving", pod="p", domain="chat",
                  started_at=started, concurrency=1, output_tokens=32, e2e_s=e2e, ttft_s=0.1,
                  tpot_s=0.03)  # fmt: skip


def _spans(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str | None]]:
    """(window start, what it spans) of every window the loop hands to decide."""
    from specguard.controller import _loop
    from specguard.controller._decide import gather

    seen: list[tuple[float, str | None]] = []
    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        if obs.window is not None:
            seen.append((obs.window.start - T0, gather(obs).spans))
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    return seen


async def test_the_first_window_after_an_operator_restart_spans_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new loop over a status an operator wrote before: the requests in flight when it
    came up ran under the last one. Its first window counts only on the requests that
    started after the restart (none here, so it does not); the next one counts."""
    seen = _spans(monkeypatch)
    loop = Loop(WindowSamples("router", T0, T0 + 10, "ok", samples=(_sample(T0 - 1),)))
    _running(loop.kube)
    loop.kube.status = {"mode": "speculative", "targetMode": "speculative",
                        "policy": {"mode": "speculative"}}  # fmt: skip
    for second in range(11):
        await loop.tick(T0 + second)
    assert seen == [(0.0, "an operator restart")]
    loop.window = WindowSamples("router", T0 + 10, T0 + 20, "ok", samples=(_sample(T0 + 11),))
    loop.sources[0].window = loop.window
    for second in range(11, 21):
        await loop.tick(T0 + second)
    assert seen == [(0.0, "an operator restart"), (10.0, None)]


async def test_no_status_from_an_earlier_operator_is_no_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _spans(monkeypatch)
    loop = Loop(WindowSamples("router", T0, T0 + 10, "ok", samples=(_sample(T0 - 1),)))
    _running(loop.kube)
    for second in range(11):
        await loop.tick(T0 + second)
    assert seen == [(0.0, None)]


def _running(kube: FakeKube) -> None:
    """The arms' Deployments exist already (a resource the cluster runs)."""
    for name, replicas in (("qwen-spec", 2), ("qwen-base", 1), ("qwen-router", 1)):
        kube.deployments[name] = {"metadata": {"name": name, "generation": 1},
                                  "spec": {"replicas": replicas}}  # fmt: skip


async def test_a_window_across_a_change_in_the_pods_spans_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _spans(monkeypatch)
    loop = Loop(WindowSamples("router", T0, T0 + 10, "ok", samples=(_sample(T0 + 1),)))
    shadow_down = [*PODS[:2], vllm("baseline", "10.0.0.3") | {"status": {"phase": "Running"}}]
    for second in range(11):
        # the shadow pod not ready at the window's end (inside it, it would restart it)
        pods = shadow_down if second == 10 else PODS
        await loop.tick(T0 + second, cluster(loop.kube, pods))
    assert seen == [(0.0, "a change in the pods (baseline ready 1→0)")]


async def test_the_first_window_after_a_swap_spans_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's window across a swap ('improved 0.572' on 28 pairs) counted toward a
    re-promotion: a request it judges began while the arms swapped."""
    seen = _spans(monkeypatch)
    loop = Loop(WindowSamples("router", T0, T0 + 10, "ok", samples=(_sample(T0 + 1),)))
    await loop.tick(T0)
    status = copy.deepcopy(loop.kube.status)
    status["arms"]["swapping"] = True  # the stored status says a swap runs
    loop.kube.status = status
    second = 1
    while loop.kube.status["arms"].get("swapping"):
        await loop.tick(T0 + second)
        second += 1
        assert second < 60
    ended = second
    window = WindowSamples("router", T0, T0 + 99, "ok", samples=(_sample(T0 + ended - 2),))
    loop.sources[0].window = window
    for s in range(ended, ended + 11):
        await loop.tick(T0 + s)
    assert seen and seen[0][1] == "a swap", seen


async def test_the_first_window_after_a_swap_counts_on_the_requests_started_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closed-loop clients always have a request in flight across the swap's end: the
    first window after it is judged on the requests that started afterwards (and counts),
    instead of being thrown away whole for the second of requests from before."""
    seen = _spans(monkeypatch)
    judged: list[tuple[float, ...]] = []
    from specguard.controller import _loop

    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        if obs.window is not None:
            judged.append(tuple(s.started_at - T0 for s in obs.window.samples))
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    loop = Loop(WindowSamples("router", T0, T0 + 10, "ok", samples=(_sample(T0 + 1),)))
    await loop.tick(T0)
    status = copy.deepcopy(loop.kube.status)
    status["arms"]["swapping"] = True
    loop.kube.status = status
    second = 1
    while loop.kube.status["arms"].get("swapping"):
        await loop.tick(T0 + second)
        second += 1
        assert second < 60
    ended = second
    after = tuple(_sample(T0 + ended + k) for k in range(1, 4))
    window = WindowSamples("router", T0, T0 + 99, "ok", samples=(_sample(T0 + ended - 2), *after))
    loop.sources[0].window = window
    for s in range(ended, ended + 11):
        await loop.tick(T0 + s)
    assert seen and seen[0][1] is None, seen
    assert judged[0] == tuple(float(ended + k) for k in range(1, 4)), judged


def _pairs(start: float, n: int, concurrency: int, spec_tpot: float) -> tuple[Sample, ...]:
    """``n`` mirrored pairs started from ``start``, both halves at ``concurrency`` in
    flight: the drafter half at ``spec_tpot`` s per token, the baseline half at 0.03 s."""
    out: list[Sample] = []
    for i in range(n):
        t = start + 0.1 * i
        halves: tuple[tuple[Arm, Role, float], ...] = (
            ("speculative", "serving", spec_tpot),
            ("baseline", "shadow", 0.03),
        )
        for arm, role, tpot in halves:
            jitter = 1.0 + 0.01 * ((i * 7) % 5)
            out.append(Sample(arm=arm, role=role, pod=f"{arm}-0", domain="chat", started_at=t,
                              concurrency=concurrency, output_tokens=64,
                              e2e_s=0.1 + 63 * tpot * jitter, ttft_s=0.1,
                              tpot_s=tpot * jitter, measurement="stream_usage",
                              pair_id=f"{start:.0f}-{i}"))  # fmt: skip
    return tuple(out)


async def test_a_window_whose_drafter_is_not_in_effect_adds_no_pairs_to_the_bands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 36: the schedule rung's band evidence (LevelPairs) is kept across windows;
    a window whose drafter arm proposed nothing (NothingToPropose: 0 drafts over 40 served
    requests) says nothing about the configured drafter, so its pairs must not reach the
    next counted window's band verdicts or status.ladder.levels."""
    from specguard.api import parse_resource
    from specguard.controller import _loop
    from specguard.render import vllm_args

    # Dry run: the guardrail's rollback is only reported, so the next window is judged too.
    spec = {
        "ladder": {"rungs": ["schedule"]},
        "rollback": {"cooldown": "60s", "startupDeadline": "1m", "policy": "notify"},
    }
    sd = parse_resource(resource(**spec))
    args = vllm_args(sd.spec, "speculative")
    pods = [
        vllm(arm, ip) | {"spec": {"containers": [{"name": "vllm", "args": args}]}}
        for arm, ip in (("speculative", "10.0.0.1"), ("speculative", "10.0.0.2"))
    ]
    pods.append(vllm("baseline", "10.0.0.3"))
    levels: list[tuple[tuple[int, int, str], ...]] = []
    spans: list[str | None] = []
    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        if obs.window is not None:
            from specguard.controller._decide import gather

            spans.append(gather(obs).spans)
            levels.append(tuple((lv.low, lv.high, lv.outcome) for lv in obs.window.levels))
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    # Window 1: the drafter slower at 1 in flight, but its counters show no draft at all.
    loop = Loop(WindowSamples("router", T0, T0 + 10, "ok", samples=_pairs(T0 + 1, 40, 1, 0.05)))
    _running(loop.kube)
    loop.readings = {"speculative": {"http://10.0.0.1:8000": Reading(drafts=0.0, accepted=0.0)}}
    for second in range(11):
        await loop.tick(T0 + second, cluster(loop.kube, pods), **spec)
    assert len(spans) == 1 and spans[0] is not None and "NothingToPropose" in spans[0], spans
    # Window 2, counted: the drafter faster at 8 in flight, drafting.
    window = WindowSamples("router", T0 + 10, T0 + 20, "ok",
                           samples=_pairs(T0 + 11, 40, 8, 0.02))  # fmt: skip
    loop.sources[0].window = window
    for second in range(11, 21):
        drafting = Reading(drafts=100.0 * (second - 10), accepted=200.0 * (second - 10))
        loop.readings = {"speculative": {"http://10.0.0.1:8000": drafting}}
        await loop.tick(T0 + second, cluster(loop.kube, pods), **spec)
    assert spans[1:] == [None], spans
    assert len(levels[1]) == 1 and levels[1][0][2] == "improved", levels
    stored = loop.kube.status["ladder"].get("levels") or []
    assert len(stored) == 1 and stored[0]["outcome"] == "improved", stored


def _windows(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[float, float, str | None, tuple[float, ...]]]:
    """(tick, window start, what it spans, its requests' starts) of every window the loop
    hands to decide, in seconds from T0."""
    from specguard.controller import _loop
    from specguard.controller._decide import gather

    seen: list[tuple[float, float, str | None, tuple[float, ...]]] = []
    real = _loop.decide  # type: ignore[attr-defined]

    def spy(obs: Any) -> Any:
        if obs.window is not None:
            starts = tuple(s.started_at - T0 for s in obs.window.samples)
            seen.append((obs.now - T0, obs.window.start - T0, gather(obs).spans, starts))
        return real(obs)

    monkeypatch.setattr(_loop, "decide", spy)
    return seen


async def test_a_change_in_the_pods_inside_a_window_restarts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shadow pod turns ready 4 s into a 10 s window: the window opens again at that
    tick (counters read afresh), and the verdict comes one window after the change (at 14 s,
    not at the spoiled window's end plus a whole window, 20 s), judged on the requests that
    started after the change, and counts."""
    seen = _windows(monkeypatch)
    before = _sample(T0 + 2)  # started before the change: left out with its pair
    after = tuple(_sample(T0 + s) for s in (5, 6, 7))
    loop = Loop(WindowSamples("router", T0, T0 + 99, "ok", samples=(before, *after)))
    shadow_down = [*PODS[:2], vllm("baseline", "10.0.0.3") | {"status": {"phase": "Running"}}]
    for second in range(21):
        await loop.tick(T0 + second, cluster(loop.kube, shadow_down if second < 4 else PODS))
    change = "a change in the pods (baseline ready 0→1)"
    assert seen[0] == (14.0, 4.0, None, (5.0, 6.0, 7.0)), seen
    assert loop.sources[0].collected[0] == (T0 + 4, T0 + 14)
    vllm_urls = {"speculative": ("http://10.0.0.1:8000", "http://10.0.0.2:8000"),
                 "baseline": ("http://10.0.0.3:8000",)}  # fmt: skip
    # Read at the first window's start, at its look at 3 s (the shadow not ready yet), again
    # at the change (the new pod in) and at its end.
    shadowless = {**vllm_urls, "baseline": ()}
    assert loop.counters[1:4] == [shadowless, vllm_urls, vllm_urls]
    assert f"1 requests that started before {change} ended are left out" in str(
        loop.kube.status["lastVerdict"]
    )


async def test_pods_that_keep_changing_still_let_windows_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Restarts postpone a window's end by less than one window: pods that change every
    4 s restart the window at 4 s and 8 s, not at 12 s; that window ends at 18 s, judged
    and not counted (its errors still reach the guardrail), and so on."""
    seen = _windows(monkeypatch)
    loop = Loop(WindowSamples("router", T0, T0 + 99, "ok", samples=(_sample(T0 + 1),)))
    shadow_down = [*PODS[:2], vllm("baseline", "10.0.0.3") | {"status": {"phase": "Running"}}]
    for second in range(19):
        pods = shadow_down if (second // 4) % 2 else PODS  # a change at 4, 8, 12, 16 s
        await loop.tick(T0 + second, cluster(loop.kube, pods))
    assert [(now, start, spans) for now, start, spans, _ in seen] == [
        (18.0, 8.0, "a change in the pods (baseline ready 0→1)")
    ], seen
