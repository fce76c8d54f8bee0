"""The kopf wiring (controller/_handlers.py): an explicit registry, settings and memo,
nothing registered by importing the module, and the loops' lifecycle by watch events."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from specguard.controller import _handlers as handlers
from specguard.controller._metrics import OperatorMetrics

from .conftest import resource
from .test_loop import FakeKube


def test_the_registry_holds_every_handler_and_the_default_one_none() -> None:
    registry = handlers.build_registry()
    assert [h.id for h in registry._activities.get_all_handlers()] == [
        "login_via_client", "stop_loops",
    ]  # fmt: skip
    assert [h.id for h in registry._indexing.get_all_handlers()] == [
        "sg_deployments", "sg_pods", "sg_services",
    ]  # fmt: skip
    assert [h.id for h in registry._watching.get_all_handlers()] == ["speculative_deployment"]
    default = kopf.get_default_registry()  # importing the module registered nothing there
    assert list(default._indexing.get_all_handlers()) == []
    assert list(default._watching.get_all_handlers()) == []


def test_settings() -> None:
    settings = handlers.operator_settings()
    assert settings.scanning.disabled and settings.posting.level == logging.WARNING
    assert (settings.watching.server_timeout, settings.watching.client_timeout) == (300, 330)


async def test_a_resource_event_starts_its_loop_and_deletion_stops_it() -> None:
    kube = FakeKube()
    memo = handlers.operator_memo(kube, OperatorMetrics(), tick_s=0.01)  # type: ignore[arg-type]
    body: dict[str, Any] = resource()
    event: dict[str, Any] = dict(
        type="ADDED", body=body, uid="u-1", namespace="llm", name="qwen", memo=memo
    )
    await handlers.on_resource_event(**event)
    running = memo.controller.loops["u-1"]
    for _ in range(200):
        if kube.status:
            break
        await asyncio.sleep(0.01)
    assert kube.status["mode"] == "speculative"  # the loop ticked: it applied and wrote
    newer = {**body, "metadata": {**body["metadata"], "generation": 2}}
    await handlers.on_resource_event(**{**event, "type": "MODIFIED", "body": newer})
    assert memo.controller.loops["u-1"] is running and running.body is newer
    await handlers.on_resource_event(**{**event, "type": "DELETED"})
    assert "u-1" not in memo.controller.loops
    await asyncio.sleep(0.05)
    assert running.task is not None and running.task.cancelled()
    await handlers.on_resource_event(**event)
    await handlers.stop_loops(memo=memo)
    assert memo.controller.loops == {}
