"""The local control plane with real objects: Deployments become simulator processes at
their pod IPs, RBAC applies to a pod's process, the scheduler honours GPU capacity, the
kubelet restarts, probes and terminates like a kubelet, Prometheus scrapes pods, and
teardown leaves no process behind."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from specguard_testkit import (
    HOST_IMAGE,
    KubeletConfig,
    LocalCluster,
    ProcessKubelet,
    PrometheusServer,
)
from specguard_testkit._procs import ProcStat, group_members, proc_stat
from specguard_testkit._wait import wait_until

pytestmark = pytest.mark.cluster

STANDIN = str(Path(__file__).with_name("standin_server.py"))
VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"


def list_pods(cluster: LocalCluster, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    with cluster.access.client() as api:
        response = api.get(f"/api/v1/namespaces/{namespace}/pods",
                           params={"labelSelector": selector})  # fmt: skip
        response.raise_for_status()
        items: list[dict[str, Any]] = response.json()["items"]
        return items


def get_pod(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    with cluster.access.client() as api:
        response = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if response.status_code == 404:
            return None
        response.raise_for_status()
        pod: dict[str, Any] = response.json()
        return pod


def pod_when(
    cluster: LocalCluster, namespace: str, name: str, predicate: Callable[[dict[str, Any]], bool]
) -> Callable[[], dict[str, Any] | None]:
    """A probe for wait_until: the pod once ``predicate`` holds for it."""

    def probe() -> dict[str, Any] | None:
        pod = get_pod(cluster, namespace, name)
        return pod if pod is not None and predicate(pod) else None

    return probe


def phase_in(*phases: str) -> Callable[[dict[str, Any]], bool]:
    return lambda pod: (pod.get("status") or {}).get("phase") in phases


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"


def pids_of(kubelet: ProcessKubelet, namespace: str) -> dict[str, int]:
    return {p.name: p.pids[c] for p in kubelet.pods() if p.namespace == namespace
            for c in p.pids}  # fmt: skip


def standin_pod(name: str, tag: str, *, port: int = 9000, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": HOST_IMAGE,
        "command": ["python", STANDIN, str(port), tag],
        "ports": [{"containerPort": port, "name": "http"}],
    }
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": spec.pop("labels", {"app": name})},
        "spec": {"containers": [container], **spec},
    }


def create_pod(cluster: LocalCluster, namespace: str, pod: dict[str, Any]) -> None:
    """Create, retrying while the namespace's service-account token does not exist yet
    (the ServiceAccount admission plugin refuses pods until it does)."""
    with cluster.access.client() as api:

        def attempt() -> bool:
            response = api.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
            if response.status_code == 201:
                return True
            assert "service account" in response.text, response.text
            return False

        wait_until(attempt, timeout=20, interval=0.2, what=f"pod {pod['metadata']['name']}")


def models_at(ip: str, port: int) -> list[str] | None:
    try:
        body = httpx.get(f"http://{ip}:{port}/v1/models", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return None
    return [m["id"] for m in body["data"]]


def sim_deployment(name: str, served_name: str) -> dict[str, Any]:
    probe = {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 1}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "vllm",
                        "image": VLLM_IMAGE,
                        "command": ["vllm", "serve"],
                        "args": ["Qwen/Qwen3-8B", "--served-model-name", served_name,
                                 "--tensor-parallel-size", "1", "--port", "8000"],
                        "ports": [{"containerPort": 8000, "name": "http"}],
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                        "startupProbe": {**probe, "failureThreshold": 120},
                        "readinessProbe": probe,
                    }],
                },
            },
        },
    }  # fmt: skip


def serving(cluster: LocalCluster, namespace: str, app: str, model: str) -> list[dict[str, Any]]:
    """The deployment's pods when exactly two exist, all Ready and serving ``model``."""
    pods = [p for p in list_pods(cluster, namespace, f"app={app}")
            if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    everything = list_pods(cluster, namespace, f"app={app}")
    if len(pods) != 2 or len(everything) != 2 or not all(is_ready(p) for p in pods):
        return []
    if all(models_at(p["status"]["podIP"], 8000) == [model] for p in pods):
        return pods
    return []


@pytest.mark.slow
def test_deployment_becomes_simulator_processes_rolls_and_stops(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    apps = k8s.AppsV1Api(local_cluster.kube_client())
    apps.create_namespaced_deployment(ns, sim_deployment("sim", "qwen-a"))

    first = wait_until(lambda: serving(local_cluster, ns, "sim", "qwen-a"), timeout=90,
                       what="2 ready simulator pods serving qwen-a")  # fmt: skip
    ips = {p["status"]["podIP"] for p in first}
    assert len(ips) == 2 and all(ip.startswith("127.") and ip != "127.0.0.1" for ip in ips)
    old_pids = pids_of(kubelet, ns)
    assert set(old_pids) == {p["metadata"]["name"] for p in first}
    assert all(alive(pid) for pid in old_pids.values())
    assert "specguard-sim" in local_cluster.logs(ns, first[0]["metadata"]["name"])

    # New args -> a new ReplicaSet: new processes start, the old ones stop.
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": [
        "Qwen/Qwen3-8B", "--served-model-name", "qwen-b", "--port", "8000"]}]}}}}  # fmt: skip
    apps.patch_namespaced_deployment("sim", ns, patch)
    second = wait_until(lambda: serving(local_cluster, ns, "sim", "qwen-b"), timeout=120,
                        what="2 ready simulator pods serving qwen-b")  # fmt: skip
    assert not {p["metadata"]["name"] for p in second} & set(old_pids)
    wait_until(lambda: not any(alive(pid) for pid in old_pids.values()), timeout=20,
               what="old simulator processes gone")  # fmt: skip
    new_pids = pids_of(kubelet, ns)
    assert len(new_pids) == 2 and all(alive(pid) for pid in new_pids.values())

    apps.delete_namespaced_deployment("sim", ns, propagation_policy="Foreground")
    wait_until(lambda: not list_pods(local_cluster, ns, "app=sim"), timeout=60,
               what="pods of the deleted deployment gone")  # fmt: skip
    wait_until(lambda: not any(alive(pid) for pid in new_pids.values()), timeout=20,
               what="simulator processes gone")  # fmt: skip
    assert not pids_of(kubelet, ns)


RBAC_PROBE = """
import os
from kubernetes import client, config
config.load_kube_config()
v1 = client.CoreV1Api()
ns = os.environ["POD_NAMESPACE"]
print("pods:", len(v1.list_namespaced_pod(ns).items))
try:
    v1.list_namespaced_secret(ns)
    print("secrets: allowed")
except client.ApiException as exc:
    print("secrets:", exc.status)
"""


def test_pod_process_has_exactly_its_service_accounts_rbac(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    rbac = k8s.RbacAuthorizationV1Api(local_cluster.kube_client())
    core = k8s.CoreV1Api(local_cluster.kube_client())
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reader"}})
    core.create_namespaced_secret(ns, {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    rbac.create_namespaced_role(ns, {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "reader-reads-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    })  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rbac-probe"},
        "spec": {
            "serviceAccountName": "reader",
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": HOST_IMAGE,
                            "command": ["python", "-c", RBAC_PROBE]}],
        },
    }  # fmt: skip
    create_pod(local_cluster, ns, pod)
    done = wait_until(pod_when(local_cluster, ns, "rbac-probe", phase_in("Succeeded", "Failed")),
                      timeout=60, what="rbac probe pod finished")  # fmt: skip
    output = local_cluster.logs(ns, "rbac-probe")
    assert done["status"]["phase"] == "Succeeded", output
    assert "pods: 1" in output
    assert "secrets: 403" in output


def test_gpu_capacity_is_honoured_by_the_scheduler(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    (node,) = local_cluster.add_gpu_nodes(1, gpus=8, prefix="gpu-capacity")
    for index in range(3):
        pod = standin_pod(
            f"tp4-{index}", "tp4", labels={"app": "tp4"},
            nodeSelector={"kubernetes.io/hostname": node},
            container={"resources": {"limits": {"nvidia.com/gpu": 4}}},
        )  # fmt: skip
        create_pod(local_cluster, ns, pod)

    def placed() -> tuple[list[str], dict[str, Any]] | None:
        pods = list_pods(local_cluster, ns, "app=tp4")
        running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        pending = [p for p in pods if p["status"].get("phase") == "Pending"
                   and any(c["type"] == "PodScheduled" and c["status"] == "False"
                           for c in p["status"].get("conditions") or [])]  # fmt: skip
        return (running, pending[0]) if len(running) == 2 and len(pending) == 1 else None

    running, pending = wait_until(placed, timeout=60, what="two TP-4 pods running, one pending")
    scheduled = next(c for c in pending["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["reason"] == "Unschedulable"
    assert "nvidia.com/gpu" in scheduled["message"]
    assert not pending["spec"].get("nodeName")

    # Freeing 4 GPUs lets the pending pod in.
    with local_cluster.access.client() as api:
        api.delete(f"/api/v1/namespaces/{ns}/pods/{running[0]}").raise_for_status()
    name = pending["metadata"]["name"]
    wait_until(pod_when(local_cluster, ns, name, phase_in("Running")), timeout=60,
               what="pending TP-4 pod running once GPUs were freed")  # fmt: skip


def test_crashing_container_restarts_with_back_off(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    pod = standin_pod("crasher", "c", container={
        "command": ["python", "-c", "import sys; print('crashing now'); sys.exit(3)"]})  # fmt: skip
    create_pod(local_cluster, ns, pod)
    seen_backoff: list[bool] = []

    def restarted_twice() -> dict[str, Any] | None:
        current = get_pod(local_cluster, ns, "crasher")
        if current is None or not current["status"].get("containerStatuses"):
            return None
        status = current["status"]["containerStatuses"][0]
        if status["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff":
            seen_backoff.append(True)
        return status if status["restartCount"] >= 2 else None

    status = wait_until(restarted_twice, timeout=60, interval=0.05, what="two restarts")
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert seen_backoff, "CrashLoopBackOff was never reported between restarts"
    assert "crashing now" in local_cluster.logs(ns, "crasher", previous=True)


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def test_startup_and_readiness_probes_gate_readiness(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    health = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1}
    pod = standin_pod("slow", "s", container={
        "command": ["python", STANDIN, "9000", "s", "--ready-after", "3"],
        "startupProbe": {**health, "failureThreshold": 30},
        "readinessProbe": health,
    })  # fmt: skip
    create_pod(local_cluster, ns, pod)
    running = wait_until(pod_when(local_cluster, ns, "slow", phase_in("Running")), timeout=30,
                         what="pod running")  # fmt: skip
    status = running["status"]["containerStatuses"][0]
    assert not is_ready(running) and status["started"] is False
    ready = wait_until(pod_when(local_cluster, ns, "slow", is_ready), timeout=30,
                       what="pod ready")  # fmt: skip
    container = ready["status"]["containerStatuses"][0]
    assert container["started"] is True and container["restartCount"] == 0
    # /health answers 200 only 3 s after the server started; times have 1 s resolution.
    started_at = _seconds(container["state"]["running"]["startedAt"])
    ready_at = _seconds(next(c["lastTransitionTime"] for c in ready["status"]["conditions"]
                             if c["type"] == "Ready"))  # fmt: skip
    assert ready_at - started_at >= 2
    ip = ready["status"]["podIP"]
    assert httpx.get(f"http://{ip}:9000/health", timeout=2).status_code == 200


def test_delete_sends_sigterm_then_sigkill_after_the_grace_period(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    stubborn = standin_pod("stubborn", "x", terminationGracePeriodSeconds=2, container={
        "command": ["python", STANDIN, "9000", "x", "--ignore-term"]})  # fmt: skip
    polite = standin_pod("polite", "y", terminationGracePeriodSeconds=30)
    for pod in (stubborn, polite):
        create_pod(local_cluster, ns, pod)
    def both_started() -> dict[str, int] | None:
        found = pids_of(kubelet, ns)
        return found if len(found) == 2 else None

    pids = wait_until(both_started, timeout=30, what="both processes started")
    wait_until(lambda: all("listening" in local_cluster.logs(ns, n) for n in pids), timeout=30,
               what="both servers listening")  # fmt: skip
    began = time.monotonic()
    with local_cluster.access.client() as api:
        for name in pids:
            api.delete(f"/api/v1/namespaces/{ns}/pods/{name}").raise_for_status()
    # Removed before its 30 s grace ran out (the wait gives up at 25 s), and the log below
    # shows it was SIGTERM that ended it: no wall-clock bound that a busy machine could miss.
    wait_until(lambda: get_pod(local_cluster, ns, "polite") is None, timeout=25,
               what="polite pod removed")  # fmt: skip
    wait_until(lambda: get_pod(local_cluster, ns, "stubborn") is None, timeout=20,
               what="stubborn pod removed")  # fmt: skip
    stubborn_s = time.monotonic() - began
    assert not alive(pids["polite"]) and not alive(pids["stubborn"])
    # SIGTERM ends the polite server inside its 30 s grace; the stubborn one ignores SIGTERM
    # and lives out its 2 s grace before SIGKILL. The grace starts after `began`, so load
    # can only lengthen stubborn_s: a lower bound holds on a busy machine.
    assert stubborn_s >= 1.9
    assert "stopped by SIGTERM" in local_cluster.logs(ns, "polite")


@pytest.mark.prometheus
def test_prometheus_scrapes_a_pods_metrics(
    local_cluster: LocalCluster,
    kubelet: ProcessKubelet,
    prometheus: PrometheusServer,
    cluster_namespace: str,
) -> None:
    ns = cluster_namespace
    create_pod(local_cluster, ns, standin_pod("scraped", "m", labels={"app": "scraped"}))
    result = prometheus.wait_for(f'standin_up{{namespace="{ns}"}}', timeout=60)
    labels = result[0]["metric"]
    assert labels["pod"] == "scraped" and labels["app"] == "scraped" and labels["tag"] == "m"
    pod = get_pod(local_cluster, ns, "scraped")
    assert pod is not None
    assert labels["instance"] == f"{pod['status']['podIP']}:9000"


def ready_heartbeat(cluster: LocalCluster, node: str) -> float:
    with cluster.access.client() as api:
        response = api.get(f"/api/v1/nodes/{node}")
        response.raise_for_status()
    conditions = response.json()["status"]["conditions"]
    return _seconds(next(c["lastHeartbeatTime"] for c in conditions if c["type"] == "Ready"))


@pytest.mark.slow
def test_node_heartbeats_and_teardown_leaves_no_process_behind() -> None:
    before = {p.pid for p in _descendants(os.getpid())}  # the session's cluster, if any
    with LocalCluster() as cluster:
        (node,) = cluster.add_gpu_nodes(1)
        kubelet = cluster.start_kubelet(KubeletConfig(heartbeat_interval=1.0))
        cluster.start_prometheus()
        create_pod(cluster, "default", standin_pod("survivor", "t"))
        pod_pids = wait_until(lambda: pids_of(kubelet, "default"), timeout=30,
                              what="pod process")  # fmt: skip
        # The kubelet keeps the node's Ready condition fresh (times have 1 s resolution).
        first = ready_heartbeat(cluster, node)
        wait_until(lambda: ready_heartbeat(cluster, node) > first, timeout=10,
                   what="a newer Ready heartbeat")  # fmt: skip
        groups = cluster.process_group_ids()
        names = {r.name for r in cluster.processes.groups()}
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                "prometheus"} <= names  # fmt: skip
        assert set(pod_pids.values()) <= set(groups)
        assert all(group_members(g) for g in groups)
        # Beyond the recorded groups: every process started under this test (at any depth,
        # in any group) and every process whose command line names the cluster's work dir.
        started = {p for p in _descendants(os.getpid()) if p.pid not in before}
        started |= _mentioning(str(cluster.workdir))
        assert set(pod_pids.values()) <= {p.pid for p in started}
    leftovers = {g: group_members(g) for g in groups if group_members(g)}
    assert not leftovers
    still = [p for p in started if (now := proc_stat(p.pid)) and now.start_ticks == p.start_ticks
             and now.state != "Z"]  # fmt: skip
    assert not still


def _descendants(root: int) -> set[ProcStat]:
    stats = [s for e in os.listdir("/proc") if e.isdigit() and (s := proc_stat(int(e)))]
    found: set[ProcStat] = set()
    frontier = {root}
    while frontier:
        children = {s for s in stats if s.ppid in frontier} - found
        found |= children
        frontier = {s.pid for s in children}
    return found


def _mentioning(text: str) -> set[ProcStat]:
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline and (stat := proc_stat(int(entry))) is not None:
            found.add(stat)
    return found


ENV_PRINTER = """
import os
keys = ("FROM_SECRET", "FROM_CONFIGMAP", "CM_MODE", "MY_IP", "POD_IP", "EXPANDED", "KUBECONFIG")
for key in keys:
    print(f"{key}={os.environ.get(key)}")
"""


def test_env_is_resolved_from_secrets_configmaps_and_the_downward_api(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    core = k8s.CoreV1Api(local_cluster.kube_client())
    core.create_namespaced_secret(ns, {"metadata": {"name": "hf"}, "stringData": {"token": "t0k"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"},
                                           "data": {"level": "debug", "MODE": "fast"}})  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "env"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "env", "image": HOST_IMAGE, "command": ["python", "-c", ENV_PRINTER],
            "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CM_"}],
            "env": [
                {"name": "FROM_SECRET",
                 "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                {"name": "FROM_CONFIGMAP",
                 "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level"}}},
                {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "EXPANDED", "value": "http://$(MY_IP):8000"},
            ],
        }]},
    }  # fmt: skip
    create_pod(local_cluster, ns, pod)
    done = wait_until(pod_when(local_cluster, ns, "env", phase_in("Succeeded")), timeout=30,
                      what="env pod finished")  # fmt: skip
    ip = done["status"]["podIP"]
    lines = dict(line.split("=", 1) for line in local_cluster.logs(ns, "env").splitlines())
    assert lines["FROM_SECRET"] == "t0k" and lines["FROM_CONFIGMAP"] == "debug"
    assert lines["CM_MODE"] == "fast"
    assert lines["MY_IP"] == ip == lines["POD_IP"]
    assert lines["EXPANDED"] == f"http://{ip}:8000"
    assert lines["KUBECONFIG"].endswith("env.kubeconfig")


def test_init_containers_run_to_completion_first(
    local_cluster: LocalCluster, kubelet: ProcessKubelet, cluster_namespace: str
) -> None:
    ns = cluster_namespace
    # Containers of one pod share its working directory, like a shared emptyDir.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "init"},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": [{"name": "fetch", "image": HOST_IMAGE, "command": [
                "python", "-c", "import time; time.sleep(1); open('weights', 'w').write('w1')"]}],
            "containers": [{"name": "serve", "image": HOST_IMAGE, "command": [
                "python", "-c", "print('serving', open('weights').read())"]}],
        },
    }  # fmt: skip
    create_pod(local_cluster, ns, pod)
    done = wait_until(pod_when(local_cluster, ns, "init", phase_in("Succeeded", "Failed")),
                      timeout=30, what="init pod finished")  # fmt: skip
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    assert "serving w1" in local_cluster.logs(ns, "init", "serve")
    # Once the kubelet has let the pod go, its spec is unknown: the container must be named.
    wait_until(lambda: all(p.name != "init" for p in kubelet.pods()), timeout=10,
               what="kubelet done with the pod")  # fmt: skip
    with pytest.raises(LookupError, match="fetch, serve: name one"):
        local_cluster.logs(ns, "init")
