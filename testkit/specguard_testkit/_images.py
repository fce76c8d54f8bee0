"""Which local command a container image stands for.

- a vLLM image (repository name containing "vllm") runs the simulator with the
  container's args: ``<python> -m specguard sim ARGS... SIM_ARGS... --host POD_IP``;
- specguard's image (``ghcr.io/specguard/specguard:*``) runs its command with a leading
  ``specguard`` replaced by ``<python> -m specguard`` (no command: the image's entrypoint,
  ``specguard``, with the args);
- ``HOST_IMAGE`` runs command + args on this machine as they are (a leading ``python`` or
  ``python3`` becomes this interpreter): for test stand-ins;
- anything else is looked up in the kubelet's ``images`` table (image or repository →
  ``ImageRunner``); an unknown image fails the container like an image pull would.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

HOST_IMAGE = "specguard.local/host"
SPECGUARD_REPOSITORY = "ghcr.io/specguard/specguard"


@dataclass(frozen=True)
class Launch:
    """What a container asks for, after $(VAR) expansion, plus where it will listen."""

    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    pod_ip: str


class ImageRunner(Protocol):
    def __call__(self, launch: Launch) -> list[str]: ...


class UnknownImageError(LookupError):
    pass


def repository(image: str) -> str:
    """Image reference without tag or digest: 'vllm/vllm-openai:v1' -> 'vllm/vllm-openai'."""
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > last_slash else name


def is_vllm_image(image: str) -> bool:
    return "vllm" in repository(image).rsplit("/", 1)[-1].lower()


def _host_python(argv: Sequence[str], python: str) -> list[str]:
    if argv and argv[0] in {"python", "python3"}:
        return [python, *argv[1:]]
    return list(argv)


def resolve_argv(
    launch: Launch,
    *,
    sim_args: Sequence[str] = (),
    images: Mapping[str, ImageRunner] | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The argv to run for ``launch`` (see the module docstring), or UnknownImageError."""
    table = images or {}
    repo = repository(launch.image)
    runner = table.get(launch.image) or table.get(repo)
    if runner is not None:
        return runner(launch)
    if repo == HOST_IMAGE:
        argv = [*launch.command, *launch.args]
        if not argv:
            raise UnknownImageError(f"{launch.image}: the host image needs a command")
        return _host_python(argv, python)
    if repo == SPECGUARD_REPOSITORY:
        command = list(launch.command) or ["specguard"]
        if command[0] == "specguard":
            command = [python, "-m", "specguard", *command[1:]]
        return _host_python([*command, *launch.args], python)
    if is_vllm_image(launch.image):
        # `vllm serve MODEL ...` and the api_server entry point both take the model and
        # flags as args; the simulator accepts the same flags. The last --host wins.
        command = list(launch.command)
        if command[:1] == ["vllm"]:
            command = command[2:] if command[1:2] == ["serve"] else command[1:]
        else:
            command = []  # python -m vllm.entrypoints...: the flags are all in args
        return [
            python, "-m", "specguard", "sim",
            *command, *launch.args, *sim_args, "--host", launch.pod_ip,
        ]  # fmt: skip
    raise UnknownImageError(f"no local mapping for image {launch.image!r}")
