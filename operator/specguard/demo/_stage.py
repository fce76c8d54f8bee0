"""The demo's cluster: control-plane binaries (built on first use), the local control plane
with fake GPU nodes and the process kubelet, specguard installed with its Helm chart and the
real helm binary, and the example SpeculativeDeployment applied with kubectl.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from specguard import __version__
from specguard._objects import arm_of, pod_ready, pod_url, ready_router_urls
from specguard.api import constants as c
from specguard_testkit import (
    ImageRunner,
    KubeletConfig,
    Launch,
    LocalCluster,
    MissingBinariesError,
    build_script,
    cache_bin_dir,
    find_binaries,
    find_tool,
    free_port,
    install_tools_script,
    kubectl_binary,
    proc_stat,
)

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "specguard"
MANIFEST = Path(__file__).with_name("speculativedeployment.yaml")
RELEASE = "specguard"
SYSTEM_NAMESPACE = "specguard-system"  # the operator: Pod Security restricted
DEMO_NAMESPACE = "specguard-demo"  # the model's pods: baseline (vLLM runs as root)
SPECGUARD_IMAGE = f"ghcr.io/specguard/specguard:{__version__}"
# The SpeculativeDeployment's vLLM image: the process kubelet runs it as the simulator
# with the DeepSeek-V4-like profile (docs/simulator.md; `specguard demo --profile` picks
# another) at the demo's time scale.
SIM_IMAGE = "specguard.local/vllm-simulator:deepseek-v4"
SIM_PROFILE = "deepseek-v4"
GPU_NODES, GPUS_PER_NODE = 2, 4
# scripts/build-control-plane.sh, measured (docs/local-cluster.md): 1,261 s user + 209 s
# system, and about 900 MB of Go modules downloaded once.
BUILD_CPU_S = 1470.0

Say = Callable[[str], None]


class DemoError(RuntimeError):
    """Something the demo needs is missing: one line saying what."""


# ----------------------------------------------------------------------------- binaries


def _group_cpu_s(pgid: int) -> float:
    """CPU seconds used by a process group: its live members with their reaped children."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is None or stat.pgid != pgid:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def build_estimate(cores: int | None = None) -> str:
    cores = max(1, min(cores or os.cpu_count() or 1, 8))
    return (
        f"{BUILD_CPU_S / 60:.1f} CPU-minutes, about {BUILD_CPU_S / 60 / cores:.0f} minutes "
        f"on {cores} idle cores, longer when they are busy, plus downloading about 900 MB "
        "of Go modules once"
    )


def progress_line(elapsed: float, cpu: float, step: str) -> str:
    """The build's progress: wall time, CPU used of the measured total, time left at the
    pace seen so far (CPU seconds per wall second)."""
    used = min(cpu, BUILD_CPU_S)
    line = (
        f"building the control plane: {_minutes(elapsed)}, {used / 60:.1f} of "
        f"~{BUILD_CPU_S / 60:.1f} CPU-minutes"
    )
    pace = cpu / elapsed if elapsed > 0 else 0.0
    if step == "building" and pace > 0.05 and cpu > 30:
        line += f", ~{_minutes((BUILD_CPU_S - used) / pace)} left at this pace"
    elif step == "resolving":
        line += " (downloading modules)"
    elif step == "waiting":
        line += " (another build is running; waiting for it)"
    return line


def ensure_binaries(say: Say, progress: Say, *, build: bool = True) -> str:
    """The control-plane binaries, built on first use; returns where they come from."""
    try:
        return find_binaries().origin
    except MissingBinariesError as missing:
        if os.environ.get("KUBEBUILDER_ASSETS"):
            raise DemoError(str(missing)) from None
        error = missing
    script = build_script()
    if not build:
        raise DemoError(str(error))
    if not script.is_file():
        raise DemoError(
            "needs the Kubernetes control-plane binaries and cannot build them: "
            f"scripts/build-control-plane.sh is not at {script} (run the demo from a specguard "
            "checkout, or set KUBEBUILDER_ASSETS)"
        )
    if shutil.which("go") is None:
        raise DemoError(
            "needs the go command (Go >= 1.26) to build the Kubernetes control plane once "
            f"(cached in {cache_bin_dir()}), or KUBEBUILDER_ASSETS pointing at setup-envtest "
            "binaries"
        )
    say(f"building Kubernetes and etcd from the Go modules (first use only; {build_estimate()})")
    log = cache_bin_dir().parent / "demo-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", str(script)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        while proc.poll() is None:
            text = log.read_text(errors="replace")
            step = (
                "waiting"
                if "another build is running" in text
                else "building"
                if "build-control-plane: building" in text
                else "resolving"
            )
            progress(progress_line(time.monotonic() - began, _group_cpu_s(proc.pid), step))
            time.sleep(2.0)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if "error:" in ln]
        why = lines[-1].split("error:", 1)[1].strip() if lines else f"exit {proc.returncode}"
        raise DemoError(f"cannot build the control plane: {why} (log: {log})")
    say(
        f"control plane built in {_minutes(time.monotonic() - began)} (cached in {cache_bin_dir()})"
    )
    return find_binaries().origin


def check_tools() -> str:
    """helm (``find_tool``: the project's .venv/bin, then PATH) and the chart; returns helm.
    kubectl is the one built with the control plane (``ensure_binaries``), checked here only
    when KUBEBUILDER_ASSETS stands in for that build."""
    helm = find_tool("helm")
    if helm is None:
        raise DemoError(
            f"needs helm (looked in {Path(sys.executable).parent} and PATH): run "
            f"`bash {install_tools_script()}`"
        )
    if os.environ.get("KUBEBUILDER_ASSETS"):
        try:
            kubectl_binary()
        except MissingBinariesError as missing:
            raise DemoError(str(missing)) from None
    if not (CHART / "Chart.yaml").is_file():
        raise DemoError(f"needs the specguard Helm chart at {CHART} (run the demo from a checkout)")
    return str(helm)


# ----------------------------------------------------------------------------- manifest


def manifest(*, window_s: int, cooldown_s: int, consecutive: int) -> dict[str, Any]:
    """The example SpeculativeDeployment with the demo's evaluation settings."""
    body: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    body["metadata"]["namespace"] = DEMO_NAMESPACE
    body["spec"]["runtime"]["image"] = SIM_IMAGE
    body["spec"]["evaluation"]["window"] = f"{window_s}s"
    body["spec"]["evaluation"]["consecutiveWindows"] = consecutive
    body["spec"]["rollback"]["cooldown"] = f"{cooldown_s}s"
    return body


def sim_runner(time_scale: float, profile: str = SIM_PROFILE) -> ImageRunner:
    """The kubelet's mapping of SIM_IMAGE: `vllm serve`'s args to the simulator."""

    def run(launch: Launch) -> list[str]:
        return [
            sys.executable,
            "-m",
            "specguard",
            "sim",
            *launch.args,
            "--profile",
            profile,
            "--time-scale",
            f"{time_scale:g}",
            "--host",
            launch.pod_ip,
        ]

    return run


# ----------------------------------------------------------------------------- the stage


class Stage:
    """The running demo cluster. ``stop()`` tears it all down (idempotent)."""

    def __init__(self, *, time_scale: float, say: Say, profile: str = SIM_PROFILE) -> None:
        self.time_scale = time_scale
        self.profile = profile
        self.say = say
        self.cluster = LocalCluster()
        self.sd: dict[str, Any] = {}
        self.name = ""
        self.helm = "helm"

    # -- start -------------------------------------------------------------------------

    def start_cluster(self) -> None:
        self.cluster.start()
        self.cluster.add_gpu_nodes(GPU_NODES, gpus=GPUS_PER_NODE)
        self.cluster.start_kubelet(
            KubeletConfig(images={SIM_IMAGE: sim_runner(self.time_scale, self.profile)})
        )

    def install_chart(self, helm: str) -> str:
        """`helm install` into a restricted namespace; returns the operator pod's name."""
        self.helm = helm
        for namespace, level in ((SYSTEM_NAMESPACE, "restricted"), (DEMO_NAMESPACE, "baseline")):
            self.kubectl("create", "namespace", namespace)
            self.kubectl(
                "label", "namespace", namespace, f"pod-security.kubernetes.io/enforce={level}"
            )
        repository, _, tag = SPECGUARD_IMAGE.rpartition(":")
        # On this machine every pod shares the host's network: the operator's metrics port
        # must be one nobody else listens on (a real pod has its own address).
        done = subprocess.run(
            [
                helm,
                f"--kubeconfig={self.cluster.kubeconfig}",
                "install",
                RELEASE,
                str(CHART),
                "-n",
                SYSTEM_NAMESPACE,
                "--wait",
                "--timeout",
                "240s",
                "--set",
                f"image.repository={repository}",
                "--set",
                f"image.tag={tag}",
                "--set",
                f"operator.metricsPort={free_port()}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise DemoError(f"helm install failed: {(done.stderr or done.stdout).strip()[-500:]}")
        pods = self.get(f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/pods")["items"]
        names = [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "operator"
        ]
        return names[0] if names else "?"

    def apply(self, body: dict[str, Any]) -> None:
        self.sd = body
        self.name = body["metadata"]["name"]
        self.kubectl(
            "apply",
            "--server-side",
            "--field-manager=specguard-demo",
            "-f",
            "-",
            stdin=yaml.safe_dump(body, sort_keys=False),
        )

    def wait_serving(self, timeout: float = 240.0) -> dict[str, Any]:
        """The resource once its drafter arm serves with every pod ready and routers answer."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, DemoError):
                last = self.resource()
                status = last.get("status") or {}
                ready = any(
                    x.get("type") == "Ready" and x.get("status") == "True"
                    for x in status.get("conditions") or []
                )
                routers = self.get(
                    f"/apis/apps/v1/namespaces/{DEMO_NAMESPACE}/deployments/"
                    f"{c.router_name(self.name)}"
                )["spec"]["replicas"]
                if (
                    status.get("mode") == c.ARM_SPECULATIVE
                    and ready
                    and len(self.router_urls()) == routers
                ):
                    return last
            time.sleep(1.0)
        raise DemoError(
            f"{self.name} did not become Ready in {timeout:.0f}s "
            f"(status: {str(last.get('status'))[:300]})"
        )

    # -- reading -----------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        try:
            done = self.cluster.kubectl(*args, input=stdin, check=False)
        except subprocess.TimeoutExpired:
            raise DemoError(f"kubectl {' '.join(args[:3])} timed out") from None
        if done.returncode != 0:
            raise DemoError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()[-400:]}")
        return done.stdout

    def get(self, path: str) -> dict[str, Any]:
        with self.cluster.access.client(timeout=10) as client:
            response = client.get(path)
        if response.status_code >= 400:
            raise DemoError(f"GET {path}: {response.status_code} {response.text[:200]}")
        result: dict[str, Any] = response.json()
        return result

    def resource_path(self) -> str:
        return f"/apis/{c.API_VERSION}/namespaces/{DEMO_NAMESPACE}/{c.PLURAL}/{self.name}"

    def resource(self) -> dict[str, Any]:
        return self.get(self.resource_path())

    def pods(self) -> list[Mapping[str, Any]]:
        items: list[Mapping[str, Any]] = self.get(f"/api/v1/namespaces/{DEMO_NAMESPACE}/pods")[
            "items"
        ]
        return items

    def router_urls(self) -> list[str]:
        """The routers that take client traffic."""
        return ready_router_urls(self.name, self.pods())

    # -- stop --------------------------------------------------------------------------

    def stop(self) -> None:
        self.cluster.stop()


def vllm_pods(
    name: str, pods: Iterable[Mapping[str, Any]], port: int
) -> list[tuple[str, str, str]]:
    """(pod, arm, base URL) of the resource's ready vLLM pods."""
    out: list[tuple[str, str, str]] = []
    for pod in pods:
        arm, url = arm_of(pod, name), pod_url(pod, port)
        if arm is not None and url is not None and pod_ready(pod):
            out.append((str(pod["metadata"]["name"]), arm, url))
    return out


__all__ = [
    "CHART",
    "DEMO_NAMESPACE",
    "SIM_IMAGE",
    "SYSTEM_NAMESPACE",
    "DemoError",
    "Stage",
    "build_estimate",
    "check_tools",
    "ensure_binaries",
    "manifest",
    "progress_line",
    "vllm_pods",
]
