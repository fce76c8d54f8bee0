"""What the current control plane gives that the tests rely on, checked on the real server.

The local cluster runs the Kubernetes release scripts/build-control-plane.sh builds from the Go
modules: CEL validation rules in the CRD, Pod Security admission, the Node authorizer with
NodeRestriction (each kubelet acts as its own node) and bound service-account tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from specguard.api import parse_resource
from specguard.render import render_all
from specguard_testkit._access import ClusterAccess
from specguard_testkit._binaries import KUBE_VERSION
from specguard_testkit._cluster import LocalCluster
from specguard_testkit._wait import wait_until

pytestmark = pytest.mark.cluster

EXAMPLE = Path(__file__).parents[2] / "examples" / "qwen3.6-dspark-tp2.yaml"
CRD_NAME = "speculativedeployments.specguard.io"
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


def _crd_yaml() -> str:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "crd"], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def crd_installed(local_cluster: LocalCluster) -> LocalCluster:
    applied = local_cluster.kubectl("apply", "--server-side", "-f", "-", check=False,
                                    input=_crd_yaml())  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    local_cluster.wait_crd_established(CRD_NAME)
    return local_cluster


def _namespace(cluster: LocalCluster, level: str | None) -> str:
    name = f"psa-{level or 'none'}-{uuid.uuid4().hex[:6]}"
    labels = {PSA_ENFORCE: level} if level else {}
    with cluster.access.client() as client:
        client.post(
            "/api/v1/namespaces", json={"metadata": {"name": name, "labels": labels}}
        ).raise_for_status()
    return name


def _delete_namespace(cluster: LocalCluster, name: str) -> None:
    with cluster.access.client() as client:
        client.delete(f"/api/v1/namespaces/{name}")


def _example(namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    obj["metadata"]["namespace"] = namespace
    return obj


def test_the_server_is_the_pinned_current_release(local_cluster: LocalCluster) -> None:
    with local_cluster.access.client() as client:
        version = client.get("/version").raise_for_status().json()
    assert version["gitVersion"] == f"v{KUBE_VERSION}"


def test_the_generated_crd_keeps_its_cel_rules_on_the_server(crd_installed: LocalCluster) -> None:
    # Accepting the CRD means the server's static cost estimate of every rule, taken at the
    # maximum list and string sizes the schema declares, fits the per-rule and total budgets.
    with crd_installed.access.client() as client:
        stored = client.get(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
        ).raise_for_status().json()
    generated = yaml.safe_load(_crd_yaml())

    def rules(schema: Any) -> list[str]:
        if isinstance(schema, dict):
            own = [r["rule"] for r in schema.get("x-kubernetes-validations", [])]
            return own + [rule for value in schema.values() for rule in rules(value)]
        if isinstance(schema, list):
            return [rule for item in schema for rule in rules(item)]
        return []

    on_server = rules(stored["spec"]["versions"])
    assert on_server, "the stored CRD has no x-kubernetes-validations"
    assert sorted(on_server) == sorted(rules(generated["spec"]["versions"]))


def test_a_spec_refused_by_a_cel_rule_names_the_field_in_kubectl_apply(
    crd_installed: LocalCluster, cluster_namespace: str
) -> None:
    obj = _example(cluster_namespace)
    # Schema-valid, refused only by a cross-field rule: eagle3 needs a drafter model.
    obj["spec"]["drafter"] = {"method": "eagle3", "numSpeculativeTokens": 3}
    refused = crd_installed.kubectl("apply", "-f", "-", check=False, input=json.dumps(obj))
    assert refused.returncode != 0
    assert "spec.drafter.model" in refused.stderr and "required" in refused.stderr
    # Python refuses the same spec, at the same field.
    with pytest.raises(ValueError, match=r"spec\.drafter\.model"):
        parse_resource(obj)


def test_an_object_at_the_maximum_list_sizes_is_admitted_within_the_runtime_cel_budget(
    crd_installed: LocalCluster, cluster_namespace: str
) -> None:
    obj = _example(cluster_namespace)
    schema = yaml.safe_load(_crd_yaml())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    runtime = schema["properties"]["spec"]["properties"]["runtime"]["properties"]
    tolerations = runtime["tolerations"]["maxItems"]
    env = runtime["env"]["maxItems"]
    obj["spec"]["runtime"]["tolerations"] = [
        {"key": f"example.com/t{i}", "operator": "Exists", "effect": "NoSchedule"}
        for i in range(tolerations)
    ]
    obj["spec"]["runtime"]["env"] = [{"name": f"VAR_{i}", "value": "x"} for i in range(env)]
    parse_resource(obj)  # valid for Python
    created = crd_installed.kubectl("create", "-f", "-", "-o", "json", check=False,
                                    input=json.dumps(obj))  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert len(json.loads(created.stdout)["spec"]["runtime"]["tolerations"]) == tolerations


def _pod_from(deployment: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": deployment["metadata"]["name"] + "-probe", "namespace": namespace},
        "spec": deployment["spec"]["template"]["spec"],
    }


def _dry_run_pod(client: httpx.Client, pod: dict[str, Any]) -> httpx.Response:
    namespace = pod["metadata"]["namespace"]
    return client.post(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", json=pod)


def test_rendered_pods_are_admitted_under_the_pod_security_level_of_their_namespace(
    local_cluster: LocalCluster,
) -> None:
    restricted = _namespace(local_cluster, "restricted")
    baseline = _namespace(local_cluster, "baseline")
    try:
        with local_cluster.access.client() as client:
            admitted: dict[tuple[str, str], httpx.Response] = {}
            for namespace in (restricted, baseline):
                objects = render_all(parse_resource(_example(namespace)))
                for obj in objects:
                    if obj["kind"] == "ServiceAccount":
                        client.post(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                                    json=obj).raise_for_status()  # fmt: skip
                for obj in objects:
                    if obj["kind"] == "Deployment":
                        pod = _pod_from(obj, namespace)
                        admitted[(obj["metadata"]["name"], namespace)] = _dry_run_pod(client, pod)
        name = "qwen"
        # The router needs no privilege: admitted where specguard's own pods run.
        assert admitted[(f"{name}-router", restricted)].status_code == 201, admitted[
            (f"{name}-router", restricted)
        ].text
        # vLLM's image runs as root: refused by "restricted", admitted by "baseline".
        for arm in ("spec", "base"):
            refused = admitted[(f"{name}-{arm}", restricted)]
            assert refused.status_code == 403, refused.text
            assert 'violates PodSecurity "restricted' in refused.json()["message"]
            assert "runAsNonRoot" in refused.json()["message"]
            assert admitted[(f"{name}-{arm}", baseline)].status_code == 201
        assert admitted[(f"{name}-router", baseline)].status_code == 201
    finally:
        _delete_namespace(local_cluster, restricted)
        _delete_namespace(local_cluster, baseline)


def _bound_pod(client: httpx.Client, namespace: str, node: str) -> dict[str, Any]:
    # An image the process kubelet does not run: the pod stays in ErrImagePull, harmless.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"on-{node}", "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "example.com/not-run:1"}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    created: dict[str, Any] = (
        client.post(f"/api/v1/namespaces/{namespace}/pods", json=pod).raise_for_status().json()
    )
    return created


def _token_request(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 3600,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


def _review(client: httpx.Client, token: str) -> dict[str, Any]:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
              "spec": {"token": token}}  # fmt: skip
    status: dict[str, Any] = (
        client.post("/apis/authentication.k8s.io/v1/tokenreviews", json=review)
        .raise_for_status()
        .json()["status"]
    )
    return status


def test_kubelets_act_as_their_node_and_pods_get_bound_tokens(
    local_cluster: LocalCluster, gpu_nodes: list[str], cluster_namespace: str
) -> None:
    mine, other = gpu_nodes[0], gpu_nodes[1]
    ns = cluster_namespace
    with local_cluster.access.client() as admin:
        admin.post(f"/api/v1/namespaces/{ns}/secrets",
                   json={"metadata": {"name": "unrelated"}, "stringData": {"k": "v"}}
                   ).raise_for_status()  # fmt: skip
        pod = _bound_pod(admin, ns, mine)
        token_path = f"/api/v1/namespaces/{ns}/serviceaccounts/default/token"
        node: ClusterAccess = local_cluster.node_access(mine)
        stranger: ClusterAccess = local_cluster.node_access(other)
        with node.client() as as_node, stranger.client() as as_stranger:
            whoami = as_node.post(
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            ).raise_for_status().json()["status"]["userInfo"]
            assert whoami["username"] == f"system:node:{mine}"
            assert "system:nodes" in whoami["groups"]
            # Node authorizer: no secret that none of the node's pods references.
            assert as_node.get(f"/api/v1/namespaces/{ns}/secrets/unrelated").status_code == 403
            # Tokens only for pods bound to the asking node, and bound to that pod.
            assert as_stranger.post(token_path, json=_token_request(pod)).status_code == 403
            issued = as_node.post(token_path, json=_token_request(pod))
            assert issued.status_code == 201, issued.text
            token = issued.json()["status"]["token"]
            # NodeRestriction: another node cannot write the pod's status.
            patched = as_stranger.patch(
                f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status",
                json={"status": {"message": "not yours"}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            assert patched.status_code == 403, patched.text
        review = _review(admin, token)
        assert review["authenticated"] is True
        assert review["user"]["extra"]["authentication.kubernetes.io/pod-name"] == [
            pod["metadata"]["name"]
        ]
        # Bound: the token dies with its pod.
        admin.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                     params={"gracePeriodSeconds": 0}).raise_for_status()  # fmt: skip
        pod_path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
        wait_until(lambda: admin.get(pod_path).status_code == 404, timeout=60,
                   what="the pod to be gone")  # fmt: skip
        # (the server checks the bound pod through its watch cache: a moment after deletion)
        wait_until(lambda: _review(admin, token).get("authenticated") is not True, timeout=30,
                   what="the deleted pod's token to be refused")  # fmt: skip
        # No legacy long-lived token Secrets are made for service accounts.
        secrets = admin.get(f"/api/v1/namespaces/{ns}/secrets").raise_for_status().json()
        assert not [s for s in secrets["items"]
                    if s.get("type") == "kubernetes.io/service-account-token"]  # fmt: skip
