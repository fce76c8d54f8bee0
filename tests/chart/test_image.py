"""What can be tested of the image without Docker: every command the chart and the
renderer start exists in the installed package, the Dockerfile installs only from
pyproject.toml, and the operator image's dependencies leave the plotting libraries out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from specguard.cli import COMMANDS
from specguard.commands.render import load_resources
from specguard.render import render_all
from specguard.testing._images import SPECGUARD_REPOSITORY, repository

from .conftest import EVERYTHING_ON, ROOT, by_kind, helm_template

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
# What the operator image must not carry (they serve `specguard evaluate`'s plots and
# tables on a workstation) and what no image may carry (test and lint tools).
NOT_IN_IMAGE = {"matplotlib", "rich", "pytest", "hypothesis", "ruff", "mypy", "checkov"}


def specguard_commands(objects: list[dict[str, Any]]) -> list[list[str]]:
    commands = []
    for obj in by_kind(objects, "Deployment"):
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if repository(container["image"]) == SPECGUARD_REPOSITORY:
                commands.append([*container.get("command", []), *container.get("args", [])])
    return commands


def image_extras() -> list[str]:
    match = re.search(r"specguard-\*\.whl\)\[([a-z0-9,-]+)\]", DOCKERFILE)
    assert match, "the Dockerfile installs the wheel with extras: specguard-*.whl)[...]"
    return match.group(1).split(",")


def assert_runs_in_image(commands: list[list[str]]) -> None:
    """Each command's console script exists and its subcommand answers --help (once per
    distinct subcommand)."""
    scripts = PYPROJECT["project"]["scripts"]
    for command in commands:
        assert command[0] in scripts, f"{command[0]!r} is no console script of pyproject.toml"
        assert scripts[command[0]] == "specguard.cli:main", command
        assert command[1] in COMMANDS, f"`specguard {command[1]}` does not exist"
    for subcommand in sorted({command[1] for command in commands}):
        completed = subprocess.run(
            [sys.executable, "-m", "specguard", subcommand, "--help"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert completed.returncode == 0, completed.stderr


def test_chart_commands_exist(tmp_path: Path) -> None:
    commands = specguard_commands(helm_template(tmp_path, EVERYTHING_ON))
    assert [command[:2] for command in commands] == [["specguard", "run"]]
    assert_runs_in_image(commands)


def test_renderer_commands_exist() -> None:
    seen = []
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        for sd in load_resources(str(example)):
            seen += specguard_commands(render_all(sd))
    assert {tuple(command[:2]) for command in seen} == {("specguard", "router")}
    assert_runs_in_image(seen)


def test_dockerfile_installs_from_pyproject_only() -> None:
    extras = image_extras()
    assert set(extras) <= set(PYPROJECT["project"]["optional-dependencies"]), extras
    assert "dev" not in extras
    installs = re.findall(r"pip install[^\n]*", DOCKERFILE)
    assert all("--only-binary=:all:" in line for line in installs), installs
    assert "USER 65532" in DOCKERFILE and 'ENTRYPOINT ["specguard"]' in DOCKERFILE
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.MULTILINE)
    assert copied == ["pyproject.toml README.md", "operator"], copied


def image_requirements(extras: list[str]) -> set[str]:
    """The distributions pip would install for the image (resolved from pyproject.toml,
    nothing installed): `pip install --dry-run --report`."""
    report = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
         "--only-binary=:all:", "--report", "-", f"{ROOT}[{','.join(extras)}]"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    return {
        item["metadata"]["name"].lower().replace("_", "-")
        for item in json.loads(report.stdout)["install"]
    }


@pytest.mark.slow
def test_image_dependencies_resolve_without_plotting_or_test_tools() -> None:
    names = image_requirements(image_extras())
    assert {"specguard", "kopf", "kubernetes", "aiohttp", "prometheus-client"} <= names
    assert not names & NOT_IN_IMAGE, f"the image would carry {sorted(names & NOT_IN_IMAGE)}"
