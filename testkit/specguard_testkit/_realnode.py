"""Real nodes for the local cluster: a kubelet, containerd with runc, the CNI bridge and
kube-proxy per node, each node in a network namespace of its own (specguard_testkit._nodenet).
Pods are real containers of the images built from this checkout (scripts/build-image.sh),
run under their security context; ``kubectl logs``, ``exec``, probes and Services work as
on any cluster.

Host facts the set-up follows (docs/local-cluster.md, "Real nodes"):

- cgroup v1 (hybrid): the kubelet needs ``failCgroupV1: false`` and ``cgroupDriver:
  cgroupfs`` (runc with ``SystemdCgroup = false``); crun refuses this layout, runc works.
- No CAP_SYS_RESOURCE: containerd's ``restrict_oom_score_adj = true`` (a pod sandbox asks
  for -998) and the kubelet's ``oomScoreAdj: 0``; rlimits stay within the host's.
- No registry: images are imported into containerd's ``k8s.io`` namespace and pods use
  ``imagePullPolicy: IfNotPresent``; the pause image is compiled from Kubernetes' pause.c.
- No CoreDNS: pods reach the API server through the ``kubernetes`` Service IP, which
  kube-proxy rewrites to the apiserver's advertised address; the pods get no nameserver.
- GPUs are fake: ``nvidia.com/gpu`` is advertised by patching the Node's status capacity
  (the kubelet keeps an extended resource it does not manage and derives allocatable
  from it); no device is given to a container.

Everything a node makes is named after its cluster's id and removed on stop: processes,
runtime state, mounts, cgroups, network namespaces. A run killed without cleanup leaves a
record that the next cluster start cleans (``reap_orphan_nodes``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specguard_testkit._access import ClusterAccess, raise_for_status
from specguard_testkit._binaries import NodeBinaries
from specguard_testkit._nodenet import ClusterNetwork, NetworkError, in_netns
from specguard_testkit._nodes import GPU_PRODUCT_LABEL, GPU_RESOURCE
from specguard_testkit._pki import ClusterPki, make_client_cert, make_serving_cert
from specguard_testkit._procs import ProcessGroups, proc_stat, run_dir, terminate_group
from specguard_testkit._wait import wait_until

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
POD_LOG_LINKS = Path("/var/log/containers")  # the kubelet's, fixed: links to our pod logs
PAUSE_IMAGE = "specguard.local/pause:3.10"  # scripts/lib-buildah.sh
KUBELET_PORT = 10250  # each node has its own network namespace: default ports are free
PROXY_USER = "system:kube-proxy"  # bound to system:node-proxier by default RBAC


@dataclass(frozen=True)
class RealNodeConfig:
    """What each real node offers the scheduler."""

    gpus: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    labels: dict[str, str] = field(default_factory=dict)
    # OCI archives imported into each node's containerd (the pause image always is).
    images: tuple[Path, ...] = ()
    start_timeout: float = 120.0


def _run(argv: Sequence[str], timeout: float = 60.0, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)  # fmt: skip


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1 controllers, name=systemd, the v2 one)."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
                found.append(Path(fields[1]))
    return found


def _make_cgroup(name: str) -> None:
    """``/name`` in every hierarchy (the kubelet's cgroupRoot must exist)."""
    for hierarchy in _cgroup_hierarchies():
        path = hierarchy / name
        path.mkdir(exist_ok=True)
        if (hierarchy / "cpuset.cpus").exists():  # a new cpuset starts empty: inherit
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((hierarchy / knob).read_text())


def _cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in _cgroup_hierarchies():
        root = hierarchy / name
        if not root.is_dir():
            continue
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in procs.read_text().split())
    return pids


def _remove_cgroup(name: str) -> None:
    for hierarchy in _cgroup_hierarchies():
        root = hierarchy / name
        if not root.is_dir():
            continue
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True):  # fmt: skip
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def _mounts_under(base: Path) -> list[str]:
    """Mount points at or below ``base``, deepest first (from /proc/self/mountinfo)."""
    points = []
    prefix = str(base).rstrip("/") + "/"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix) or point == str(base):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def _unmount_all(base: Path) -> None:
    for _ in range(3):  # a lazy unmount can reveal a mount beneath it
        points = _mounts_under(base)
        if not points:
            return
        for point in points:
            _run(["umount", "--lazy", point], timeout=30)


def _pids_with_arg(arg: str) -> list[int]:
    """Processes whose command line carries ``arg`` exactly (a node's own socket path:
    its containerd shims, which leave the process group they were started in)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if arg.encode() in argv:
                found.append(int(entry))
    return found


def _kill(pids: set[int] | list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class NodeRecord:
    """What a node leaves on the machine, for its cleanup (also by a later run)."""

    base: str
    socket: str
    cgroup: str

    def clean(self) -> None:
        """Stop what runs, unmount, remove state, cgroups and links. Idempotent."""
        base = Path(self.base)
        for _ in range(3):
            leftovers = _cgroup_pids(self.cgroup) | set(_pids_with_arg(self.socket))
            if not leftovers:
                break
            _kill(leftovers)
            time.sleep(0.3)
        _unmount_all(base)
        _remove_cgroup(self.cgroup)
        logs = str(base / "pod-logs")
        with contextlib.suppress(OSError):
            for link in POD_LOG_LINKS.iterdir():
                with contextlib.suppress(OSError):
                    if link.is_symlink() and os.readlink(link).startswith(logs):
                        link.unlink()
        shutil.rmtree(base, ignore_errors=True)


class RealNode:
    """One node: containerd, kubelet and kube-proxy in the node's network namespace."""

    def __init__(
        self, *, name: str, index: int, network: ClusterNetwork, base: Path,
        binaries: NodeBinaries, config: RealNodeConfig, access: ClusterAccess,
        node_access: ClusterAccess, pki: ClusterPki, processes: ProcessGroups,
    ) -> None:  # fmt: skip
        self.name = name
        self.index = index
        self.network = network
        self.netns = network.netns(index)
        self.address = network.node_address(index)
        self.base = base
        self.binaries = binaries
        self.config = config
        self._access = access
        self._node_access = node_access
        self._pki = pki
        self._processes = processes
        self.socket = base / "containerd" / "containerd.sock"
        self.cgroup = f"specguard-{network.cluster_id}-n{index}"
        self._pids: dict[str, int] = {}
        self._proxy_access = access

    @property
    def record(self) -> NodeRecord:
        return NodeRecord(str(self.base), str(self.socket), self.cgroup)

    def log_path(self, component: str) -> Path:
        return self.base / "logs" / f"{component}.log"

    # ---------------------------------------------------------------- start

    def prepare(self) -> None:
        """Directories and certificates (one node at a time: they share the CA's serial)."""
        for sub in ("containerd", "runc", "cni/net.d", "cni/ipam", "kubelet", "pod-logs",
                    "logs", "pki", "volume-plugins"):  # fmt: skip
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        (self.base / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.socket}\nimage-endpoint: unix://{self.socket}\n"
            "timeout: 30\n"
        )
        pki = self.base / "pki"
        make_serving_cert(self._pki, pki, name=self.name, ips=[self.address])
        cert, key = make_client_cert(self._pki, pki, user=PROXY_USER,
                                     group="system:node-proxiers")  # fmt: skip
        self._proxy_access = self._access.with_client_cert(cert, key)

    def start(self) -> None:
        """Start containerd (and import the images), the kubelet and kube-proxy; return
        once the node is Ready with its GPUs allocatable. ``prepare`` first."""
        deadline = time.monotonic() + self.config.start_timeout
        _make_cgroup(self.cgroup)
        self._start_containerd(deadline)
        self._import_images()
        self._write_cni_config()
        self._start_kubelet()
        self._start_kube_proxy()
        self._wait_ready(deadline)
        self._advertise_gpus()

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        # containerd finds its shim and runc on PATH.
        path = os.pathsep.join([str(self.binaries.containerd.parent),
                                str(self.binaries.runc.parent), os.environ.get("PATH", "")])
        full_env = {**os.environ, "PATH": path}
        full_env.pop("KUBECONFIG", None)
        process = self._processes.spawn(
            in_netns(self.netns, argv), name=f"{self.name}/{name}",
            log_path=self.log_path(name), env=full_env, cwd=self.base,
        )  # fmt: skip
        self._pids[name] = process.pid

    def _alive(self, name: str) -> None:
        pid = self._pids[name]
        stat = proc_stat(pid)
        if stat is None or stat.state == "Z":
            tail = "\n".join(self.log_path(name).read_text(errors="replace").splitlines()[-25:])
            raise RuntimeError(f"{self.name}: {name} exited; last lines of its log:\n{tail}")

    def containerd_config(self) -> str:
        c = self.base / "containerd"
        runtime = "plugins.'io.containerd.cri.v1.runtime'"
        return f"""version = 3
root = "{c / 'root'}"
state = "{c / 'state'}"
temp = "{c / 'tmp'}"
# Nothing outside this node's directory: no NRI socket, no /opt/containerd, no snapshotters
# that need more than overlayfs.
disabled_plugins = [
  "io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[{runtime}]
  # The pod sandbox asks for oom_score_adj -998; lowering it needs CAP_SYS_RESOURCE,
  # which this machine withholds: clamp to containerd's own score instead.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{self.binaries.runc}"
        Root = "{self.base / 'runc'}"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{self.binaries.cni_bin_dir}"]
    conf_dir = "{self.base / 'cni' / 'net.d'}"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""

    def _start_containerd(self, deadline: float) -> None:
        config = self.base / "containerd" / "config.toml"
        config.write_text(self.containerd_config())
        self._spawn("containerd", [str(self.binaries.containerd), "--config", str(config)])

        def up() -> bool:
            self._alive("containerd")
            return self._ctr("version", timeout=10).returncode == 0

        wait_until(up, timeout=max(deadline - time.monotonic(), 1), interval=0.2,
                   what=f"{self.name}: containerd")  # fmt: skip

    def _ctr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return _run([str(self.binaries.ctr), "--address", str(self.socket),
                     "--namespace", "k8s.io", *args], timeout=timeout)  # fmt: skip

    def crictl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """crictl against this node's containerd (what one would run on a node)."""
        return _run([str(self.binaries.crictl), f"--config={self.base / 'crictl.yaml'}", *args],
                    timeout=timeout)  # fmt: skip

    def _import_images(self) -> None:
        for archive in (self.binaries.pause_archive, *self.config.images):
            done = self._ctr("images", "import", "--local", "--digests",
                             "--snapshotter", "overlayfs", str(archive), timeout=300)  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"{self.name}: ctr images import {archive}: {done.stderr}")

    def _write_cni_config(self) -> None:
        conflist = {
            "cniVersion": "1.0.0",
            "name": "specguard",
            "plugins": [
                {
                    "type": "bridge", "bridge": "sgbr0", "isGateway": True, "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.network.pod_subnet(self.index)}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.base / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }  # fmt: skip
        (self.base / "cni" / "net.d" / "10-specguard.conflist").write_text(json.dumps(conflist))

    def kubelet_config(self) -> dict[str, Any]:
        pki = self.base / "pki"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This host runs cgroup v1 (hybrid): 1.35+ refuses it unless told otherwise.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "cgroupsPerQOS": True,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.address,
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "tlsCertFile": str(pki / f"{self.name}.crt"),
            "tlsPrivateKeyFile": str(pki / f"{self.name}.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self._pki.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            # No CAP_SYS_RESOURCE: the kubelet cannot lower its own OOM score.
            "oomScoreAdj": 0,
            "failSwapOn": False,
            "podLogsDir": str(self.base / "pod-logs"),
            "volumePluginDir": str(self.base / "volume-plugins"),
            "resolvConf": "",  # no cluster DNS, and no host resolver for pods either
            "serializeImagePulls": False,
            "registerNode": True,
            "nodeStatusUpdateFrequency": "5s",
            "nodeStatusReportFrequency": "30s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "shutdownGracePeriod": "0s",
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%",
                             "imagefs.available": "2%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
        }

    def _start_kubelet(self) -> None:
        save_kernel_tunables()
        kubeconfig = self._node_access.write_kubeconfig(self.base / "kubelet.kubeconfig",
                                                        user=f"system:node:{self.name}")
        config = self.base / "kubelet-config.yaml"
        config.write_text(yaml.safe_dump(self.kubelet_config(), sort_keys=False))
        labels = {
            GPU_PRODUCT_LABEL: self.config.gpu_product,
            "nvidia.com/gpu.count": str(self.config.gpus),
            "nvidia.com/gpu.present": "true",
            **self.config.labels,
        }
        self._spawn("kubelet", [
            str(self.binaries.kubelet), f"--config={config}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.base / 'kubelet'}", f"--hostname-override={self.name}",
            f"--node-ip={self.address}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
            "--v=1",
        ])  # fmt: skip

    def _start_kube_proxy(self) -> None:
        kubeconfig = self._proxy_access.write_kubeconfig(
            self.base / "kube-proxy.kubeconfig", user=PROXY_USER
        )
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "hostnameOverride": self.name,
            "bindAddress": self.address,
            "clusterCIDR": self.network.cluster_cidr,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # Leave the machine's conntrack settings alone (nf_conntrack_max is global).
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
        }
        path = self.base / "kube-proxy-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self._spawn("kube-proxy", [str(self.binaries.kube_proxy), f"--config={path}", "--v=1"])

    def _node(self) -> dict[str, Any] | None:
        with self._access.client(timeout=5) as client:
            response = client.get(f"/api/v1/nodes/{self.name}")
        if response.status_code == 404:
            return None
        node: dict[str, Any] = raise_for_status(response).json()
        return node

    def _wait_ready(self, deadline: float) -> None:
        def ready() -> bool:
            for name in ("containerd", "kubelet", "kube-proxy"):
                self._alive(name)
            node = self._node()
            conditions = ((node or {}).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        wait_until(ready, timeout=max(deadline - time.monotonic(), 1), interval=0.5,
                   what=f"node {self.name} Ready")  # fmt: skip

    def _advertise_gpus(self) -> None:
        """Extended resources are advertised by patching the Node's status capacity; the
        kubelet keeps them in capacity and derives allocatable at its next status update."""
        patch = [{"op": "add", "path": f"/status/capacity/{GPU_RESOURCE.replace('/', '~1')}",
                  "value": str(self.config.gpus)}]  # fmt: skip
        with self._access.client() as client:
            raise_for_status(client.patch(
                f"/api/v1/nodes/{self.name}/status", json=patch,
                headers={"Content-Type": "application/json-patch+json"},
            ))  # fmt: skip

        def allocatable() -> bool:
            node = self._node() or {}
            status = node.get("status") or {}
            return (status.get("allocatable") or {}).get(GPU_RESOURCE) == str(self.config.gpus)

        wait_until(allocatable, timeout=60, interval=0.5,
                   what=f"node {self.name}: {GPU_RESOURCE} allocatable")  # fmt: skip

    # ---------------------------------------------------------------- stop

    def stop(self) -> None:
        """Stop the kubelet, remove every pod (CNI teardown included), stop kube-proxy and
        containerd, then clean what is left (NodeRecord.clean)."""
        began = time.monotonic()
        kubelet = self._pids.pop("kubelet", None)
        if kubelet is not None:
            terminate_group(kubelet, grace=5.0)
            self._processes.unregister(kubelet)
        if "containerd" in self._pids and self.socket.exists():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.crictl("rmp", "--force", "--all", timeout=60)
        for name in ("kube-proxy", "containerd"):
            pid = self._pids.pop(name, None)
            if pid is not None:
                terminate_group(pid, grace=5.0)
                self._processes.unregister(pid)
        stopped = time.monotonic()
        self.record.clean()
        log.info("node %s stopped in %.1fs (cleaned in %.1fs)", self.name,
                 time.monotonic() - began, time.monotonic() - stopped)  # fmt: skip


# ----------------------------------------------------------------------------- registry


def _registry_path(cluster_id: str) -> Path:
    own = proc_stat(os.getpid())
    return run_dir() / f"nodes-{os.getpid()}-{own.start_ticks if own else 0}-{cluster_id}.json"


def save_record(cluster_id: str, network: ClusterNetwork, nodes: list[NodeRecord]) -> None:
    body = {"network": network.record(), "nodes": [vars(node) for node in nodes]}
    path = _registry_path(cluster_id)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    tmp.replace(path)


def forget_record(cluster_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        _registry_path(cluster_id).unlink()


def reap_orphan_nodes() -> list[str]:
    """Clean the nodes and networks of clusters whose owner died without cleaning up."""
    reaped = []
    for path in sorted(run_dir().glob("nodes-*.json")):
        try:
            _, pid, start, cluster_id = path.stem.split("-", 3)
            owner = proc_stat(int(pid))
        except ValueError:
            continue
        if owner is not None and owner.start_ticks == int(start):
            continue
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError):
            body = {}
        for node in body.get("nodes", []):
            with contextlib.suppress(KeyError, TypeError):
                NodeRecord(str(node["base"]), str(node["socket"]), str(node["cgroup"])).clean()
        if "network" in body:
            with contextlib.suppress(NetworkError, KeyError, ValueError):
                ClusterNetwork.from_record(body["network"]).remove()
        path.unlink(missing_ok=True)
        reaped.append(cluster_id)
        log.warning("cleaned the real nodes of a dead cluster %s", cluster_id)
    if reaped:
        restore_kernel_tunables()
    return reaped


def leftovers(cluster_id: str) -> list[str]:
    """What the real nodes of cluster ``cluster_id`` left on the machine (empty once it is
    cleaned): network namespaces, links, mounts, cgroups, directories, processes."""
    found = []
    netns = Path("/run/netns")
    if netns.is_dir():
        found += [f"netns {n.name}" for n in netns.iterdir() if cluster_id in n.name]
    links = json.loads(_run(["ip", "-j", "link"]).stdout or "[]")
    found += [f"link {link['ifname']}" for link in links if cluster_id in link["ifname"]]
    base_prefix = f"specguard-node-{cluster_id}-"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            if base_prefix in line.split()[4]:
                found.append(f"mount {line.split()[4]}")
    for hierarchy in _cgroup_hierarchies():
        with contextlib.suppress(OSError):
            found += [f"cgroup {p}" for p in hierarchy.iterdir()
                      if p.name.startswith(f"specguard-{cluster_id}-")]  # fmt: skip
    with contextlib.suppress(OSError):
        found += [f"directory {p}" for p in Path("/var/tmp").iterdir()
                  if p.name.startswith(base_prefix)]  # fmt: skip
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if base_prefix.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(f"process {entry}")
    return found


# ----------------------------------------------------------------------------- kernel tunables

# What a kubelet sets at start on any machine (protectKernelDefaults: false), and puts back
# here once the last real node on the machine is gone.
KERNEL_TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
                   "kernel/panic_on_oops", "kernel/keys/root_maxkeys",
                   "kernel/keys/root_maxbytes")  # fmt: skip


def _tunables_file() -> Path:
    return run_dir() / "kernel-tunables.json"


def save_kernel_tunables() -> None:
    """Record the machine's values before the first kubelet changes them (once: a later
    cluster must not record the values an earlier one's kubelet set)."""
    values = {}
    for name in KERNEL_TUNABLES:
        with contextlib.suppress(OSError):
            values[name] = (Path("/proc/sys") / name).read_text().strip()
    with contextlib.suppress(FileExistsError), _tunables_file().open("x") as handle:
        handle.write(json.dumps(values))


def restore_kernel_tunables() -> None:
    """Put the recorded values back when no cluster with real nodes is left alive."""
    for path in run_dir().glob("nodes-*.json"):
        with contextlib.suppress(ValueError):
            _, pid, start, _ = path.stem.split("-", 3)
            owner = proc_stat(int(pid))
            if owner is not None and owner.start_ticks == int(start):
                return
    try:
        values = json.loads(_tunables_file().read_text())
    except (OSError, ValueError):
        return
    for name, value in values.items():
        with contextlib.suppress(OSError):
            (Path("/proc/sys") / name).write_text(f"{value}\n")
    _tunables_file().unlink(missing_ok=True)
