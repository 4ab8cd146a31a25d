"""docs/recipe.md, generated from the typed recipe: every key, its type and range, its default, and one
line of meaning (the docstring under the field).

    python -m posttrain.cli.recipe_doc > docs/recipe.md     # regenerate
    python -m posttrain.cli.recipe_doc --check docs/recipe.md   # exit 1 (and say how) when out of date

``recipe_reference()`` walks ``posttrain.train.recipe.Recipe``: each dataclass is a section, each
field a row; a field's type comes from its annotation (``Annotated[int, Range(ge=1)]`` reads
"integer >= 1", a ``Literal`` its choices, a list its items), its default from the dataclass, and
its meaning from the string literal under it in the source (read with ``ast``: Python keeps no
field docstrings at run time). Sections are listed in the order the recipe nests them; a section
used in two places (a list of task sources in ``tasks.train`` and ``tasks.eval``) is described once.

Not here: checking a recipe (``posttrain.config.parse_config``), the recipes themselves (configs/).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import errno
import functools
import inspect
import json
import os
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from posttrain.config import MAX_FLOAT, Range
from posttrain.pyast import parse as parse_python

MINIMAL_RECIPE = """\
# recipe.yaml: SFT on your tasks' references, then GRPO against their verifiers, then evaluation
seed: 0
stages: [sft, rl]
model:
  name: embedded              # or a Hugging Face checkpoint directory
tasks:
  train: [{file: examples/tasks/math.jsonl, skip: 4}]
  eval: [{file: examples/tasks/math.jsonl, n: 4}]
sft: {demonstrations: references, epochs: 2}
rl: {steps: 20, prompts_per_step: 4, group_size: 4, max_new_tokens: 24}
eval: {samples_per_task: 2}
"""
"""A complete recipe in a few lines (README shows it; tests/core/test_recipe_doc.py parses it)."""


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass, from the string literal under each field in its source
    (a base dataclass's fields from the base: ``DPOConfig`` and ``RMConfig`` extend ``PairTraining``)."""
    out = {k: v for base in reversed(cls.__mro__[1:]) if dataclasses.is_dataclass(base) for k, v in field_docs(base).items()}
    try:
        tree = parse_python(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return out
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for stmt, after in zip(body, body[1:], strict=False):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            out[stmt.target.id] = " ".join(after.value.value.split())
    return out


def _sections_in(tp: Any, in_list: bool = False) -> list[tuple[type, bool]]:
    """The dataclasses a field's type holds (itself, a list's items, a union's members), each with
    whether it sits in a list (its keys are then ``key[].field``)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return [(tp, in_list)]
    origin = get_origin(tp)
    if origin is Annotated:
        return _sections_in(get_args(tp)[0], in_list)
    return [c for arg in get_args(tp) for c in _sections_in(arg, in_list or origin is tuple)]


def type_text(tp: Any) -> str:
    """How a field's type reads in the reference."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        rng = next((x for x in extras if isinstance(x, Range)), None)
        text = rng.describe(base) if rng else type_text(base)
        return text.removeprefix("an ").removeprefix("a ")
    if origin is Literal:
        return " \\| ".join(json.dumps(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        text = " or ".join(type_text(a) for a in args)
        return f"{text} or null" if type(None) in get_args(tp) else text
    if origin is tuple:
        return f"list of ({type_text(get_args(tp)[0])})"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"section `{tp.__name__}`"
    return {bool: "true \\| false", int: "integer", float: "number", str: "string"}.get(tp, getattr(tp, "__name__",
                                                                                                       str(tp)))


def default_text(f: dataclasses.Field) -> str:
    """A field's default as YAML would write it."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(its section's defaults)"
    return f"`{_yaml(value)}`"


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, str):
        return value if value and all(c.isalnum() or c in "_-./" for c in value) else json.dumps(value)
    return repr(value)


_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring (its one line of meaning in the reference).

    >>> first_sentence("Passes over the data (e.g. 3). Fractions allowed.")
    'Passes over the data (e.g. 3).'
    """
    start = 0
    while (cut := doc.find(". ", start)) > 0:
        if not doc[: cut + 1].endswith(_ABBREVIATIONS):
            return doc[: cut + 1]
        start = cut + 2
    return doc


def _section(cls: type, keys: list[str]) -> tuple[list[str], list[tuple[type, str]]]:
    """The table of one section (found at ``keys``) and the sections nested in it, with their keys."""
    hints = get_type_hints(cls, include_extras=True)
    docs = field_docs(cls)
    key = keys[0]
    lines = [("## " + ", ".join(f"`{k}`" for k in keys)) if key else "## top level", ""]
    head = (inspect.getdoc(cls) or "").split("\n\n")[0]
    if head and not head.startswith(cls.__name__ + "("):
        lines += [" ".join(head.split()), ""]
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    nested = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        full = f"{key}.{f.name}" if key else f.name
        subs = _sections_in(tp)
        meaning = first_sentence(docs.get(f.name, "")) or (f"the `{full}` section below" if subs else "—")
        lines.append(f"| `{full}` | {type_text(tp)} | {default_text(f)} | {meaning.replace('|', chr(92) + '|')} |")
        nested += [(sub, f"{full}[]" if in_list else full) for sub, in_list in subs]
    return lines, nested


def recipe_reference() -> str:
    """The whole of docs/recipe.md."""
    from posttrain.train.recipe import Recipe

    out = ["# Recipe reference", "",
           "<!-- generated by `python -m posttrain.cli.recipe_doc > docs/recipe.md` from posttrain/train/recipe.py and "
           "the dataclasses it nests; do not edit by hand (tests/core/test_recipe_doc.py keeps it in sync) -->", "",
           "A recipe is a YAML file of these keys; every one is optional and has the default shown. Unknown keys, "
           "values of the wrong type or outside their range, and invalid combinations are refused in one line before "
           "any work (`posttrain run RECIPE --set key=value` overrides one). Every number is also finite, an "
           f"integer fits in 64 bits and a number's magnitude is at most {MAX_FLOAT:g}. A complete recipe:", "",
           "```yaml", MINIMAL_RECIPE.rstrip("\n"), "```", "",
           "Task files and their fields: docs/tasks.md. What each stage does: docs/contracts.md.", ""]
    order: list[type] = []
    where: dict[type, list[str]] = {}
    queue: list[tuple[type, str]] = [(Recipe, "")]
    while queue:  # breadth first: every key a section is found at, in the order the recipe nests them
        cls, key = queue.pop(0)
        if cls not in where:
            order.append(cls)
            where[cls] = []
            queue += _section(cls, [key])[1]
        where[cls].append(key)
    for cls in order:
        out += [*_section(cls, where[cls])[0], ""]
    return "\n".join(out).rstrip("\n") + "\n"


REGENERATE = "python -m posttrain.cli.recipe_doc > docs/recipe.md"


def _why_not_a_file(path: Path) -> str:
    """What ``path``, no regular file, is: a symbolic link to nothing or a loop was "no such file",
    though ``ls`` lists it; so was a link to a device."""
    if path.is_dir():
        return "is a directory, expected the generated file"
    if path.is_symlink():
        try:
            path.stat()
        except OSError as e:
            if e.errno == errno.ELOOP:
                return "a symbolic link loop; expected the generated file"
            return f"a symbolic link to {os.readlink(path)}, which does not exist; expected the generated file " \
                   f"(make it: {REGENERATE})"
        return f"a symbolic link to {os.readlink(path)}, a device, socket or pipe; expected the generated file"
    if path.exists():
        return "a device, socket or pipe, not a file; expected the generated file"
    return f"no such file (make it: {REGENERATE})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, metavar="FILE", help="exit 1 when FILE differs from the generated text")
    args = parser.parse_args(argv)
    text = recipe_reference()
    if args.check is None:
        sys.stdout.write(text)
        return 0
    if not args.check.is_file():
        print(f"posttrain: error: --check {args.check}: {_why_not_a_file(args.check)}", file=sys.stderr)
        return 2
    if args.check.read_text(encoding="utf-8", errors="replace") != text:  # a file that is not UTF-8 differs too
        print(f"posttrain: {args.check} is out of date with the recipe; regenerate it: {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
