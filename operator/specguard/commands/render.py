"""`specguard render FILE.yaml|- [--mode baseline]`: print the objects specguard would run.

Bad input (unreadable file, not YAML, an invalid resource) prints one line per problem,
each naming the field, and exits 2.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from specguard._args import ArgumentParser, UsageError
from specguard.api import constants as c
from specguard.api.errors import SpecError
from specguard.api.resource import SpeculativeDeployment, parse_resource
from specguard.render import render_all


class _Dumper(yaml.SafeDumper):
    # Objects share small lists and dicts (labels, verbs); spell them out, no &anchors.
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML in the objects' own key order; long JSON args stay on one line."""
    return yaml.dump_all(
        objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 20
    )


class InputError(Exception):
    """A file that cannot be used; the message is one line per problem, ready to print."""


def load_resources(path: str) -> list[SpeculativeDeployment]:
    """The resources in the file at ``path`` (``-``: standard input)."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (UTF-8)") from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        reason = getattr(exc, "problem", None) or "invalid YAML"
        raise InputError(f"{path}: not valid YAML{line}: {reason}") from None
    if not documents:
        raise InputError(f"{path}: no SpeculativeDeployment in the file")
    resources: list[SpeculativeDeployment] = []
    lines: list[str] = []
    for index, document in enumerate(documents):
        prefix = path if len(documents) == 1 else f"{path} (document {index + 1})"
        try:
            resources.append(parse_resource(document))
        except SpecError as error:
            lines += [f"{prefix}: {problem}" for problem in error.problems]
    if lines:
        raise InputError("\n".join(lines))
    return resources


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="specguard render",
        description="Print the Kubernetes objects specguard runs for a SpeculativeDeployment.",
    )
    parser.add_argument(
        "file", help="YAML file with one or more SpeculativeDeployments; - reads standard input"
    )
    parser.add_argument(
        "--mode",
        choices=c.ARMS,
        default=c.ARM_SPECULATIVE,
        help="which arm serves: speculative (drafter on) or baseline (after a rollback)",
    )
    return parser


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
        resources = load_resources(args.file)
    except (UsageError, InputError) as error:
        print(f"specguard render: {error}" if isinstance(error, UsageError) else error,
              file=sys.stderr)  # fmt: skip
        return 2
    objects = [obj for sd in resources for obj in render_all(sd, args.mode)]
    sys.stdout.write(dump_yaml(objects))
    return 0
