"""`specguard crd [--kube-version X.Y]`: print the SpeculativeDeployment CRD as YAML.

Below 1.25 the CEL validation rules are left out (those servers refuse them).
"""

from __future__ import annotations

import argparse
import sys

from specguard.api.crd import DEFAULT_KUBE_VERSION, crd, parse_kube_version
from specguard.commands.render import dump_yaml


def crd_yaml(kube_version: str = DEFAULT_KUBE_VERSION) -> str:
    return dump_yaml([crd(kube_version)])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="specguard crd", description="Print the SpeculativeDeployment CRD as YAML."
    )
    parser.add_argument(
        "--kube-version",
        default=DEFAULT_KUBE_VERSION,
        help=f"Kubernetes version of the target server (default {DEFAULT_KUBE_VERSION}); "
        "below 1.25 the CEL rules are left out",
    )
    args = parser.parse_args(argv)
    try:
        parse_kube_version(args.kube_version)
    except ValueError as error:
        print(f"specguard crd: --kube-version: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(crd_yaml(args.kube_version))
    return 0
