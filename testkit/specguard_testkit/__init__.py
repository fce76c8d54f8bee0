"""specguard_testkit: a real local control plane for tests and the demo.

LocalCluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler as local
processes), fake GPU nodes, a process kubelet that runs pods as local processes (the vLLM
image as the simulator), real nodes (kubelet, containerd, runc, CNI, kube-proxy) that run
the images built from the Dockerfile as containers, and a real Prometheus scraping them.
See docs/local-cluster.md.
Also what `specguard demo` runs on it: where the binaries come from and the build script,
the command-line tools (``find_tool``: the project's .venv/bin, then PATH;
``kubectl_binary``), free ports, process-group inspection, the streaming client of the
tests, and a router in a process of its own. Real vLLM (the CPU build) and its tiny models
for the real-vLLM tier: ``find_real_vllm``, ``serve_argv``, ``start_vllm``.
"""

from specguard.sim import SimProcess
from specguard_testkit._binaries import (
    ImageArchives,
    MissingBinariesError,
    build_images,
    build_script,
    cache_bin_dir,
    find_binaries,
    find_node_binaries,
    find_tool,
    install_tools_script,
    kubectl_binary,
)
from specguard_testkit._cluster import LocalCluster
from specguard_testkit._images import HOST_IMAGE, ImageRunner, Launch
from specguard_testkit._kubelet import KubeletConfig, ProcessKubelet
from specguard_testkit._loadclient import StreamRecord, stream_once
from specguard_testkit._nodes import NodeSpec
from specguard_testkit._ports import free_port
from specguard_testkit._procs import group_members, group_pss_mib, proc_stat
from specguard_testkit._prometheus import PrometheusServer
from specguard_testkit._realnode import RealNode, RealNodeConfig
from specguard_testkit._realvllm import (
    RealVllm,
    RealVllmMissingError,
    find_real_vllm,
    serve_argv,
    start_vllm,
)
from specguard_testkit._routerproc import router_process

__all__ = [
    "HOST_IMAGE",
    "ImageArchives",
    "ImageRunner",
    "KubeletConfig",
    "Launch",
    "LocalCluster",
    "MissingBinariesError",
    "NodeSpec",
    "ProcessKubelet",
    "PrometheusServer",
    "RealNode",
    "RealNodeConfig",
    "RealVllm",
    "RealVllmMissingError",
    "SimProcess",
    "StreamRecord",
    "build_images",
    "build_script",
    "cache_bin_dir",
    "find_binaries",
    "find_node_binaries",
    "find_real_vllm",
    "find_tool",
    "free_port",
    "group_members",
    "group_pss_mib",
    "install_tools_script",
    "kubectl_binary",
    "proc_stat",
    "router_process",
    "serve_argv",
    "start_vllm",
    "stream_once",
]
