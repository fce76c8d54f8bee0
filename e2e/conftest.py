"""End-to-end scenarios: one suite, two backends (e2e/README.md).

pytest e2e                      # the local control plane (default)
pytest e2e --backend kind       # a kind cluster; skipped with one line without Docker/kind
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from .backends import Backend, Tools, kind_missing, start_backend


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend", choices=("local", "kind"),
        default=os.environ.get("SPECGUARD_E2E_BACKEND", "local"),
        help="where the e2e scenarios run (default: local, or $SPECGUARD_E2E_BACKEND)",
    )  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without Docker or kind the kind backend is skipped with one line: the first
    scenario is reported skipped, the others deselected."""
    if config.getoption("--backend") != "kind" or not items:
        return
    why = kind_missing()
    if why is None:
        return
    items[0].add_marker(pytest.mark.skip(reason=f"kind backend not run: {why}"))
    config.hook.pytest_deselected(items=items[1:])
    del items[1:]


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    name = str(request.config.getoption("--backend"))
    for tool in ("kubectl", "helm"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not on PATH: run `bash scripts/install-kube-tools.sh`")
    yield from start_backend(name)


@pytest.fixture(scope="session")
def tools(backend: Backend) -> Tools:
    return Tools(backend.kubeconfig)
