"""The network of a local cluster with real nodes: a bridge on the host for the API server,
one network namespace per node, routes between them. Nothing global is touched: no host
iptables rule, no host sysctl, no default route out of a node.

    host netns                              node netns specguard-<id>-n0
    sgh<id>  10.X.0.1/24  (kube-apiserver)  eth0   10.X.0.10/24 (kubelet, kube-proxy)
      |  veth sgv<id>0 -------------------- sgbr0  10.X.1.1/24  (CNI bridge) -- pods 10.X.1.N
      |  veth sgv<id>1 ---- node n1: eth0 10.X.0.11, pods 10.X.2.N

- The host reaches every pod through a route per node (10.X.(i+1).0/24 via the node's
  address), so a test reads a pod's IP from its status and connects, as from a node.
- A node reaches the API server on the bridge (the kubernetes Service's endpoint: the
  apiserver advertises 10.X.0.1) and the other nodes' pods through routes to them.
- Service IPs are rewritten by kube-proxy inside each node's namespace (its iptables
  chains live there); a Service IP is never sent from the host, which has no route for it.
- X is picked where no address or route of the host lies, under a lock, so two clusters
  on one machine never share a range; every name carries the cluster's id.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import random
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
POD_BRIDGE = "sgbr0"  # inside each node's namespace, so the same name everywhere
NODE_INTERFACE = "eth0"
FIRST_NODE_HOST = 10  # node i has 10.X.0.(10 + i)
MAX_NODES = 200


class NetworkError(RuntimeError):
    pass


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def in_netns(netns: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run in network namespace ``netns`` only (the mount namespace stays the
    host's: a kubelet's volume mounts must be seen by containerd and the runtime)."""
    return ["nsenter", f"--net={NETNS_DIR / netns}", "--", *argv]


def write_sysctl(netns: str, name: str, value: str) -> None:
    """A per-namespace sysctl (net.*) inside ``netns``."""
    path = "/proc/sys/" + name.replace(".", "/")
    done = subprocess.run(
        in_netns(netns, ["sh", "-c", f"echo {value} > {path}"]),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise NetworkError(f"{name}={value} in {netns}: {done.stderr.strip()}")


def _host_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Every IPv4 network the host has an address or a route in."""
    networks = []
    for entry in json.loads(ip("-j", "-4", "addr") or "[]"):
        for info in entry.get("addr_info", []):
            networks.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", False))
    for route in json.loads(ip("-j", "-4", "route") or "[]"):
        dst = route.get("dst", "")
        if dst and dst != "default":
            networks.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", False))
    return networks


@contextlib.contextmanager
def _range_lock(lock_dir: Path) -> Iterator[None]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    with (lock_dir / "network.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class ClusterNetwork:
    """The host side of one cluster's node network (see the module docstring)."""

    cluster_id: str  # 6 hex digits: names stay within Linux's 15 characters
    octet: int  # X of 10.X.0.0/16
    service_range: str
    nodes: list[str] = field(default_factory=list)  # netns names, index = node number

    @property
    def bridge(self) -> str:
        return f"sgh{self.cluster_id}"

    @property
    def api_address(self) -> str:
        return f"10.{self.octet}.0.1"

    @property
    def cluster_cidr(self) -> str:
        """Every node and pod address of the cluster (kube-proxy's clusterCIDR)."""
        return f"10.{self.octet}.0.0/16"

    def node_address(self, index: int) -> str:
        return f"10.{self.octet}.0.{FIRST_NODE_HOST + index}"

    def pod_subnet(self, index: int) -> str:
        return f"10.{self.octet}.{index + 1}.0/24"

    def netns(self, index: int) -> str:
        return f"specguard-{self.cluster_id}-n{index}"

    def _veth(self, index: int) -> str:
        return f"sgv{self.cluster_id}{index}"

    @classmethod
    def create(cls, cluster_id: str, lock_dir: Path, service_range: str) -> ClusterNetwork:
        """Pick a free 10.X.0.0/16 and make the host bridge with the API server's address."""
        service = ipaddress.ip_network(service_range)
        with _range_lock(lock_dir):
            taken = [*_host_networks(), service]
            candidates = list(range(64, 250))
            random.shuffle(candidates)
            for octet in candidates:
                block = ipaddress.ip_network(f"10.{octet}.0.0/16")
                if not any(block.overlaps(other) for other in taken):
                    break
            else:
                raise NetworkError("no free 10.X.0.0/16 range for the cluster's nodes")
            network = cls(cluster_id, octet, service_range)
            bridge = network.bridge
            ip("link", "add", bridge, "type", "bridge")
            try:
                ip("addr", "add", f"{network.api_address}/24", "dev", bridge)
                ip("link", "set", bridge, "up")
            except NetworkError:
                ip("link", "del", bridge, check=False)
                raise
        log.info("cluster network 10.%d.0.0/16 on %s", octet, bridge)
        return network

    def add_node(self) -> int:
        """A namespace for the next node, wired to the host bridge; returns its index."""
        index = len(self.nodes)
        if index >= MAX_NODES:
            raise NetworkError(f"at most {MAX_NODES} nodes per cluster")
        netns, veth = self.netns(index), self._veth(index)
        self.nodes.append(netns)
        ip("netns", "add", netns)
        ip("link", "add", veth, "type", "veth", "peer", "name", NODE_INTERFACE, "netns", netns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("addr", "add", f"{self.node_address(index)}/24", "dev", NODE_INTERFACE, netns=netns)
        ip("link", "set", NODE_INTERFACE, "up", netns=netns)
        ip("link", "set", "lo", "up", netns=netns)
        # The node routes between its pods' bridge and eth0; bridged traffic goes through
        # its iptables (kube-proxy's rules also hold for a pod calling a Service whose
        # endpoint is on the same bridge).
        write_sysctl(netns, "net.ipv4.ip_forward", "1")
        write_sysctl(netns, "net.bridge.bridge-nf-call-iptables", "1")
        # The host and the nodes before this one reach its pods through it, and it reaches
        # theirs.
        ip("route", "add", self.pod_subnet(index), "via", self.node_address(index),
           "dev", self.bridge)  # fmt: skip
        for other in range(index):
            ip("route", "add", self.pod_subnet(other), "via", self.node_address(other),
               netns=netns)  # fmt: skip
            ip("route", "add", self.pod_subnet(index), "via", self.node_address(index),
               netns=self.netns(other))  # fmt: skip
        return index

    def remove(self) -> None:
        """Kill what still runs in a node's namespace (it is ours), delete each node's veth
        (both ends go at once; a namespace's own end would only go with the namespace, which
        outlives its name while anything holds it) and namespace, then the host bridge (its
        routes go with it). Idempotent."""
        for index in reversed(range(len(self.nodes))):
            netns = self.nodes[index]
            pids = ip("netns", "pids", netns, check=False).split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("link", "del", self._veth(index), check=False)
            ip("netns", "del", netns, check=False)
        self.nodes.clear()
        ip("link", "del", self.bridge, check=False)

    def record(self) -> dict[str, object]:
        return {"cluster_id": self.cluster_id, "octet": self.octet,
                "service_range": self.service_range, "nodes": list(self.nodes)}  # fmt: skip

    @classmethod
    def from_record(cls, record: dict[str, object]) -> ClusterNetwork:
        nodes = record.get("nodes")
        return cls(str(record["cluster_id"]), int(str(record["octet"])),
                   str(record["service_range"]),
                   [str(n) for n in nodes] if isinstance(nodes, list) else [])  # fmt: skip
