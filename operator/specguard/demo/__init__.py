"""specguard.demo: `specguard demo`, the operator's whole job on a local cluster (docs/demo.md).

The public surface is the command, ``main(argv)`` and ``build_parser()``. Internals, one
private module each:

_command     the CLI entry point: the stage, the schedule, the summary, teardown
_stage       the cluster: binaries (built on first use), LocalCluster, helm install, the resource
_schedule    the traffic schedule's phases (pure)
_load        the client process (its main in a Python process of its own): closed-loop streams
_watch       status, Events, per-pod load and the routers' sample feed while it runs
_accounting  realized vs always / never / per-window best (pure)
_report      the decisions and the summary's text and JSON (pure)
_plot        the timeline PNG (matplotlib, imported when called)
"""

from specguard.demo._command import build_parser, main

__all__ = ["build_parser", "main"]
