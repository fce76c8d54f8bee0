"""specguard.demo: `specguard demo`, the operator's whole job on a local cluster (docs/demo.md).

command     the CLI entry point: the stage, the schedule, the summary, teardown
stage       the cluster: binaries (built on first use), LocalCluster, helm install, the resource
schedule    the traffic schedule's phases (pure)
load        the client process: closed-loop streams through the router pods
watch       status, Events, per-pod load and the routers' sample feed while it runs
accounting  realized vs always / never / per-window best, from the mirrored pairs (pure)
report      the decisions and the summary's text and JSON (pure)
plot        the timeline PNG (matplotlib, imported when called)
"""

__all__ = ["accounting", "command", "load", "plot", "report", "schedule", "stage", "watch"]
