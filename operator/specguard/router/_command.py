"""``specguard router``: run the shadow router, in Kubernetes or with static upstreams.

specguard router --deployment NAME --namespace NS --port 8080
specguard router --serving URL [URL...] --shadow URL [URL...] [--load-match arrivals] --port P
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import signal
import sys
from collections.abc import Sequence
from urllib.parse import urlsplit

from aiohttp import web

from specguard._args import ArgumentParser, UsageError
from specguard._arms import other_arm
from specguard.judge import LOAD_MATCHES, Arm, LoadMatch
from specguard.router._pool import Endpoint, Topology
from specguard.router._proxy import Router, RouterConfig

log = logging.getLogger("specguard.router")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="specguard router", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--host", default="0.0.0.0",
        help="address to listen on (default 0.0.0.0); a single address that is not loopback "
        "(a pod IP) gets a second listener on localhost, for kubectl port-forward",
    )  # fmt: skip
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    k8s = p.add_argument_group("Kubernetes mode")
    k8s.add_argument("--deployment", help="SpeculativeDeployment name")
    k8s.add_argument("--namespace", help="its namespace")
    static = p.add_argument_group("static mode")
    static.add_argument("--serving", nargs="+", metavar="URL", help="serving-arm base URLs")
    static.add_argument("--shadow", nargs="*", metavar="URL", default=[], help="shadow-arm URLs")
    static.add_argument(
        "--mirror-share", type=float, help="largest share of requests to mirror, 0..1 "
        "(default 1: as many as --load-match allows)",
    )  # fmt: skip
    static.add_argument(
        "--load-match", choices=LOAD_MATCHES,
        help="in_flight (closed-loop clients): the shadow arm holds, time-averaged, the "
        "serving arm's requests in flight per pod (copies wait for room); arrivals (open-loop "
        "clients): copy shadow URLs / serving URLs of the requests, so each shadow pod gets "
        "a serving pod's arrivals (default in_flight; in Kubernetes mode the operator "
        "publishes it in status.arms.loadMatch)",
    )  # fmt: skip
    static.add_argument(
        "--serving-arm", choices=("speculative", "baseline"), default="speculative",
        help="arm the serving URLs run (the shadow runs the other); default speculative",
    )  # fmt: skip
    tune = p.add_argument_group("limits")
    cfg = RouterConfig
    tune.add_argument(
        "--max-body-bytes", type=int, default=cfg.max_body_bytes, metavar="BYTES",
        help=f"largest request body, in bytes; larger ones get 413 (default {cfg.max_body_bytes})",
    )  # fmt: skip
    tune.add_argument(
        "--connect-timeout", type=float, default=cfg.connect_timeout_s, metavar="SECONDS",
        help=f"seconds to open a connection to a pod (default {cfg.connect_timeout_s:g})",
    )  # fmt: skip
    tune.add_argument(
        "--read-timeout", type=float, default=cfg.read_timeout_s, metavar="SECONDS",
        help="longest silence on a serving connection, in seconds, before the request fails "
        f"(504 before the response, a cut stream after) (default {cfg.read_timeout_s:g})",
    )  # fmt: skip
    tune.add_argument(
        "--shadow-max-in-flight", type=int, default=cfg.shadow_max_in_flight, metavar="N",
        help="shadow copies running at once; beyond it a copy is dropped and counted "
        f"(default {cfg.shadow_max_in_flight})",
    )  # fmt: skip
    tune.add_argument(
        "--shadow-timeout", type=float, default=cfg.shadow_timeout_s, metavar="SECONDS",
        help=f"longest a shadow copy may run, in seconds (default {cfg.shadow_timeout_s:g})",
    )  # fmt: skip
    tune.add_argument(
        "--shadow-queue", type=int, default=cfg.shadow_queue, metavar="N",
        help="in-flight rule: copies that may wait for room on the shadow arm (at most as "
        "many as its target holds, and this many; 0: none wait) "
        f"(default {cfg.shadow_queue})",
    )  # fmt: skip
    tune.add_argument(
        "--shadow-queue-wait", type=float, default=cfg.shadow_queue_wait_s, metavar="SECONDS",
        help="longest a copy may wait for room before it is dropped, in seconds "
        f"(default {cfg.shadow_queue_wait_s:g})",
    )  # fmt: skip
    tune.add_argument(
        "--samples-capacity", type=int, default=cfg.samples_capacity, metavar="N",
        help="samples kept for GET /samples; older ones are evicted "
        f"(default {cfg.samples_capacity})",
    )  # fmt: skip
    tune.add_argument("--poll-interval", type=float, default=2.0, help=argparse.SUPPRESS)
    tune.add_argument("--no-uvloop", action="store_true", help="use the default event loop")
    tune.add_argument(
        "--log-level", default="INFO", type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="log level (default INFO)",
    )  # fmt: skip
    return p


LOCALHOST_V4 = "127.0.0.1"
LOCALHOST_V6 = "::1"


def listen_hosts(host: str) -> list[str]:
    """The addresses to listen on for ``--host``.

    In a pod the router is given its pod IP (``$(POD_IP)``), but ``kubectl port-forward``
    connects to localhost inside the pod: a single non-loopback address therefore gets a
    second listener on localhost (127.0.0.1, or ::1 for an IPv6 pod IP). A loopback address
    gets none: the local process kubelet gives each pod its own 127.0.X.N in one shared
    network namespace, where two routers on 127.0.0.1:PORT would collide. A wildcard
    (0.0.0.0, ::) already covers localhost, and a host name is left as it is.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return [host]
    if address.is_loopback or address.is_unspecified:
        return [host]
    return [host, LOCALHOST_V6 if address.version == 6 else LOCALHOST_V4]


def _check_url(flag: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{flag}: expected an http(s)://host:port URL, got {url!r}")
    if parts.path not in ("", "/") or parts.query:
        raise UsageError(f"{flag}: give the server's base URL without a path, got {url!r}")
    return f"{parts.scheme}://{parts.netloc}"


def static_topology(
    serving: Sequence[str],
    shadow: Sequence[str],
    share: float | None,
    serving_arm: str,
    *,
    load_match: LoadMatch = "in_flight",
) -> Topology:
    arm: Arm = "baseline" if serving_arm == "baseline" else "speculative"
    endpoints = [Endpoint(urlsplit(u).netloc, u, arm) for u in serving]
    endpoints += [Endpoint(urlsplit(u).netloc, u, other_arm(arm)) for u in shadow]
    top = Topology()
    share = 1.0 if share is None else share
    top.set_roles(arm, share if shadow else 0.0, load_match=load_match)
    top.set_endpoints(endpoints)
    return top


def config_from(args: argparse.Namespace) -> RouterConfig:
    for flag, value in (
        ("--max-body-bytes", args.max_body_bytes),
        ("--shadow-max-in-flight", args.shadow_max_in_flight),
        ("--samples-capacity", args.samples_capacity),
    ):
        if value < 1:
            raise UsageError(f"{flag}: must be at least 1, got {value}")
    if args.shadow_queue < 0:
        raise UsageError(f"--shadow-queue: must be 0 or more, got {args.shadow_queue}")
    for flag, seconds in (
        ("--connect-timeout", args.connect_timeout),
        ("--read-timeout", args.read_timeout),
        ("--shadow-timeout", args.shadow_timeout),
        ("--shadow-queue-wait", args.shadow_queue_wait),
    ):
        if not seconds > 0:
            raise UsageError(f"{flag}: must be a positive number of seconds, got {seconds}")
    return RouterConfig(
        max_body_bytes=args.max_body_bytes,
        connect_timeout_s=args.connect_timeout,
        read_timeout_s=args.read_timeout,
        shadow_max_in_flight=args.shadow_max_in_flight,
        shadow_timeout_s=args.shadow_timeout,
        shadow_queue=args.shadow_queue,
        shadow_queue_wait_s=args.shadow_queue_wait,
        samples_capacity=args.samples_capacity,
    )


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, RouterConfig]:
    args = build_parser().parse_args(list(argv))
    if not 0 < args.port < 65536:
        raise UsageError(f"--port: expected 1..65535, got {args.port}")
    k8s = args.deployment is not None or args.namespace is not None
    if k8s and args.serving:
        raise UsageError("--serving: use either --deployment/--namespace or --serving, not both")
    if k8s:
        if not args.deployment or not args.namespace:
            raise UsageError("--deployment and --namespace: Kubernetes mode needs both")
    elif not args.serving:
        raise UsageError("--serving: give serving URLs, or --deployment and --namespace")
    else:
        args.serving = [_check_url("--serving", u) for u in args.serving]
        args.shadow = [_check_url("--shadow", u) for u in args.shadow]
    if args.mirror_share is not None and not 0.0 <= args.mirror_share <= 1.0:
        raise UsageError(f"--mirror-share: expected a number from 0 to 1, got {args.mirror_share}")
    if k8s and args.mirror_share is not None:
        raise UsageError("--mirror-share: in Kubernetes mode the share comes from the resource")
    if k8s and args.load_match is not None:
        raise UsageError(
            "--load-match: in Kubernetes mode the rule comes from the resource "
            "(status.arms.loadMatch, which the operator sets from the traffic)"
        )
    return args, config_from(args)


async def serve(args: argparse.Namespace, config: RouterConfig) -> None:
    discovery = None
    if args.deployment:
        from specguard.router._discovery import KubeDiscovery

        topology = Topology()
        router = Router(topology, config)
        discovery = KubeDiscovery(
            args.deployment, args.namespace, topology,
            on_change=router.refresh_gauges, poll_interval=args.poll_interval,
        )  # fmt: skip
        await discovery.start()
        # Listen once the first pod list is in, so early requests do not all get 502.
        try:
            await asyncio.wait_for(discovery.synced.wait(), timeout=15.0)
        except TimeoutError:
            log.warning("no pod list from the API server yet; serving anyway")
    else:
        topology = static_topology(
            args.serving, args.shadow, args.mirror_share, args.serving_arm,
            load_match=args.load_match or "in_flight",
        )  # fmt: skip
        router = Router(topology, config)
    runner = web.AppRunner(router.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    host, *extra = listen_hosts(args.host)
    await web.TCPSite(runner, host, args.port, backlog=1024).start()
    log.info("router listening on %s:%d", host, args.port)
    for local in extra:
        try:
            await web.TCPSite(runner, local, args.port, backlog=1024).start()
        except OSError as exc:  # e.g. a sidecar holds the port on localhost
            log.warning(
                "not listening on %s:%d (kubectl port-forward will not reach the router): %s",
                local, args.port, exc.strerror or exc,
            )  # fmt: skip
        else:
            log.info("router listening on %s:%d", local, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        if discovery is not None:
            await discovery.stop()
        await runner.cleanup()


def main(argv: list[str]) -> int:
    try:
        args, config = parse(argv)
    except UsageError as exc:
        print(f"specguard router: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from specguard.router._discovery import DiscoveryError

    try:
        if args.no_uvloop:
            asyncio.run(serve(args, config))
            return 0
        try:
            import uvloop
        except ImportError:
            asyncio.run(serve(args, config))
        else:
            uvloop.run(serve(args, config))
    except DiscoveryError as exc:
        print(f"specguard router: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the port is taken
        print(f"specguard router: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
