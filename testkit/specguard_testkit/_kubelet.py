"""A kubelet that runs pods as local processes.

It watches the pods bound to its nodes and, for each one, gives the pod a loopback
address, resolves each container's image to a local command (specguard_testkit._images),
its environment and service-account kubeconfig (specguard_testkit._podenv), starts it in
its own process group, runs its probes (specguard_testkit._probes) and reports the pod's
status. Exits are restarted per ``restartPolicy`` with an exponential back-off
(CrashLoopBackOff); a deleted pod gets SIGTERM, its grace period, then SIGKILL, and is
then removed from the API (deletion finalized with grace 0), as a kubelet does.

All of it runs on one asyncio loop in a background thread; ``ProcessKubelet`` is the
thread-safe face the tests use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from specguard.sim import signal_group
from specguard_testkit._access import ClusterAccess, raise_for_status
from specguard_testkit._images import (
    ImageRunner,
    Launch,
    UnknownImageError,
    is_vllm_image,
    resolve_argv,
)
from specguard_testkit._loopback import LoopbackPool
from specguard_testkit._nodes import heartbeat_patch, now_rfc3339
from specguard_testkit._podenv import (
    ContainerConfigError,
    container_env,
    expand,
    service_account_token,
)
from specguard_testkit._probes import Probe, parse_probe, probe_once
from specguard_testkit._procs import ProcessGroups
from specguard_testkit._realvllm import RealVllm, pod_argv

log = logging.getLogger(__name__)

HOST_IP = "127.0.0.1"
STRATEGIC_MERGE = {"Content-Type": "application/strategic-merge-patch+json"}
MERGE = {"Content-Type": "application/merge-patch+json"}


@dataclass
class KubeletConfig:
    """How the kubelet maps and paces things; defaults suit tests."""

    # Appended to the simulator's command line for vLLM images (e.g. --profile, --time-scale).
    sim_args: tuple[str, ...] = ()
    # More simulator args for the pods carrying a label, as {"key=value": (args...)}; e.g.
    # {"specguard.io/arm=speculative": ("--fault-drop-drafter",)} for the drafter pods only.
    sim_args_by_label: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # image or repository -> argv builder, consulted before the built-in mappings.
    images: dict[str, ImageRunner] = field(default_factory=dict)
    # Real vLLM for vLLM images instead of the simulator (specguard_testkit.find_real_vllm()):
    # the container's `vllm serve MODEL ARGS` runs as it is with the CPU build's environment
    # and flags; MODEL must be a local folder (the tiny models). sim_args do not apply.
    real_vllm: RealVllm | None = None
    # '127.0.X' for pod addresses; None picks a /24 where nothing listens.
    pod_subnet: str | None = None
    # Restart back-off: a real kubelet uses 10 s doubling to 5 min; tests want seconds.
    backoff_initial: float = 1.0
    backoff_max: float = 20.0
    backoff_reset_after: float = 60.0
    # Probe periods above this are shortened, keeping period x failureThreshold.
    max_probe_period: float | None = 1.0
    heartbeat_interval: float = 10.0
    # Grace for pods when the kubelet itself stops (teardown), instead of each pod's own.
    shutdown_grace: float = 5.0
    python: str = sys.executable


def _inherited_env() -> dict[str, str]:
    """This process's environment minus anything that would point a pod elsewhere."""
    return {
        k: v
        for k, v in os.environ.items()
        if k != "KUBECONFIG" and not k.startswith("KUBERNETES_")
    }


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode  # -15 -> 143 like a shell


class ContainerRunner:
    """One container of a pod: its process, restarts, probes and status."""

    def __init__(self, pod: PodRunner, spec: dict[str, Any], *, init: bool) -> None:
        self.pod = pod
        self.spec = spec
        self.name: str = spec["name"]
        self.init = init
        self.state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: dict[str, Any] = {}
        self.restart_count = 0
        self.ready = False
        self.started = False
        self.finished = False  # will not run again
        self.exit_code: int | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.ports: dict[str, int] = {
            p["name"]: int(p["containerPort"]) for p in spec.get("ports") or [] if p.get("name")
        }
        self._env: dict[str, str] = {}

    def _set(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self, key, value)
        self.pod.mark_dirty()

    # ------------------------------------------------------------ run

    async def run(self) -> int | None:
        """Run until the container will not be restarted (or the pod stops)."""
        backoff = self.pod.config.backoff_initial
        while not self.pod.stopping:
            try:
                argv, env = await self._prepare()
            except ContainerConfigError as exc:
                self._set(state={"waiting": {"reason": "CreateContainerConfigError",
                                             "message": str(exc)}})  # fmt: skip
                await self.pod.sleep(1.0)
                continue
            except UnknownImageError as exc:
                self._set(state={"waiting": {"reason": "ErrImagePull", "message": str(exc)}})
                await self.pod.sleep(5.0)
                continue
            except httpx.HTTPError as exc:  # the apiserver hiccuped: try again shortly
                self._set(state={"waiting": {"reason": "ContainerCreating",
                                             "message": str(exc)}})  # fmt: skip
                await self.pod.sleep(1.0)
                continue
            if self.pod.stopping:
                break
            began = time.monotonic()
            returncode, started_at = await self._run_once(argv, env)
            terminated = {
                "exitCode": returncode,
                "reason": "Completed" if returncode == 0 else "Error",
                "startedAt": started_at,
                "finishedAt": now_rfc3339(),
            }
            self.exit_code = returncode
            if self.pod.stopping or not self._should_restart(returncode):
                self._set(state={"terminated": terminated}, ready=False, finished=True)
                return returncode
            if time.monotonic() - began > self.pod.config.backoff_reset_after:
                backoff = self.pod.config.backoff_initial
            message = f"back-off {backoff:g}s restarting failed container={self.name}"
            self._set(
                last_state={"terminated": terminated},
                state={"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                ready=False,
                started=False,
            )
            await self.pod.sleep(backoff)
            backoff = min(backoff * 2, self.pod.config.backoff_max)
            if not self.pod.stopping:
                self.restart_count += 1
        self._set(finished=True)
        return self.exit_code

    def _should_restart(self, returncode: int) -> bool:
        policy = self.pod.restart_policy
        if self.init:
            return returncode != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and returncode != 0)

    async def _prepare(self) -> tuple[list[str], dict[str, str]]:
        pod = self.pod
        initial = {
            "POD_IP": pod.ip,
            "POD_NAME": pod.name,
            "POD_NAMESPACE": pod.namespace,
            "NODE_NAME": pod.node,
        }
        # The downward API must see this pod's address before its status says so.
        status = {**(pod.pod.get("status") or {}), "podIP": pod.ip, "hostIP": HOST_IP}
        view = {**pod.pod, "status": status}
        env = await container_env(pod.client, view, self.spec, initial)
        token = await service_account_token(pod.client, pod.pod, self.spec)
        process_env = {**_inherited_env(), "PYTHONUNBUFFERED": "1", **env}
        if token is not None:
            kubeconfig = pod.kubelet.access.with_token(token).write_kubeconfig(
                pod.directory / f"{self.name}.kubeconfig", user=f"pod-{pod.name}"
            )
            process_env["KUBECONFIG"] = str(kubeconfig)
        launch = Launch(
            image=self.spec.get("image", ""),
            command=tuple(expand(c, env) for c in self.spec.get("command") or []),
            args=tuple(expand(a, env) for a in self.spec.get("args") or []),
            pod_ip=pod.ip,
        )
        config = pod.config
        labels = pod.pod["metadata"].get("labels") or {}
        sim_args = list(config.sim_args)
        for selector, extra in config.sim_args_by_label.items():
            key, _, value = selector.partition("=")
            if labels.get(key) == value:
                sim_args.extend(extra)
        if config.real_vllm is not None and is_vllm_image(launch.image):
            argv = pod_argv(config.real_vllm, launch)
        else:
            argv = resolve_argv(launch, sim_args=sim_args, images=config.images,
                                python=config.python)  # fmt: skip
        self._env = process_env
        return argv, process_env

    def log_path(self, run: int | None = None) -> Path:
        return self.pod.directory / f"{self.name}-{self.restart_count if run is None else run}.log"

    async def _run_once(self, argv: list[str], env: dict[str, str]) -> tuple[int, str]:
        pod = self.pod
        log_path = self.log_path()
        started_at = now_rfc3339()
        try:
            with log_path.open("ab") as out:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    cwd=pod.directory,
                    start_new_session=True,
                )
        except OSError as exc:
            log_path.write_text(f"cannot start {argv[0]}: {exc}\n")
            return 128, started_at
        self.process = process
        pod.kubelet.processes.register(process.pid, f"pod {pod.namespace}/{pod.name}/{self.name}")
        if pod.stopping:  # asked to stop while the process was being created
            await self.terminate(pod.grace_period())
        has_startup = bool(self.spec.get("startupProbe"))
        self._set(state={"running": {"startedAt": started_at}}, started=not has_startup)
        probes = asyncio.create_task(self._probe(process))
        try:
            returncode = await process.wait()
        finally:
            probes.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probes
            # Like a container's cgroup: whatever the process forked dies with it.
            signal_group(process.pid, signal.SIGKILL)
            pod.kubelet.processes.unregister(process.pid)
            self.process = None
        return _exit_code(returncode), started_at

    async def terminate(self, grace: float) -> None:
        """SIGTERM the process group, wait up to ``grace`` seconds, SIGKILL."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        signal_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), timeout=grace)
        except TimeoutError:
            signal_group(process.pid, signal.SIGKILL)

    # ------------------------------------------------------------ probes

    def _parse(self, key: str) -> Probe | None:
        return parse_probe(self.spec.get(key), self.pod.config.max_probe_period)

    async def _check(self, probe: Probe) -> bool:
        return await probe_once(probe, self.pod.ip, self.ports, self._env)

    async def _probe(self, process: asyncio.subprocess.Process) -> None:
        """Startup probe first; readiness and liveness only once it has succeeded."""
        startup = self._parse("startupProbe")
        if startup is not None:
            await asyncio.sleep(startup.initial_delay)
            failures = 0
            while not await self._check(startup):
                failures += 1
                if failures >= startup.failure_threshold:
                    log.info("%s/%s: startup probe failed", self.pod.name, self.name)
                    await self.terminate(self.pod.grace_period())
                    return
                await asyncio.sleep(startup.period)
            self._set(started=True)
        readiness = self._parse("readinessProbe")
        liveness = self._parse("livenessProbe")
        if readiness is None:
            self._set(ready=True)
        loops = [self._readiness(readiness)] if readiness else []
        if liveness is not None:
            loops.append(self._liveness(liveness))
        if loops:
            await asyncio.gather(*loops)

    async def _readiness(self, probe: Probe) -> None:
        await asyncio.sleep(probe.initial_delay)
        successes = failures = 0
        while True:
            if await self._check(probe):
                successes, failures = successes + 1, 0
                if not self.ready and successes >= probe.success_threshold:
                    self._set(ready=True)
            else:
                successes, failures = 0, failures + 1
                if self.ready and failures >= probe.failure_threshold:
                    self._set(ready=False)
            await asyncio.sleep(probe.period)

    async def _liveness(self, probe: Probe) -> None:
        await asyncio.sleep(probe.initial_delay)
        failures = 0
        while True:
            failures = 0 if await self._check(probe) else failures + 1
            if failures >= probe.failure_threshold:
                log.info("%s/%s: liveness probe failed", self.pod.name, self.name)
                await self.terminate(self.pod.grace_period())
                return
            await asyncio.sleep(probe.period)

    # ------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        image = self.spec.get("image", "")
        status: dict[str, Any] = {
            "name": self.name,
            "image": image,
            "imageID": f"specguard-local://{image}",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.process is not None:
            status["containerID"] = f"process://{self.process.pid}"
        return status


class PodRunner:
    """One pod: its address, containers, status reporting and termination."""

    def __init__(self, kubelet: _KubeletLoop, pod: dict[str, Any]) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.node: str = pod["spec"]["nodeName"]
        self.restart_policy: str = pod["spec"].get("restartPolicy", "Always")
        self.config = kubelet.config
        # Everything done for the pod is done as its node (Node authorizer, NodeRestriction).
        self.client = kubelet.client_for(self.node)
        self.ip = ""
        self.directory = kubelet.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.init_containers = [
            ContainerRunner(self, c, init=True) for c in pod["spec"].get("initContainers") or []
        ]
        self.containers = [ContainerRunner(self, c, init=False) for c in pod["spec"]["containers"]]
        self.initialized = not self.init_containers
        self.start_time = now_rfc3339()
        self.stopping = False
        self.gone = False  # the pod object no longer exists
        self.grace_override: float | None = None
        self._stop = asyncio.Event()
        self._dirty = asyncio.Event()
        self._transitions: dict[str, tuple[str, str]] = {}

    # ------------------------------------------------------------ events from the watch

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.request_stop()

    def request_stop(self, *, gone: bool = False, grace: float | None = None) -> None:
        self.gone = self.gone or gone
        if grace is not None:
            self.grace_override = grace
        self.stopping = True
        self._stop.set()
        self._dirty.set()  # wakes the reporter, which then stops reporting

    def mark_dirty(self) -> None:
        self._dirty.set()

    async def sleep(self, seconds: float) -> None:
        """Sleep, waking early when the pod is to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)

    def grace_period(self) -> float:
        if self.grace_override is not None:
            return self.grace_override
        meta, spec = self.pod["metadata"], self.pod["spec"]
        seconds = meta.get("deletionGracePeriodSeconds")
        if seconds is None:
            seconds = spec.get("terminationGracePeriodSeconds", 30)
        return float(seconds)

    # ------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ip = self.kubelet.pool.allocate()
        reporter = asyncio.create_task(self._report())
        try:
            self.mark_dirty()
            if await self._run_init_containers():
                await self._run_phase(self.containers)
            self.mark_dirty()
        finally:
            if not self.stopping:  # ended by itself: report the terminal phase
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._flush(), timeout=5)
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
            self.kubelet.pool.release(self.ip)
            if self.pod["metadata"].get("deletionTimestamp") and not self.gone:
                await self.kubelet.finalize_deletion(self.pod)

    async def _run_phase(self, containers: list[ContainerRunner]) -> list[int | None]:
        """Run ``containers`` until they all end, or until the pod is to stop: then
        SIGTERM them, wait the grace period, SIGKILL."""
        tasks = [asyncio.create_task(c.run()) for c in containers]

        async def all_exited() -> None:
            await asyncio.wait(tasks)  # unlike gather, cancelling this spares them

        async def stop_requested() -> None:
            await self._stop.wait()

        waiters = [asyncio.create_task(all_exited()), asyncio.create_task(stop_requested())]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        if self.stopping:
            grace = self.grace_period()
            await asyncio.gather(*(c.terminate(grace) for c in containers))
        return list(await asyncio.gather(*tasks))

    async def _run_init_containers(self) -> bool:
        for container in self.init_containers:
            (code,) = await self._run_phase([container])
            if code != 0 or self.stopping:
                return False
        self.initialized = True
        self.mark_dirty()
        return True

    # ------------------------------------------------------------ status

    def phase(self) -> str:
        containers = self.containers
        if any(c.exit_code not in (None, 0) and c.finished for c in self.init_containers):
            return "Failed"
        if containers and all(c.finished and c.exit_code is not None for c in containers):
            return "Succeeded" if all(c.exit_code == 0 for c in containers) else "Failed"
        if self.initialized and any(
            "running" in c.state or c.restart_count or c.last_state for c in containers
        ):
            return "Running"
        return "Pending"

    def _condition(self, kind: str, value: bool) -> dict[str, Any]:
        text = "True" if value else "False"
        previous = self._transitions.get(kind)
        if previous is None or previous[0] != text:
            previous = (text, now_rfc3339())
            self._transitions[kind] = previous
        return {"type": kind, "status": text, "lastProbeTime": None,
                "lastTransitionTime": previous[1]}  # fmt: skip

    def status(self) -> dict[str, Any]:
        phase = self.phase()
        ready = phase == "Running" and all(c.ready for c in self.containers)
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": HOST_IP,
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            "conditions": [
                self._condition("Initialized", self.initialized),
                self._condition("Ready", ready),
                self._condition("ContainersReady", ready),
                self._condition("PodScheduled", True),
            ],
            "containerStatuses": [c.status() for c in self.containers],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        return status

    async def _flush(self) -> None:
        response = await self.client.patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
            json={"status": self.status()},
            headers=MERGE,
        )
        if response.status_code == 404:
            self.request_stop(gone=True, grace=0)
        else:
            raise_for_status(response)

    async def _report(self) -> None:
        """Patch the pod's status whenever it changes (bursts coalesced), until it stops."""
        last: dict[str, Any] | None = None
        while True:
            await self._dirty.wait()
            await asyncio.sleep(0.05)
            self._dirty.clear()
            if self.stopping:
                # A deleted pod keeps its last status until it is removed (no terminal
                # phase flash that a controller could read as a failure).
                return
            current = self.status()
            if current == last:
                continue
            try:
                await self._flush()
                last = current
            except httpx.HTTPError as exc:
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)
                await asyncio.sleep(0.5)
                self._dirty.set()


class _KubeletLoop:
    """The asyncio side: the pod watch, node heartbeats, the pod runners."""

    def __init__(
        self,
        *,
        access: ClusterAccess,
        nodes: set[str],
        processes: ProcessGroups,
        workdir: Path,
        config: KubeletConfig,
        client: httpx.AsyncClient,
        node_access: Callable[[str], ClusterAccess] | None = None,
    ) -> None:
        self.access = access
        self.nodes = nodes
        self.processes = processes
        self.workdir = workdir
        self.config = config
        self.client = client  # the pod watch (all nodes at once: a test convenience)
        self._node_access = node_access
        self._node_clients: dict[str, httpx.AsyncClient] = {}
        self.pool = LoopbackPool(config.pod_subnet)
        self.runners: dict[str, PodRunner] = {}
        self.finished: set[str] = set()
        self.synced = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.lock = threading.Lock()  # guards ``runners`` for readers on other threads

    async def run(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.create_task(self._watch_pods()), asyncio.create_task(self._heartbeat())]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        runners = list(self.runners.values())
        for runner in runners:
            # The cluster goes away with us: stop processes, leave the objects alone.
            runner.request_stop(gone=True, grace=self.config.shutdown_grace)
        await asyncio.gather(*(self._task_of(r) for r in runners), return_exceptions=True)

    def client_for(self, node: str) -> httpx.AsyncClient:
        """The client of the kubelet on ``node``: its own node credentials when the cluster
        gives them, else the shared client."""
        if self._node_access is None:
            return self.client
        if node not in self._node_clients:
            self._node_clients[node] = self._node_access(node).async_client(timeout=15)
        return self._node_clients[node]

    async def close_node_clients(self) -> None:
        clients, self._node_clients = list(self._node_clients.values()), {}
        for client in clients:
            await client.aclose()

    def _task_of(self, runner: PodRunner) -> asyncio.Task[None]:
        return self._tasks[runner.uid]

    # ------------------------------------------------------------ pods

    async def _watch_pods(self) -> None:
        while True:
            try:
                version = await self._relist()
                params = {"watch": "1", "resourceVersion": version,
                          "allowWatchBookmarks": "true", "timeoutSeconds": "240"}  # fmt: skip
                timeout = httpx.Timeout(10.0, read=300.0)
                async with self.client.stream(
                    "GET", "/api/v1/pods", params=params, timeout=timeout
                ) as response:
                    response.raise_for_status()
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        kind, obj = event["type"], event["object"]
                        if kind == "ERROR":
                            break  # typically 410 Gone: relist
                        if kind == "DELETED":
                            self._pod_deleted(obj)
                        elif kind in ("ADDED", "MODIFIED"):
                            self._pod_seen(obj)
            except asyncio.CancelledError:
                raise
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                log.debug("pod watch interrupted: %s", exc)
                await asyncio.sleep(0.5)

    async def _relist(self) -> str:
        response = await self.client.get("/api/v1/pods")
        response.raise_for_status()
        body = response.json()
        present = set()
        for pod in body["items"]:
            present.add(pod["metadata"]["uid"])
            self._pod_seen(pod)
        for uid, runner in list(self.runners.items()):
            if uid not in present:
                runner.request_stop(gone=True, grace=2.0)
        self.synced.set()
        version: str = body["metadata"]["resourceVersion"]
        return version

    def _pod_seen(self, pod: dict[str, Any]) -> None:
        if pod["spec"].get("nodeName") not in self.nodes:
            return
        uid = pod["metadata"]["uid"]
        runner = self.runners.get(uid)
        if runner is not None:
            runner.update(pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if uid in self.finished or phase in ("Succeeded", "Failed"):
            if pod["metadata"].get("deletionTimestamp"):
                task = asyncio.create_task(self.finalize_deletion(pod))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return
        runner = PodRunner(self, pod)
        with self.lock:
            self.runners[uid] = runner
        self._tasks[uid] = asyncio.create_task(self._run(runner))
        runner.update(pod)

    def _pod_deleted(self, pod: dict[str, Any]) -> None:
        runner = self.runners.get(pod["metadata"]["uid"])
        if runner is not None:
            runner.request_stop(gone=True, grace=2.0)

    async def _run(self, runner: PodRunner) -> None:
        try:
            await runner.run()
        except Exception:
            log.exception("pod %s/%s: kubelet error", runner.namespace, runner.name)
        finally:
            self.finished.add(runner.uid)
            with self.lock:
                self.runners.pop(runner.uid, None)

    async def finalize_deletion(self, pod: dict[str, Any]) -> None:
        """The kubelet's last word on a deleted pod: remove it now (grace 0)."""
        meta = pod["metadata"]
        client = self.client_for(pod["spec"].get("nodeName") or "")
        with contextlib.suppress(httpx.HTTPError):
            await client.request(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                json={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )

    # ------------------------------------------------------------ nodes

    async def _heartbeat(self) -> None:
        while True:
            for node in sorted(self.nodes):
                with contextlib.suppress(httpx.HTTPError):
                    await self.client_for(node).patch(
                        f"/api/v1/nodes/{node}/status", json=heartbeat_patch(),
                        headers=STRATEGIC_MERGE,
                    )  # fmt: skip
            await asyncio.sleep(self.config.heartbeat_interval)


@dataclass(frozen=True)
class PodProcessInfo:
    namespace: str
    name: str
    ip: str
    node: str
    pids: dict[str, int]  # container -> pid of its current process
    restart_counts: dict[str, int]


class ProcessKubelet:
    """Runs the kubelet loop in a daemon thread; safe to call from test code."""

    def __init__(
        self,
        access: ClusterAccess,
        node_names: Iterable[str],
        processes: ProcessGroups,
        workdir: Path,
        config: KubeletConfig | None = None,
        *,
        node_access: Callable[[str], ClusterAccess] | None = None,
    ) -> None:
        self.access = access
        self._node_access = node_access
        self.nodes: set[str] = set(node_names)
        self.processes = processes
        self.workdir = workdir
        self.config = config or KubeletConfig()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._inner: _KubeletLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> ProcessKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._thread_main, name="process-kubelet",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            raise RuntimeError(f"process kubelet did not start: {self._error!r}")
        return self

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            log.exception("process kubelet crashed")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.access.async_client(timeout=15) as client:
            inner = _KubeletLoop(
                access=self.access,
                nodes=self.nodes,
                processes=self.processes,
                workdir=self.workdir,
                config=self.config,
                client=client,
                node_access=self._node_access,
            )
            self._inner = inner
            runner = asyncio.create_task(inner.run(self._stop))
            waiter = asyncio.create_task(inner.synced.wait())
            await asyncio.wait([runner, waiter], return_when=asyncio.FIRST_COMPLETED)
            self._ready.set()
            try:
                await runner
            finally:
                await inner.close_node_clients()

    def stop(self) -> None:
        """Stop every pod process (SIGTERM, shutdown_grace, SIGKILL), then the loop."""
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is None or stop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=self.config.shutdown_grace + 15)
        self._loop = None

    def add_nodes(self, names: Iterable[str]) -> None:
        self.nodes.update(names)  # the loop shares this set; adding is atomic under the GIL

    # ------------------------------------------------------------ introspection

    def _runners(self) -> list[PodRunner]:
        inner = self._inner
        if inner is None:
            return []
        with inner.lock:
            return list(inner.runners.values())

    def _find(self, namespace: str, pod: str) -> PodRunner | None:
        for runner in self._runners():
            if runner.namespace == namespace and runner.name == pod:
                return runner
        return None

    def pods(self) -> list[PodProcessInfo]:
        """The pods this kubelet currently runs and the pids of their containers."""
        infos = []
        for runner in self._runners():
            pids = {}
            for container in runner.containers:
                process = container.process
                if process is not None:
                    pids[container.name] = process.pid
            infos.append(PodProcessInfo(
                runner.namespace, runner.name, runner.ip, runner.node, pids,
                {c.name: c.restart_count for c in runner.containers},
            ))  # fmt: skip
        return infos

    def logs(
        self, namespace: str, pod: str, container: str | None = None, *, previous: bool = False
    ) -> str:
        """Output of a pod's container: its current run, or the one before (``previous``).
        Works for pods that ended too (the newest pod of that name)."""
        runner = self._find(namespace, pod)
        if runner is not None:
            directory = runner.directory
        else:
            candidates = sorted(
                (self.workdir / "pods").glob(f"{namespace}_{pod}_*"),
                key=lambda p: p.stat().st_mtime,
            )
            if not candidates:
                raise LookupError(f"no pod {namespace}/{pod} ran on this kubelet")
            directory = candidates[-1]
        files = sorted(directory.glob("*.log"))
        if container is None and runner is not None:
            container = runner.containers[0].name
        if container is None:
            # An ended pod: its spec is gone, so which container came first is unknown.
            names = sorted({f.stem.rsplit("-", 1)[0] for f in files})
            if len(names) > 1:
                raise LookupError(f"pod {namespace}/{pod} ran {', '.join(names)}: name one")
        else:
            files = [f for f in files if f.stem.rsplit("-", 1)[0] == container]
        runs = sorted(files, key=lambda f: int(f.stem.rsplit("-", 1)[1]))
        index = -2 if previous else -1
        if len(runs) < (2 if previous else 1):
            return ""
        return runs[index].read_text(errors="replace")
