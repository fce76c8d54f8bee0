"""specguard.router: the shadow router (`specguard router`).

Forwards every request to the serving arm, mirrors a matched share to the shadow arm, measures
per-token latency on both (``specguard.meter``) and serves ``/metrics`` and the ``/samples``
feed. Pods come from a static topology or from the cluster (``KubeDiscovery``: pod labels and
the SpeculativeDeployment's status). See docs/router.md.
"""

from specguard.router._command import build_parser, main, static_topology
from specguard.router._discovery import KubeDiscovery
from specguard.router._feed import CursorError, SampleFeed
from specguard.router._pool import Endpoint, Pod, Topology
from specguard.router._proxy import Router, RouterConfig

__all__ = [
    "CursorError",
    "Endpoint",
    "KubeDiscovery",
    "Pod",
    "Router",
    "RouterConfig",
    "SampleFeed",
    "Topology",
    "build_parser",
    "main",
    "static_topology",
]
