"""specguard.evaluate: the pre-adoption A/B sweep (`specguard evaluate`, docs/evaluate.md).

The public surface is the command, ``main(argv)`` and ``build_parser()``. Internals, one
private module each:

_command    the CLI entry point: flags, the passes, the report's files
_cells      what a sweep measured, as plain data (pure): Cell, ArmRun, VariantRun
_sweep      closed-loop streamed load on each endpoint (aiohttp), one cell at a time
_preflight  endpoint checks before a sweep
_simulate   --simulate: local simulators for every drafter arm, time scale, rescaling
_analysis   gains, crossovers, verdicts, the drafter arms and the recommendation (pure)
_report     report.json (report.schema.json), samples files, the terminal tables
_plots      PNG plots (matplotlib)
_promptset  the shipped prompt sets and user JSONL

Imports run one way: _analysis and _report read _cells, never _sweep. Importing this package
needs the ``evaluate`` extra (rich, matplotlib).
"""

from specguard.evaluate._command import build_parser, main

__all__ = ["build_parser", "main"]
