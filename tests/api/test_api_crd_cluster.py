"""The generated CRD, CEL rules included, on a real kube-apiserver (the local control plane).

cel-python checks the rules; this checks what only a real server can: that it accepts the
schema at all (1.20 refused an earlier one over status defaults), that its defaulting
agrees with the models', that it refuses bad objects naming the field, and that the
printer columns, status subresource and `kubectl explain` work.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from specguard.api import SpecError, parse_resource
from specguard.judge import PolicyState
from specguard_testkit._cluster import LocalCluster

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def _kubectl(
    cluster: LocalCluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(*args, check=False, input=stdin)


@pytest.fixture(scope="module")
def installed_crd(local_cluster: LocalCluster) -> LocalCluster:
    crd = subprocess.run(
        [sys.executable, "-m", "specguard", "crd"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    applied = _kubectl(local_cluster, "apply", "-f", "-", stdin=crd)
    assert applied.returncode == 0, applied.stderr
    local_cluster.wait_crd_established("speculativedeployments.specguard.io")
    return local_cluster


def _example(path: Path) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    obj["metadata"].pop("namespace", None)
    return obj


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_accepted_and_server_defaults_match_the_models(
    installed_crd: LocalCluster, cluster_namespace: str, path: Path
) -> None:
    obj = _example(path)
    created = _kubectl(installed_crd, "create", "-n", cluster_namespace, "-o", "json", "-f", "-",
                       stdin=json.dumps(obj))  # fmt: skip
    assert created.returncode == 0, created.stderr
    from_server = json.loads(created.stdout)
    assert parse_resource(from_server).spec == parse_resource(obj).spec
    # The server filled in the defaults (sections the user left out included).
    assert (
        from_server["spec"]["evaluation"]["tolerance"]
        == parse_resource(obj).spec.evaluation.tolerance
    )


def test_server_refuses_a_bad_object_naming_the_field(
    installed_crd: LocalCluster, cluster_namespace: str
) -> None:
    obj = _example(EXAMPLES[0])
    obj["spec"]["drafter"]["method"] = "medusa"
    obj["spec"]["runtime"]["tensorParallelSize"] = 3
    refused = _kubectl(
        installed_crd, "create", "-n", cluster_namespace, "-f", "-", stdin=json.dumps(obj)
    )
    assert refused.returncode != 0
    assert "spec.drafter.method" in refused.stderr
    assert "spec.runtime.tensorParallelSize" in refused.stderr


def test_bare_number_duration_refused_by_server_and_python_alike(
    installed_crd: LocalCluster, cluster_namespace: str
) -> None:
    obj = _example(EXAMPLES[0])
    obj["spec"].setdefault("evaluation", {})["window"] = 60
    refused = _kubectl(
        installed_crd, "create", "-n", cluster_namespace, "-f", "-", stdin=json.dumps(obj)
    )
    assert refused.returncode != 0
    assert "spec.evaluation.window" in refused.stderr
    with pytest.raises(SpecError, match=r"spec\.evaluation\.window"):
        parse_resource(obj)


def test_status_subresource_and_printer_columns(
    installed_crd: LocalCluster, cluster_namespace: str
) -> None:
    obj = _example(EXAMPLES[0])
    name = obj["metadata"]["name"]
    assert _kubectl(installed_crd, "create", "-n", cluster_namespace, "-f", "-",
                    stdin=json.dumps(obj)).returncode == 0  # fmt: skip
    verdict = {"outcome": "regressed", "ratio": 1.17, "concurrency": {"speculative": 12}}
    at = "2026-12-01T05:00:00Z"
    conditions = [
        {"type": kind, "status": "True", "reason": reason, "lastTransitionTime": at}
        for kind, reason in (
            ("Ready", "Serving"), ("Swapping", "RollingSwap"), ("Halted", "FlapLimit")
        )
    ]
    # The policy memory an operator before readable times wrote (Unix seconds, a streak with
    # its outcome): an upgraded operator must still read it from the server.
    old_memory = {
        "mode": "baseline", "streak": 2, "streakOutcome": "improved",
        "since": 1_800_000_000.5, "flapTimes": [1_800_000_000.5], "halted": False,
    }  # fmt: skip
    ladder = {"rung": {"name": "adaptive"}}
    status = {"status": {"mode": "baseline", "lastVerdict": verdict, "conditions": conditions,
                         "policy": old_memory, "ladder": ladder}}  # fmt: skip
    patched = _kubectl(
        installed_crd, "patch", "sd", name, "-n", cluster_namespace,
        "--subresource=status", "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    assert patched.returncode == 0, patched.stderr
    table = _kubectl(installed_crd, "get", "sd", name, "-n", cluster_namespace)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()[:2]
    assert header.split()[:10] == [
        "NAME", "MODE", "DRAFTER", "RUNG", "RATIO", "CONCURRENCY", "READY", "SWAPPING", "HALTED",
        "AGE",
    ]  # fmt: skip
    method = obj["spec"]["drafter"]["method"]
    assert row.split()[1:9] == [
        "baseline", method, "adaptive", "1.17", "12", "True", "True", "True",
    ]  # fmt: skip
    stored = json.loads(
        _kubectl(installed_crd, "get", "sd", name, "-n", cluster_namespace, "-o", "json").stdout
    )["status"]["policy"]
    assert stored == old_memory  # kept whole
    assert PolicyState.from_wire(stored) == PolicyState(
        mode="baseline", streak=2, since=1_800_000_000.5, flap_times=(1_800_000_000.5,)
    )
    # A spec-only update cannot write status: the subresource keeps them apart.
    obj["status"] = {"mode": "speculative"}
    replaced = _kubectl(
        installed_crd, "apply", "-n", cluster_namespace, "-f", "-", stdin=json.dumps(obj)
    )
    assert replaced.returncode == 0, replaced.stderr
    got = json.loads(
        _kubectl(installed_crd, "get", "sd", name, "-n", cluster_namespace, "-o", "json").stdout
    )
    assert got["status"]["mode"] == "baseline"


def test_kubectl_explain_shows_field_descriptions(installed_crd: LocalCluster) -> None:
    # The server publishes CRD schemas to /openapi/v2 a moment after Established.
    deadline = time.monotonic() + 30
    explained = _kubectl(
        installed_crd, "explain", "sd.spec.drafter", "--output=plaintext-openapiv2"
    )
    while explained.returncode != 0 and time.monotonic() < deadline:
        time.sleep(1)
        explained = _kubectl(
            installed_crd, "explain", "sd.spec.drafter", "--output=plaintext-openapiv2"
        )
    assert explained.returncode == 0, explained.stderr
    assert "adaptiveVerification" in explained.stdout
    assert "enable_adaptive_verification" in explained.stdout
    assert "numSpeculativeTokens" in explained.stdout
