"""External check of the tool verifier against BFCL v4 (the ``bfcl-eval`` wheel's data and checker).

On BFCL's ``simple_python``, ``multiple`` and ``parallel`` categories:
1. our verifier accepts every ground-truth answer (written as an OpenAI ``tool_calls`` message);
2. on perturbed answers (wrong function, missing / unknown parameter, changed value, wrong type,
   missing / extra call, reordered parallel calls) it agrees with BFCL's own AST checker.

The data and checker come from the copy ``make install`` unzips under the venv (target bfcl-data;
never pip-installed: it pins heavy dependencies); a missing copy fails with that instruction, never
skips, and nothing is fetched here. Its checker is imported with ``model_config`` stubbed out
(shared/reference/offline-data.md §3).
"""

from __future__ import annotations

import collections
import copy
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.bfcl import BfclDataMissing, bfcl_root

pytestmark = pytest.mark.slow

CATEGORIES = ("simple_python", "multiple", "parallel")
_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


@pytest.fixture(scope="module")
def bfcl() -> Path:
    try:
        return bfcl_root()
    except BfclDataMissing as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def ast_checker(bfcl: Path):
    sys.path.insert(0, str(bfcl))
    stub = types.SimpleNamespace(MODEL_CONFIG_MAPPING=collections.defaultdict(
        lambda: types.SimpleNamespace(underscore_to_dot=False)))
    sys.modules["bfcl_eval.constants.model_config"] = stub  # type: ignore[assignment]
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker as checker

    return lambda funcs, output, truth, category: checker(funcs, output, truth, Language.PYTHON, category, "m")["valid"]


def _load(bfcl: Path, category: str) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    data = bfcl / "bfcl_eval" / "data"
    questions = [json.loads(x) for x in (data / f"BFCL_v4_{category}.json").read_text().splitlines() if x.strip()]
    answers = {a["id"]: a["ground_truth"] for a in map(json.loads, (data / "possible_answer" /
                                                                  f"BFCL_v4_{category}.json").read_text().splitlines())}
    return [(q, answers[q["id"]]) for q in questions]


def _schema(node: Any) -> Any:
    """BFCL's parameter types (dict, float, tuple, any) -> JSON Schema."""
    if isinstance(node, list):
        return [_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _schema(v) for k, v in node.items() if k not in ("optional",)}
    if node.get("type") == "any":
        del out["type"]
    elif isinstance(node.get("type"), str):
        out["type"] = _TYPES.get(node["type"], node["type"])
    return out


def _first(values: list[Any]) -> Any:
    """The first accepted value of a BFCL answer list, with nested dict answers resolved."""
    value = next(v for v in values if v != "")
    return _resolve(value)


def _resolve(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _first(v) for k, v in value.items() if any(x != "" for x in v)}
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return [_resolve(x) for x in value]
    return value


def _task(q: dict[str, Any], truth: list[dict[str, Any]], category: str):
    tools = [{"type": "function", "function": {**f, "parameters": _schema(f["parameters"])}} for f in q["function"]]
    expected = []
    for call in truth:
        ((name, params),) = call.items()
        alts = {p: [_resolve(v) for v in vals if v != ""] for p, vals in params.items()}
        expected.append({"name": name, "alternatives": {p: a for p, a in alts.items() if a},
                         "optional": [p for p, vals in params.items() if "" in vals]})
    record = {"id": q["id"], "domain": "tool", "prompt": q["question"][0][-1]["content"], "tools": tools,
              "expected_calls": expected, "ordered": False}
    return get_domain("tool").parse_task(record, f"BFCL {category}")


def _truth_calls(truth: list[dict[str, Any]], funcs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ground truth as one call each: required parameters with their first accepted value,
    optional ones (BFCL marks them with "") omitted unless the schema requires them. Omitting them also sidesteps two BFCL answers
    that accept a value of the wrong type for an optional parameter (simple_python_307 lists
    ``true`` for a string, parallel_152 ``null`` for a number), which our schema check rejects."""
    calls = []
    for call in truth:
        ((name, params),) = call.items()
        required = set(next(f for f in funcs if f["name"] == name)["parameters"].get("required", []))
        calls.append({name: {p: _first(v) for p, v in params.items() if "" not in v or p in required}})
    return calls


def _response(calls: list[dict[str, Any]]) -> str:
    return json.dumps({"role": "assistant", "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, c in enumerate(calls) for n, a in c.items()]})


def _perturbations(calls: list[dict[str, Any]], funcs: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    (name, args), rest = next(iter(calls[0].items())), calls[1:]
    out.append(("wrong function", [{name + "_v2": args}, *rest]))
    out.append(("unknown parameter", [{name: {**args, "zz_extra": 1}}, *rest]))
    spec = next(f for f in funcs if f["name"] == name)
    for p in spec["parameters"].get("required", []):
        if p in args:
            out.append(("missing required", [{name: {k: v for k, v in args.items() if k != p}}, *rest]))
            break
    for p, v in args.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, int | float):
            out.append(("changed number", [{name: {**args, p: v * 3 + 7}}, *rest]))
            out.append(("number as string", [{name: {**args, p: str(v)}}, *rest]))
            break
    for p, v in args.items():
        if isinstance(v, str):
            out.append(("changed string", [{name: {**args, p: "zzz unrelated value"}}, *rest]))
            break
    if len(calls) > 1:
        out.append(("missing call", calls[:-1]))
        out.append(("reordered calls", list(reversed(calls))))
    out.append(("extra call", [*calls, copy.deepcopy(calls[0])]))
    if len(funcs) > 1:
        other = next(f["name"] for f in funcs if f["name"] != name)
        out.append(("distractor function", [{other: args}, *rest]))
    return out


@pytest.mark.parametrize("category", CATEGORIES)
def test_ground_truth_accepted_and_perturbations_agree_with_bfcl(bfcl, ast_checker, category: str) -> None:
    verify = get_domain("tool").make_verifier(None)
    items = _load(bfcl, category)
    assert len(items) >= 200
    rejected_truth, agree, disagree = [], 0, []
    for q, truth in items:
        task = _task(q, truth, category)
        calls = _truth_calls(truth, q["function"])
        assert ast_checker(q["function"], calls, truth, category), q["id"]  # our reading of BFCL's answer
        v = verify(task, _response(calls))
        if not v.passed:
            rejected_truth.append((q["id"], v.feedback))
        for kind, perturbed in _perturbations(calls, q["function"]):
            theirs = ast_checker(q["function"], perturbed, truth, category)
            ours = verify(task, _response(perturbed)).passed
            if ours == theirs:
                agree += 1
            else:
                disagree.append((q["id"], kind, theirs, ours))
    assert rejected_truth == [], rejected_truth[:5]
    total = agree + len(disagree)
    print(f"\nBFCL {category}: {len(items)} ground truths accepted; perturbations: {agree}/{total} agree")
    # Known differences: BFCL normalises strings (case, spaces, punctuation) and coerces int to
    # float; our comparison is exact (no perturbation above exercises either). BFCL matches
    # parallel calls greedily, we find a one-to-one matching: on parallel_178 reversed, answer 0
    # accepts "Microsoft" or "Apple", BFCL's greedy pass gives it the Apple call that answer 2
    # needs and rejects a correct response; we accept it. Measured: 5272/5273 agree.
    for d in disagree:
        print("  disagreement (id, perturbation, bfcl, ours):", d)
    assert agree / total >= 0.99, disagree[:10]
