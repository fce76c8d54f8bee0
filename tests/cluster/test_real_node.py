"""Real nodes clean up after a run that died: the next cluster start removes what a
SIGKILLed owner left (containers, shims, mounts, cgroups, the network namespaces and the
bridge). The graceful path (``LocalCluster.stop``) is checked at the end of every e2e run
on real nodes (e2e/backends.py: NodeBackend.stop)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from specguard import __version__
from specguard_testkit import build_images
from specguard_testkit._binaries import IMAGE_SPECGUARD
from specguard_testkit._procs import reap_orphans
from specguard_testkit._realnode import leftovers, reap_orphan_nodes

pytestmark = [pytest.mark.cluster, pytest.mark.node, pytest.mark.slow]

OWNER = """
import json, sys
from specguard import __version__
from specguard_testkit import LocalCluster, RealNodeConfig
from pathlib import Path

cluster = LocalCluster(node_network=True).start()
(node,) = cluster.start_real_nodes(1, RealNodeConfig(gpus=1, images=(Path(sys.argv[1]),)))
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": sys.argv[2], "command": ["sleep", "600"],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
cluster.kubectl("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")
print(json.dumps({"cluster": cluster.cluster_id}), flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(1200)  # may build this checkout's image first
def test_a_killed_runs_nodes_are_cleaned_by_the_next_start() -> None:
    archive = build_images().specguard
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(archive), f"{IMAGE_SPECGUARD}:{__version__}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line, owner.stderr.read() if owner.stderr else ""
        cluster_id = json.loads(line)["cluster"]
        running = leftovers(cluster_id)
        kinds = {item.split()[0] for item in running}
        assert {"netns", "link", "mount", "cgroup", "directory", "process"} <= kinds, running
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(30)
    time.sleep(1)
    reap_orphans()  # the control plane and the node daemons: process groups
    assert cluster_id in reap_orphan_nodes()  # containers, shims, mounts, cgroups, network
    assert leftovers(cluster_id) == []
