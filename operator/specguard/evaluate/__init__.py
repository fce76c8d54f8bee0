"""specguard.evaluate: the pre-adoption A/B sweep (`specguard evaluate`, docs/evaluate.md).

command    the CLI entry point (``main(argv)``): flags, the passes, the report's files
cells      what a sweep measured, as plain data (pure): Cell, ArmRun, VariantRun
sweep      closed-loop streamed load on each endpoint (aiohttp), one cell at a time
preflight  endpoint checks before a sweep
simulate   --simulate: local simulators for every drafter arm, time scale, rescaling
analysis   gains, crossovers, verdicts, the drafter arms and the recommendation (pure)
report     report.json (report.schema.json), samples files, the terminal tables
plots      PNG plots (matplotlib)
promptset  the shipped prompt sets and user JSONL

Imports run one way: analysis and report read cells, never sweep.
"""

__all__ = [
    "analysis",
    "cells",
    "command",
    "plots",
    "preflight",
    "promptset",
    "report",
    "simulate",
    "sweep",
]
