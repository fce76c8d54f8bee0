"""Deleting a SpeculativeDeployment, with and without an operator running (local control
plane; the operator as the `specguard run` subprocess the chart runs).

The resource carries no finalizer: with no operator left (after `helm uninstall`, or
scaled to 0) `kubectl delete` must not hang, and while one runs the deletion must still
stop the resource's loop and let the garbage collector take what it made.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specguard.api import constants as c
from specguard_testkit._cluster import LocalCluster

from .kit import SD_PATH, api, create_sd, get_sd, install_crd, sd_body, start_operator, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

def owned(cluster: LocalCluster, ns: str, name: str) -> list[str]:
    """What the operator made for ``name`` and is still there (terminating or not)."""
    found = []
    for version, plural in c.OWNED_KINDS.values():
        prefix = "api/v1" if version == "v1" else f"apis/{version}"
        path = (f"/{prefix}/namespaces/{ns}/{plural}"
                f"?labelSelector={c.LABEL_APP_INSTANCE}={name}")  # fmt: skip
        found += [f"{plural}/{o['metadata']['name']}" for o in api(cluster, "GET", path)["items"]]
    return found


def exists(cluster: LocalCluster, ns: str, name: str) -> bool:
    found = api(cluster, "GET", f"{SD_PATH.format(ns=ns)}/{name}", ok=False)
    return bool(found.get("kind") == c.KIND)


def applied(cluster: LocalCluster, ns: str, name: str) -> None:
    """Wait until the operator made the resource's objects and wrote its status."""

    def deployments() -> bool:
        return len([o for o in owned(cluster, ns, name) if o.startswith("deployments/")]) == 3

    def status_written() -> bool:
        return (get_sd(cluster, ns, name).get("status") or {}).get("observedGeneration") == 1

    wait_for(f"{name}'s Deployments", deployments, 90)
    wait_for(f"{name}'s status", status_written, 60)


def delete(cluster: LocalCluster, ns: str, name: str, propagation: str = "Background") -> None:
    api(cluster, "DELETE", f"{SD_PATH.format(ns=ns)}/{name}",
        {"propagationPolicy": propagation}, content_type="application/json")  # fmt: skip


def test_deletion_with_and_without_an_operator(
    local_cluster: LocalCluster, cluster_namespace: str, tmp_path: Path
) -> None:
    cluster, ns = local_cluster, cluster_namespace
    install_crd(cluster)
    op = start_operator(cluster, ns, tmp_path)
    try:
        for name in ("qwen", "fore", "kept"):
            create_sd(cluster, sd_body(name, ns))
        for name in ("qwen", "fore", "kept"):
            applied(cluster, ns, name)
            assert "finalizers" not in get_sd(cluster, ns, name)["metadata"], name

        # With the operator running: the resource goes at once, the garbage collector takes
        # what it made, and its loop stopped (it does not put anything back).
        delete(cluster, ns, "qwen")
        wait_for("qwen deleted", lambda: not exists(cluster, ns, "qwen"), 20)
        # Foreground: the resource stays (deletionTimestamp) until its dependents are gone;
        # a loop still running would put them back.
        delete(cluster, ns, "fore", "Foreground")

        def gone() -> bool:
            return not owned(cluster, ns, "qwen") and not owned(cluster, ns, "fore")

        wait_for("their objects collected", gone, 90)
        wait_for("fore deleted", lambda: not exists(cluster, ns, "fore"), 30)
        time.sleep(5)  # ten ticks of the operator
        assert gone(), "a stopped loop put objects back"
        log = op.log.read_text()
        for name in ("qwen", "fore"):
            assert f"{ns}/{name}: deleted, its loop stopped" in log, log[-3000:]
        assert owned(cluster, ns, "kept"), "the other resource's objects stay"
    finally:
        op.stop()

    # No operator left: `kubectl delete` completes, and the owned objects go with it.
    delete(cluster, ns, "kept")
    wait_for("kept deleted without an operator", lambda: not exists(cluster, ns, "kept"), 20)
    wait_for("kept's objects collected", lambda: not owned(cluster, ns, "kept"), 90)
