"""specguard.controller: the operator (`specguard run`).

Pure parts (no I/O; tested by exact equality): ``settings`` (resource → judge and policy
settings), ``swap`` (the rolling-swap planner), ``conditions`` (status and condition
builders, Event sentences), ``window`` (one evaluation window: verdict → policy → status),
``schedule`` (periodic shadow), ``observe`` (cluster objects → what the planner needs),
``mirror`` (the mirror share: the routers' ceiling, 1 while the shadow is judged; they
match the arms' in-flight counts themselves).

I/O parts: ``kube`` (server-side apply, status patches, Events), ``source`` (samples from
the configured metrics source), ``loop`` (one resource's reconcile and window loop),
``handlers`` (kopf registration), ``lease`` (single active instance), ``metrics``,
``command`` (`specguard run`) and ``plugin`` (`kubectl-specguard`).

See docs/operator.md.
"""

from specguard.controller._command import build_parser, main

__all__ = ["build_parser", "main"]
