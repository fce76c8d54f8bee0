"""The `specguard` command: one subcommand per room, each loaded only when used.

Every subcommand is a module or package exporting ``main(argv: list[str]) -> int`` so that
``specguard render`` never imports aiohttp or numpy and the rooms stay independent.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from specguard._args import UsageError

# name -> (module or package exporting ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("specguard.controller", "run the operator"),
    "render": ("specguard.commands.render", "print the Kubernetes objects of a resource"),
    "crd": ("specguard.commands.crd", "print the SpeculativeDeployment CRD"),
    "sim": ("specguard.sim", "run the vLLM simulator with speculative-decoding economics"),
    "router": ("specguard.router", "run the shadow router"),
    "judge": ("specguard.commands.judge", "judge recorded per-request samples"),
    "evaluate": ("specguard.evaluate", "A/B sweep of a drafter against no drafter"),
    "demo": ("specguard.demo", "the operator's whole job on a local cluster, in minutes"),
}

# Libraries that come with an optional extra (pyproject.toml), so that the operator image can
# leave them out: top-level module -> extra.
EXTRAS: dict[str, str] = {"matplotlib": "evaluate", "rich": "evaluate"}


# Packages of other distributions that a command needs and the operator's wheel leaves out:
# top-level module -> (distribution, what it is, how to install it). The test rig runs
# `specguard demo` (docs/architecture.md).
DISTRIBUTIONS: dict[str, tuple[str, str, str]] = {
    "specguard_testkit": (
        "specguard-testkit",
        "the local control plane and process kubelet the demo runs on",
        "pip install -e ./testkit (in a checkout of specguard; scripts/setup.sh does)",
    ),
}


def missing_extra(command: str, error: ModuleNotFoundError) -> str | None:
    """One line naming the extra (or the distribution) that brings the missing module, or
    None if none does."""
    module = (error.name or "").partition(".")[0]
    if module in DISTRIBUTIONS:
        distribution, what, install = DISTRIBUTIONS[module]
        return f"specguard {command}: needs {distribution} ({what}): {install}"
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    return (
        f"specguard {command}: needs {module}, which comes with the {extra!r} extra: "
        f"pip install 'specguard[{extra}]'"
    )


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: specguard COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] == "--version":
        from specguard import __version__

        print(__version__)
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"specguard: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as error:
        message = missing_extra(name, error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2
    try:
        result: int = module.main(rest)
    except UsageError as error:  # a bad command line the subcommand did not print itself
        print(f"specguard {name}: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:  # an extra the command imports once it runs
        message = missing_extra(name, error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    raise SystemExit(main())
