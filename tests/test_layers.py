"""The architecture as contracts that fail the build: which way imports run in
``operator/specguard`` (docs/architecture.md, "Which way imports run").

Why an AST test here rather than import-linter: the graph is read from the source with the
standard library, so the contracts run inside the pytest gate CI already runs (no extra
install on a bare machine, well under a second); function-level imports (the CLI loads each
room lazily) count like any other; and the same graph is compared with the table drawn in
docs/architecture.md, so the document cannot drift from the code. Each contract is a small
function, and ``test_breaking_*`` feeds it a tree that breaks it, so a contract that stops
finding violations fails too.

Units: each package below ``specguard`` (``api``, ``judge``, ...) and each top-level module
(``_arms``, ``_objects``, ``_args``, ``meter``, ``cli``, ``__main__``); ``specguard`` is the
root ``__init__`` (the version).
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "operator" / "specguard"
DOC = ROOT / "docs" / "architecture.md"

PURE_CORES = ("api", "render", "judge")
# The rooms with I/O (network, processes, files, the API server, the terminal).
IO_ROOMS = ("sim", "router", "sources", "evaluate", "controller", "commands", "demo", "cli",
            "__main__")  # fmt: skip
# The test rig, a distribution of its own (testkit/, not in the operator's wheel or image):
# only the demo runs on it, and the CLI loads the demo only for ``specguard demo``.
TESTKIT = "specguard_testkit"
TESTKIT_USERS = ("specguard.demo",)
# What api and judge may import besides themselves: the root (version), the vocabulary and
# the time format.
BASE = ("specguard", "_arms", "_times")
# Libraries (and builtins) that do I/O or read the clock: a pure module uses none of them.
IO_LIBRARIES = (
    "aiohttp", "asyncio", "http", "httpx", "kopf", "kubernetes", "logging", "os",
    "prometheus_api_client", "prometheus_client", "requests", "shutil", "socket", "subprocess",
    "sys", "tempfile", "threading", "time", "urllib", "uvloop",
)  # fmt: skip
IO_BUILTINS = ("open", "print", "input")
# Pure modules of those libraries.
PURE_LIBRARY_MODULES = ("prometheus_client.parser",)
# Modules that must stay pure (no I/O library, no clock, only pure specguard modules): the
# pure cores whole, the shared top-level modules, and the pure parts of the I/O rooms that
# docs/architecture.md names (what tests compare by exact equality).
PURE_MODULES = (
    "specguard.api", "specguard.render", "specguard.judge", "specguard._arms", "specguard._times",
    "specguard._objects", "specguard._exposition", "specguard.meter", "specguard.toolcalls",
    "specguard.controller._decide",
    "specguard.controller._settings", "specguard.controller._observe",
    "specguard.controller._swap", "specguard.controller._conditions",
    "specguard.controller._mirror", "specguard.controller._schedule",
    "specguard.controller._clients", "specguard.controller._rungs", "specguard.controller._split",
    "specguard.router._pool", "specguard.router._strip", "specguard.sources._window",
    "specguard.evaluate._cells", "specguard.evaluate._analysis",
    "specguard.demo._accounting", "specguard.demo._report", "specguard.demo._schedule",
)  # fmt: skip
# Impure modules a pure one may still import: the command-line error type (``UsageError``,
# raised by the demo's schedule parser); importing ``_args`` does no I/O.
PURE_MAY_IMPORT = ("specguard", "specguard._args")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. specguard.controller._loop
    target: str  # the imported module, e.g. specguard.judge, or a library's (os.path)
    line: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def modules(root: Path) -> dict[str, Path]:
    """Module name → file, for every module below ``root`` (a ``specguard`` folder)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = ("specguard", *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(root: Path) -> list[Import]:
    """Every import in every module below ``root``, function-level ones included: specguard
    modules by their full name (``from specguard.x import y`` is ``specguard.x.y`` when y is
    a module), libraries by the module named."""
    known = modules(root)
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
                targets = subs or [base]
            for target in targets:
                module = target
                if module.split(".")[0] == "specguard":
                    while module not in known and "." in module:  # an attribute path
                        module = module.rpartition(".")[0]
                found.append(Import(name, module, node.lineno))
    return found


def unit(module: str) -> str:
    """``specguard.controller._loop`` → ``controller``; ``specguard._arms`` → ``_arms``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_graph(found: Iterable[Import], root: Path = SOURCE) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {unit(name): set() for name in modules(root)}
    for imp in found:
        graph.setdefault(unit(imp.source), set())
        if _ours(imp.target) and unit(imp.target) != unit(imp.source):
            graph[unit(imp.source)].add(unit(imp.target))
    return graph


def _ours(module: str) -> bool:
    """A module of the operator's package (not the testkit, not a library)."""
    return module.split(".", maxsplit=1)[0] == "specguard"


def _internal(found: Iterable[Import]) -> list[Import]:
    """The imports of one unit from another."""
    return [i for i in found if _ours(i.target) and unit(i.target) != unit(i.source)]


# -- the contracts -------------------------------------------------------------------------


def pure_cores_import_no_io_room(found: Iterable[Import]) -> list[str]:
    return [str(i) for i in _internal(found)
            if unit(i.source) in PURE_CORES and unit(i.target) in IO_ROOMS]  # fmt: skip


def api_and_judge_import_no_other_package(found: Iterable[Import]) -> list[str]:
    return [str(i) for i in _internal(found)
            if unit(i.source) in ("api", "judge") and unit(i.target) not in BASE]  # fmt: skip


def nothing_imports_cli(found: Iterable[Import]) -> list[str]:
    return [str(i) for i in _internal(found)
            if unit(i.target) == "cli" and i.source != "specguard.__main__"]  # fmt: skip


def only_the_demo_imports_the_testkit(found: Iterable[Import]) -> list[str]:
    def user(module: str) -> bool:
        return any(module == u or module.startswith(u + ".") for u in TESTKIT_USERS)

    return [str(i) for i in found
            if i.target.split(".")[0] == TESTKIT and not user(i.source)]  # fmt: skip


def no_upward_imports(found: Iterable[Import], layers: Mapping[str, int]) -> list[str]:
    """Every import goes to a unit of a lower layer (same layer: no; unknown unit: no)."""
    bad = []
    for i in _internal(found):
        src, dst = layers.get(unit(i.source)), layers.get(unit(i.target))
        if src is None or dst is None or dst >= src:
            bad.append(f"{i} (layer {src} → {dst})")
    return bad


def pure_modules_stay_pure(root: Path, found: Iterable[Import]) -> list[str]:
    def pure(module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in PURE_MODULES)

    bad = [str(i) for i in found if pure(i.source) and (
        (i.target.split(".")[0] in ("specguard", TESTKIT) and not pure(i.target)
         and i.target not in PURE_MAY_IMPORT)
        or (i.target.split(".")[0] in IO_LIBRARIES and i.target not in PURE_LIBRARY_MODULES)
    )]  # fmt: skip
    for name, path in modules(root).items():
        if not pure(name):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in IO_BUILTINS):  # fmt: skip
                bad.append(f"{name}:{node.lineno} calls {node.func.id}()")
    return bad


def declared_graph(text: str) -> tuple[dict[str, int], dict[str, set[str]]]:
    """The table between ``<!-- import-graph -->`` and ``<!-- /import-graph -->`` in the
    architecture document: layer and imports per unit."""
    block = text.split("<!-- import-graph -->", 1)[1].split("<!-- /import-graph -->", 1)[0]
    layers: dict[str, int] = {}
    edges: dict[str, set[str]] = {}
    for row in re.finditer(r"^\|\s*(\d+)\s*\|\s*`([\w.]+)`\s*\|([^|]*)\|", block, re.M):
        layer, name, targets = int(row[1]), row[2], row[3]
        layers[name] = layer
        edges[name] = set(re.findall(r"`([\w.]+)`", targets))
    return layers, edges


# -- the contracts on the real tree ---------------------------------------------------------

FOUND = imports(SOURCE)
LAYERS, DECLARED = declared_graph(DOC.read_text(encoding="utf-8"))


def test_pure_cores_import_no_io_room() -> None:
    assert pure_cores_import_no_io_room(FOUND) == []


def test_api_and_judge_import_no_other_specguard_package() -> None:
    assert api_and_judge_import_no_other_package(FOUND) == []


def test_nothing_imports_cli() -> None:
    assert nothing_imports_cli(FOUND) == []


def test_only_the_demo_imports_the_testkit() -> None:
    assert only_the_demo_imports_the_testkit(FOUND) == []
    # and it does: the contract watches a real import, not an empty set
    assert any(i.target.split(".")[0] == TESTKIT for i in FOUND)


def test_no_upward_imports() -> None:
    assert no_upward_imports(FOUND, LAYERS) == []


def test_pure_modules_do_no_io() -> None:
    assert pure_modules_stay_pure(SOURCE, FOUND) == []


def test_the_documented_import_graph_is_the_real_one() -> None:
    real = unit_graph(FOUND)
    assert set(LAYERS) == set(real), "docs/architecture.md: units drawn ≠ units that exist"
    assert {u: sorted(t) for u, t in DECLARED.items()} == {u: sorted(t) for u, t in real.items()}


# -- each contract fails when its rule is broken ---------------------------------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "specguard"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in {p.parent for p in root.rglob("*.py")}:
        (folder / "__init__.py").touch()
    return root


def test_breaking_the_pure_core_rules_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "judge/_policy.py": "def f():\n    from specguard.controller import _loop\n",
        "api/_spec.py": "from specguard.judge import Verdict\nfrom .. import _arms\n",
        "render/__init__.py": "import specguard.sources\n",
        "controller/_loop.py": "from specguard.api import Spec\n",
        "sources/__init__.py": "",
        "_arms.py": "",
    })  # fmt: skip
    found = imports(root)
    assert pure_cores_import_no_io_room(found) == [
        "specguard.judge._policy:2 imports specguard.controller._loop",
        "specguard.render:1 imports specguard.sources",
    ]
    assert api_and_judge_import_no_other_package(found) == [
        "specguard.api._spec:1 imports specguard.judge",
        "specguard.judge._policy:2 imports specguard.controller._loop",
    ]


def test_breaking_the_cli_rule_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "cli.py": "", "__main__.py": "from specguard.cli import main\n",
        "demo/_command.py": "from specguard import cli\n",
    })  # fmt: skip
    assert nothing_imports_cli(imports(root)) == ["specguard.demo._command:1 imports specguard.cli"]


def test_breaking_the_testkit_rule_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "demo/_stage.py": "from specguard_testkit import LocalCluster\n",
        "sim/_launch.py": "def f():\n    import specguard_testkit._procs\n",
        "controller/_loop.py": "from specguard_testkit._cluster import LocalCluster\n",
        "demo/_accounting.py": "import specguard_testkit\n",
        "router/__init__.py": "import specguard_testkitten\n",
    })  # fmt: skip
    found = imports(root)
    assert only_the_demo_imports_the_testkit(found) == [
        "specguard.controller._loop:1 imports specguard_testkit._cluster",
        "specguard.sim._launch:2 imports specguard_testkit._procs",
    ]
    # a pure part of the demo may not import it either (the testkit does I/O)
    assert pure_modules_stay_pure(root, found) == [
        "specguard.demo._accounting:1 imports specguard_testkit"
    ]
    # the testkit is no unit of the operator's graph
    assert "specguard_testkit" not in {t for ts in unit_graph(found, root).values() for t in ts}


def test_an_upward_import_in_the_real_tree_fails() -> None:
    upward = Import("specguard.judge._policy", "specguard.controller._decide", 1)
    sideways = Import("specguard.controller._observe", "specguard.router", 7)
    assert no_upward_imports([*FOUND, upward, sideways], LAYERS) == [
        f"{upward} (layer {LAYERS['judge']} → {LAYERS['controller']})",
        f"{sideways} (layer {LAYERS['controller']} → {LAYERS['router']})",
    ]
    drawn = {u: set(t) for u, t in DECLARED.items()}
    assert drawn != unit_graph([*FOUND, upward])  # and the document no longer matches


def test_an_impure_pure_module_fails(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "controller/_decide.py": "import time\nfrom specguard.sources import Targets\n"
                                 "def f():\n    print('x')\n",
        "sources/__init__.py": "import httpx\n",
        "judge/_verdict.py": "def g(p):\n    return open(p).read()\n",
    })  # fmt: skip
    assert pure_modules_stay_pure(root, imports(root)) == [
        "specguard.controller._decide:1 imports time",
        "specguard.controller._decide:2 imports specguard.sources",
        "specguard.controller._decide:4 calls print()",
        "specguard.judge._verdict:2 calls open()",
    ]


# The test tiers (conftest.py at the root; docs/architecture.md): every entry of the TIERS table
# names files or tests that exist, and no test of an in-process tier starts a process, even
# through a helper or a fixture of its module, a conftest or the cluster plugin.

# What starts a process: modules, and names imported from anywhere.
PROCESS_MODULES = ("subprocess", "multiprocessing")
PROCESS_NAMES = ("Popen", "create_subprocess_exec", "create_subprocess_shell", "start_sim",
                 "start_vllm", "router_process", "LocalCluster", "build_images")  # fmt: skip
PLUGIN = ROOT / "testkit" / "specguard_testkit" / "pytest_plugin.py"


def _root_conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("specguard_tiers_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TIERS = _root_conftest()


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Top-level functions by name, and methods as ``Class::method``."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    found[f"{node.name}::{sub.name}"] = sub
    return found


def _used(node: ast.AST) -> set[str]:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return names | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    return {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]}


def starting(tree: ast.Module, fixtures: Iterable[str] = ()) -> set[str]:
    """The module's functions (and classes) that start a process: they use a process module
    or name, take one of ``fixtures`` (or a fixture of the module that does), or use a function
    or class of the module that does."""
    bad = set(PROCESS_NAMES)
    taken = set(fixtures)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad |= {(a.asname or a.name).split(".")[0] for a in node.names
                    if a.name.split(".")[0] in PROCESS_MODULES}  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            PROCESS_MODULES
        ):
            bad |= {a.asname or a.name for a in node.names}
    functions = _functions(tree)
    found: set[str] = set()
    while True:
        more = {name for name, fn in functions.items() if name not in found
                and (_used(fn) & bad or _params(fn) & taken)}  # fmt: skip
        if not more:
            return found
        found |= more
        bad |= {part for name in more for part in name.split("::")}
        taken |= {name for name in more if _is_fixture(functions[name])}


def _is_fixture(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def process_fixtures() -> set[str]:
    """The cluster plugin's fixtures, and every conftest fixture that starts a process."""
    found = {n for n, fn in _functions(ast.parse(PLUGIN.read_text())).items() if _is_fixture(fn)}
    conftests = [*sorted((ROOT / "tests").rglob("conftest.py")), ROOT / "e2e" / "conftest.py"]
    for _ in range(2):  # a fixture of one conftest may take another's
        for path in conftests:
            tree = ast.parse(path.read_text())
            functions = _functions(tree)
            found |= {n for n in starting(tree, found) if n in functions and
                      _is_fixture(functions[n])}  # fmt: skip
    return found


def _markers(decorators: Iterable[ast.expr]) -> set[str]:
    text = " ".join(ast.unparse(d) for d in decorators)
    return set(re.findall(r"pytest\.mark\.(\w+)", text))


def tiers_of_tests(tree: ast.Module, path: str) -> dict[str, str]:
    """Each test function of a module (``path::name``) → its tier: the table's, or the
    heaviest of the module's and the function's tier markers."""
    module_marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            module_marks |= _markers([node.value])
    out = {}
    for name, fn in _functions(tree).items():
        if not name.split("::")[-1].startswith("test"):
            continue
        tiers = [TIERS.path_tier(f"{path}::{name}")]
        marks = module_marks | _markers(fn.decorator_list)
        tiers += [TIERS.MARKER_TIERS[m] for m in marks if m in TIERS.MARKER_TIERS]
        out[name] = max(tiers, key=TIERS.TIER_ORDER.index)
    return out


def in_process_violations(tree: ast.Module, path: str, fixtures: Iterable[str]) -> list[str]:
    tiers = tiers_of_tests(tree, path)
    starts = starting(tree, fixtures)
    found = [f"{path}::{name} starts a process in the {tier} tier"
             for name, tier in tiers.items()
             if tier in TIERS.IN_PROCESS and name in starts]  # fmt: skip
    if tiers and all(tier in TIERS.IN_PROCESS for tier in tiers.values()):
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        found += [f"{path} (in-process tiers only) imports {m}" for m in sorted(imported)
                  if m.split(".")[0] in PROCESS_MODULES]  # fmt: skip
    return found


TEST_FILES = sorted(
    p.relative_to(ROOT).as_posix()
    for top in ("tests", "e2e") for p in (ROOT / top).rglob("test_*.py")
)  # fmt: skip


def test_no_in_process_test_starts_a_process() -> None:
    fixtures = process_fixtures()
    assert {"local_cluster", "kubelet", "sims", "servers", "make_prometheus"} <= fixtures
    found = [violation for path in TEST_FILES
             for violation in in_process_violations(ast.parse((ROOT / path).read_text()), path,
                                                    fixtures)]  # fmt: skip
    assert found == []


def test_every_tier_entry_names_what_exists() -> None:
    names = {f"{path}::{name}" for path in TEST_FILES
             for name in _functions(ast.parse((ROOT / path).read_text()))}  # fmt: skip
    stale = [pattern for pattern, _ in TIERS.TIERS
             if not any(fnmatch.fnmatchcase(n if "::" in pattern else n.split("::")[0], pattern)
                        for n in names)]  # fmt: skip
    assert stale == []
    assert {tier for _, tier in TIERS.TIERS} | set(TIERS.MARKER_TIERS.values()) <= set(
        TIERS.TIER_ORDER
    )
    assert {TIERS.path_tier(p) for p in TEST_FILES if p.startswith("e2e/")} == {"e2e"}


def test_breaking_the_tier_check_is_found() -> None:
    source = (
        "import subprocess\n"
        "import pytest\n"
        "def helper():\n    return subprocess.run(['true'])\n"
        "def test_pure():\n    assert 1\n"
        "def test_through_a_helper():\n    helper()\n"
        "def test_on_the_cluster(local_cluster):\n    pass\n"
        "@pytest.mark.cluster\n"
        "def test_marked(local_cluster):\n    pass\n"
    )
    path = "tests/judge/test_judge_new.py"
    assert in_process_violations(ast.parse(source), path, {"local_cluster"}) == [
        f"{path}::test_through_a_helper starts a process in the inprocess tier",
        f"{path}::test_on_the_cluster starts a process in the inprocess tier",
    ]
    pure = "import subprocess\ndef test_pure():\n    assert 1\n"
    assert in_process_violations(ast.parse(pure), path, ()) == [
        f"{path} (in-process tiers only) imports subprocess"
    ]


def test_ci_runs_every_tier_and_the_readme_command_does_too() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    loop = re.search(r"^for tier in ([\w ]+); do$", ci, re.MULTILINE)
    assert loop is not None and tuple(loop.group(1).split()) == TIERS.TIER_ORDER
    setup = next(line for line in ci.splitlines() if line.startswith("bash scripts/setup.sh"))
    readme = (ROOT / "README.md").read_text()
    assert f"\n{setup} && .venv/bin/python -m pytest --tiers all\n" in readme
