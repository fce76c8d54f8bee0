"""Command-line front ends of the pure cores (api, render, judge).

The cores do no I/O; reading files and printing happens here, in thin wrappers. The I/O
rooms (sim, router, evaluate) keep their command modules next to their code.

Each module is one subcommand: ``build_parser()`` and ``main(argv) -> int``, run by
``specguard.cli``.
"""

__all__ = ["crd", "judge", "render"]
