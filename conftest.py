"""The test tiers: which tests a run selects (README; docs/architecture.md, the contracts).

- ``inprocess``: pure and in-process tests (no subprocess, no control plane, no real vLLM).
  Plain ``pytest`` runs only these (under a minute).
- ``slow``: in-process tests that take seconds each (statistics over many runs, real-time
  waits): ``slow``-marked ones and those the table names.
- ``process``: tests that start processes (``specguard sim`` and router subprocesses, CLI
  runs, helm, Prometheus, the demo command without a cluster).
- ``cluster``: the local control plane (``specguard_testkit``).
- ``realvllm``: real vLLM for CPU on the tiny models.
- ``e2e``: real nodes and the image (``e2e/``, ``node``-marked tests).

``--slow``, ``--process``, ``--cluster``, ``--realvllm``, ``--e2e`` add a tier to the in-process
one;
``--tiers LIST`` (comma-separated, or ``all``) selects exactly those tiers (``.ci/run`` runs
one tier at a time). A tier that is opted into and lacks its tools fails, never skips: its
fixtures call ``pytest.fail`` (``specguard_testkit.pytest_plugin``, tests/realvllm/conftest.py,
e2e/conftest.py, tests/chart/conftest.py).

This file is at the repository root so that ``pytest e2e`` and ``pytest tests/...`` both load
it. The table below is the one place a test gets its tier.
"""

from __future__ import annotations

import fnmatch
import subprocess
from collections import Counter
from collections.abc import Iterator

import pytest

pytest_plugins = ["specguard_testkit.pytest_plugin"]

TIER_ORDER = ("inprocess", "slow", "process", "cluster", "realvllm", "e2e")

# (glob on the test's node id, tier): the first match gives the path's tier, else
# ``inprocess``. A pattern without ``::`` matches the whole file; ``path::name`` entries
# place single tests of a file whose other tests are in-process. tests/test_layers.py checks
# that no in-process test starts a process or uses the cluster fixtures.
TIERS: tuple[tuple[str, str], ...] = (
    ("e2e/*", "e2e"),
    ("tests/cluster/test_real_node.py", "e2e"),
    ("tests/realvllm/*", "realvllm"),
    ("*_realvllm.py", "realvllm"),
    ("*_cluster.py", "cluster"),
    ("tests/api/test_api_differential.py", "cluster"),
    ("tests/cluster/test_local_cluster.py", "cluster"),
    ("tests/cluster/test_current_kubernetes.py", "cluster"),
    ("tests/controller/test_operator_*.py", "cluster"),
    # Whole files that start processes.
    ("tests/chart/*", "process"),
    ("tests/cluster/test_kube_tools.py", "process"),
    ("tests/cluster/test_testing_command.py", "process"),
    ("tests/judge/test_judge_command.py", "process"),
    ("tests/router/test_router_aiperf.py", "process"),
    ("tests/router/test_router_drain_refusal.py", "process"),
    ("tests/router/test_router_listen.py", "process"),
    ("tests/router/test_router_queue_sim.py", "process"),
    ("tests/router/test_router_sim.py", "process"),
    ("tests/router/test_router_timestamps.py", "process"),
    ("tests/sim/test_sim_api.py", "process"),
    ("tests/sim/test_sim_calibration.py", "process"),
    ("tests/sim/test_sim_deepseek_shape.py", "process"),
    ("tests/sim/test_sim_engine.py", "process"),
    ("tests/sim/test_sim_faults.py", "process"),
    ("tests/sim/test_sim_fidelity.py", "process"),
    ("tests/sim/test_sim_metrics.py", "process"),
    ("tests/sim/test_sim_prometheus.py", "process"),
    ("tests/sim/test_sim_validation.py", "process"),
    ("tests/sources/test_sources_overload_e2e.py", "process"),
    ("tests/sources/test_sources_prometheus.py", "process"),
    ("tests/sources/test_sources_sim_e2e.py", "process"),
    ("tests/sources/test_sources_two_routers.py", "process"),
    ("tests/evaluate/test_evaluate_simulated.py", "process"),
    ("tests/evaluate/test_evaluate_errors.py", "process"),
    ("tests/demo/test_demo_command.py", "process"),
    # Single tests that start processes, in files of in-process tests.
    ("tests/api/test_api_crd.py::test_crd_command_bad_version_exits_2", "process"),
    ("tests/cluster/test_cluster_parts.py::test_build_script_*", "process"),
    ("tests/cluster/test_cluster_parts.py::test_kubebuilder_assets_first_*", "process"),
    ("tests/cluster/test_cluster_parts.py::test_version_skew_between_envtest_*", "process"),
    ("tests/cluster/test_cluster_parts.py::test_live_owner_is_left_alone_*", "process"),
    ("tests/cluster/test_cluster_parts.py::test_missing_binaries_fail_the_cluster_tier_*",
     "process"),
    ("tests/cluster/test_cluster_parts.py::test_orphans_of_a_killed_owner_are_reaped", "process"),
    ("tests/controller/test_swap.py::test_swap_back_and_forth_ends_in_the_final_counts",
     "process"),
    ("tests/controller/test_swap.py::test_swap_bounds_hold_and_it_finishes", "process"),
    ("tests/render/test_render_command.py::test_a_namespace_in_the_same_file_*", "process"),
    ("tests/render/test_render_command.py::test_invalid_file_lists_every_problem", "process"),
    ("tests/render/test_render_command.py::test_render_example_prints_objects", "process"),
    ("tests/render/test_render_command.py::test_schedule_rung_without_a_derived_*", "process"),
    ("tests/render/test_render_input.py::test_render_dash_as_a_process", "process"),
    ("tests/router/test_router_cli.py::test_bad_input_through_the_specguard_command", "process"),
    ("tests/router/test_router_cli.py::test_no_prompt_or_completion_text_in_logs_*", "process"),
    ("tests/router/test_router_client_loop.py::test_the_demo_clients_are_told_apart_*",
     "process"),
    ("tests/router/test_router_domains.py::test_each_domain_is_served_by_its_arm_*", "process"),
    ("tests/sim/test_sim_acceptance_spread.py::test_the_server_draws_acceptance_*", "process"),
    ("tests/sim/test_sim_cli.py::test_bad_flag_exit_code_is_2", "process"),
    ("tests/sim/test_sim_cli.py::test_bad_speculative_config_exits_2_with_one_line", "process"),
    ("tests/sim/test_sim_cli.py::test_help_gives_every_flag_a_help_text", "process"),
    ("tests/sim/test_sim_cli.py::test_near_miss_exits_2_with_one_line_*", "process"),
    ("tests/sim/test_sim_cli.py::test_stop_leaves_no_process_behind", "process"),
    ("tests/sim/test_sim_cli.py::test_unknown_vllm_flags_are_accepted_with_a_warning",
     "process"),
    ("tests/sim/test_sim_held_drafter.py::test_k0_schedule_is_slower_per_token_*", "process"),
    ("tests/sim/test_sim_tool_calls.py::test_a_simulator_answers_valid_calls_*", "process"),
    ("tests/test_cli.py::test_missing_extra_is_one_line_naming_it", "process"),
    ("tests/test_cli.py::test_demo_without_the_testkit_is_one_line_naming_it", "process"),
    ("tests/test_cli.py::test_render_reads_standard_input", "process"),
    ("tests/test_cli.py::test_unknown_command_exits_2", "process"),
    ("tests/test_repository.py::test_only_evaluate_needs_the_evaluate_extra", "process"),
    ("tests/test_repository.py::test_only_the_demo_needs_the_testkit", "process"),
    # In-process files and tests that take seconds (measured with --durations).
    ("tests/judge/test_judge_clients.py", "slow"),
    ("tests/router/test_router_load_match.py", "slow"),
    ("tests/router/test_router_mirror.py", "slow"),
    ("tests/sim/test_sim_published_kimi.py", "slow"),
    ("tests/sources/test_sources_scrape.py", "slow"),
    ("tests/api/test_api_rules.py::test_cel_*", "slow"),
    ("tests/judge/test_judge_pod_offset.py::test_a_in_a_modest_number_of_runs_*", "slow"),
    ("tests/judge/test_judge_traffic.py::test_load_dependent_a_a_keeps_the_interval_honest",
     "slow"),
    ("tests/render/test_render_input.py::test_huge_values_are_elided_in_errors", "slow"),
    ("tests/router/test_router_proxy.py::test_parsed_request_is_not_held_for_the_generation",
     "slow"),
    ("tests/router/test_router_toolcalls.py::test_*_agrees_with_jsonschema", "slow"),
    ("tests/sources/test_sources_window.py::test_every_metrics_source_is_a_source", "slow"),
    ("tests/sources/test_sources_window_reads.py::test_every_mirrored_pair_is_judged_*", "slow"),
)  # fmt: skip

# The tiers whose tests start no process (the guard below and tests/test_layers.py).
IN_PROCESS = ("inprocess", "slow")

# Markers that put a test in a heavier tier than its path (a test takes the heaviest).
MARKER_TIERS = {
    "slow": "slow",
    "process": "process",
    "prometheus": "process",
    "cluster": "cluster",
    "realvllm": "realvllm",
    "node": "e2e",
    "e2e": "e2e",
}


def path_tier(nodeid: str) -> str:
    """The table's tier for a node id (``tests/x.py::test_y[param]``) or a file path."""
    name = nodeid.split("[", 1)[0]
    path = name.split("::", 1)[0]
    for pattern, tier in TIERS:
        if fnmatch.fnmatchcase(name if "::" in pattern else path, pattern):
            return tier
    return "inprocess"


def item_tier(item: pytest.Item) -> str:
    tiers = [path_tier(item.nodeid)]
    tiers += [MARKER_TIERS[m.name] for m in item.iter_markers() if m.name in MARKER_TIERS]
    return max(tiers, key=TIER_ORDER.index)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specguard tiers")
    group.addoption(
        "--tiers", default="inprocess",
        help="comma-separated tiers to run, exactly (or 'all'); default: inprocess. "
        f"Tiers: {', '.join(TIER_ORDER)}",
    )  # fmt: skip
    for tier in TIER_ORDER[1:]:
        group.addoption(f"--{tier}", action="store_true", help=f"also run the {tier} tier")


def selected_tiers(config: pytest.Config) -> tuple[str, ...]:
    raw = str(config.getoption("--tiers"))
    names = set(TIER_ORDER) if raw == "all" else {t.strip() for t in raw.split(",") if t.strip()}
    unknown = names - set(TIER_ORDER)
    if unknown:
        raise pytest.UsageError(f"--tiers: unknown {', '.join(sorted(unknown))}; "
                                f"tiers are {', '.join(TIER_ORDER)} or all")  # fmt: skip
    names |= {tier for tier in TIER_ORDER[1:] if config.getoption(f"--{tier}")}
    return tuple(tier for tier in TIER_ORDER if tier in names)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SELECTED] = selected_tiers(config)
    config.stash[_DESELECTED] = Counter()


_SELECTED = pytest.StashKey[tuple[str, ...]]()
_DESELECTED = pytest.StashKey[Counter[str]]()
_TIER = pytest.StashKey[str]()


def pytest_report_header(config: pytest.Config) -> str:
    selected: tuple[str, ...] = config.stash[_SELECTED]
    return f"tiers: {', '.join(selected)} (--tiers all runs every tier)"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = config.stash[_SELECTED]
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        tier = item.stash[_TIER] = item_tier(item)
        item.add_marker(tier)
        (keep if tier in selected else drop).append(item)
    config.stash[_DESELECTED].update(item.stash[_TIER] for item in drop)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def deselected_line(config: pytest.Config) -> str:
    counts = config.stash[_DESELECTED]
    if not counts:
        return ""
    parts = [f"{tier} {counts[tier]}" for tier in TIER_ORDER if counts[tier]]
    more = ",".join(tier for tier in TIER_ORDER if counts[tier])
    return f"tiers not opted into, deselected: {', '.join(parts)} (--tiers {more} runs them)"


def pytest_report_collectionfinish(config: pytest.Config) -> str:
    return deselected_line(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    line = deselected_line(terminalreporter.config)
    if line:
        terminalreporter.write_line(line)


class ProcessStartedError(AssertionError):
    """An in-process test started a process: its tier in the table is wrong."""


@pytest.fixture(autouse=True)
def _inprocess_starts_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """An in-process test that starts a process fails, naming the table to fix."""
    item = request.node
    if not isinstance(item, pytest.Item) or item.stash.get(_TIER, "") not in IN_PROCESS:
        yield
        return
    original = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[bytes], *args: object, **kwargs: object) -> None:
        raise ProcessStartedError(
            f"{item.nodeid} is in the in-process tier but starts a process ({args[:1]!r}): "
            "give it its tier in the TIERS table of conftest.py"
        )

    subprocess.Popen.__init__ = refuse  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
