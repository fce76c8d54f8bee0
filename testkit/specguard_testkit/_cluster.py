"""LocalCluster: etcd, kube-apiserver, kube-controller-manager and kube-scheduler as
local processes on free loopback ports, data in a temporary directory.

    with LocalCluster() as cluster:
        cluster.add_gpu_nodes(2)
        cluster.start_kubelet()
        api = cluster.kube_client()          # a kubernetes.client.ApiClient (admin)
        ...                                  # cluster.kubeconfig for kubectl / kopf

    with LocalCluster(node_network=True) as cluster:     # root: real nodes
        cluster.start_real_nodes(2, RealNodeConfig(images=build_images().all()))

With ``node_network`` the apiserver listens on a bridge address of the cluster's own node
network (specguard_testkit._nodenet) instead of loopback and advertises it, so the
``kubernetes`` Service has an endpoint pods can reach; real nodes (kubelet, containerd,
kube-proxy: specguard_testkit._realnode) join it.

Teardown (``stop``, the context manager, interpreter exit, SIGTERM, or the next run's
orphan reaper) kills every process group it started.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from specguard_testkit._access import ClusterAccess
from specguard_testkit._binaries import ControlPlaneBinaries, find_binaries, kubectl_binary
from specguard_testkit._pki import ClusterPki, make_client_cert, make_pki
from specguard_testkit._ports import free_port
from specguard_testkit._procs import (
    ProcessGroups,
    forget_registry,
    install_exit_handlers,
    reap_orphans,
    terminate_group,
)
from specguard_testkit._wait import wait_until

if TYPE_CHECKING:
    from specguard_testkit._kubelet import KubeletConfig, ProcessKubelet
    from specguard_testkit._nodenet import ClusterNetwork
    from specguard_testkit._prometheus import PrometheusServer
    from specguard_testkit._realnode import RealNode, RealNodeConfig

log = logging.getLogger(__name__)

ADMIN_USER = "specguard-admin"
NODE_BASE = Path("/var/tmp")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class ClusterStartError(RuntimeError):
    pass


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path


class LocalCluster:
    """A real control plane made of local processes. Not thread-safe; start once."""

    def __init__(
        self,
        *,
        binaries: ControlPlaneBinaries | None = None,
        workdir: Path | None = None,
        service_cluster_ip_range: str = "10.0.0.0/24",
        start_timeout: float = 90.0,
        keep_workdir: bool | None = None,
        without_controllers: tuple[str, ...] = (),
        node_network: bool = False,
    ) -> None:
        """``without_controllers``: kube-controller-manager controllers not to run, e.g.
        ``("deployment-controller", "replicaset-controller")``: Deployments then create no
        pods (a benchmark of an operator that needs no pods). ``node_network``: a network
        for real nodes (``start_real_nodes``; needs root)."""
        self._binaries = binaries
        self.node_network = node_network
        self.cluster_id = secrets.token_hex(3)
        self.network: ClusterNetwork | None = None
        self.real_nodes: list[RealNode] = []
        self.without_controllers = without_controllers
        self._given_workdir = workdir
        self.service_cluster_ip_range = service_cluster_ip_range
        self.start_timeout = start_timeout
        # Logs are in the work directory: SPECGUARD_KEEP_CLUSTER=1 keeps it for a post-mortem.
        if keep_workdir is None:
            keep_workdir = os.environ.get("SPECGUARD_KEEP_CLUSTER", "") not in ("", "0")
        self.keep_workdir = keep_workdir
        self.workdir = Path()
        self.processes = ProcessGroups()
        self._components: list[Component] = []
        self._addons: list[Any] = []  # things with .stop(), stopped in reverse order
        self._access: ClusterAccess | None = None
        self._pki: ClusterPki | None = None
        self._node_access: dict[str, ClusterAccess] = {}
        self._node_lock = threading.Lock()
        self.kubeconfig = Path()
        self.start_seconds = 0.0
        self.kubelet: ProcessKubelet | None = None
        self.prometheus: PrometheusServer | None = None
        self.gpu_node_names: list[str] = []

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def access(self) -> ClusterAccess:
        if self._access is None:
            raise RuntimeError("LocalCluster is not started")
        return self._access

    @property
    def server(self) -> str:
        return self.access.server

    def start(self) -> LocalCluster:
        began = time.monotonic()
        reap_orphans()
        if self.node_network:
            from specguard_testkit._realnode import reap_orphan_nodes

            reap_orphan_nodes()
        binaries = self._binaries or find_binaries()
        install_exit_handlers(self.processes)
        if self._given_workdir is not None:
            self.workdir = self._given_workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            # etcd fsyncs every write; on tmpfs that costs nothing.
            shm = Path("/dev/shm")
            base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
            self.workdir = Path(tempfile.mkdtemp(prefix="specguard-cluster-", dir=base))
        try:
            self._start_control_plane(binaries, began + self.start_timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        log.info("local cluster up in %.1fs at %s", self.start_seconds, self.server)
        return self

    def stop(self) -> None:
        """Stop add-ons (kubelet: pods get SIGTERM; real nodes at once, in parallel), then
        the control plane; idempotent."""
        if self.real_nodes:
            from concurrent.futures import ThreadPoolExecutor

            nodes, self.real_nodes = self.real_nodes, []
            self._addons = [addon for addon in self._addons if addon not in nodes]
            with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
                for future in [pool.submit(node.stop) for node in nodes]:
                    try:
                        future.result()
                    except Exception:
                        log.exception("stopping a real node failed")
        for addon in reversed(self._addons):
            try:
                addon.stop()
            except Exception:
                log.exception("stopping %r failed", addon)
        self._addons.clear()
        for component in reversed(self._components):
            terminate_group(component.process.pid, grace=3.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                component.process.wait(timeout=5)
            self.processes.unregister(component.process.pid)
        self._components.clear()
        self.processes.kill_all()  # anything left (pods of a kubelet that failed to stop)
        forget_registry(self.processes)
        if self.network is not None:
            from specguard_testkit._realnode import forget_record, restore_kernel_tunables

            self.network.remove()
            self.network = None
            forget_record(self.cluster_id)
            restore_kernel_tunables()
        if not self.keep_workdir and self._given_workdir is None and self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---------------------------------------------------------------- control plane

    def _spawn(self, name: str, argv: Sequence[str]) -> Component:
        log_path = self.workdir / "logs" / f"{name}.log"
        process = self.processes.spawn(argv, name=name, log_path=log_path, cwd=self.workdir)
        component = Component(name, process, log_path)
        self._components.append(component)
        return component

    def _wait(
        self, component: Component, check: Callable[[], bool], deadline: float, what: str
    ) -> None:
        while True:
            if component.process.poll() is not None:
                raise ClusterStartError(
                    f"{component.name} exited with {component.process.returncode}; "
                    f"last lines of {component.log_path}:\n{_tail(component.log_path)}"
                )
            with contextlib.suppress(httpx.HTTPError, OSError):
                if check():
                    return
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"{component.name}: {what} not reached in time; last lines of "
                    f"{component.log_path}:\n{_tail(component.log_path)}"
                )
            time.sleep(0.1)

    def _start_control_plane(self, binaries: ControlPlaneBinaries, deadline: float) -> None:
        work = self.workdir
        service_ip = self._first_service_ip()
        address = "127.0.0.1"
        if self.node_network:
            address = self._make_network().api_address
        pki = make_pki(work / "pki", service_ip=service_ip,
                       addresses=[address] if self.node_network else [])  # fmt: skip
        self._pki = pki
        token = secrets.token_hex(16)
        token_file = work / "tokens.csv"
        token_file.write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        token_file.chmod(0o600)

        etcd_port, etcd_peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(binaries.etcd),
                "--name=specguard",
                f"--data-dir={work / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-cluster=specguard=http://127.0.0.1:{etcd_peer_port}",
                "--log-level=warn",
            ],
        )
        # Asked while etcd boots: refuses binaries outside the supported versions and skew.
        binaries.checked_minors()
        self._wait(
            etcd,
            lambda: "true" in httpx.get(f"{etcd_url}/health", timeout=2).text,
            deadline,
            "/health",
        )

        api_port = free_port()
        self._access = ClusterAccess(f"https://{address}:{api_port}", token, pki.ca_cert)
        self.kubeconfig = self._access.write_kubeconfig(work / "admin.kubeconfig")
        if self.node_network:
            # Real nodes: pods reach this address through the `kubernetes` Service (its
            # endpoint is the advertised address, kept by the lease reconciler), and the
            # apiserver reaches each kubelet (logs, exec) with a client certificate and
            # checks the kubelet's serving certificate against the cluster CA.
            kubelet_cert, kubelet_key = make_client_cert(
                pki, work / "pki", user="kube-apiserver-kubelet-client", group="system:masters"
            )
            addressing = [
                f"--kubelet-client-certificate={kubelet_cert}",
                f"--kubelet-client-key={kubelet_key}",
                f"--kubelet-certificate-authority={pki.ca_cert}",
                "--kubelet-preferred-address-types=InternalIP",
            ]
        else:
            # The `kubernetes` Service's endpoints may not be loopback addresses; pods here
            # reach the apiserver through the kubeconfig the process kubelet writes for them.
            addressing = ["--endpoint-reconciler-type=none"]
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={address}",
                f"--advertise-address={address}",
                *addressing,
                f"--secure-port={api_port}",
                f"--cert-dir={work / 'apiserver-certs'}",
                f"--tls-cert-file={pki.server_cert}",
                f"--tls-private-key-file={pki.server_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={token_file}",
                # Kubelets act as their node (client certificates in system:nodes): the Node
                # authorizer and NodeRestriction limit them to their own pods, as in a real
                # cluster. PodSecurity is on by default: namespaces choose their level by label.
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={self.service_cluster_ip_range}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        with self.access.client(timeout=3) as client:
            self._wait(
                apiserver,
                lambda: client.get("/readyz").status_code == 200,
                deadline,
                "/readyz",
            )

        # Both wait for the apiserver themselves; started together they overlap their boot.
        kcm = self._spawn_secured(
            "kube-controller-manager",
            [
                str(binaries.kube_controller_manager),
                f"--kubeconfig={self.kubeconfig}",
                # The process kubelet renews no node leases: the node-lifecycle controller
                # would mark its fake nodes NotReady and evict their pods. Real kubelets do,
                # and need it (it lifts the not-ready taint a new node is registered with).
                "--controllers="
                + ",".join(["*", *([] if self.node_network else ["-nodelifecycle"]),
                            *(f"-{c}" for c in self.without_controllers)]),
                "--leader-elect=false",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--authentication-skip-lookup=true",
                "--v=1",
            ],
        )
        scheduler = self._spawn_secured(
            "kube-scheduler",
            [
                str(binaries.kube_scheduler),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--authentication-skip-lookup=true",
                "--v=1",
            ],
        )
        for component, port in (kcm, scheduler):
            self._wait(
                component,
                lambda port=port: httpx.get(  # type: ignore[misc]
                    f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2
                ).status_code
                == 200,
                deadline,
                "/healthz",
            )
        self._wait_default_service_account(apiserver, deadline)

    def _make_network(self) -> ClusterNetwork:
        from specguard_testkit._nodenet import ClusterNetwork
        from specguard_testkit._procs import run_dir
        from specguard_testkit._realnode import save_record

        if os.geteuid() != 0:
            raise ClusterStartError("real nodes need root (network namespaces, cgroups, mounts)")
        network = ClusterNetwork.create(self.cluster_id, run_dir(), self.service_cluster_ip_range)
        self.network = network
        save_record(self.cluster_id, network, [])
        return network

    def _spawn_secured(self, name: str, argv: list[str]) -> tuple[Component, int]:
        """controller-manager or scheduler, serving /healthz on a free port."""
        port = free_port()
        argv = [
            *argv,
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / (name + '-certs')}",
        ]
        return self._spawn(name, argv), port

    def _wait_default_service_account(self, apiserver: Component, deadline: float) -> None:
        """Pods are refused until default/default exists."""

        def ready() -> bool:
            with self.access.client(timeout=3) as client:
                response = client.get("/api/v1/namespaces/default/serviceaccounts/default")
                return response.status_code == 200

        self._wait(apiserver, ready, deadline, "service account default/default")

    def _first_service_ip(self) -> str:
        network, _ = self.service_cluster_ip_range.split("/")
        octets = network.split(".")
        octets[-1] = str(int(octets[-1]) + 1)
        return ".".join(octets)

    # ---------------------------------------------------------------- clients

    def node_access(self, node: str) -> ClusterAccess:
        """Credentials of a kubelet on ``node``: a client certificate for
        ``system:node:<node>`` in group ``system:nodes`` (Node authorizer, NodeRestriction)."""
        if self._pki is None:
            raise RuntimeError("LocalCluster is not started")
        with self._node_lock:  # the kubelet's thread may ask for a node added later
            return self._node_access_locked(node, self._pki)

    def _node_access_locked(self, node: str, pki: ClusterPki) -> ClusterAccess:
        if node not in self._node_access:
            cert, key = make_client_cert(
                pki, self.workdir / "pki" / "nodes",
                user=f"system:node:{node}", group="system:nodes",
            )  # fmt: skip
            self._node_access[node] = self.access.with_client_cert(cert, key)
        return self._node_access[node]

    def kube_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` logged in as cluster admin."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.server
        configuration.ssl_ca_cert = str(self.access.ca_file)
        configuration.api_key = {"authorization": f"Bearer {self.access.token}"}
        return client.ApiClient(configuration)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster (the one built with the control plane when there
        is one: its version matches the server's; else find_tool's: .venv/bin, PATH)."""
        return subprocess.run(
            [str(kubectl_binary()), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def wait_crd_established(self, name: str, timeout: float = 60.0) -> None:
        """Wait until CustomResourceDefinition ``name`` is Established (``kubectl wait`` fails
        at once while the server has not yet written any condition)."""

        def established() -> bool:
            with self.access.client(timeout=5) as client:
                response = client.get(
                    f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
            if response.status_code != 200:
                return False
            conditions = response.json().get("status", {}).get("conditions") or []
            return any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            )

        wait_until(established, timeout=timeout, interval=0.2, what=f"CRD {name} Established")

    def process_group_ids(self) -> list[int]:
        """Every process group this cluster started and still tracks (control plane, pods)."""
        return [record.pgid for record in self.processes.groups()]

    def component_logs(self) -> dict[str, Path]:
        return {c.name: c.log_path for c in self._components}

    # ---------------------------------------------------------------- add-ons

    def add_gpu_nodes(
        self, count: int = 1, *, gpus: int = 8, prefix: str = "gpu-node", **kwargs: Any
    ) -> list[str]:
        """Register ``count`` fake GPU nodes (see specguard_testkit._nodes)."""
        from specguard_testkit._nodes import NodeSpec, register_nodes

        spec = NodeSpec(gpus=gpus, **kwargs)
        start = len(self.gpu_node_names)
        names = [f"{prefix}-{start + i}" for i in range(count)]
        register_nodes(self.access, names, spec)
        for name in names:
            self.node_access(name)  # issue the kubelet's certificates here, not in its loop
        self.gpu_node_names.extend(names)
        if self.kubelet is not None:
            self.kubelet.add_nodes(names)
        return names

    def start_kubelet(self, config: KubeletConfig | None = None) -> ProcessKubelet:
        """Run pods bound to this cluster's GPU nodes as local processes."""
        from specguard_testkit._kubelet import KubeletConfig, ProcessKubelet

        if self.kubelet is not None:
            raise RuntimeError("a kubelet is already running for this cluster")
        config = config or KubeletConfig()
        kubelet = ProcessKubelet(
            self.access, self.gpu_node_names, self.processes, self.workdir / "kubelet", config,
            node_access=self.node_access,
        )
        kubelet.start()
        self.kubelet = kubelet
        self._addons.append(kubelet)
        return kubelet

    def start_real_nodes(self, count: int = 1, config: RealNodeConfig | None = None,
                         *, prefix: str = "node") -> list[RealNode]:  # fmt: skip
        """Start ``count`` real nodes (kubelet, containerd, kube-proxy; see
        specguard_testkit._realnode) and wait until each is Ready with its GPUs allocatable.
        Needs ``node_network=True``; the binaries come from scripts/build-node.sh and
        scripts/build-control-plane.sh, the images from ``config.images``."""
        from concurrent.futures import ThreadPoolExecutor

        from specguard_testkit._binaries import find_node_binaries
        from specguard_testkit._realnode import RealNode, RealNodeConfig, save_record

        if self.network is None or self._pki is None:
            raise RuntimeError("real nodes need LocalCluster(node_network=True), started")
        binaries = find_node_binaries()
        config = config or RealNodeConfig()
        nodes = []
        for _ in range(count):
            index = self.network.add_node()
            name = f"{prefix}-{index}"
            nodes.append(RealNode(
                name=name, index=index, network=self.network,
                # On disk: a node holds its images unpacked (hundreds of MB), too much for
                # the tmpfs the control plane's work directory is on.
                base=NODE_BASE / f"specguard-node-{self.cluster_id}-{index}"
                if self._given_workdir is None else self.workdir / "nodes" / name,
                binaries=binaries, config=config, access=self.access,
                node_access=self.node_access(name), pki=self._pki, processes=self.processes,
            ))  # fmt: skip
            self.real_nodes.append(nodes[-1])
            self._addons.append(nodes[-1])
        save_record(self.cluster_id, self.network, [node.record for node in self.real_nodes])
        for node in nodes:
            node.prepare()
        with ThreadPoolExecutor(max_workers=len(nodes) or 1) as pool:
            for future in [pool.submit(node.start) for node in nodes]:
                future.result()
        return nodes

    def start_prometheus(self, scrape_interval: float = 1.0) -> PrometheusServer:
        """Real Prometheus scraping the running pods (file-based service discovery)."""
        from specguard_testkit._prometheus import PrometheusServer

        if self.prometheus is not None:
            return self.prometheus
        server = PrometheusServer(
            self.access, self.processes, self.workdir / "prometheus", scrape_interval
        )
        server.start()
        self.prometheus = server
        self._addons.append(server)
        return server

    def logs(
        self, namespace: str, pod: str, container: str | None = None, *, previous: bool = False
    ) -> str:
        """What a pod's container printed: its current run, or the one before."""
        if self.real_nodes:  # what `kubectl logs` shows (the kubelet serves it)
            args = ["-n", namespace, "logs", pod, *(["-c", container] if container else []),
                    *(["--previous"] if previous else [])]  # fmt: skip
            done = self.kubectl(*args, check=False)
            return done.stdout + done.stderr
        if self.kubelet is None:
            raise RuntimeError("no kubelet runs for this cluster")
        return self.kubelet.logs(namespace, pod, container, previous=previous)
