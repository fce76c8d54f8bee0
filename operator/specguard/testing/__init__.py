"""specguard.testing: a real local control plane for tests and the demo.

LocalCluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler as local
processes), fake GPU nodes, a process kubelet that runs pods as local processes (the vLLM
image as the simulator), and a real Prometheus scraping them. See docs/local-cluster.md.
"""

from specguard.testing._binaries import MissingBinariesError, find_binaries
from specguard.testing._cluster import LocalCluster
from specguard.testing._images import HOST_IMAGE, Launch
from specguard.testing._kubelet import KubeletConfig, ProcessKubelet
from specguard.testing._nodes import NodeSpec
from specguard.testing._prometheus import PrometheusServer

__all__ = [
    "HOST_IMAGE",
    "KubeletConfig",
    "Launch",
    "LocalCluster",
    "MissingBinariesError",
    "NodeSpec",
    "ProcessKubelet",
    "PrometheusServer",
    "find_binaries",
]
