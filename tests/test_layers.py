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
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "operator" / "specguard"
DOC = ROOT / "docs" / "architecture.md"

PURE_CORES = ("api", "render", "judge")
# The rooms with I/O (network, processes, files, the API server, the terminal).
IO_ROOMS = ("sim", "router", "sources", "evaluate", "testing", "controller", "commands",
            "demo", "cli", "__main__")  # fmt: skip
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
        if imp.target.startswith("specguard") and unit(imp.target) != unit(imp.source):
            graph[unit(imp.source)].add(unit(imp.target))
    return graph


def _internal(found: Iterable[Import]) -> list[Import]:
    """The imports of one unit from another."""
    return [
        i for i in found if i.target.startswith("specguard") and unit(i.target) != unit(i.source)
    ]


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
        (i.target.startswith("specguard") and not pure(i.target)
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
