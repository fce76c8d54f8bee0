"""specguard.controller: the operator (`specguard run`).

Start reading at ``_decide.py``: the decision core, one pure step per tick
(``decide(Observation) -> Outcome``: target, swap plan, status, Events), over
``judge.step``. Its other pure parts (no I/O; tested by exact equality): ``settings`` (the
resource → judge and policy settings), ``observe`` (cluster objects → what the decision
needs), ``swap`` (the rolling-swap planner), ``conditions`` (conditions, the verdict as
status shows it, Event sentences), ``mirror`` (the routers' mirror ceiling), ``schedule``
(the periodic shadow), ``rungs`` (the ladder's step and the shadow rung's loss), ``split``
(routing by request domain), ``clients`` (the load match from the clients).

The I/O shell: ``loop`` (one resource's tick: window timing and collection, apply with
back-off, the status writer), ``kube`` (server-side apply, status patches, Events),
``handlers`` (the kopf registry, settings and memo), ``lease`` (one active instance),
``metrics``, ``command`` (`specguard run`) and ``plugin`` (`kubectl-specguard`).

See docs/architecture.md and docs/operator.md.
"""

from specguard.controller._command import build_parser, main

__all__ = ["build_parser", "main"]
