"""The chart rendered by the real helm: lint, schema, every object valid on every supported
Kubernetes version, the CRD identical to `specguard crd` on both sides of the CEL switch,
least-privilege RBAC and restricted pod security."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from specguard.api import constants as c
from specguard.api._crd import crd, parse_kube_version

from .conftest import (
    CHART,
    EVERYTHING_ON,
    ROOT,
    SUPPORTED_KUBE_VERSIONS,
    by_kind,
    helm_template,
    run_helm,
)

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything-on": EVERYTHING_ON,
    "namespaced": {"watchNamespaces": ["llm", "team-b"], **EVERYTHING_ON},
    "no-crds-existing-sa": {
        "crds": {"install": False},
        "serviceAccount": {"create": False, "name": "existing"},
        "image": {"digest": "sha256:" + "a" * 64},
        "operator": {
            "replicas": 0,
            "extraArgs": ["--verbose"],
            "extraEnv": [{"name": "X", "value": "1"}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        },
    },
}


def load_generator() -> Any:
    path = ROOT / "charts" / "tools" / "crd_template.py"
    spec = importlib.util.spec_from_file_location("crd_template", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_helm_lint() -> None:
    result = run_helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout, result.stdout


def test_crd_template_is_up_to_date() -> None:
    committed = (CHART / "templates" / "crd.yaml").read_text()
    assert committed == load_generator().render_template(), (
        "charts/specguard/templates/crd.yaml is stale: run `python charts/tools/crd_template.py`"
    )


def validation_rules(node: Any) -> list[dict[str, Any]]:
    """Every x-kubernetes-validations entry anywhere in ``node``."""
    if isinstance(node, list):
        return [rule for item in node for rule in validation_rules(item)]
    if not isinstance(node, dict):
        return []
    found = list(node.get("x-kubernetes-validations", []))
    return found + [rule for value in node.values() for rule in validation_rules(value)]


def without_helm_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"] = {"name": obj["metadata"]["name"]}
    return obj


# Both sides of every switch: CEL (1.25), fieldPath (1.28), quantity rules (1.30).
@pytest.mark.parametrize(
    "kube_version", ["1.20", "1.24", "1.25", "1.27", "1.28", "1.29", "1.30", "1.33", "1.37"]
)
def test_crd_matches_specguard_crd_for_each_version(tmp_path: Path, kube_version: str) -> None:
    """The chart renders exactly what `specguard crd --kube-version` prints."""
    (rendered,) = by_kind(helm_template(tmp_path, kube_version=kube_version),
                          "CustomResourceDefinition")  # fmt: skip
    expected = crd(kube_version)
    assert without_helm_metadata(rendered) == without_helm_metadata(expected)
    rules = validation_rules(rendered)
    assert bool(rules) == (parse_kube_version(kube_version) >= (1, 25))
    assert any("fieldPath" in rule for rule in rules) == (
        parse_kube_version(kube_version) >= (1, 28)
    )
    for key, value in expected["metadata"]["labels"].items():
        assert rendered["metadata"]["labels"][key] == value


def test_crds_keep_and_install(tmp_path: Path) -> None:
    (kept,) = by_kind(helm_template(tmp_path), "CustomResourceDefinition")
    assert kept["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    (dropped,) = by_kind(
        helm_template(tmp_path, {"crds": {"keep": False}}), "CustomResourceDefinition"
    )
    assert "annotations" not in dropped["metadata"]
    assert by_kind(helm_template(tmp_path, {"crds": {"install": False}}),
                   "CustomResourceDefinition") == []  # fmt: skip


def validate_all(objects: list[dict[str, Any]], kube_version: str) -> list[str]:
    """kubernetes-validate's errors for every object (strict: unknown fields are errors).
    Custom resources of other operators (monitoring.coreos.com) have no schema there."""
    errors = []
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']} on {kube_version}: {error}")
    return errors


def test_kubernetes_validate_knows_every_supported_version() -> None:
    known = {
        kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()
    }
    missing = [version for version in SUPPORTED_KUBE_VERSIONS if version not in known]
    assert not missing, f"kubernetes-validate lacks schemas for {missing}: upgrade it"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_object_valid_on_every_supported_version(tmp_path: Path, name: str) -> None:
    errors = []
    for version in SUPPORTED_KUBE_VERSIONS:
        objects = helm_template(tmp_path, VALUE_SETS[name], kube_version=version)
        assert objects, name
        errors += validate_all(objects, version)
    assert not errors, "\n".join(errors)


def test_validation_catches_a_broken_object(tmp_path: Path) -> None:
    """The validation above can fail: a misspelt field in the Deployment is reported."""
    objects = helm_template(tmp_path)
    (deployment,) = by_kind(objects, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    assert validate_all([deployment], "1.33")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"watchNamespace": ["llm"]}, "additional properties 'watchNamespace' not allowed"),
        ({"operator": {"replica": 1}}, "additional properties 'replica' not allowed"),
        ({"crds": {"keep": "yes"}}, "got string, want boolean"),
        ({"operator": {"replicas": 2}}, "maximum"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "does not match pattern"),
        ({"monitoring": {"prometheusRule": {"judgeDegradedFor": "15 minutes"}}},
         "does not match pattern"),
        ({"image": {"pullPolicy": "Sometimes"}}, "value must be one of"),
    ],
)  # fmt: skip
def test_bad_values_fail_with_the_schema_message(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(values))
    result = run_helm("template", "x", str(CHART), "-f", str(path), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert message in result.stderr, result.stderr


# Objects of values.schema.json left open on purpose: Helm's `global`, and Kubernetes
# types passed through to the pod (the API server validates them).
OPEN_IN_SCHEMA = {
    "global",
    "operator.extraEnv[].valueFrom",
    "operator.affinity.nodeAffinity", "operator.affinity.podAffinity",
    "operator.affinity.podAntiAffinity",
    "networkPolicy.metricsFrom[].podSelector", "networkPolicy.metricsFrom[].namespaceSelector",
    "networkPolicy.metricsFrom[].ipBlock",
}  # fmt: skip


def test_schema_closes_every_object_of_the_chart() -> None:
    """additionalProperties is false on every object (or types every key of a map such as
    podAnnotations), so a typo anywhere fails at install."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects = []

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object":
            extra = node.get("additionalProperties")
            if extra is not False and not isinstance(extra, dict) and path not in OPEN_IN_SCHEMA:
                open_objects.append(path)
        for key, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{key}" if path else key)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    walk(schema, "")
    assert schema["additionalProperties"] is False
    assert not open_objects, f"open objects in values.schema.json: {open_objects}"


def notes(tmp_path: Path, values: dict[str, Any]) -> str:
    """NOTES.txt as `helm install` prints it (a client-side dry run: no cluster)."""
    out = run_helm("install", "sg", str(CHART), "--namespace", "specguard", "--dry-run=client",
                   values=values, tmp=tmp_path).stdout  # fmt: skip
    return out.partition("\nNOTES:\n")[2]


def test_notes_tell_what_to_do_next(tmp_path: Path) -> None:
    default = notes(tmp_path, {})
    assert "It watches every namespace." in default
    assert "kubectl -n specguard rollout status deployment/sg-specguard" in default
    assert "helm uninstall keeps the CRD" in default and "crds.install is false" not in default
    assert "with or without an operator running" in default
    namespaced = notes(tmp_path, {"watchNamespaces": ["llm", "team-b"], "crds": {"install": False}})
    assert "It watches the namespaces: llm, team-b" in namespaced
    assert "crds.install is false" in namespaced
    assert "kubectl -n specguard rollout restart deployment/sg-specguard" in namespaced
    assert "helm uninstall keeps the CRD" not in namespaced  # it did not install one
    monitored = notes(tmp_path, EVERYTHING_ON)
    assert "Prometheus Operator objects are installed" in monitored
    assert "ConfigMap sg-specguard-dashboard" in monitored


def rules_of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [rule for obj in by_kind(objects, kind) for rule in obj["rules"]]


def grants(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in rules
    )


LEASE_ONLY = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "resourceNames": ["specguard"], "verbs": ["get", "update"]},
]  # fmt: skip


def bound_rules(objects: list[dict[str, Any]], account: str) -> dict[tuple[str, str], list[Any]]:
    """(kind, namespace or "") -> rules of every role bound to ``account``."""
    roles = {(obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj
             for obj in objects if obj["kind"] in ("Role", "ClusterRole")}  # fmt: skip
    bound: dict[tuple[str, str], list[Any]] = {}
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": "specguard"}
        ]
        namespace = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        bound.setdefault((binding["kind"], namespace), []).extend(role["rules"])
    return bound


def test_rbac_cluster_wide_by_default(tmp_path: Path) -> None:
    objects = helm_template(tmp_path)
    (account,) = by_kind(objects, "ServiceAccount")
    bound = bound_rules(objects, account["metadata"]["name"])
    assert set(bound) == {("ClusterRoleBinding", ""), ("RoleBinding", "specguard")}
    assert bound[("RoleBinding", "specguard")] == LEASE_ONLY
    assert grants(bound[("ClusterRoleBinding", "")], "apps", "deployments", "patch")
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    command = pod["containers"][0]["command"]
    assert "--all-namespaces" in command and "--peering=specguard" in command


def test_rbac_namespaced_with_watch_namespaces(tmp_path: Path) -> None:
    objects = helm_template(tmp_path, {"watchNamespaces": ["llm", "team-b"]})
    bound = bound_rules(objects, "specguard")
    # Nothing cluster-wide: the watched namespaces, and the Lease in the release's.
    assert set(bound) == {("RoleBinding", "specguard"), ("RoleBinding", "llm"),
                          ("RoleBinding", "team-b")}  # fmt: skip
    assert bound[("RoleBinding", "specguard")] == LEASE_ONLY
    assert bound[("RoleBinding", "llm")] == bound[("RoleBinding", "team-b")]
    assert grants(bound[("RoleBinding", "llm")], "apps", "deployments", "patch")
    (deployment,) = by_kind(objects, "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--all-namespaces" not in command
    assert [arg for arg in command if arg.startswith("--namespace")] == [
        "--namespace=llm", "--namespace=team-b",
    ]  # fmt: skip


def test_rbac_least_privilege(tmp_path: Path) -> None:
    rules = rules_of(helm_template(tmp_path), "ClusterRole")
    # No secrets, no wildcards, no bind/escalate/impersonate, no exec; the resource's spec
    # cannot be replaced (patch only, for kopf's metadata).
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert not {"bind", "escalate", "impersonate", "delete", "deletecollection"} & set(
            rule["verbs"]
        ), rule
        forbidden = {"secrets", "configmaps", "pods/exec", "nodes", "customresourcedefinitions"}
        assert not forbidden & set(rule["resources"]), rule
    # Nothing on the resource itself but reading it: it cannot write spec, and puts no
    # finalizer on it (a `kubectl delete` with no operator left would hang).
    for verb in ("create", "update", "patch", "delete"):
        assert not grants(rules, c.GROUP, c.PLURAL, verb), verb
    assert grants(rules, c.GROUP, f"{c.PLURAL}/status", "patch")


def test_rbac_covers_everything_the_renderer_produces(tmp_path: Path) -> None:
    """Each object kind of `specguard render` can be applied server-side (get, create,
    patch), and the router's Role grants nothing the operator lacks (so it may create and
    bind it without bind/escalate)."""
    from specguard.commands.render import load_resources
    from specguard.render import render_all

    rules = rules_of(helm_template(tmp_path), "ClusterRole")
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        for sd in load_resources(str(example)):
            for obj in render_all(sd):
                version, plural = c.OWNED_KINDS[obj["kind"]]
                assert obj["apiVersion"] == version
                group = version.rpartition("/")[0]
                for verb in ("get", "create", "patch"):
                    assert grants(rules, group, plural, verb), (obj["kind"], verb)
                if obj["kind"] == "Role":
                    for rule in obj["rules"]:
                        for group in rule["apiGroups"]:
                            for resource in rule["resources"]:
                                for verb in rule["verbs"]:
                                    assert grants(rules, group, resource, verb), rule


RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def test_operator_pod_is_restricted(tmp_path: Path) -> None:
    (deployment,) = by_kind(helm_template(tmp_path), "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    for key, value in RESTRICTED_CONTAINER.items():
        assert container["securityContext"][key] == value, key
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


# Labels Prometheus adds to every series it scrapes through the chart's monitors: the
# target's namespace and pod, and the pods' labels the PodMonitors copy (podTargetLabels).
TARGET_LABELS = {"namespace", "pod", "container", "instance", "job", "endpoint", "service",
                 "specguard_io_router", "specguard_io_deployment", "specguard_io_arm"}  # fmt: skip


def metric_names(text: str) -> set[str]:
    """Metric names in PromQL expressions: every specguard_* and vllm:* word that is not
    one of the target labels the chart's monitors add (specguard_io_arm, ...)."""
    words = re.findall(r"\b(specguard_[a-z_]+|vllm:[a-z_:]+)", text)
    return set(words) - TARGET_LABELS


def exported_families() -> dict[str, set[str]]:
    """Every series name the router, the simulator (vLLM's names) and the operator expose,
    with its labels (from their own registries)."""
    from prometheus_client import CollectorRegistry

    from specguard.controller._metrics import OperatorMetrics
    from specguard.router._metrics import RouterMetrics
    from specguard.sim._exporter import SimMetrics

    exporters: list[OperatorMetrics | RouterMetrics | SimMetrics] = [
        OperatorMetrics(), RouterMetrics(), SimMetrics("m", num_spec_tokens=4, max_model_len=4096)
    ]  # fmt: skip
    registries: list[CollectorRegistry] = []
    for exporter in exporters:
        registries.append(exporter.registry)
        # A labelled child of every family, so that each shows its label names.
        for metric in vars(exporter).values():
            names = getattr(metric, "_labelnames", None)
            if names and not getattr(metric, "_labelvalues", None):  # a parent, not a child
                metric.labels(*["x"] * len(names))
    families: dict[str, set[str]] = {}
    for registry in registries:
        for family in registry.collect():
            labels = {label for sample in family.samples for label in sample.labels}
            for suffix in ("", "_bucket", "_count", "_sum", "_total"):
                families.setdefault(family.name + suffix, set()).update(labels)
            for sample in family.samples:
                families.setdefault(sample.name, set()).update(labels)
    return families


def exported_metrics() -> set[str]:
    return set(exported_families())


def selector_labels(expr: str) -> list[tuple[str, str]]:
    """(metric, label) for each label matcher in ``metric{...}`` selectors."""
    pairs = []
    for metric, inner in re.findall(r"\b(specguard_[a-z_]+|vllm:[a-z_]+)\s*\{([^}]*)\}", expr):
        pairs += [(metric, label) for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", inner)]
    return pairs


def test_dashboard_and_alerts_use_exported_metric_names(tmp_path: Path) -> None:
    objects = helm_template(tmp_path, EVERYTHING_ON)
    (dashboard,) = by_kind(objects, "ConfigMap")
    panels = json.loads(dashboard["data"]["specguard.json"])["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    exprs += [var["definition"] for var in json.loads(dashboard["data"]["specguard.json"])
              ["templating"]["list"] if "definition" in var]  # fmt: skip
    (rule,) = by_kind(objects, "PrometheusRule")
    exprs += [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    used = set().union(*(metric_names(expr) for expr in exprs))
    assert {"specguard_router_tpot_seconds_bucket", "specguard_mode", "specguard_source_up",
            "vllm:spec_decode_num_accepted_tokens_total"} <= used  # fmt: skip
    assert "specguard_tpot_ratio_ci" in used, "the ratio panel shows the verdict's CI"
    unknown = used - exported_metrics()
    assert not unknown, f"dashboard or alerts use metrics nobody exports: {sorted(unknown)}"
    families = exported_families()
    wrong = sorted({f"{metric}{{{label}}}" for expr in exprs
                    for metric, label in selector_labels(expr)
                    if label not in families[metric] | TARGET_LABELS})  # fmt: skip
    assert not wrong, f"dashboard or alerts select on labels those metrics lack: {wrong}"
