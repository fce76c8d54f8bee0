"""Helpers for the operator's cluster tests: the operator as a subprocess (the entrypoint the
chart runs), the resource, waits, a pod-count sampler and a load generator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import httpx

from specguard_testkit._cluster import LocalCluster
from specguard_testkit._ports import free_port

CRD = Path(__file__).resolve().parents[2] / "crds" / "specguard.io_speculativedeployments.yaml"
CRD_NAME = "speculativedeployments.specguard.io"
DRAFTER = "RedHatAI/DeepSeek-V4-speculator.dspark"
SD_PATH = "/apis/specguard.io/v1alpha1/namespaces/{ns}/speculativedeployments"
T = TypeVar("T")


def install_crd(cluster: LocalCluster) -> None:
    """The committed CRD (this branch's status fields), established."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + CRD_NAME

    def established() -> bool:
        conditions = (api(cluster, "GET", path).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for("the CRD established", established, 120)


def api(
    cluster: LocalCluster,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/merge-patch+json",
    ok: bool = True,
) -> Any:
    with cluster.access.client(timeout=30.0) as client:
        headers = {"Content-Type": content_type} if body is not None else {}
        response = client.request(
            method, path, content=None if body is None else json.dumps(body), headers=headers
        )
        if ok:
            assert response.status_code < 400, f"{method} {path}: {response.text[:1000]}"
        return response.json() if response.content else None


def sd_body(name: str, ns: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4", "servedModelName": "dsv4"},
            "replicas": 2,
            "drafter": {"method": "dspark", "model": DRAFTER, "numSpeculativeTokens": 32},
            "shadow": {"replicas": 1},
            "evaluation": {
                "window": "10s",
                "minRequestsPerArm": 30,
                "minOutputTokens": 16,
                "consecutiveWindows": 2,
            },
            "rollback": {"cooldown": "20s", "startupDeadline": "1m"},
        },
    }
    body["spec"].update(spec)
    return body


def create_sd(cluster: LocalCluster, body: dict[str, Any]) -> dict[str, Any]:
    ns = body["metadata"]["namespace"]
    result: dict[str, Any] = api(
        cluster, "POST", SD_PATH.format(ns=ns), body, content_type="application/json"
    )
    return result


def get_sd(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api(cluster, "GET", f"{SD_PATH.format(ns=ns)}/{name}")
    return result


def patch_sd(cluster: LocalCluster, ns: str, name: str, patch: dict[str, Any]) -> None:
    api(cluster, "PATCH", f"{SD_PATH.format(ns=ns)}/{name}", patch)


def condition(sd: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in (sd.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (httpx.HTTPError, AssertionError) as exc:
            last = exc
        if last:
            return last  # type: ignore[no-any-return]
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def sd_until(
    cluster: LocalCluster,
    ns: str,
    name: str,
    what: str,
    pred: Callable[[dict[str, Any]], Any],
    *,
    timeout: float,
) -> dict[str, Any]:
    """The resource once ``pred`` holds for it."""

    seen: list[dict[str, Any]] = []

    def probe() -> dict[str, Any] | None:
        sd = get_sd(cluster, ns, name)
        seen[:] = [sd]
        return sd if pred(sd) else None

    try:
        return wait_for(what, probe, timeout)
    except AssertionError as exc:
        status = json.dumps((seen[0].get("status") if seen else None), indent=1)[:4000]
        raise AssertionError(f"{exc}; status: {status}") from None


def pods(cluster: LocalCluster, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api(
        cluster, "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}"
    )["items"]
    return items


def ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def metrics(self) -> dict[str, float]:
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def counter(self, prefix: str) -> float:
        return sum(v for k, v in self.metrics().items() if k.startswith(prefix))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def start_operator(cluster: LocalCluster, ns: str, log_dir: Path, *extra: str) -> Operator:
    port = free_port()
    log = log_dir / f"operator-{port}.log"
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1"}
    args = [
        sys.executable,
        "-m",
        "specguard",
        "run",
        "--namespace",
        ns,
        "--metrics-port",
        str(port),
        "--tick",
        "0.5",
        *extra,
    ]
    if "--peering" not in extra:
        args.append("--standalone")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    op = Operator(proc, log, port)
    wait_for("operator metrics", lambda: _answers(op), 60)
    return op


def _answers(op: Operator) -> bool:
    if op.proc.poll() is not None:
        raise AssertionError(f"operator exited: {op.log.read_text()[-3000:]}")
    try:
        op.metrics()
    except httpx.HTTPError:
        return False
    return True


@contextlib.contextmanager
def operator(cluster: LocalCluster, ns: str, log_dir: Path, *extra: str) -> Iterator[Operator]:
    op = start_operator(cluster, ns, log_dir, *extra)
    try:
        yield op
    finally:
        try:
            delete_all(cluster, ns)
        finally:
            op.stop()


def delete_all(cluster: LocalCluster, ns: str) -> None:
    """Delete the namespace's resources (while an operator still runs: its loops stop)."""
    path = SD_PATH.format(ns=ns)
    for item in api(cluster, "GET", path)["items"]:
        api(cluster, "DELETE", f"{path}/{item['metadata']['name']}", ok=False)
    wait_for("resources deleted", lambda: not api(cluster, "GET", path)["items"], 60)


@dataclass
class Moment:
    t: float
    spec_pods: int
    base_pods: int
    serving_ready: int
    mode: str
    swapping: bool
    target: str = ""
    share: float | None = None
    # status.arms.{serving,shadow}.readyReplicas, written with the share
    arms_ready: tuple[int, int] | None = None
    verdict: dict[str, Any] = field(default_factory=dict)  # status.lastVerdict
    conditions: dict[str, str] = field(default_factory=dict)  # type → status


@dataclass
class PodSampler:
    """Samples the vLLM pods and the serving arm every 0.25 s in a thread."""

    cluster: LocalCluster
    ns: str
    name: str
    moments: list[Moment] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PodSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                self.moments.append(self.sample())
            self._stop.wait(0.25)

    def sample(self) -> Moment:
        status = get_sd(self.cluster, self.ns, self.name).get("status") or {}
        mode = status.get("mode", "speculative")
        swapping = bool((status.get("arms") or {}).get("swapping"))
        items = pods(self.cluster, self.ns, f"specguard.io/deployment={self.name}")
        by_arm = {"speculative": [], "baseline": []}  # type: dict[str, list[dict[str, Any]]]
        for pod in items:
            by_arm[pod["metadata"]["labels"]["specguard.io/arm"]].append(pod)
        arms = ("speculative", "baseline") if swapping else (mode,)
        serving = sum(ready(p) for arm in arms for p in by_arm[arm])
        arms_status = status.get("arms") or {}
        return Moment(
            time.time(),
            len(by_arm["speculative"]),
            len(by_arm["baseline"]),
            serving,
            mode,
            swapping,
            target=status.get("targetMode", mode),
            share=arms_status.get("mirrorShare"),
            arms_ready=(
                int((arms_status.get("serving") or {}).get("readyReplicas") or 0),
                int((arms_status.get("shadow") or {}).get("readyReplicas") or 0),
            )
            if arms_status
            else None,
            verdict=dict(status.get("lastVerdict") or {}),
            conditions={
                c.get("type", ""): c.get("status", "") for c in status.get("conditions") or []
            },
        )

    def windows(self) -> list[tuple[float, dict[str, Any], float | None]]:
        """Each judged window once, in order: (when it was seen, lastVerdict, the mirror
        share then)."""
        out: list[tuple[float, dict[str, Any], float | None]] = []
        for m in self.moments:
            end = m.verdict.get("windowEnd")
            if end and (not out or out[-1][1].get("windowEnd") != end):
                out.append((m.t, m.verdict, m.share))
        return out

    def first(self, pred: Callable[[Moment], bool], after: float = 0.0) -> float | None:
        return next((m.t for m in self.moments if m.t >= after and pred(m)), None)

    def trace(self) -> list[tuple[int, int, int, str]]:
        """The distinct (spec pods, base pods, ready serving, mode) states in order."""
        out: list[tuple[int, int, int, str]] = []
        for m in self.moments:
            row = (m.spec_pods, m.base_pods, m.serving_ready, m.mode)
            if not out or out[-1] != row:
                out.append(row)
        return out


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@dataclass
class Load:
    """Closed-loop streaming clients against the router pods; change ``concurrency``,
    ``domain`` and ``temperatures`` while it runs (``mixed``: every other client math, the
    others tool calls). ``temperatures``: client ``i`` samples at ``temperatures[i % len]``
    (empty: the server's default)."""

    urls: list[str]
    concurrency: int = 4
    domain: str = "math"
    max_tokens: int = 48
    model: str = "dsv4"
    temperatures: tuple[float, ...] = ()
    completed: int = 0
    errors: int = 0
    error_times: list[float] = field(default_factory=list)
    error_kinds: dict[str, int] = field(default_factory=dict)  # "HTTP 503", "ClientPayloadError"
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Load:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    async def _main(self) -> None:
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            workers = [asyncio.create_task(self._worker(session, i)) for i in range(256)]
            while not self._stop.is_set():
                await asyncio.sleep(0.2)
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self, session: aiohttp.ClientSession, index: int) -> None:
        while True:
            if index >= self.concurrency:
                await asyncio.sleep(0.2)
                continue
            domain = self.domain
            if domain == "mixed":
                domain = ("math", "tool_call")[index % 2]
            body: dict[str, Any] = {
                "model": self.model,
                "stream": True,
                "max_tokens": self.max_tokens,
                "messages": [
                    {
                        "role": "user",
                        "content": "Solve 12 + 30 = ?"
                        if domain == "math"
                        else "What is the weather in Paris?",
                    }
                ],
            }
            if domain == "tool_call":
                body["tools"] = TOOLS
            if self.temperatures:
                temperature = self.temperatures[index % len(self.temperatures)]
                body |= {"temperature": temperature, "ignore_eos": True}
            url = self.urls[index % len(self.urls)] + "/v1/chat/completions"
            try:
                async with session.post(
                    url, json=body, headers={"X-Specguard-Domain": domain}
                ) as resp:
                    if resp.status == 200:
                        async for _ in resp.content:
                            pass
                        self.completed += 1
                    else:
                        # the router's own error message (never the request's text)
                        message = (await resp.text())[:160] if resp.status >= 500 else ""
                        self._error(f"HTTP {resp.status} {message}".strip())
                        await asyncio.sleep(0.2)
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._error(type(exc).__name__)
                await asyncio.sleep(0.2)

    def _error(self, kind: str) -> None:
        self.errors += 1
        self.error_times.append(time.time())
        self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1


def router_urls(cluster: LocalCluster, ns: str, name: str) -> list[str]:
    items = pods(cluster, ns, f"specguard.io/router={name}")
    return [f"http://{p['status']['podIP']}:8080" for p in items if ready(p)]


def events(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api(
        cluster,
        "GET",
        f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name={name}",
    )["items"]
    return items
