"""Python and the API server accept exactly the same SpeculativeDeployments.

Hypothesis generates valid resources and mutations of them (wrong types, unknown and
snake_case fields, nulls, boundary and out-of-range numbers, huge quantities, long and odd
strings); each is sent to the real kube-apiserver with the generated CRD installed
(``specguard crd``, CEL rules and all) as a server-side dry-run create with strict field
validation (kubectl's default), and parsed by ``parse_resource``. The two verdicts must
agree on every case. Each disagreement found on the way is a case in ``REGRESSIONS``.

``status`` is left out: the server drops it on create (it has its own subresource), and
only the operator writes it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from specguard.api import SpecError, parse_resource
from specguard.api._resource import NAMESPACE_PATTERN
from specguard.api._rules import RULES
from specguard.api.constants import GROUP, PLURAL, VERSION
from specguard_testkit._cluster import LocalCluster

from .conftest import BASE_SPEC, resource
from .strategies import resources

pytestmark = pytest.mark.cluster

NAMESPACE = "differential"
# About a minute against the local server on a busy 2-core machine. A longer, random hunt:
# SPECGUARD_DIFFERENTIAL_EXAMPLES=5000 pytest tests/api/test_api_differential.py -s
EXAMPLES = int(os.environ.get("SPECGUARD_DIFFERENTIAL_EXAMPLES", "1200"))
FIXED_SEED = "SPECGUARD_DIFFERENTIAL_EXAMPLES" not in os.environ


@dataclass
class Server:
    """Server-side dry-run creates against one namespace."""

    client: httpx.Client
    namespace: str
    cases: int = 0
    verdicts: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})

    def accepts(self, obj: dict[str, Any]) -> tuple[bool, str]:
        url = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        response = self.client.post(
            url,
            params={"dryRun": "All", "fieldValidation": "Strict"},
            content=json.dumps(obj),
            headers={"Content-Type": "application/json"},
        )
        self.cases += 1
        if response.status_code in (200, 201):
            self.verdicts[True] += 1
            return True, ""
        # Refused as invalid (422), malformed or mismatched (400): anything else is the
        # test's own problem, not a verdict.
        assert response.status_code in (400, 422), (response.status_code, response.text[:500])
        self.verdicts[False] += 1
        return False, response.json().get("message", "")[:2000]


@pytest.fixture(scope="module")
def server(local_cluster: LocalCluster) -> Iterator[Server]:
    crd = subprocess.run(
        [sys.executable, "-m", "specguard", "crd"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    applied = local_cluster.kubectl("apply", "-f", "-", input=crd, check=False)
    assert applied.returncode == 0, applied.stderr
    local_cluster.kubectl(
        "wait", "--for=condition=Established", "crd/speculativedeployments.specguard.io",
        "--timeout=60s",
    )  # fmt: skip
    with local_cluster.access.client(timeout=30) as client:
        created = client.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}})
        assert created.status_code in (201, 409), created.text
        checked = Server(client, NAMESPACE)
        # The server reads the CRD a moment after Established: wait until it takes a
        # valid object.
        for _ in range(60):
            if checked.accepts(_in_namespace(resource(BASE_SPEC)))[0]:
                break
            time.sleep(1)
        yield checked
        print(
            f"\ndifferential: {checked.cases} cases sent to the API server "
            f"({checked.verdicts[True]} accepted, {checked.verdicts[False]} refused)"
        )


def _in_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    """The object in the test's namespace: a valid namespace is valid whichever it is (and
    the server wants the request's), an invalid one stays to be refused."""
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    valid = isinstance(namespace, str) and re.fullmatch(NAMESPACE_PATTERN, namespace)
    if valid and len(namespace) <= 63:  # type: ignore[arg-type]
        metadata["namespace"] = NAMESPACE  # type: ignore[index]
    return obj


# What CEL cannot see (rules.py says why): Python alone refuses these, by design.
PYTHON_ONLY = tuple(rule.message for rule in RULES if rule.cel is None)


def python_accepts(obj: dict[str, Any]) -> tuple[bool, str]:
    """Python's verdict, leaving out what only Python can check."""
    try:
        parse_resource(obj)
    except SpecError as error:
        if all(p.message.startswith(PYTHON_ONLY) for p in error.problems):
            return True, f"(refused by Python-only rules: {error})"
        return False, str(error)
    return True, ""


def assert_agree(server: Server, obj: dict[str, Any]) -> None:
    on_server, server_says = server.accepts(obj)
    in_python, python_says = python_accepts(obj)
    assert on_server == in_python, (
        f"API server {'accepts' if on_server else 'refuses'}, Python "
        f"{'accepts' if in_python else 'refuses'}:\n{json.dumps(obj)[:3000]}\n"
        f"server: {server_says}\npython: {python_says[:2000]}"
    )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=FIXED_SEED,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(obj=resources().map(_in_namespace))
def test_python_and_api_server_agree(server: Server, obj: dict[str, Any]) -> None:
    assert_agree(server, obj)


def _with(path: str, value: Any) -> dict[str, Any]:
    obj = _in_namespace(resource(json.loads(json.dumps(BASE_SPEC))))
    node: Any = obj
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return obj


# Disagreements the differential test found, kept as cases (each was fixed in Python or
# the CRD): the path set and the value.
REGRESSIONS: list[tuple[str, Any]] = [
    ("spec.runtime.shmSize", "1e999999999"),
    ("spec.runtime.resources", {"limits": {"memory": "1e99999999999999999999"}}),
    ("spec.drafter.num_speculative_tokens", 4),
    ("spec.drafter.adaptive_verification", True),
    ("spec.bogus", 1),
    ("bogus", 1),
    ("metadata.namespace", "Bad_NS!"),
    ("spec.runtime.tolerations", [{"key": "a", "effect": "NoExecute", "tolerationSeconds": 2**70}]),
    ("spec.runtime.extraArgs", ["--tensor-parallel=4"]),
    ("spec.replicas", None),
    ("spec.runtime.tolerations", [{"key": None, "operator": "Exists"}]),
    ("metadata.namespace", None),
    ("spec.runtime.resources", {"requests": {"cpu": None}}),
    ("spec.runtime.extraArgs", ["-pp", "2"]),  # Python only, by design (rules.py)
    ("metadata.namespace", ""),
    ("spec.runtime.tensorParallelSize", True),  # a Literal of ints took True for 1
    ("spec.evaluation.windowsPerFalseAlarm", 9),
    ("spec.evaluation.windowsPerFalseAlarm", 0),
    ("spec.evaluation.windowsPerFalseAlarm", 10**12 + 1),
    # The ladder and routing fields (BASE_SPEC: DSpark with adaptive verification).
    ("spec.ladder", {"rungs": ["adaptive"]}),
    ("spec.ladder", {"rungs": ["schedule", "schedule"]}),
    ("spec.ladder", {"rungs": ["schedule"]}),
    ("spec.ladder", {"rungs": [], "retryAfter": "30s"}),
    ("spec.ladder", {"rungs": ["bogus"]}),
    ("spec.routing", {"byDomain": True}),
    ("spec.routing", {"by_domain": True}),
    ("spec.rollback", {"toolCallGuardrail": "true"}),
]


@pytest.mark.parametrize(("path", "value"), REGRESSIONS, ids=[r[0] for r in REGRESSIONS])
def test_found_disagreements_stay_fixed(server: Server, path: str, value: Any) -> None:
    assert_agree(server, _with(path, value))
