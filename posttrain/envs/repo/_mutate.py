"""Procedural bug injection by AST mutation (SWE-smith's procedural modifiers as the model).

``mutation_sites(source)`` lists every place in a module where one operator applies, in a fixed
order; ``mutate(source, site)`` returns the module with that one change made by replacing the
node's own source text (so the rest of the file, comments and layout included, is untouched and
the diff stays a few lines). Operators:

- ``invert_if``: ``if c:`` -> ``if not (c):``;
- ``compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``is`` <-> ``is not``, ``in`` <-> ``not in``;
- ``binop``: ``+`` <-> ``-``, ``*`` -> ``//``... (one partner per operator, ``BINOP``);
- ``boolop``: ``and`` <-> ``or``;
- ``constant``: an integer ``k`` -> ``k + 1`` (``1`` -> ``0``), ``True`` <-> ``False``;
- ``remove_assign``: a one-line assignment deleted (``pass`` where it was the block's only statement);
- ``swap_statements``: two adjacent one-line statements exchanged;
- ``return_none``: ``return x`` -> ``return None``.

Which mutants become tasks is decided by running the suite (``_gen.py``): a mutant must break
between 1 and k tests and leave every other test passing. Equivalent mutants (no test fails) are
dropped there.

>>> src = "def f(a, b):\\n    return a + b\\n"
>>> [s.operator for s in mutation_sites(src)]
['binop', 'return_none']
>>> print(mutate(src, mutation_sites(src)[0]), end="")
def f(a, b):
    return a - b
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

__all__ = ["Site", "mutate", "mutation_sites", "OPERATORS"]

OPERATORS = ("invert_if", "compare", "binop", "boolop", "constant", "remove_assign", "swap_statements",
             "return_none")
COMPARE: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                             ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
                             ast.NotIn: ast.In}
BINOP: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                           ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
                           ast.LShift: ast.RShift, ast.RShift: ast.LShift}


@dataclass(frozen=True)
class Site:
    """One mutation: an operator at a node, named by its source span (1-based lines, 0-based columns)."""

    operator: str
    line: int
    col: int
    end_line: int
    end_col: int
    function: str
    """The qualified name of the function the site is in."""


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((prefix + child.name, child))
                stack.append((child, prefix + child.name + ".<locals>."))
            elif isinstance(child, ast.ClassDef):
                stack.append((child, prefix + child.name + "."))
    return sorted(out, key=lambda item: item[1].lineno)


def _site(op: str, node: ast.AST, fn: str) -> Site:
    return Site(op, node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0, fn)


def _simple(stmt: ast.stmt) -> bool:
    return stmt.lineno == stmt.end_lineno and not isinstance(stmt, ast.FunctionDef | ast.ClassDef | ast.Return)


def _block_sites(fn_name: str, body: list[ast.stmt]) -> list[Site]:
    out = []
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign) and _simple(stmt) and len(body) > 1:
            out.append(_site("remove_assign", stmt, fn_name))
        if i + 1 < len(body) and _simple(stmt) and _simple(body[i + 1]) and body[i + 1].lineno == stmt.lineno + 1 \
                and not isinstance(stmt, ast.Expr) and ast.unparse(stmt) != ast.unparse(body[i + 1]):
            out.append(Site("swap_statements", stmt.lineno, stmt.col_offset, body[i + 1].end_lineno or 0,
                            body[i + 1].end_col_offset or 0, fn_name))
    return out


def _node_sites(fn_name: str, node: ast.AST) -> list[Site]:
    if isinstance(node, ast.If):
        return [_site("invert_if", node.test, fn_name)]
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
        return [_site("compare", node, fn_name)]
    if isinstance(node, ast.BinOp) and type(node.op) in BINOP and not isinstance(node.left, ast.Constant | ast.JoinedStr):
        return [_site("binop", node, fn_name)]
    if isinstance(node, ast.BoolOp):
        return [_site("boolop", node, fn_name)]
    if isinstance(node, ast.Constant) and (type(node.value) is int or type(node.value) is bool):
        return [_site("constant", node, fn_name)]
    if isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        return [_site("return_none", node, fn_name)]
    return []


def mutation_sites(source: str) -> list[Site]:
    """Every site of every operator in the module's functions, in source order (docstrings and
    decorators excluded)."""
    tree = ast.parse(source)
    out: list[Site] = []
    for name, fn in _functions(tree):
        inner = {id(n) for child in ast.iter_child_nodes(fn) if isinstance(child, ast.FunctionDef | ast.ClassDef)
                 for n in ast.walk(child)}
        body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(
            getattr(fn.body[0], "value", None), ast.Constant) else fn.body
        for stmt in body:
            for node in ast.walk(stmt):
                if id(node) in inner:
                    continue
                for field in ("body", "orelse", "finalbody"):
                    block = getattr(node, field, None)
                    if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                        out += _block_sites(name, block)
                out += _node_sites(name, node)
        out += _block_sites(name, body)
    return sorted(set(out), key=lambda s: (s.line, s.col, s.end_line, s.end_col, s.operator))


def _replace(lines: list[str], site: Site, text: str) -> str:
    first, last = lines[site.line - 1], lines[site.end_line - 1]
    new = first[: site.col] + text + last[site.end_col:]
    return "".join(lines[: site.line - 1] + [new] + lines[site.end_line:])


def _node_at(tree: ast.Module, site: Site) -> ast.AST:
    for node in ast.walk(tree):
        if (getattr(node, "lineno", None), getattr(node, "col_offset", None), getattr(node, "end_lineno", None),
                getattr(node, "end_col_offset", None)) == (site.line, site.col, site.end_line, site.end_col):
            if site.operator != "constant" or isinstance(node, ast.Constant):
                return node
    raise ValueError(f"no node at {site}")


def _mutated_text(node: ast.AST, op: str) -> str:
    if op == "invert_if":
        return f"not ({ast.unparse(node)})"
    if op == "compare":
        assert isinstance(node, ast.Compare)
        return ast.unparse(ast.Compare(node.left, [COMPARE[type(node.ops[0])]()], node.comparators))
    if op == "binop":
        assert isinstance(node, ast.BinOp)
        return ast.unparse(ast.BinOp(node.left, BINOP[type(node.op)](), node.right))
    if op == "boolop":
        assert isinstance(node, ast.BoolOp)
        return ast.unparse(ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values))
    if op == "constant":
        assert isinstance(node, ast.Constant)
        v = node.value
        return repr(not v) if isinstance(v, bool) else repr(0 if v == 1 else v + 1)
    if op == "return_none":
        return "return None"
    raise ValueError(op)


def mutate(source: str, site: Site) -> str:
    """``source`` with the one change ``site`` names (module docstring)."""
    lines = source.splitlines(keepends=True)
    if site.operator == "remove_assign":
        indent = lines[site.line - 1][: len(lines[site.line - 1]) - len(lines[site.line - 1].lstrip())]
        return "".join(lines[: site.line - 1] + lines[site.end_line:]) if indent else source
    if site.operator == "swap_statements":
        a, b = lines[site.line - 1], lines[site.end_line - 1]
        return "".join(lines[: site.line - 1] + [b, a] + lines[site.end_line:])
    node = _node_at(ast.parse(source), site)
    text = _mutated_text(node, site.operator)
    out = _replace(lines, site, text)
    ast.parse(out)
    return out
