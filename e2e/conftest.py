"""End-to-end scenarios: one suite, three backends (e2e/README.md).

pytest e2e                      # the local control plane with real nodes (default; root)
pytest e2e --backend local      # the same control plane with the process kubelet
pytest e2e --backend kind       # a kind cluster; skipped with one line without Docker/kind
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from specguard_testkit import (
    MissingBinariesError,
    find_tool,
    install_tools_script,
    kubectl_binary,
)

from .backends import BACKENDS, Backend, Tools, kind_missing, start_backend

HERE = Path(__file__).parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend", choices=tuple(BACKENDS),
        default=os.environ.get("SPECGUARD_E2E_BACKEND", "node"),
        help="where the e2e scenarios run (default: node, or $SPECGUARD_E2E_BACKEND)",
    )  # fmt: skip


# The steps build on each other (e2e/README.md): once one fails, the later ones fail at
# once, naming it, instead of each waiting out its own timeouts on a broken cluster.
_FAILED: list[str] = []
_BACKEND: list[Backend] = []  # the session's, for the logs of a failed step


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when in ("setup", "call") and item.path.parent == HERE:
        _FAILED.append(item.name)
        if _BACKEND:
            report.sections.append(("operator logs", operator_logs(_BACKEND[0])))
    return report


def operator_logs(backend: Backend) -> str:
    """The last lines of every operator pod's log (what a failed step needs most)."""
    tools = Tools(backend.kubeconfig)
    out = []
    try:
        pods = tools.json("get", "pods", "-A", "-l", "app.kubernetes.io/component=operator")
        for pod in pods["items"]:
            meta = pod["metadata"]
            text = backend.pod_logs(meta["namespace"], meta["name"])
            out.append(f"--- {meta['namespace']}/{meta['name']}\n" + text[-6000:])
    except Exception as error:  # the logs only help; never hide the step's own failure
        out.append(f"(no operator logs: {error})")
    return "\n".join(out)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _FAILED and item.path.parent == HERE:
        pytest.fail(f"not run: the earlier step {_FAILED[0]} failed", pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without Docker or kind the kind backend is skipped with one line: the first
    scenario is reported skipped, the others deselected. The process kubelet serves no
    logs, exec or Service IPs: the steps marked ``real_kubelet`` are deselected there,
    with one line saying so."""
    scenarios = [item for item in items if item.path.parent == HERE]
    backend = config.getoption("--backend")
    if not scenarios:
        return
    if backend == "local":
        needing = [item for item in scenarios if item.get_closest_marker("real_kubelet")]
        if needing:
            reason = f"{len(needing)} steps need a real kubelet: run --backend node"
            needing[0].add_marker(pytest.mark.skip(reason=reason))
            config.hook.pytest_deselected(items=needing[1:])
            items[:] = [item for item in items if item not in needing[1:]]
        return
    if backend != "kind":
        return
    why = kind_missing()
    if why is None:
        return
    scenarios[0].add_marker(pytest.mark.skip(reason=f"kind backend not run: {why}"))
    config.hook.pytest_deselected(items=scenarios[1:])
    items[:] = [item for item in items if item not in scenarios[1:]]


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    name = str(request.config.getoption("--backend"))
    if find_tool("helm") is None:
        pytest.fail(f"helm is in neither .venv/bin nor PATH: run `bash {install_tools_script()}`")
    try:
        kubectl_binary()
    except MissingBinariesError as missing:
        pytest.fail(str(missing))
    for backend in start_backend(name):
        _BACKEND.append(backend)
        yield backend
        _BACKEND.clear()


@pytest.fixture(scope="session")
def tools(backend: Backend) -> Tools:
    return Tools(backend.kubeconfig)
