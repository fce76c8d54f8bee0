"""The `specguard` command: one subcommand per room, each loaded only when used.

Every subcommand lives in its own module as ``main(argv: list[str]) -> int`` so that
``specguard render`` never imports aiohttp or numpy and the rooms stay independent.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# name -> (module holding ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("specguard.controller.command", "run the operator"),
    "render": ("specguard.commands.render", "print the Kubernetes objects of a resource"),
    "crd": ("specguard.commands.crd", "print the SpeculativeDeployment CRD"),
    "sim": ("specguard.sim.command", "run the vLLM simulator with speculative-decoding economics"),
    "router": ("specguard.router.command", "run the shadow router"),
    "judge": ("specguard.commands.judge", "judge recorded per-request samples"),
    "evaluate": ("specguard.evaluate.command", "A/B sweep of a drafter against no drafter"),
}


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
    module = importlib.import_module(COMMANDS[name][0])
    result: int = module.main(rest)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
