"""`specguard crd [--kube-version X.Y]`: print the SpeculativeDeployment CRD as YAML.

Below 1.25 the CEL validation rules are left out (those servers refuse them).
"""

from __future__ import annotations

import sys

from specguard._args import ArgumentParser, UsageError
from specguard.api import DEFAULT_KUBE_VERSION, crd, parse_kube_version
from specguard.commands.render import dump_yaml


def crd_yaml(kube_version: str = DEFAULT_KUBE_VERSION) -> str:
    return dump_yaml([crd(kube_version)])


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="specguard crd", description="Print the SpeculativeDeployment CRD as YAML."
    )
    parser.add_argument(
        "--kube-version",
        default=DEFAULT_KUBE_VERSION,
        metavar="X.Y",
        help="Kubernetes version (major.minor) of the target API server; "
        "below 1.25 the CEL rules are left out",
    )
    return parser


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        try:
            parse_kube_version(args.kube_version)
        except ValueError as error:
            raise UsageError(f"--kube-version: {error}") from None
    except UsageError as error:
        print(f"specguard crd: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(crd_yaml(args.kube_version))
    return 0
