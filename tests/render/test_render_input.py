"""No input makes `specguard render` hang, use unbounded memory or print a traceback.

Arbitrary bytes, arbitrary YAML (fragments that exercise tags, anchors, aliases, nesting
and non-JSON types, spliced into a real resource) and the known bombs each give either the
rendered objects or one short line per problem, within a time and memory budget.
"""

from __future__ import annotations

import io
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.api._errors import MAX_MESSAGE, MAX_PATH
from specguard.api._loading import MAX_DEPTH, MAX_INPUT_BYTES
from specguard.commands.render import InputError, load_resources, main, resources_from_bytes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen3.6-dspark-tp2.yaml"
EXAMPLE_TEXT = EXAMPLE.read_text()

# Generous for a busy 2-core machine: a bomb that is not stopped takes minutes and GBs.
SECONDS = 10.0
PEAK_BYTES = 64 << 20
# "<source> (document N, <name>): " + path + ": " + message
MAX_LINE = 400 + MAX_PATH + MAX_MESSAGE

FRAGMENTS = [
    "&a ", "*a", "&b [*a, *a, *a]", "*b", "[", "]", "{", "}", ": ", "- ", "\n", "  ", ",",
    "? ", "<<: *a\n", "---\n", "...\n", "!!binary aGk=", "!!set {x}", "!!omap [a: 1]",
    "!!python/object:os.system ls", "!foo x", "2024-01-01", "2024-01-01T00:00:00Z", ".nan",
    ".inf", "-.inf", "1e400", "9" * 5000, "0x1F", "0o17", "1_000", "~", "null", "yes", "'",
    '"', "\\", "#", "%YAML 1.1\n", "\t", "\x00", "\x85", "\ufeff", "é", "\U0001f600",
    "apiVersion: specguard.io/v1alpha1\n", "kind: SpeculativeDeployment\n",
    "metadata: {name: qwen}\n", "spec:\n", "  replicas: 4\n", "  shmSize: 1e999999999\n",
]  # fmt: skip


def _render(data: bytes) -> tuple[bool, list[str]]:
    """(accepted, error lines) of rendering ``data``, checked against the budget."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        resources_from_bytes(data, "in.yaml")
        accepted, lines = True, []
    except InputError as error:
        accepted, lines = False, str(error).split("\n")
    finally:
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < SECONDS, f"{elapsed:.1f}s on {data[:200]!r}"
    assert peak < PEAK_BYTES, f"{peak >> 20} MiB on {data[:200]!r}"
    for line in lines:
        assert line.startswith("in.yaml"), line[:300]
        assert len(line) <= MAX_LINE and "Traceback" not in line, line[:300]
    assert accepted or lines
    return accepted, lines


SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(st.binary(max_size=4096))
def test_arbitrary_bytes(data: bytes) -> None:
    _render(data)


@SETTINGS
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=40).map("".join))
def test_arbitrary_yaml(text: str) -> None:
    _render(text.encode("utf-8", "surrogatepass"))


@SETTINGS
@given(
    st.integers(0, len(EXAMPLE_TEXT)),
    st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=6).map("".join),
)
def test_fragments_spliced_into_a_resource(at: int, fragment: str) -> None:
    _render((EXAMPLE_TEXT[:at] + fragment + EXAMPLE_TEXT[at:]).encode())


def _alias_bomb(levels: int, width: int) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines)


def _flow_bomb(levels: int, width: int) -> str:
    parts = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for level in range(1, levels):
        parts.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "{" + ", ".join(parts) + "}"


def _in_spec(where: str, value: str) -> str:
    """The example with ``value`` (a YAML flow value) at ``where`` in its spec."""
    doc = yaml.safe_load(EXAMPLE_TEXT)
    doc["spec"]["drafter"].pop(where, None)
    text = yaml.safe_dump(doc, sort_keys=False)
    marker = "  drafter:\n"
    return text.replace(marker, f"{marker}    {where}: {value}\n", 1)


BOMBS: list[tuple[str, str, str]] = [
    ("alias bomb", _alias_bomb(9, 9), "aliases expand to more than"),
    ("alias bomb in extraConfig", _in_spec("extraConfig", _flow_bomb(9, 9)), "aliases expand"),
    ("flow nesting", "[" * 100_000, "nest"),  # libyaml stops it at 1000 levels itself
    ("flow nesting, 100 levels", "[" * 100, f"nested deeper than {MAX_DEPTH} levels"),
    ("block nesting", "".join("  " * i + f"k{i}:\n" for i in range(500)), "nested deeper"),
    ("recursive alias", "a: &a [*a]", "an alias refers to itself"),
    ("date", _in_spec("extraConfig", "{since: 2024-01-01}"), "extraConfig.since: a YAML date"),
    ("timestamp", _in_spec("extraConfig", "{at: 2024-01-01T10:00:00Z}"), "YAML timestamp"),
    ("binary", _in_spec("extraConfig", "{b: !!binary aGk=}"), "extraConfig.b: a YAML !!binary"),
    ("set", _in_spec("extraConfig", "{s: !!set {x}}"), "extraConfig.s: a YAML !!set"),
    ("nan", _in_spec("extraConfig", "{t: .nan}"), "spec.drafter.extraConfig.t: nan is not"),
    ("huge int", _in_spec("numSpeculativeTokens", "9" * 5000), "is out of range"),
    ("NUL byte", "a: b\x00c", "line 1 column 5: character U+0000 is not allowed"),
    ("duplicate key", "a: 1\nb: 2\na: 3\n", "line 3: duplicate key 'a'"),
    ("int key", "metadata: {1: x}", "metadata: key 1 is a YAML integer"),
]


@pytest.mark.parametrize(("label", "text", "expected"), BOMBS, ids=[b[0] for b in BOMBS])
def test_known_bombs_get_one_line(label: str, text: str, expected: str) -> None:
    accepted, lines = _render(text.encode())
    assert not accepted
    assert len(lines) == 1 and expected in lines[0], lines


def test_input_larger_than_the_cap_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=f"larger than {MAX_INPUT_BYTES // 1024} KiB"):
        load_resources("/dev/zero")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_INPUT_BYTES + 1))
    with pytest.raises(InputError, match="larger than"):
        load_resources(str(big))


def test_huge_values_are_elided_in_errors() -> None:
    doc = yaml.safe_load(EXAMPLE_TEXT)
    doc["metadata"]["name"] = "X" * 200_000
    accepted, lines = _render(yaml.safe_dump(doc).encode())
    assert not accepted
    assert any(line.startswith("in.yaml: metadata.name: must be a DNS-1035") for line in lines)
    assert all(len(line) < 1000 for line in lines)
    doc["metadata"]["name"] = "X" * 5_000_000
    assert _render(yaml.safe_dump(doc).encode())[1] == ["in.yaml: larger than 256 KiB"]


def test_long_duration_gives_no_python_advice() -> None:
    doc = yaml.safe_load(EXAMPLE_TEXT)
    doc["spec"].setdefault("evaluation", {})["window"] = "9" * 5000 + "s"
    accepted, lines = _render(yaml.safe_dump(doc).encode())
    assert not accepted
    assert any("spec.evaluation.window" in line for line in lines), lines
    assert not any("int_max_str_digits" in line for line in lines), lines


def test_render_reads_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(EXAMPLE.read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["-"]) == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out.getvalue())]
    assert "qwen-router" in names


def test_render_dash_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "render", "-"],
        input="spec: [\n", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("<stdin>: line 2 column 1: not valid YAML: ")


def test_duplicate_names_are_refused_naming_both_documents() -> None:
    doc = yaml.safe_load(EXAMPLE_TEXT)
    other = yaml.safe_load(EXAMPLE_TEXT)
    other["metadata"]["name"] = "other"
    text = yaml.safe_dump_all([doc, other, doc])
    accepted, lines = _render(text.encode())
    assert not accepted
    namespace = doc["metadata"].get("namespace", "default")
    assert lines == [
        f"in.yaml (document 3, qwen): metadata.name: {namespace}/qwen is also document 1; "
        "each resource must have its own name"
    ]


def test_each_documents_problems_carry_its_index_and_name() -> None:
    good = yaml.safe_load(EXAMPLE_TEXT)
    bad = yaml.safe_load(EXAMPLE_TEXT)
    bad["metadata"]["name"] = "second"
    bad["spec"]["replicas"] = 0
    bad["spec"]["drafter"]["num_speculative_tokens"] = 4
    accepted, lines = _render(yaml.safe_dump_all([good, bad, "not a mapping"]).encode())
    assert not accepted
    assert lines == [
        "in.yaml (document 2, second): spec.drafter.num_speculative_tokens: unknown field",
        "in.yaml (document 2, second): spec.replicas: Input should be greater than or equal to 1",
        "in.yaml (document 3, no name): (root): a SpeculativeDeployment must be a mapping",
    ]
