"""Where the end-to-end scenarios run: the local control plane with real nodes (the
default, and what CI runs), the same control plane with the process kubelet, or kind.

Each gives the scenarios the same things: a kubeconfig for the real kubectl and helm, the
image reference the chart installs, a SpeculativeDeployment runtime image that stands in
for vLLM (the simulator), a way to fault the drafter arm, and an address where the test
process reaches a router pod.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specguard import __version__
from specguard.api import constants as c
from specguard_testkit import find_tool, kubectl_binary

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "specguard"
SPECGUARD_IMAGE = f"ghcr.io/specguard/specguard:{__version__}"
# The drafter arm of a SpeculativeDeployment on this image fails this share of requests
# (the simulator's --error-rate): a drafter that breaks under real traffic, the fault the
# operator's error-rate guardrail rolls back from. The baseline arm is never faulted.
FAULTY_VLLM_IMAGE = "specguard.local/vllm-sim-faulty-drafter:e2e"
DRAFTER_ERROR_RATE = "0.6"
SIM_ARGS = ("--time-scale", "0.05", "--startup-delay", "0")
ROUTER_PORT = c.ROUTER_PORT


def run(argv: list[str], *, stdin: str | None = None, timeout: float = 180,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)  # fmt: skip


class Backend(Protocol):
    name: str
    real_kubelet: bool  # kubectl logs/exec, probes, Services: a kubelet and a proxy serve them
    kubeconfig: Path
    image_repository: str
    image_tag: str
    vllm_image: str  # a healthy simulator standing in for vLLM
    faulty_vllm_image: str  # the same, with a drafter arm that fails requests

    def pod_address(self, namespace: str, pod: str, port: int) -> tuple[str, int]: ...

    def router_address(self, namespace: str, pod: str) -> tuple[str, int]: ...

    def pod_logs(self, namespace: str, pod: str) -> str: ...

    def stop(self) -> None: ...


@dataclass
class Tools:
    """The real kubectl and helm against one cluster."""

    kubeconfig: Path
    log: list[str] = field(default_factory=list)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout: float = 180) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return self._run([str(kubectl_binary()), f"--kubeconfig={self.kubeconfig}", *args],
                         stdin, check, timeout)  # fmt: skip

    def helm(self, *args: str, check: bool = True,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return self._run([str(find_tool("helm") or "helm"), f"--kubeconfig={self.kubeconfig}",
                          *args], None, check, timeout)  # fmt: skip

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def _run(self, argv: list[str], stdin: str | None, check: bool,
             timeout: float) -> subprocess.CompletedProcess[str]:  # fmt: skip
        done = run(argv, stdin=stdin, timeout=timeout)
        self.log.append(f"$ {' '.join(argv[:1] + argv[2:])} -> {done.returncode}")
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}{done.stdout[-2000:]}"
            )
        return done


# ----------------------------------------------------------------------------- local


class _OnLocalCluster:
    """What the two LocalCluster backends share: pods are reached at their IPs (loopback
    addresses, or real ones routed from the host to the nodes)."""

    kubeconfig: Path
    cluster: Any  # specguard_testkit.LocalCluster

    def pod_address(self, namespace: str, pod: str, port: int) -> tuple[str, int]:
        obj = Tools(self.kubeconfig).json("-n", namespace, "get", "pod", pod)
        return obj["status"]["podIP"], port

    def router_address(self, namespace: str, pod: str) -> tuple[str, int]:
        return self.pod_address(namespace, pod, ROUTER_PORT)

    def pod_logs(self, namespace: str, pod: str) -> str:
        return str(self.cluster.logs(namespace, pod))

    def stop(self) -> None:
        self.cluster.stop()


class LocalBackend(_OnLocalCluster):
    """specguard_testkit.LocalCluster: real apiserver, controller-manager and scheduler;
    the process kubelet runs every pod (the specguard image as `python -m specguard ...`,
    vLLM images as the simulator) under the pod's own service-account credentials."""

    name = "local"
    real_kubelet = False

    def __init__(self) -> None:
        from specguard_testkit import KubeletConfig, LocalCluster
        from specguard_testkit._images import Launch

        def faulty(launch: Launch) -> list[str]:
            import sys

            drafter = any(arg.startswith("--speculative-config") for arg in launch.args)
            fault = ["--error-rate", DRAFTER_ERROR_RATE] if drafter else []
            return [sys.executable, "-m", "specguard", "sim", *launch.args, *SIM_ARGS,
                    *fault, "--host", launch.pod_ip]  # fmt: skip

        self.cluster = LocalCluster()
        self.cluster.start()
        self.cluster.add_gpu_nodes(2, gpus=8)
        self.cluster.start_kubelet(KubeletConfig(sim_args=SIM_ARGS,
                                                 images={FAULTY_VLLM_IMAGE: faulty}))  # fmt: skip
        self.kubeconfig = self.cluster.kubeconfig
        self.image_repository, _, self.image_tag = SPECGUARD_IMAGE.rpartition(":")
        self.vllm_image = "vllm/vllm-openai:v0.33.0"
        self.faulty_vllm_image = FAULTY_VLLM_IMAGE


# ----------------------------------------------------------------------------- node


class NodeBackend(_OnLocalCluster):
    """specguard_testkit.LocalCluster with real nodes: two nodes, each a kubelet, containerd
    with runc, the CNI bridge and kube-proxy in a network namespace; the images built from
    this checkout's Dockerfile (scripts/build-image.sh), the vLLM stand-in included (the
    simulator as `vllm serve`, scripts/images/vllm-sim). Pods are real containers under
    their security context; the test process reaches pod IPs through the host's routes."""

    name = "node"
    real_kubelet = True
    nodes = 2

    def __init__(self) -> None:
        from specguard_testkit import LocalCluster, RealNodeConfig, build_images
        from specguard_testkit._binaries import (
            IMAGE_SPECGUARD,
            IMAGE_VLLM_SIM,
            IMAGE_VLLM_SIM_FAULTY,
        )

        images = build_images()
        self.cluster = LocalCluster(node_network=True)
        try:
            self.cluster.start()
            self.cluster.start_real_nodes(self.nodes, RealNodeConfig(images=images.all()))
        except BaseException:
            self.cluster.stop()
            raise
        self.kubeconfig = self.cluster.kubeconfig
        self.image_repository, self.image_tag = IMAGE_SPECGUARD, __version__
        self.vllm_image = f"{IMAGE_VLLM_SIM}:{__version__}"
        self.faulty_vllm_image = f"{IMAGE_VLLM_SIM_FAULTY}:{__version__}"

    def stop(self) -> None:
        from specguard_testkit._realnode import leftovers

        self.cluster.stop()
        left = leftovers(self.cluster.cluster_id)
        if left:  # the session's teardown fails: a node left something on the machine
            raise RuntimeError(f"the real nodes left behind: {left}")


# ----------------------------------------------------------------------------- kind


def kind_missing() -> str | None:
    """Why the kind backend cannot run here, or None."""
    for tool in ("docker", "kind", "kubectl", "helm"):
        if find_tool(tool) is None:
            return f"{tool} not found"
    info = run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30)
    if info.returncode != 0:
        return "no Docker daemon (`docker info` failed)"
    return None


# The vLLM stand-ins (the specguard image with a `vllm` command that runs the simulator;
# DRAFTER_ERROR_RATE fails the drafter arm's requests): the recipe the real nodes' images
# are built from too (scripts/build-image.sh).
VLLM_SIM_CONTEXT = ROOT / "scripts" / "images" / "vllm-sim"


class KindBackend:
    """A kind cluster with the image built from the Dockerfile and loaded into it; GPU
    capacity advertised on the nodes as an extended resource (no real GPU is used)."""

    name = "kind"
    real_kubelet = True
    cluster_name = "specguard-e2e"

    def __init__(self) -> None:
        self.workdir = Path(os.environ.get("TMPDIR", "/tmp")) / "specguard-e2e-kind"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.image_repository, _, self.image_tag = SPECGUARD_IMAGE.rpartition(":")
        self.vllm_image = "specguard.local/vllm-sim:e2e"
        self.faulty_vllm_image = "specguard.local/vllm-sim-faulty-drafter:e2e"
        self._forwards: list[subprocess.Popen[bytes]] = []
        self._check(
            run(
                [
                    "kind",
                    "create",
                    "cluster",
                    "--name",
                    self.cluster_name,
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--wait",
                    "120s",
                ],
                timeout=600,
            )
        )
        self._check(run(["docker", "build", "-t", SPECGUARD_IMAGE, str(ROOT)], timeout=1200))
        for tag, rate in ((self.vllm_image, ""), (self.faulty_vllm_image, DRAFTER_ERROR_RATE)):
            self._check(run(["docker", "build", "-t", tag,
                             "--build-arg", f"SPECGUARD_IMAGE={SPECGUARD_IMAGE}",
                             "--build-arg", f"SIM_ARGS={' '.join(SIM_ARGS)}",
                             "--build-arg", f"DRAFTER_ERROR_RATE={rate}",
                             "-f", str(VLLM_SIM_CONTEXT / "Containerfile"),
                             str(VLLM_SIM_CONTEXT)], timeout=600))  # fmt: skip
        for image in (SPECGUARD_IMAGE, self.vllm_image, self.faulty_vllm_image):
            self._check(run(["kind", "load", "docker-image", "--name", self.cluster_name,
                             image], timeout=600))  # fmt: skip
        self._advertise_gpus()

    @staticmethod
    def _check(done: subprocess.CompletedProcess[str]) -> None:
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(done.args)}: {done.stderr[-2000:]}")

    def _advertise_gpus(self) -> None:
        tools = Tools(self.kubeconfig)
        for node in tools.json("get", "nodes")["items"]:
            patch = json.dumps([{"op": "add", "path": "/status/capacity/nvidia.com~1gpu",
                                 "value": "8"}])  # fmt: skip
            tools.kubectl("patch", "node", node["metadata"]["name"], "--subresource=status",
                          "--type=json", "-p", patch)  # fmt: skip

    def router_address(self, namespace: str, pod: str) -> tuple[str, int]:
        return self.pod_address(namespace, pod, ROUTER_PORT)

    def pod_address(self, namespace: str, pod: str, port: int) -> tuple[str, int]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            local = int(sock.getsockname()[1])
        forward = subprocess.Popen(
            [str(kubectl_binary()), f"--kubeconfig={self.kubeconfig}", "-n", namespace,
             "port-forward",
             f"pod/{pod}", f"{local}:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._forwards.append(forward)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", local), 1):
                return "127.0.0.1", local
            time.sleep(0.5)
        raise RuntimeError(f"kubectl port-forward to {namespace}/{pod} did not open")

    def pod_logs(self, namespace: str, pod: str) -> str:
        done = run([str(kubectl_binary()), f"--kubeconfig={self.kubeconfig}", "-n", namespace,
                    "logs", pod])  # fmt: skip
        return done.stdout + done.stderr

    def stop(self) -> None:
        for forward in self._forwards:
            forward.terminate()
        run(["kind", "delete", "cluster", "--name", self.cluster_name], timeout=300)


BACKENDS: dict[str, type[LocalBackend] | type[NodeBackend] | type[KindBackend]] = {
    "node": NodeBackend, "local": LocalBackend, "kind": KindBackend,
}  # fmt: skip


def start_backend(name: str) -> Iterator[Backend]:
    backend: Backend = BACKENDS[name]()
    try:
        yield backend
    finally:
        backend.stop()
