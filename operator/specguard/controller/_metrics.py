"""The operator's Prometheus metrics (prometheus-client), labelled by resource."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from specguard.api import Status
from specguard.api import constants as c
from specguard.controller._conditions import GUARD_WIRE
from specguard.judge import Verdict

LABELS = ("namespace", "name")
# The guards' label values (status.lastVerdict.guards' names).
GUARDS = tuple(GUARD_WIRE.values())


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.mode = Gauge(
            "specguard_mode",
            "Arm that serves clients: 1 for the labelled mode, 0 otherwise",
            [*LABELS, "mode"],
            registry=r,
        )
        self.tpot_ratio = Gauge(
            "specguard_tpot_ratio",
            "Per-token latency ratio speculative / baseline of the last verdict",
            LABELS,
            registry=r,
        )
        self.tpot_ratio_ci = Gauge(
            "specguard_tpot_ratio_ci",
            "Confidence bounds (bound=lower|upper) of the last verdict's per-token latency ratio",
            [*LABELS, "bound"],
            registry=r,
        )
        self.source_up = Gauge(
            "specguard_source_up",
            "1 when the last window's sample source answered, 0 when it failed "
            "(JudgeDegraded SourceUnavailable); a window without traffic is 1",
            LABELS,
            registry=r,
        )
        self.rollbacks = Counter(
            "specguard_rollbacks", "Rollbacks decided (drafter → no drafter)", LABELS, registry=r
        )
        self.promotions = Counter(
            "specguard_promotions",
            "Re-promotions decided (no drafter → drafter)",
            LABELS,
            registry=r,
        )
        self.verdicts = Counter(
            "specguard_verdicts", "Window verdicts by result", [*LABELS, "result"], registry=r
        )
        self.api_requests = Counter(
            "specguard_api_requests", "Requests the operator made to the API server", ["verb"],
            registry=r,
        )  # fmt: skip
        self.status_writes = Counter(
            "specguard_status_writes", "Status patches per resource", LABELS, registry=r
        )
        self.rung = Gauge(
            "specguard_rung",
            "Drafter configuration the speculative arm runs (spec.ladder): 1 for the labelled "
            "rung",
            [*LABELS, "rung"],
            registry=r,
        )
        self.route = Gauge(
            "specguard_route",
            "Request domains served by the other arm than the serving one (routing by "
            "domain): 1 per domain routed, labelled with its arm",
            [*LABELS, "domain", "arm"],
            registry=r,
        )
        self.halted = Gauge(
            "specguard_halted",
            "1 while automatic changes are stopped after changes back and forth on the same "
            "traffic (the Halted condition; kubectl specguard retry resumes them)",
            LABELS,
            registry=r,
        )
        self.changes_held = Gauge(
            "specguard_changes_held",
            "Changes of mode the windows asked for since automatic changes stopped, not made "
            "(status.policy.held); 0 when not halted",
            LABELS,
            registry=r,
        )
        self.guard_ratio = Gauge(
            "specguard_guard_ratio",
            "The last verdict's guard beside the median (guard=tpotP99|ttftP50|ttftP99|"
            "e2eP99): the arms' quantile ratio, speculative / baseline",
            [*LABELS, "guard"],
            registry=r,
        )
        self.guard_regressed = Gauge(
            "specguard_guard_regressed",
            "1 when the last verdict's guard was confidently regressed (its lower bound above "
            "1 + its tolerance), 0 otherwise",
            [*LABELS, "guard"],
            registry=r,
        )
        self._routes: dict[tuple[str, str], dict[str, c.Arm]] = {}  # the route labels shown

    def set_mode(self, namespace: str, name: str, mode: str) -> None:
        for arm in c.ARMS:
            self.mode.labels(namespace, name, arm).set(1.0 if arm == mode else 0.0)

    def set_beyond(self, namespace: str, name: str, status: Status) -> None:
        """From the status just decided: the ladder's rung, the routes in effect, and the
        flap stop with the changes it held."""
        policy = status.policy or {}
        halted = policy.get("halted") is True
        held = policy.get("held", 0) if halted else 0
        self.halted.labels(namespace, name).set(1.0 if halted else 0.0)
        self.changes_held.labels(namespace, name).set(float(held) if isinstance(held, int) else 0.0)
        if status.ladder is not None:
            running = status.ladder.rung.name
            for rung in ("configured", "adaptive", "schedule"):
                self.rung.labels(namespace, name, rung).set(1.0 if rung == running else 0.0)
        routes = dict(status.arms.routes) if status.arms is not None else {}
        shown = self._routes.get((namespace, name), {})
        for domain, arm in shown.items():
            if routes.get(domain) != arm:
                self.route.remove(namespace, name, domain, arm)
        for domain, arm in routes.items():
            self.route.labels(namespace, name, domain, arm).set(1.0)
        self._routes[(namespace, name)] = routes

    def set_guards(self, namespace: str, name: str, verdict: Verdict) -> None:
        """The window's guards beside the median: each judged guard's ratio, and whether it
        was confidently regressed (``Verdict.regressed_guards``, what the policy acts on). A
        guard the verdict does not judge (off, an unpaired or inconclusive window) is 0 and
        has no ratio series, nor has one without a ratio (too few pairs): no stale figure."""
        regressed = {g.name for g in verdict.regressed_guards}
        ratios = {g.name: g.ratio for g in verdict.guards if g.ratio is not None}
        for guard, wire in GUARD_WIRE.items():
            self.guard_regressed.labels(namespace, name, wire).set(float(guard in regressed))
            if guard in ratios:
                self.guard_ratio.labels(namespace, name, wire).set(ratios[guard])
            else:
                with contextlib.suppress(KeyError):
                    self.guard_ratio.remove(namespace, name, wire)

    def forget(self, namespace: str, name: str) -> None:
        for gauge in (self.tpot_ratio, self.source_up, self.halted, self.changes_held):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, name)
        for bound in ("lower", "upper"):
            with contextlib.suppress(KeyError):
                self.tpot_ratio_ci.remove(namespace, name, bound)
        for arm in c.ARMS:
            with contextlib.suppress(KeyError):
                self.mode.remove(namespace, name, arm)
        for rung in ("configured", "adaptive", "schedule"):
            with contextlib.suppress(KeyError):
                self.rung.remove(namespace, name, rung)
        for guard in GUARDS:
            for gauge in (self.guard_ratio, self.guard_regressed):
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, name, guard)
        for domain, arm in self._routes.pop((namespace, name), {}).items():
            self.route.remove(namespace, name, domain, arm)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
