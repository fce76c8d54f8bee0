"""What the renderer puts in the objects, checked field by field and as properties."""

from __future__ import annotations

import copy
import json
import math
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specguard import __version__
from specguard.api import parse_resource
from specguard.api._spec import (
    DRAFTER_METHODS,
    METHODS_WITHOUT_MODEL,
    METHODS_WITHOUT_REQUIRED_MODEL,
)
from specguard.api.constants import OWNED_KINDS
from specguard.render import arm_replicas, render_all
from specguard.render._vllm import INTER_TOKEN_LATENCY_BUCKETS

BASE: dict[str, Any] = {
    "apiVersion": "specguard.io/v1alpha1",
    "kind": "SpeculativeDeployment",
    "metadata": {"name": "qwen", "namespace": "llm"},
    "spec": {
        "model": {
            "name": "Qwen/Qwen3.6-35B-A3B",
            "servedModelName": "qwen3.6",
            "revision": "abc123",
        },
        "runtime": {
            "tensorParallelSize": 2,
            "extraArgs": ["--max-model-len=32768"],
            "hfTokenSecret": {"name": "hf", "key": "tok"},
            "env": [{"name": "A", "value": "1"}],
            "modelCache": {"claimName": "cache", "readOnly": True},
            "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "64Gi"}},
            "port": 9000,
        },
        "replicas": 4,
        "drafter": {
            "method": "dspark",
            "model": "RedHatAI/Qwen3.6-35B-A3B-speculator.dspark",
            "numSpeculativeTokens": 8,
            "adaptiveVerification": True,
            "extraConfig": {"dspark_draft_topk": 4},
        },
        "shadow": {"replicas": 1},
        "rollback": {"startupDeadline": "25m"},
    },
}


def by_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return cast(dict[str, Any], only)


def flag_value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_objects_and_order() -> None:
    objects = render_all(parse_resource(BASE))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", "qwen-router"),
        ("Role", "qwen-router"),
        ("RoleBinding", "qwen-router"),
        ("Service", "qwen"),
        ("Service", "qwen-spec"),
        ("Service", "qwen-base"),
        ("Deployment", "qwen-spec"),
        ("Deployment", "qwen-base"),
        ("Deployment", "qwen-router"),
    ]
    assert all(o["metadata"]["namespace"] == "llm" for o in objects)
    assert all("ownerReferences" not in o["metadata"] for o in objects)
    # the owned kinds, as the operator applies them and the chart's RBAC grants them
    assert {(o["kind"], o["apiVersion"]) for o in objects} == {
        (kind, version) for kind, (version, _) in OWNED_KINDS.items()
    }
    chosen = render_all(parse_resource(BASE), replicas={"speculative": 1, "baseline": 2})
    assert [o["spec"]["replicas"] for o in chosen if o["metadata"]["name"] != "qwen-router"
            and o["kind"] == "Deployment"] == [1, 2]  # fmt: skip


def test_vllm_args_and_container() -> None:
    objects = by_name(render_all(parse_resource(BASE)))
    spec_c = container(objects[("Deployment", "qwen-spec")])
    base_c = container(objects[("Deployment", "qwen-base")])
    assert spec_c["command"] == ["vllm", "serve"]
    assert spec_c["args"][:9] == [
        "Qwen/Qwen3.6-35B-A3B",
        "--served-model-name",
        "qwen3.6",
        "--tensor-parallel-size",
        "2",
        "--port",
        "9000",
        "--revision",
        "abc123",
    ]
    assert spec_c["args"][-1] == "--max-model-len=32768"
    config_text = flag_value(spec_c["args"], "--speculative-config")
    assert config_text is not None and " " not in config_text  # compact JSON
    assert json.loads(config_text) == {
        "method": "dspark",
        "model": "RedHatAI/Qwen3.6-35B-A3B-speculator.dspark",
        "num_speculative_tokens": 8,
        "enable_adaptive_verification": True,
        "dspark_draft_topk": 4,
    }
    assert "--speculative-config" not in base_c["args"]
    for c in (spec_c, base_c):
        buckets = json.loads(flag_value(c["args"], "--custom-histogram-buckets") or "{}")
        assert buckets == {"inter_token_latency": list(INTER_TOKEN_LATENCY_BUCKETS)}
        assert c["resources"] == {
            "requests": {"cpu": "4", "nvidia.com/gpu": 2},
            "limits": {"memory": "64Gi", "nvidia.com/gpu": 2},
        }
        assert c["env"] == [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "tok"}}},
            {"name": "A", "value": "1"},
        ]
        assert {
            "name": "model-cache",
            "mountPath": "/root/.cache/huggingface",
            "readOnly": True,
        } in c["volumeMounts"]
        assert c["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
        assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 25 * 60
        assert c["readinessProbe"]["httpGet"]["path"] == "/health"
        assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    pod = objects[("Deployment", "qwen-spec")]["spec"]["template"]["spec"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    strategy = objects[("Deployment", "qwen-spec")]["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }


def test_drain_on_removal_from_shutdown_timeout() -> None:
    """A vLLM pod being removed finishes what it has (--shutdown-timeout) within a grace
    period 30 s longer; 0s passes no flag (an older vLLM, or aborting on purpose)."""
    for value, flag, grace in (("60s", "60", 90), ("2m", "120", 150), ("0s", None, 30)):
        body = copy.deepcopy(BASE)
        body["spec"]["runtime"]["shutdownTimeout"] = value
        objects = by_name(render_all(parse_resource(body)))
        for name in ("qwen-spec", "qwen-base"):
            deployment = objects[("Deployment", name)]
            assert flag_value(container(deployment)["args"], "--shutdown-timeout") == flag
            assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
    default = by_name(render_all(parse_resource(BASE)))[("Deployment", "qwen-spec")]
    assert flag_value(container(default)["args"], "--shutdown-timeout") == "60"


def test_labels_and_selectors() -> None:
    objects = by_name(render_all(parse_resource(BASE)))
    for arm, suffix in (("speculative", "spec"), ("baseline", "base")):
        deployment = objects[("Deployment", f"qwen-{suffix}")]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert pod_labels["specguard.io/deployment"] == "qwen"
        assert pod_labels["specguard.io/arm"] == arm
        assert pod_labels["app.kubernetes.io/instance"] == "qwen"
        # An operator upgrade must not restart vLLM pods.
        assert "app.kubernetes.io/version" not in pod_labels
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod_labels.items()
        assert objects[("Service", f"qwen-{suffix}")]["spec"]["selector"] == selector
    router = objects[("Deployment", "qwen-router")]
    router_pod_labels = router["spec"]["template"]["metadata"]["labels"]
    # Router pods never match a vLLM pod selector.
    assert "specguard.io/deployment" not in router_pod_labels
    assert objects[("Service", "qwen")]["spec"]["selector"].items() <= router_pod_labels.items()
    assert objects[("Service", "qwen")]["spec"]["ports"][0]["port"] == 9000


def test_router_and_rbac() -> None:
    objects = by_name(render_all(parse_resource(BASE)))
    router = objects[("Deployment", "qwen-router")]
    c = container(router)
    assert c["image"] == f"ghcr.io/specguard/specguard:{__version__}"
    assert c["command"] == [
        "specguard",
        "router",
        "--deployment",
        "qwen",
        "--namespace",
        "llm",
        "--port",
        "8080",
        "--host",
        "$(POD_IP)",
    ]
    assert c["env"] == [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    ]
    assert router["spec"]["replicas"] == 2
    assert router["spec"]["template"]["spec"]["serviceAccountName"] == "qwen-router"
    rules = objects[("Role", "qwen-router")]["rules"]
    assert {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in rules} == {
        ("", "pods"): ["get", "list", "watch"],
        ("specguard.io", "speculativedeployments"): ["get", "list", "watch"],
    }
    binding = objects[("RoleBinding", "qwen-router")]
    assert binding["roleRef"]["name"] == "qwen-router"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "qwen-router", "namespace": "llm"}
    ]


def test_owner_references_when_resource_has_uid() -> None:
    obj = copy.deepcopy(BASE)
    obj["metadata"]["uid"] = "1234-abcd"
    for rendered in render_all(parse_resource(obj)):
        assert rendered["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "specguard.io/v1alpha1",
                "kind": "SpeculativeDeployment",
                "name": "qwen",
                "uid": "1234-abcd",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def test_unknown_mode_refused() -> None:
    with pytest.raises(ValueError, match="mode must be speculative or baseline"):
        render_all(parse_resource(BASE), "turbo")


def test_per_batch_ranges_rendered_in_order() -> None:
    obj = copy.deepcopy(BASE)
    obj["spec"]["drafter"].update(
        method="dspark",
        perBatchSize=[
            {"minBatchSize": 33, "maxBatchSize": 256, "numSpeculativeTokens": 0},
            {"minBatchSize": 1, "maxBatchSize": 32, "numSpeculativeTokens": 8},
        ],
    )
    spec_c = container(by_name(render_all(parse_resource(obj)))[("Deployment", "qwen-spec")])
    config = json.loads(flag_value(spec_c["args"], "--speculative-config") or "{}")
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 32, 8], [33, 256, 0]]


# --- properties over generated specs ----------------------------------------------


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    replicas = draw(st.integers(1, 64))
    method = draw(st.sampled_from(DRAFTER_METHODS))
    drafter: dict[str, Any] = {"method": method}
    if method not in METHODS_WITHOUT_MODEL and (
        method not in METHODS_WITHOUT_REQUIRED_MODEL or draw(st.booleans())
    ):
        drafter["model"] = "org/drafter"
    if draw(st.booleans()):
        drafter["numSpeculativeTokens"] = draw(st.integers(1, 32))
    extra_args = draw(
        st.lists(
            st.sampled_from(["--enforce-eager", "--max-num-seqs=64", "--max-model-len=8192"]),
            max_size=3,
        )
    )
    # vLLM refuses adaptive verification in eager mode (and so does specguard).
    if method == "dspark" and "--enforce-eager" not in extra_args:
        drafter["adaptiveVerification"] = draw(st.booleans())
    if draw(st.booleans()):
        drafter["draftTensorParallelSize"] = draw(st.sampled_from(sorted({1, tp})))
    return {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {
            "name": draw(st.from_regex(r"[a-z][a-z0-9]{0,20}", fullmatch=True)),
            "namespace": "ns",
        },
        "spec": {
            "model": {"name": "org/model"},
            "runtime": {
                "tensorParallelSize": tp,
                "gpuResource": draw(st.sampled_from(["nvidia.com/gpu", "amd.com/gpu"])),
                "extraArgs": extra_args,
            },
            "replicas": replicas,
            "drafter": drafter,
            "shadow": {"replicas": draw(st.integers(1, replicas))},
            "rollback": {"startupDeadline": f"{draw(st.integers(60, 86400))}s"},
        },
    }


def vllm_deployments(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["spec"]["template"]["metadata"]["labels"]["specguard.io/arm"]: o
        for o in objects
        if o["kind"] == "Deployment"
        and "specguard.io/arm" in o["spec"]["template"]["metadata"]["labels"]
    }


@settings(max_examples=60, deadline=None)
@given(resources(), st.sampled_from(["speculative", "baseline"]))
def test_render_properties(obj: dict[str, Any], mode: str) -> None:
    sd = parse_resource(obj)
    objects = render_all(sd, mode)
    assert objects == render_all(sd, mode)  # deterministic
    arms = vllm_deployments(objects)
    tp = sd.spec.runtime.tensor_parallel_size
    gpu = sd.spec.runtime.gpu_resource
    for arm, deployment in arms.items():
        c = container(deployment)
        has_config = "--speculative-config" in c["args"]
        # The drafter runs on the speculative arm only, whatever the mode.
        assert has_config == (arm == "speculative")
        if has_config:
            config = json.loads(flag_value(c["args"], "--speculative-config") or "")
            assert config["method"] == sd.spec.drafter.method
        assert c["resources"]["requests"][gpu] == tp == c["resources"]["limits"][gpu]
        assert flag_value(c["args"], "--tensor-parallel-size") == str(tp)
        probe = c["startupProbe"]
        budget = probe["periodSeconds"] * probe["failureThreshold"]
        deadline = sd.spec.rollback.startup_deadline
        assert deadline <= budget < deadline + probe["periodSeconds"]
    serving = "speculative" if mode == "speculative" else "baseline"
    shadow = "baseline" if serving == "speculative" else "speculative"
    assert arms[serving]["spec"]["replicas"] == sd.spec.replicas
    assert arms[shadow]["spec"]["replicas"] == sd.spec.shadow.replicas


@settings(max_examples=40, deadline=None)
@given(resources())
def test_mode_swap_preserves_gpus(obj: dict[str, Any]) -> None:
    sd = parse_resource(obj)
    spec_mode = arm_replicas(sd.spec, "speculative")
    base_mode = arm_replicas(sd.spec, "baseline")
    assert sum(spec_mode.values()) == sum(base_mode.values())
    assert spec_mode["speculative"] == base_mode["baseline"]
    assert spec_mode["baseline"] == base_mode["speculative"]
    gpus = [
        sum(
            d["spec"]["replicas"]
            * container(d)["resources"]["limits"][sd.spec.runtime.gpu_resource]
            for d in vllm_deployments(render_all(sd, mode)).values()
        )
        for mode in ("speculative", "baseline")
    ]
    assert gpus[0] == gpus[1] == sum(spec_mode.values()) * sd.spec.runtime.tensor_parallel_size
    assert math.isfinite(gpus[0])
