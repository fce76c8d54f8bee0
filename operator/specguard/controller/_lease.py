"""One active operator: a coordination.k8s.io/v1 Lease, as kube-controller-manager does it.

Why not kopf peering: kopf's peering freezes *every* operator that sees another one with the
same priority ("all operators issue a warning and freeze, leaving the cluster unserved",
kopf's docs), so two replicas of one Deployment — same pod template, same priority — would
both stop. Priorities would have to differ per replica, which a Deployment cannot express.
A Lease has no such case: a standby waits until the holder stops renewing, then takes over.

``specguard run`` acquires the Lease before kopf starts and renews it while running; when it
cannot renew within the lease's duration it stops the operator and exits non-zero, so the
pod restarts as a standby (never two leaders acting at once for longer than that).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from specguard.controller._kube import Kube, KubeError

log = logging.getLogger("specguard.lease")


def micro_time(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lease_free(lease: dict[str, Any], identity: str, now: float) -> bool:
    """Can ``identity`` take (or keep) this Lease at ``now``?"""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder or holder == identity:
        return True
    renewed = parse_micro_time(spec.get("renewTime")) or parse_micro_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds") or 15
    return renewed is None or now > renewed + duration


class LeaseElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration_s: int = 15,
        renew_s: float = 5.0,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.renew_s = renew_s
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"

    def _spec(self, now: float, acquired: Any = None, transitions: int = 0) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": acquired or micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    def _try(self) -> bool:
        """One attempt to hold the Lease (create, take over or renew). Blocking."""
        now = time.time()
        try:
            lease = self.kube._call("lease", "GET", self.path)
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now),
            }
            try:
                self.kube._call("lease", "POST", self.path.rsplit("/", 1)[0], body=body)
            except KubeError as exc2:
                if exc2.status == 409:
                    return False
                raise
            return True
        if not lease_free(lease, self.identity, now):
            return False
        spec = lease.get("spec") or {}
        mine = spec.get("holderIdentity") == self.identity
        lease["spec"] = self._spec(
            now,
            spec.get("acquireTime") if mine else None,
            int(spec.get("leaseTransitions") or 0) + (0 if mine else 1),
        )
        try:  # the resourceVersion in the body makes this a compare-and-swap
            self.kube._call("lease", "PUT", self.path, body=lease)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def acquire(self) -> None:
        waiting_logged = False
        while True:
            try:
                if await asyncio.to_thread(self._try):
                    log.info("lease %s/%s held by %s", self.namespace, self.name, self.identity)
                    return
            except KubeError as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            if not waiting_logged:
                log.info("lease %s/%s held by another instance: standing by",
                         self.namespace, self.name)  # fmt: skip
                waiting_logged = True
            await asyncio.sleep(self.renew_s)

    async def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew every ``renew_s``; call ``on_lost`` once it cannot for ``duration_s``."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.renew_s)
            try:
                if await asyncio.to_thread(self._try):
                    last = time.monotonic()
                    continue
                log.error("lease %s/%s taken by another instance", self.namespace, self.name)
                on_lost()
                return
            except KubeError as exc:
                log.warning("lease renewal failed: %s", exc)
            if time.monotonic() - last > self.duration_s:
                log.error("lease %s/%s not renewed for %ss", self.namespace, self.name,
                          self.duration_s)  # fmt: skip
                on_lost()
                return
