"""The image: every command the chart and the renderer start exists in the installed
package, the Dockerfile installs only from pyproject.toml, the operator image's dependencies
leave the plotting libraries out; and the image built from the Dockerfile here
(scripts/build-image.sh, no registry) runs under the chart's security context."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from specguard import __version__
from specguard.cli import COMMANDS
from specguard.commands.render import load_resources
from specguard.render import render_all
from specguard_testkit import free_port
from specguard_testkit._binaries import IMAGE_SPECGUARD
from specguard_testkit._images import SPECGUARD_REPOSITORY, repository

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


# ----------------------------------------------------------------------------- the built image

# The chart's container security context, as podman spells it: no --user, so the image's
# own USER must be the non-root 65532 (runAsNonRoot admits it as is).
CHART_SECURITY = ("--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp:rw,size=64m",
                  "--cap-drop", "ALL", "--security-opt", "no-new-privileges")  # fmt: skip


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    from specguard_testkit._binaries import containers_env

    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env=containers_env())  # fmt: skip


@pytest.fixture(scope="module")
def built_image() -> str:
    """The image built from this checkout's Dockerfile (scripts/build-image.sh: cached,
    rebuilt when operator/ changed; it tags that build in the store podman reads)."""
    from specguard_testkit import build_images

    build_images()
    return f"{IMAGE_SPECGUARD}:{__version__}"


@pytest.mark.node
@pytest.mark.slow
@pytest.mark.timeout(1200)  # the first user of built_image may build this checkout's image
def test_built_image_runs_under_the_charts_security_context(built_image: str) -> None:
    script = ("id -u; id -g; id -un; "
              "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; "
              "touch /opt/specguard/x 2>&1; touch /x 2>&1; touch /tmp/x && echo tmp-writable; "
              "specguard --version; specguard router --help >/dev/null && echo router-ok; "
              "specguard sim --help >/dev/null && echo sim-ok")  # fmt: skip
    done = podman("run", "--rm", "--network", "none", *CHART_SECURITY, "--entrypoint", "/bin/sh",
                  built_image, "-c", script)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # A named user: getpass.getuser() (kopf's peering identity) must not fail.
    assert lines[:3] == ["65532", "65532", "specguard"], lines
    status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    assert status["CapEff"] == status["CapBnd"] == "0000000000000000", status
    assert status["NoNewPrivs"] == "1", status
    assert sum("Read-only file system" in line for line in lines) == 2, lines
    assert {"tmp-writable", __version__, "router-ok", "sim-ok"} <= set(lines), lines


@pytest.mark.node
@pytest.mark.slow
def test_built_image_serves_the_simulator_read_only(built_image: str) -> None:
    """The simulator (what the vLLM stand-in runs) serves from the read-only image: the
    bytecode was compiled at build time and nothing writes outside /tmp."""
    port = free_port()
    name = f"specguard-smoke-{port}"
    started = podman("run", "--detach", "--name", name, "--network", "host", *CHART_SECURITY,
                     built_image, "sim", "qwen", "--host", "127.0.0.1", "--port", str(port),
                     "--startup-delay", "0")  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 60
        models: dict[str, Any] = {}
        while time.monotonic() < deadline and not models:
            with contextlib.suppress(httpx.HTTPError):
                models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
            time.sleep(0.3)
        assert [m["id"] for m in models.get("data", [])] == ["qwen"], podman("logs", name).stdout
        changed = podman("diff", name).stdout.split()
        assert not [path for path in changed if path.startswith("/opt")], changed
    finally:
        podman("rm", "--force", "--time", "2", name)


@pytest.mark.node
@pytest.mark.slow
def test_built_image_carries_no_host_ca(built_image: str) -> None:
    """The build's RUN steps may trust a TLS-intercepting proxy through the host's CA
    bundle (mounted for the build only): no CA the host added locally is in the image."""
    local = sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))
    bundle = podman("run", "--rm", "--network", "none", "--entrypoint", "cat", built_image,
                    "/etc/ssl/certs/ca-certificates.crt")  # fmt: skip
    assert bundle.returncode == 0 and "BEGIN CERTIFICATE" in bundle.stdout, bundle.stderr
    for cert in local:
        body = "".join(cert.read_text().split("-----")[2].split())
        assert body[:200] not in "".join(bundle.stdout.split()), f"{cert} is in the image"
