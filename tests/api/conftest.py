"""Shared pieces of the api tests: a valid resource and a CEL evaluator for CRD rules."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import celpy
import celpy.adapter
import pytest
from celpy import celtypes

from specguard.api._resource import NAME_CEL
from specguard.api._rules import RULES, Rule
from specguard.api._wire import quantity_value

BASE_SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3.6-35B-A3B", "servedModelName": "qwen3.6"},
    "runtime": {"tensorParallelSize": 2, "extraArgs": ["--max-model-len=32768"]},
    "replicas": 4,
    "drafter": {
        "method": "dspark",
        "model": "RedHatAI/Qwen3.6-35B-A3B-speculator.dspark",
        "numSpeculativeTokens": 8,
        "adaptiveVerification": True,
    },
    "shadow": {"replicas": 1},
}


def resource(spec: dict[str, Any], name: str = "qwen") -> dict[str, Any]:
    return {
        "apiVersion": "specguard.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name, "namespace": "llm"},
        "spec": spec,
    }


@pytest.fixture
def base_spec() -> dict[str, Any]:
    return copy.deepcopy(BASE_SPEC)


def _quantity(text: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(quantity_value(str(text))))


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


# Kubernetes' quantity library, as far as the rules use it.
QUANTITY_FUNCTIONS: dict[str, Any] = {"quantity": _quantity, "compareTo": _compare_to}


class CelRules:
    """Evaluates the CRD's CEL rules with cel-python the way the API server applies them:
    each rule at its schema node, with ``self`` bound to that node, only when the node is
    present in the object (items of a list each on their own)."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}

    def evaluate(self, expression: str, value: Any) -> bool:
        program = self._programs.get(expression)
        if program is None:
            program = self._env.program(self._env.compile(expression), QUANTITY_FUNCTIONS)
            self._programs[expression] = program
        result = program.evaluate({"self": celpy.adapter.json_to_cel(value)})
        if isinstance(result, Exception):  # celpy returns CELEvalError values
            raise result
        return bool(result)

    @staticmethod
    def nodes(obj: dict[str, Any], scope: str) -> Iterator[Any]:
        current: list[Any] = [obj]
        for part in scope.split("."):
            key = part.removesuffix("[]")
            current = [node[key] for node in current if isinstance(node, dict) and key in node]
            if part.endswith("[]"):
                current = [item for node in current for item in node]
        yield from current

    def failing(self, obj: dict[str, Any], rules: tuple[Rule, ...] = RULES) -> set[str]:
        """Names of the rules the object breaks; ``obj`` is a whole resource."""
        failed = {
            rule.name
            for rule in rules
            if rule.cel is not None
            for node in self.nodes(obj, rule.scope)
            if not self.evaluate(rule.cel, node)
        }
        if not self.evaluate(NAME_CEL, obj):
            failed.add("metadata-name")
        return failed


@pytest.fixture(scope="session")
def cel() -> CelRules:
    return CelRules()


Mutation = Callable[[dict[str, Any]], None]
