"""BFCL v4 multi-turn entries as ``Task``s: where the installed wheel is, its tasks, tools and ground truth.

The wheel is unzipped by ``make install`` (target ``bfcl-data``) under ``<venv>/share/bfcl/wheel``;
nothing here downloads it. Only data files are read on the host (JSON lines and the ground-truth call
strings, parsed with ``ast``, never evaluated); BFCL's Python backends run in the sandbox only.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.errors import UserError
from posttrain.pyast import parse as parse_python
from posttrain.types import Task

DOMAIN = "bfcl"
CATEGORIES = ("multi_turn_base",)
"""Categories loaded as tasks. (``long_context``, ``miss_func``, ``miss_param`` need BFCL's
long-context scenario and per-turn tool changes: not done.)"""

# BFCL's constants/executable_backend_config.py (the test checks these against the wheel's).
CLASS_MODULES: Mapping[str, str] = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
FUNC_DOCS: Mapping[str, str] = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
STATELESS_CLASSES = frozenset({"MathAPI"})
BACKEND_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


class BfclDataMissing(UserError):
    """The unzipped bfcl-eval wheel is not where ``make install`` puts it."""


@dataclass(frozen=True)
class Call:
    """One tool call: a function name and its arguments (JSON values)."""

    name: str
    arguments: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}


def bfcl_root(root: str | Path | None = None) -> Path:
    """The unzipped wheel (the directory holding ``bfcl_eval/``): ``root``, or ``<venv>/share/bfcl/wheel``."""
    path = Path(root) if root is not None else Path(sys.prefix) / "share" / "bfcl" / "wheel"
    if not (path / "bfcl_eval" / "data" / "multi_turn_func_doc").is_dir():
        raise BfclDataMissing(
            f"BFCL v4 data not found at {path} (expected bfcl_eval/data/ of the unzipped bfcl-eval wheel); "
            "`make install` puts it there (Makefile target bfcl-data)")
    return path


def bfcl_version(root: Path) -> str:
    """The wheel's version, from its dist-info directory name."""
    infos = sorted(root.glob("bfcl_eval-*.dist-info"))
    return infos[-1].name.removeprefix("bfcl_eval-").removesuffix(".dist-info") if infos else "unknown"


def _read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def to_openai_tool(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL function doc as an OpenAI tool (BFCL's ``dict``/``float``/``tuple``/``any`` types to JSON Schema)."""
    return {"type": "function", "function": {"name": doc["name"], "description": doc.get("description", ""),
                                             "parameters": _schema(doc["parameters"])}}


def _schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _schema(v) for k, v in node.items() if k != "optional"}
    if node.get("type") == "any":
        del out["type"]
    elif isinstance(node.get("type"), str):
        out["type"] = _TYPES.get(node["type"], node["type"])
    return out


def parse_call(text: str, signatures: Mapping[str, Sequence[str]]) -> Call:
    """A ground-truth call string (``cd(folder='x')``, ``sort('f.txt')``) as a ``Call``; positional
    arguments are named by the backend method's signature (``signatures``: name -> parameter names).

    >>> parse_call("tail('log.txt', lines=20)", {"tail": ["file_name", "lines"]})
    Call(name='tail', arguments={'file_name': 'log.txt', 'lines': 20})
    """
    node = parse_python(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    name = node.func.id
    args = {signatures[name][i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return Call(name, args)


@functools.cache
def method_signatures(root: Path, cls: str) -> dict[str, tuple[str, ...]]:
    """``{method: parameter names after self}`` of backend class ``cls``, read from its source with
    ``ast`` (never imported on the host)."""
    path = root / Path(*BACKEND_PACKAGE.split(".")) / f"{CLASS_MODULES[cls]}.py"
    tree = parse_python(path.read_text(), str(path))
    [node] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    return {f.name: tuple(a.arg for a in [*f.args.posonlyargs, *f.args.args][1:])
            for f in node.body if isinstance(f, ast.FunctionDef)}


def load_func_docs(root: Path, classes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{function name: BFCL doc}`` of ``classes``, in BFCL's order (``populate_test_cases_with_predefined_functions``)."""
    return {d["name"]: d for cls in classes for d in _class_docs(root, cls)}


@functools.cache
def _class_docs(root: Path, cls: str) -> tuple[dict[str, Any], ...]:
    return tuple(_read_lines(root / "bfcl_eval" / "data" / "multi_turn_func_doc" / FUNC_DOCS[cls]))


def load_tasks(category: str = "multi_turn_base", *, root: str | Path | None = None) -> list[Task]:
    """BFCL v4 ``category`` as tool-agent tasks (one per entry, in file order).

    ``Task.fields``: ``turns`` (each turn's user messages), ``tools`` (OpenAI tools of the involved
    classes' function docs), ``methods`` (function name -> backend class), ``initial_config``,
    ``involved_classes``, ``ground_truth`` (per turn, a list of ``{name, arguments}``), ``bfcl_version``.
    """
    if category not in CATEGORIES:
        raise UserError(f"BFCL category {category!r}: expected one of {list(CATEGORIES)}")
    base = bfcl_root(root)
    data = base / "bfcl_eval" / "data"
    truth = {a["id"]: a["ground_truth"] for a in _read_lines(data / "possible_answer" / f"BFCL_v4_{category}.json")}
    version = bfcl_version(base)
    tasks = []
    for entry in _read_lines(data / f"BFCL_v4_{category}.json"):
        classes = list(entry["involved_classes"])
        docs = load_func_docs(base, classes)
        signatures = {name: params for cls in classes for name, params in method_signatures(base, cls).items()}
        methods = {d["name"]: cls for cls in classes for d in _class_docs(base, cls)}
        turns = [[dict(m) for m in turn] for turn in entry["question"]]
        gt = [[parse_call(c, signatures).to_json() for c in turn] for turn in truth[entry["id"]]]
        fields = {"turns": turns, "tools": [to_openai_tool(d) for d in docs.values()], "methods": methods,
                  "initial_config": entry.get("initial_config", {}), "involved_classes": classes,
                  "ground_truth": gt, "category": category, "bfcl_version": version}
        tasks.append(Task(id=entry["id"], domain=DOMAIN, prompt=turns[0][-1]["content"], fields=fields))
    return tasks
