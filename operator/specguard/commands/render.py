"""`specguard render FILE.yaml|- [--mode baseline] [--rung NAME]`: print the objects specguard
would run.

Bad input (unreadable file, not YAML, an invalid resource) prints one line per problem,
each naming the field, and exits 2. ``-`` reads standard input. Input is read through
:mod:`specguard.api._loading`: at most 1 MiB, bounded nesting and aliases, JSON types only.
Documents of other Kubernetes kinds (a Namespace, a Secret applied from the same file) are
left out, with one line on standard error saying which; a document that claims the
specguard.io group, or names no kind, is checked as a SpeculativeDeployment.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from specguard._args import ArgumentParser, UsageError
from specguard.api import (
    MAX_INPUT_BYTES,
    DrafterRung,
    LoadError,
    SpecError,
    SpeculativeDeployment,
    decode,
    load_documents,
    parse_resource,
    shown,
)
from specguard.api import constants as c
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


STDIN = "-"


def read_input(path: str) -> bytes:
    """At most MAX_INPUT_BYTES + 1 bytes of ``path`` (``-``: standard input)."""
    name = "<stdin>" if path == STDIN else shown(path, quote=False, limit=300)
    try:
        if path == STDIN:
            return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        with open(path, "rb") as handle:
            return handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None


def _document_name(document: Any) -> str:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return shown(name, quote=False, limit=40) if isinstance(name, str) else "no name"


def other_kind(document: Any) -> str | None:
    """``"Kind name"`` for a document that is plainly another Kubernetes object (a string
    ``kind`` other than SpeculativeDeployment and an ``apiVersion`` outside the specguard.io
    group), else None: the document is checked as a SpeculativeDeployment."""
    if not isinstance(document, dict):
        return None
    kind, api_version = document.get("kind"), document.get("apiVersion")
    if not isinstance(kind, str) or not kind or kind == c.KIND:
        return None
    if not isinstance(api_version, str) or api_version.split("/")[0] == c.GROUP:
        return None
    return f"{shown(kind, quote=False, limit=60)} {_document_name(document)}"


def parse_documents(
    documents: list[Any], source: str, left_out: list[str] | None = None
) -> list[SpeculativeDeployment]:
    """Every SpeculativeDeployment document, or InputError with every problem: each line
    prefixed by the source (and the document's index and name when there are several); two
    documents with the same namespace and name are refused. Documents of other kinds
    (``other_kind``) are skipped and, when ``left_out`` is given, named in it."""
    others = [(i, other_kind(d)) for i, d in enumerate(documents, start=1)]
    skipped = [f"document {i} ({what})" for i, what in others if what is not None]
    if left_out is not None:
        left_out += skipped
    if len(skipped) == len(documents):
        also = f" ({len(skipped)} of another kind: {', '.join(skipped)})" if skipped else ""
        raise InputError(f"{source}: no SpeculativeDeployment in the input{also}")
    resources: list[SpeculativeDeployment] = []
    lines: list[str] = []
    first_index: dict[tuple[str, str], int] = {}
    for index, document in enumerate(documents, start=1):
        if others[index - 1][1] is not None:
            continue
        prefix = (
            source
            if len(documents) == 1
            else f"{source} (document {index}, {_document_name(document)})"
        )
        try:
            sd = parse_resource(document)
        except SpecError as error:
            lines += [f"{prefix}: {problem}" for problem in error.problems]
            continue
        key = (sd.namespace, sd.name)
        if key in first_index:
            lines.append(
                f"{prefix}: metadata.name: {sd.namespace}/{sd.name} is also document "
                f"{first_index[key]}; each resource must have its own name"
            )
            continue
        first_index[key] = index
        resources.append(sd)
    if lines:
        raise InputError("\n".join(lines))
    return resources


def load_resources(path: str, left_out: list[str] | None = None) -> list[SpeculativeDeployment]:
    """The SpeculativeDeployments in ``path`` (``-``: standard input), or InputError;
    documents of other kinds are named in ``left_out``."""
    source = "<stdin>" if path == STDIN else shown(path, quote=False, limit=300)
    return resources_from_bytes(read_input(path), source, left_out)


def resources_from_bytes(
    data: bytes, source: str, left_out: list[str] | None = None
) -> list[SpeculativeDeployment]:
    """The SpeculativeDeployments in ``data`` (read from ``source``), or InputError;
    documents of other kinds are named in ``left_out``."""
    try:
        documents = load_documents(decode(data))
    except LoadError as error:
        raise InputError(f"{source}: {error}") from None
    return parse_documents(documents, source, left_out)


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
    parser.add_argument(
        "--rung",
        choices=("configured", "adaptive", "schedule"),
        help="the drafter configuration of the speculative arm (spec.ladder); default: the "
        "one in the resource's status.ladder, else configured. schedule takes the schedule "
        "derived in status.ladder",
    )
    return parser


def drafter_rung(sd: SpeculativeDeployment, name: str | None) -> DrafterRung | None:
    """The rung to render: ``name``, or the one the resource's status says runs; the
    schedule rung takes its derived schedule from the status (UsageError without one)."""
    ladder = sd.status.ladder if sd.status is not None else None
    if name is None:
        return ladder.rung if ladder is not None else None
    if name != "schedule":
        return DrafterRung(name=name)
    known = [r for r in (ladder.rung, ladder.next) if r is not None] if ladder else []
    derived = next((r for r in known if r.name == "schedule" and r.schedule), None)
    if derived is None:
        raise UsageError(
            f"--rung schedule: {sd.name} has no derived schedule in status.ladder (the "
            "operator derives it when the schedule rung is chosen)"
        )
    return derived


def main(argv: list[str]) -> int:
    left_out: list[str] = []
    try:
        args = build_parser().parse_args(argv)
        resources = load_resources(args.file, left_out)
    except (UsageError, InputError) as error:
        print(f"specguard render: {error}" if isinstance(error, UsageError) else error,
              file=sys.stderr)  # fmt: skip
        return 2
    if left_out:
        source = "<stdin>" if args.file == STDIN else shown(args.file, quote=False, limit=300)
        print(f"{source}: left out (not a SpeculativeDeployment): {', '.join(left_out)}",
              file=sys.stderr)  # fmt: skip
    try:
        rendered = [render_all(sd, args.mode, rung=drafter_rung(sd, args.rung)) for sd in resources]
        objects = [obj for group in rendered for obj in group]
    except UsageError as error:
        print(f"specguard render: {error}", file=sys.stderr)
        return 2
    sys.stdout.write(dump_yaml(objects))
    return 0
