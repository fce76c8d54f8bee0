"""The user's path, end to end: helm install, a SpeculativeDeployment served through the
router, a rollback seen with kubectl, a GitOps re-apply, RBAC and Pod Security, helm
upgrade and uninstall. The steps run in order and share one cluster (backend fixture).

Needs the operator (`specguard run`). The kind backend runs the same steps on a kind
cluster with the image built from the Dockerfile.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from lupa import LuaRuntime

from specguard.api import constants as c
from specguard_testkit import kubectl_binary

from .backends import CHART, Backend, Tools

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RELEASE = "specguard"
SYSTEM = "specguard-system"  # the operator's namespace: enforces Pod Security restricted
WORKLOAD = "llm-e2e"  # the SpeculativeDeployment's namespace
RESTRICTED = "restricted-e2e"  # only for the router pod's admission check
NAME = "qwen"
SERVICE_ACCOUNT = f"system:serviceaccount:{SYSTEM}:{RELEASE}"
GITOPS_MANAGER = "argocd-controller"
HEALTH_LUA = (CHART / "argocd" / "health.lua").read_text()
STATE: dict[str, Any] = {}  # what later steps need from earlier ones


def manifest(image: str) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION, "kind": c.KIND,
        "metadata": {"name": NAME, "namespace": WORKLOAD},
        "spec": {
            "model": {"name": "Qwen/Qwen3-8B", "servedModelName": "qwen"},
            "runtime": {"image": image, "tensorParallelSize": 1,
                        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}},
            "replicas": 2,
            "drafter": {"method": "ngram", "numSpeculativeTokens": 4},
            "shadow": {"replicas": 1},
            "evaluation": {"window": "10s", "minRequestsPerArm": 20, "consecutiveWindows": 2},
            "rollback": {"cooldown": "10m", "startupDeadline": "2m"},
        },
    }  # fmt: skip


def argocd_health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(HEALTH_LUA)
    return str(result["status"]), str(result["message"])


def wait_for(what: str, probe: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def sd(tools: Tools) -> dict[str, Any]:
    obj: dict[str, Any] = tools.json(
        "-n", WORKLOAD, "get", f"{c.PLURAL}.{c.GROUP}", NAME, "--show-managed-fields"
    )
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


def server_minor(tools: Tools) -> int:
    version = json.loads(tools.kubectl("version", "-o", "json").stdout)["serverVersion"]
    return int(str(version["minor"]).rstrip("+"))


def ready_router_pod(tools: Tools) -> str:
    def find() -> str | None:
        pods = tools.json("-n", WORKLOAD, "get", "pods", "-l", f"{c.LABEL_ROUTER}={NAME}")
        for pod in pods["items"]:
            conditions = pod["status"].get("conditions") or []
            if any(x["type"] == "Ready" and x["status"] == "True" for x in conditions):
                return str(pod["metadata"]["name"])
        return None

    name: str = wait_for("a ready router pod", find, 180)
    return name


async def _load(base: str, seconds: float, concurrency: int, tools_call: bool) -> dict[str, int]:
    outcomes: dict[str, int] = {}
    body: dict[str, Any] = {
        "model": "qwen", "stream": True, "max_tokens": 48,
        "messages": [{"role": "user", "content": "Solve 37 * 41 step by step."}],
    }  # fmt: skip
    if tools_call:
        body["tools"] = [{"type": "function", "function": {
            "name": "lookup", "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip
        body["messages"] = [{"role": "user", "content": "Look up the weather in Oslo."}]
    end = time.monotonic() + seconds

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            try:
                async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                    async for _ in reply.aiter_bytes():
                        pass
                    key = str(reply.status_code)
            except httpx.HTTPError as error:
                key = type(error).__name__
            outcomes[key] = outcomes.get(key, 0) + 1

    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return outcomes


def drive_load(backend: Backend, tools: Tools, seconds: float, concurrency: int = 8,
               tools_call: bool = False) -> dict[str, int]:  # fmt: skip
    host, port = backend.router_address(WORKLOAD, ready_router_pod(tools))
    return asyncio.run(_load(f"http://{host}:{port}", seconds, concurrency, tools_call))


@contextmanager
def watching(tools: Tools) -> Iterator[list[dict[str, Any]]]:
    """Every version of the resource the API server sends while the block runs
    (`kubectl get -w -o json`): each status the operator wrote."""
    seen: list[dict[str, Any]] = []
    proc = subprocess.Popen(
        [str(kubectl_binary()), f"--kubeconfig={tools.kubeconfig}", "-n", WORKLOAD, "get",
         f"{c.PLURAL}.{c.GROUP}", NAME, "-w", "-o", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in proc.stdout:
            buffer += line
            try:
                obj, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                continue
            seen.append(obj)
            buffer = buffer.lstrip()[end:]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield seen
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(10)


def swapping(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return bool((status.get("arms") or {}).get("swapping")) or (
        status.get("targetMode") not in (None, status.get("mode"))
    )


def operator_metrics(backend: Backend, tools: Tools) -> str:
    """The operator pod's /metrics, as Prometheus would scrape it."""
    (pod,) = tools.json("-n", SYSTEM, "get", "pods", "-l",
                        "app.kubernetes.io/component=operator")["items"]  # fmt: skip
    host, port = backend.pod_address(SYSTEM, pod["metadata"]["name"], 9090)
    return httpx.get(f"http://{host}:{port}/metrics", timeout=10).text


def source_up(backend: Backend, tools: Tools) -> float:
    """The operator's specguard_source_up for the resource (the judge-degraded alert's input)."""
    for line in operator_metrics(backend, tools).splitlines():
        if line.startswith("specguard_source_up{") and f'name="{NAME}"' in line:
            return float(line.rpartition(" ")[2])
    raise AssertionError("no specguard_source_up series for the resource")


def apply_as_gitops(tools: Tools, obj: dict[str, Any]) -> None:
    """What Argo CD and Flux do: server-side apply under their own field manager, without
    forcing conflicts (a conflict with the operator's fields would fail here)."""
    tools.kubectl("apply", "--server-side", f"--field-manager={GITOPS_MANAGER}", "-f", "-",
                  stdin=yaml.safe_dump(obj))  # fmt: skip


# ------------------------------------------------------------------------- the steps


# The first step also starts the backend: on real nodes that may build this checkout's
# image first (a minute or more after a change under operator/; setup.sh built it in CI).
@pytest.mark.timeout(1200)
def test_helm_install(backend: Backend, tools: Tools, tmp_path: Path) -> None:
    for namespace in (SYSTEM, WORKLOAD, RESTRICTED):
        tools.kubectl("create", "namespace", namespace)
    for namespace in (SYSTEM, RESTRICTED):
        tools.kubectl("label", "namespace", namespace,
                      "pod-security.kubernetes.io/enforce=restricted")  # fmt: skip
    # vLLM pods need what baseline allows (a memory-backed /dev/shm, no forced non-root).
    tools.kubectl("label", "namespace", WORKLOAD, "pod-security.kubernetes.io/enforce=baseline")
    tools.helm("install", RELEASE, str(CHART), "-n", SYSTEM, "--wait", "--timeout", "240s",
               "--set", f"image.repository={backend.image_repository}",
               "--set", f"image.tag={backend.image_tag}")  # fmt: skip
    tools.kubectl("wait", "--for=condition=Established", f"crd/{c.CRD_NAME}", "--timeout=60s")
    tools.kubectl("-n", SYSTEM, "wait", "--for=condition=Available", f"deployment/{RELEASE}",
                  "--timeout=180s")  # fmt: skip
    (pod,) = tools.json("-n", SYSTEM, "get", "pods", "-l",
                        "app.kubernetes.io/component=operator")["items"]  # fmt: skip
    assert pod["spec"]["serviceAccountName"] == RELEASE
    STATE["operator_pod"] = pod["metadata"]["name"]


def test_operator_rbac_denies_what_it_must_not_do(tools: Tools) -> None:
    def can(*args: str) -> bool:
        done = tools.kubectl("auth", "can-i", *args, f"--as={SERVICE_ACCOUNT}", check=False)
        return done.stdout.strip() == "yes"

    assert can("patch", "deployments.apps", "-n", WORKLOAD)
    assert can("create", "roles.rbac.authorization.k8s.io", "-n", WORKLOAD)
    assert can("patch", f"{c.PLURAL}.{c.GROUP}", "--subresource=status", "-n", WORKLOAD)
    for forbidden in (("get", "secrets", "-n", WORKLOAD), ("list", "secrets", "-A"),
                      ("create", "pods/exec", "-n", WORKLOAD),
                      ("update", f"{c.PLURAL}.{c.GROUP}", "-n", WORKLOAD),
                      ("patch", f"{c.PLURAL}.{c.GROUP}", "-n", WORKLOAD),
                      ("bind", "clusterroles.rbac.authorization.k8s.io"),
                      ("delete", "deployments.apps", "-n", WORKLOAD)):  # fmt: skip
        assert not can(*forbidden), forbidden
    # A real request as the operator: 403.
    denied = tools.kubectl("-n", WORKLOAD, "get", "secrets", f"--as={SERVICE_ACCOUNT}",
                           check=False)  # fmt: skip
    assert denied.returncode != 0 and "Forbidden" in denied.stderr, denied.stderr


def test_speculative_deployment_serves_and_is_healthy(backend: Backend, tools: Tools) -> None:
    apply_as_gitops(tools, manifest(backend.vllm_image))

    def speculating() -> bool:
        obj = sd(tools)
        return (obj.get("status") or {}).get("mode") == c.ARM_SPECULATIVE and condition(
            obj, c.CONDITION_READY
        ).get("status") == "True"

    wait_for("mode speculative and Ready", speculating, 300)
    outcomes = drive_load(backend, tools, seconds=20)
    assert outcomes.get("200", 0) > 0 and set(outcomes) == {"200"}, outcomes
    obj = sd(tools)
    STATE["generation"] = obj["metadata"]["generation"]
    assert argocd_health(obj)[0] == "Healthy", (argocd_health(obj), obj["status"])
    # The operator's own series that the chart's dashboard and alerts read, live: the
    # verdict's ratio with its CI once a window with traffic was judged.
    wait_for("a verdict with a ratio", lambda: (sd(tools)["status"].get("lastVerdict") or {})
             .get("ratio") is not None, 60)  # fmt: skip
    text = operator_metrics(backend, tools)
    for series in ("specguard_mode{", "specguard_tpot_ratio{", 'bound="lower"', 'bound="upper"',
                   "specguard_verdicts_total{", "specguard_source_up{"):  # fmt: skip
        assert series in text, f"{series} not in the operator's /metrics"


def exec_in(tools: Tools, namespace: str, pod: str, *argv: str) -> str:
    done = tools.kubectl("-n", namespace, "exec", pod, "--", *argv, check=False, timeout=60)
    assert done.returncode == 0, f"kubectl exec {pod} -- {argv}: {done.stderr}{done.stdout}"
    return done.stdout


def pods_of(tools: Tools, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods: dict[str, Any] = tools.json("-n", namespace, "get", "pods", "-l", selector)
    return list(pods["items"])


# What a container may show of itself under the chart's security context (read in it).
SELF_CHECK = ("id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; "
              "touch /opt/specguard/x 2>&1; touch /tmp/x 2>&1 && echo tmp-writable; "
              "true")  # fmt: skip


@pytest.mark.real_kubelet
def test_pods_are_containers_under_the_charts_security_context(
    backend: Backend, tools: Tools
) -> None:
    """The operator, router and vLLM pods run as containers of the built images; kubectl
    exec shows the operator and router under the security context the chart and the
    renderer ask for (non-root, no capabilities, no privilege escalation, read-only root,
    RuntimeDefault seccomp), and kubectl logs shows what they print."""
    operator = STATE["operator_pod"]
    routers = pods_of(tools, WORKLOAD, f"{c.LABEL_ROUTER}={NAME}")
    vllm = pods_of(tools, WORKLOAD, f"{c.LABEL_APP_INSTANCE}={NAME},{c.LABEL_ARM}")
    assert routers and len(vllm) >= 3, (routers, vllm)
    for pod in [tools.json("-n", SYSTEM, "get", "pod", operator), *routers, *vllm]:
        for status in pod["status"]["containerStatuses"]:
            assert status["containerID"].startswith("containerd://"), status
            assert status["ready"] and "running" in status["state"], status
    for namespace, pod in ((SYSTEM, operator), (WORKLOAD, routers[0]["metadata"]["name"])):
        lines = exec_in(tools, namespace, pod, "sh", "-c", SELF_CHECK).splitlines()
        status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
        assert lines[0] == str(c.SPECGUARD_UID), (pod, lines)
        assert status == {"CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}, (
            pod, status)  # fmt: skip
        assert "touch: cannot touch '/opt/specguard/x': Read-only file system" in lines, lines
        # The chart gives the operator a /tmp (an emptyDir); the router needs none.
        assert ("tmp-writable" in lines) == (namespace == SYSTEM), (pod, lines)
    # vLLM pods run under baseline: the stand-in's own non-root user, a writable root.
    vllm_pod = vllm[0]["metadata"]["name"]
    assert exec_in(tools, WORKLOAD, vllm_pod, "id", "-u").strip() == str(c.SPECGUARD_UID)
    # kubectl logs: the kubelet serves what each container printed.
    router_log = tools.kubectl("-n", WORKLOAD, "logs", routers[0]["metadata"]["name"]).stdout
    assert "router listening on" in router_log, router_log[-2000:]
    sim_log = tools.kubectl("-n", WORKLOAD, "logs", vllm_pod).stdout
    assert "specguard-sim: listening on" in sim_log, sim_log[-2000:]
    operator_log = tools.kubectl("-n", SYSTEM, "logs", operator, "--tail=2000").stdout
    assert operator_log.strip(), "the operator's log is empty"


PY_GET = """
import json, os, ssl, sys, urllib.request
url, auth = sys.argv[1], len(sys.argv) > 2
headers, context = {}, None
if auth:
    sa = '/var/run/secrets/kubernetes.io/serviceaccount/'
    headers['Authorization'] = 'Bearer ' + open(sa + 'token').read()
    context = ssl.create_default_context(cafile=sa + 'ca.crt')
request = urllib.request.Request(url, headers=headers)
print(urllib.request.urlopen(request, timeout=20, context=context).read().decode())
"""


@pytest.mark.real_kubelet
def test_services_route_through_kube_proxy(backend: Backend, tools: Tools) -> None:
    """From inside a pod, as a client in the cluster would: the `kubernetes` Service
    reaches the API server (in-cluster config, no DNS), the SpeculativeDeployment's front
    Service reaches the router, and an arm's Service its vLLM pods."""
    router = pods_of(tools, WORKLOAD, f"{c.LABEL_ROUTER}={NAME}")[0]["metadata"]["name"]
    python = "/opt/specguard/bin/python"
    env = exec_in(tools, WORKLOAD, router, "env")
    host = next(line.split("=", 1)[1] for line in env.splitlines()
                if line.startswith("KUBERNETES_SERVICE_HOST="))  # fmt: skip
    kubernetes_ip = tools.json("-n", "default", "get", "service", "kubernetes")["spec"]["clusterIP"]
    assert host == kubernetes_ip
    version = json.loads(exec_in(tools, WORKLOAD, router, python, "-c", PY_GET,
                                 f"https://{host}:443/version", "auth"))  # fmt: skip
    server = json.loads(tools.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"] == server["gitVersion"]
    for service, path in ((NAME, "/v1/models"),
                          (c.arm_deployment_name(NAME, c.ARM_BASELINE), "/v1/models")):  # fmt: skip
        spec = tools.json("-n", WORKLOAD, "get", "service", service)["spec"]
        url = f"http://{spec['clusterIP']}:{spec['ports'][0]['port']}{path}"
        models = json.loads(exec_in(tools, WORKLOAD, router, python, "-c", PY_GET, url))
        assert [model["id"] for model in models["data"]] == ["qwen"], (service, models)
    # The Service's endpoints are the pods' real addresses (core Endpoints accept them).
    endpoints = tools.json("-n", WORKLOAD, "get", "endpointslices", "-l",
                           f"kubernetes.io/service-name={NAME}")["items"]  # fmt: skip
    addresses = {a for s in endpoints for e in s.get("endpoints") or [] for a in e["addresses"]}
    router_ip = tools.json("-n", WORKLOAD, "get", "pod", router)["status"]["podIP"]
    assert router_ip in addresses and not router_ip.startswith("127."), addresses


PROBED = "probes-e2e"


def probed_pod(name: str, readiness_path: str, liveness_port: int) -> dict[str, Any]:
    """A pod of the specguard image serving the simulator on 8000, probed by the kubelet."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": PROBED, "labels": {"app": "probed"}},
        "spec": {
            "securityContext": {"runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "sim", "image": c.specguard_image(),
                "imagePullPolicy": "IfNotPresent",
                "args": ["sim", "qwen", "--port", "8000", "--startup-delay", "0"],
                "ports": [{"name": "http", "containerPort": 8000}],
                "readinessProbe": {"httpGet": {"path": readiness_path, "port": "http"},
                                   "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": liveness_port}, "periodSeconds": 2,
                                  "failureThreshold": 2, "initialDelaySeconds": 2},
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }  # fmt: skip


@pytest.mark.real_kubelet
def test_probes_gate_readiness_and_restart_containers(backend: Backend, tools: Tools) -> None:
    """The kubelet runs the probes: a pod whose readiness probe passes is Ready and a
    ready endpoint of its Service; one whose readiness fails is neither; one whose
    liveness probe fails is restarted (restartCount, an Unhealthy event)."""
    tools.kubectl("create", "namespace", PROBED)
    tools.kubectl("label", "namespace", PROBED, "pod-security.kubernetes.io/enforce=restricted")
    pods = {"healthy": probed_pod("healthy", "/health", 8000),
            "unready": probed_pod("unready", "/no-such-path", 8000),
            "dying": probed_pod("dying", "/health", 8001)}  # fmt: skip
    ports = [{"port": 80, "targetPort": "http"}]
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "probed", "namespace": PROBED},
               "spec": {"selector": {"app": "probed"}, "ports": ports}}  # fmt: skip
    tools.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": [*pods.values(), service]}))
    tools.kubectl("-n", PROBED, "wait", "--for=condition=Ready", "pod/healthy", "--timeout=120s")

    def restarted() -> dict[str, Any] | None:
        pod = tools.json("-n", PROBED, "get", "pod", "dying")
        statuses = pod["status"].get("containerStatuses") or [{}]
        return pod if statuses[0].get("restartCount", 0) >= 1 else None

    wait_for("the dying pod's container restarted", restarted, 120)
    unready = tools.json("-n", PROBED, "get", "pod", "unready")["status"]
    assert unready["phase"] == "Running" and not unready["containerStatuses"][0]["ready"]
    events = tools.json("-n", PROBED, "get", "events", "--field-selector",
                        "involvedObject.name=dying")["items"]  # fmt: skip
    assert any(e["reason"] == "Unhealthy" and "Liveness probe failed" in e["message"]
               for e in events), [(e["reason"], e["message"]) for e in events]  # fmt: skip

    def ready_endpoints() -> dict[str, bool] | None:
        slices = tools.json("-n", PROBED, "get", "endpointslices", "-l",
                            "kubernetes.io/service-name=probed")["items"]  # fmt: skip
        seen = {e["targetRef"]["name"]: bool(e["conditions"].get("ready"))
                for s in slices for e in s.get("endpoints") or []}  # fmt: skip
        return seen if {"healthy", "unready"} <= set(seen) else None

    seen = wait_for("the probed pods in the Service's endpoints", ready_endpoints, 60)
    assert seen["healthy"] and not seen["unready"], seen
    tools.kubectl("delete", "namespace", PROBED, "--wait=false")


def test_gitops_reapply_never_conflicts_and_operator_never_writes_spec(
    backend: Backend, tools: Tools
) -> None:
    obj = sd(tools)
    apply_as_gitops(tools, manifest(backend.vllm_image))  # the same manifest, again
    again = sd(tools)
    assert again["metadata"]["generation"] == obj["metadata"]["generation"]
    for entry in again["metadata"]["managedFields"]:
        if entry["manager"] in (GITOPS_MANAGER, "kubectl", "kubectl-client-side-apply"):
            continue
        fields = json.dumps(entry.get("fieldsV1", {}))
        assert '"f:spec"' not in fields, f"{entry['manager']} owns spec fields: {fields}"


def test_judge_degraded_when_the_sample_source_is_down(backend: Backend, tools: Tools) -> None:
    """The sample source fails (a Prometheus nobody serves): JudgeDegraded, Degraded in
    Argo CD, the mode unchanged; back to the router source, an idle window is Healthy."""
    broken = manifest(backend.vllm_image)
    broken["spec"]["metricsSource"] = {"type": "prometheus", "prometheusUrl": "http://127.0.0.1:9"}
    apply_as_gitops(tools, broken)

    def degraded() -> dict[str, Any] | None:
        obj = sd(tools)
        judged = condition(obj, c.CONDITION_JUDGE_DEGRADED)
        return obj if judged.get("reason") == "SourceUnavailable" else None

    obj = wait_for("JudgeDegraded SourceUnavailable", degraded, 90)
    assert condition(obj, c.CONDITION_JUDGE_DEGRADED)["status"] == "True"
    status, message = argocd_health(obj)
    assert status == "Degraded" and message.startswith("Judge degraded: "), (status, message)
    assert obj["status"]["mode"] == c.ARM_SPECULATIVE
    assert source_up(backend, tools) == 0  # what the SpecguardJudgeDegraded alert reads
    apply_as_gitops(tools, manifest(backend.vllm_image))

    def idle() -> dict[str, Any] | None:
        obj = sd(tools)
        judged = condition(obj, c.CONDITION_JUDGE_DEGRADED)
        fresh = obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        return obj if fresh and judged.get("reason") == "NoSamples" else None

    obj = wait_for("an idle window judged (NoSamples)", idle, 90)
    status, message = argocd_health(obj)
    assert status == "Healthy" and "nothing judged" in message, (status, message)
    assert source_up(backend, tools) == 1  # no traffic is no alert


def test_rollback_seen_with_kubectl(backend: Backend, tools: Tools) -> None:
    """A new drafter build that fails requests under traffic: the error-rate guardrail.
    Every status the operator writes meanwhile goes through the Argo CD health check."""
    with watching(tools) as seen:
        apply_as_gitops(tools, manifest(backend.faulty_vllm_image))
        generation = sd(tools)["metadata"]["generation"]
        wait_for("the new generation observed",
                 lambda: (sd(tools).get("status") or {}).get("observedGeneration") == generation,
                 120)  # fmt: skip

        def rolled_back() -> bool:
            drive_load(backend, tools, seconds=10)
            return condition(sd(tools), c.CONDITION_ROLLED_BACK).get("status") == "True"

        wait_for("RolledBack=True", rolled_back, 420, every=0)
        tools.kubectl("-n", WORKLOAD, "wait", f"{c.PLURAL}.{c.GROUP}/{NAME}",
                      "--for=condition=RolledBack", "--timeout=60s")  # fmt: skip
        obj = wait_for("the swap to finish",
                       lambda: None if swapping(sd(tools)) else sd(tools), 300)  # fmt: skip
        time.sleep(2)  # the watch brings the last writes
    events = tools.kubectl("-n", WORKLOAD, "get", "events", "--field-selector",
                           f"involvedObject.name={NAME}", "-o", "json").stdout  # fmt: skip
    items = json.loads(events)["items"]
    reasons = [event["reason"] for event in items]
    assert "RolledBack" in reasons and "SwapComplete" in reasons, reasons
    print("\n" + "\n".join(f"Event {e['type']} {e['reason']}: {e['message']}" for e in items
                            if e["reason"] in ("RolledBack", "SwapComplete")))  # fmt: skip
    assert obj["status"]["mode"] == c.ARM_BASELINE
    status, message = argocd_health(obj)
    assert status == "Degraded" and "Rolled back" in message, (status, message)
    # What Argo CD showed for each status the operator wrote, in order (repeats merged).
    shown: list[tuple[str, bool]] = []
    for version in seen:
        step = (argocd_health(version)[0], swapping(version))
        if not shown or shown[-1] != step:
            shown.append(step)
    print(f"\nArgo CD health over the rollback (status, swapping): {shown}")
    assert ("Progressing", True) in shown, shown
    assert all(health == "Progressing" for health, moving in shown if moving), shown
    assert shown[-1] == ("Degraded", False), shown
    # Still no spec writes by the operator, and a re-apply still does not conflict.
    apply_as_gitops(tools, manifest(backend.faulty_vllm_image))
    assert sd(tools)["metadata"]["generation"] == generation


def test_router_and_operator_pods_meet_pod_security_restricted(tools: Tools) -> None:
    if server_minor(tools) < 25:
        pytest.fail("Pod Security admission needs a Kubernetes >= 1.25 server; this one is "
                    "older (build the current control plane: docs/local-cluster.md)")  # fmt: skip
    # The operator pod runs in a namespace that enforces restricted: it was admitted.
    assert tools.json("-n", SYSTEM, "get", "pod", STATE["operator_pod"])["status"]["phase"]
    router = tools.json("-n", WORKLOAD, "get", "deployment", c.router_name(NAME))
    template = router["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "router-admission", "namespace": RESTRICTED},
           "spec": {**template["spec"], "serviceAccountName": "default"}}  # fmt: skip
    done = tools.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod),
                         check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_helm_upgrade_to_namespaced(tools: Tools) -> None:
    started = time.monotonic()
    tools.helm("upgrade", RELEASE, str(CHART), "-n", SYSTEM, "--reuse-values", "--wait",
               "--timeout", "240s", "--set", f"watchNamespaces={{{WORKLOAD}}}")  # fmt: skip
    (pod,) = wait_for(
        "one new operator pod",
        lambda: [p for p in tools.json("-n", SYSTEM, "get", "pods", "-l",
                                       "app.kubernetes.io/component=operator")["items"]
                 if p["metadata"]["name"] != STATE["operator_pod"]
                 and "deletionTimestamp" not in p["metadata"]] or None,
        180,
    )  # fmt: skip
    STATE["operator_pod"] = pod["metadata"]["name"]
    upgraded = time.monotonic() - started
    can_default = tools.kubectl("auth", "can-i", "patch", "deployments.apps", "-n", "default",
                                f"--as={SERVICE_ACCOUNT}", check=False)  # fmt: skip
    assert can_default.stdout.strip() == "no"
    denied = tools.kubectl("-n", "default", "get", "deployments", f"--as={SERVICE_ACCOUNT}",
                           check=False)  # fmt: skip
    assert denied.returncode != 0 and "Forbidden" in denied.stderr, denied.stderr
    # Still does its job in the watched namespace: drift on an owned Deployment is repaired.
    serving = c.arm_deployment_name(NAME, sd(tools)["status"]["mode"])
    wanted = tools.json("-n", WORKLOAD, "get", "deployment", serving)["spec"]["replicas"]
    tools.kubectl("-n", WORKLOAD, "scale", "deployment", serving, "--replicas=0")
    scaled = time.monotonic()
    wait_for("the operator to repair the scaled Deployment",
             lambda: tools.json("-n", WORKLOAD, "get", "deployment", serving)["spec"]["replicas"]
             == wanted, 120)  # fmt: skip
    print(f"\nhelm upgrade to a new operator pod: {upgraded:.0f}s; drift repaired "
          f"{time.monotonic() - scaled:.0f}s after the scale")


def test_helm_uninstall_leaves_no_orphans_and_keeps_the_crd(tools: Tools) -> None:
    tools.helm("uninstall", RELEASE, "-n", SYSTEM, "--wait", "--timeout", "180s")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    for kinds, scope in (
        ("deployments,serviceaccounts,roles,rolebindings,leases,services,pods,"
         "networkpolicies,configmaps", ["-A"]),
        ("clusterroles,clusterrolebindings", []),
    ):
        listed = ["get", kinds, "-l", selector, *scope]

        def gone(args: list[str] = listed) -> bool:
            return not tools.json(*args)["items"]

        assert wait_for("the release's objects to go", gone, 120)
    crd = tools.json("get", "crd", c.CRD_NAME)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert sd(tools)["metadata"]["name"] == NAME  # the resources stay with the CRD
    # With no operator left, deleting the resource completes (it carries no finalizer)
    # and deletes what the operator made (owner references).
    assert "finalizers" not in sd(tools)["metadata"]
    tools.kubectl("-n", WORKLOAD, "delete", f"{c.PLURAL}.{c.GROUP}", NAME, "--wait=true",
                  "--timeout=60s")  # fmt: skip
    owned = ["-n", WORKLOAD, "get", "deployments,services,roles", "-l",
             f"{c.LABEL_APP_INSTANCE}={NAME}"]  # fmt: skip
    wait_for("owned objects garbage-collected", lambda: not tools.json(*owned)["items"], 120)
