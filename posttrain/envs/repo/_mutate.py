"""Procedural bug injection by AST mutation (SWE-smith's procedural modifiers as the model).

``mutation_sites(source)`` lists every place in a module where one operator applies, in a fixed
order; ``mutate(source, site)`` returns the module with that one change made by replacing the
node's own source text (so the rest of the file, comments and layout included, is untouched and
the diff stays a few lines). An operator is swapped in place, between its operands' own text, and an
``if`` is inverted the way a person writes it, so a mutant's line reads like the project's own (the
first packs wrote ``ast.unparse`` of the node: ``if not (kwargs):``, a form no project writes; a
rule that stripped every ``not (...)`` from an ``if`` passed 31 of their 289 tasks without reading a
test, and the reformatted boolean operations -- ``x and (not y)`` -- pointed at their line).
Operators:

- ``invert_if``: ``if c:`` -> ``if not c:``, ``if not c:`` -> ``if c:``, ``if a is b:`` -> ``if a is not b:``
  (``is``, ``in``, ``==`` and their negations), ``if a and b:`` -> ``if not a or not b:``, and
  ``if not (c):`` where ``c`` is any other expression;
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
['return_none', 'binop']
>>> print(mutate(src, mutation_sites(src)[1]), end="")
def f(a, b):
    return a - b
>>> src = "def g(x, y):\\n    if x is None and not y:\\n        return 1\\n"
>>> site = next(s for s in mutation_sites(src) if s.operator == "invert_if")
>>> print(mutate(src, site).splitlines()[1])
    if x is not None or y:
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from posttrain.pyast import parse as parse_python

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
    tree = parse_python(source)
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


def _node_at(tree: ast.Module, site: Site) -> ast.AST:
    for node in ast.walk(tree):
        if (getattr(node, "lineno", None), getattr(node, "col_offset", None), getattr(node, "end_lineno", None),
                getattr(node, "end_col_offset", None)) == (site.line, site.col, site.end_line, site.end_col):
            if site.operator != "constant" or isinstance(node, ast.Constant):
                return node
    raise ValueError(f"no node at {site}")


def _mutated_text(node: ast.AST, op: str) -> str:
    """The mutant of ``node`` as ``ast.unparse`` writes it: what the text-preserving mutant must parse to
    for ``compare``, ``binop`` and ``boolop``, and the text itself for ``constant``."""
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


TOKEN: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                          ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.Add: "+",
                          ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%",
                          ast.BitAnd: "&", ast.BitOr: "|", ast.LShift: "<<", ast.RShift: ">>", ast.And: "and",
                          ast.Or: "or"}
"""How the source spells each operator the mutations swap."""
NEGATED = {ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Eq: ast.NotEq,
           ast.NotEq: ast.Eq}
"""The comparisons an inverted ``if`` negates in place (``a is b`` -> ``a is not b``); an ordering one is
not its opposite's negation (sets, NaN) and is written ``not (a < b)``."""
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


class _Text:
    """A module's source by the byte offsets ``ast`` gives (a column is a UTF-8 byte offset)."""

    def __init__(self, source: str) -> None:
        self.data = source.encode()
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def at(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def start(self, node: ast.AST) -> int:
        return self.at(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.at(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def of(self, a: int, b: int) -> str:
        return self.data[a:b].decode()


def _swap_in_gap(gap: str, old: str, new: str) -> str:
    """``gap`` (the text between two operands: spaces, brackets, line continuations, comments and one
    operator) with its operator ``old`` spelled ``new``."""
    masked = "\n".join(ln.split("#", 1)[0] for ln in gap.split("\n"))  # (a gap holds no string literal)
    filler = " \t\n\\()"
    first = next((i for i, ch in enumerate(masked) if ch not in filler), -1)
    last = max((i for i, ch in enumerate(masked) if ch not in filler), default=-1)
    if first < 0 or " ".join(masked[first:last + 1].split()) != old:
        raise ValueError(f"no {old!r} between the operands: {gap!r}")
    return gap[:first] + new + gap[last + 1:]


def _with_ops(text: _Text, node: ast.AST, parts: list[ast.expr], olds: list[str], new: str,
              pieces: list[str] | None = None) -> str:
    """``node``'s source with each operator between ``parts`` (``olds``) spelled ``new``; the parts
    themselves as ``pieces`` where given, else as written."""
    out = [text.of(text.start(node), text.start(parts[0]))]
    for i, part in enumerate(parts):
        out.append(pieces[i] if pieces is not None else text.of(text.start(part), text.end(part)))
        if i + 1 < len(parts):
            out.append(_swap_in_gap(text.of(text.end(part), text.start(parts[i + 1])), olds[i], new))
    out.append(text.of(text.end(parts[-1]), text.end(node)))
    return "".join(out)


def _negated(text: _Text, node: ast.expr, nested: bool = False) -> str:
    """Source for ``not node`` in a test's place (its truth value is what an ``if`` reads), written as a
    person would: ``not x``, ``x`` for ``not x``, ``a is not b``, De Morgan's for ``and``/``or``;
    ``not (...)`` for what else has no such form. ``nested``: inside a boolean operation."""
    own = text.of(text.start(node), text.end(node))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = text.of(text.start(node.operand), text.end(node.operand))
        low = isinstance(node.operand, ast.BoolOp | ast.IfExp | ast.Lambda | ast.NamedExpr)
        return f"({inner})" if low and (nested or not isinstance(node.operand, ast.BoolOp)) else inner
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in NEGATED:
        return _with_ops(text, node, [node.left, *node.comparators], [TOKEN[type(node.ops[0])]],
                         TOKEN[NEGATED[type(node.ops[0])]])
    if isinstance(node, ast.BoolOp):
        other = "or" if isinstance(node.op, ast.And) else "and"
        pieces = [_negated(text, v, nested=True) for v in node.values]
        return _with_ops(text, node, node.values, [TOKEN[type(node.op)]] * (len(node.values) - 1), other, pieces)
    if isinstance(node, _ATOMS):
        return f"not {own}"
    return f"not ({own})"


def _in_place(source: str, site: Site, node: ast.AST) -> str:
    """The site's new text, made from its own source text (operands, spacing, brackets, comments kept)."""
    text = _Text(source)
    if site.operator == "invert_if":
        assert isinstance(node, ast.expr)
        return _negated(text, node)
    if isinstance(node, ast.Compare):
        return _with_ops(text, node, [node.left, *node.comparators], [TOKEN[type(node.ops[0])]],
                         TOKEN[COMPARE[type(node.ops[0])]])
    if isinstance(node, ast.BinOp):
        return _with_ops(text, node, [node.left, node.right], [TOKEN[type(node.op)]], TOKEN[BINOP[type(node.op)]])
    if isinstance(node, ast.BoolOp):
        op = TOKEN[type(node.op)]
        return _with_ops(text, node, node.values, [op] * (len(node.values) - 1), "or" if op == "and" else "and")
    return _mutated_text(node, site.operator)


def _splice(source: str, site: Site, new: str) -> str:
    text = _Text(source)
    a, b = text.at(site.line, site.col), text.at(site.end_line, site.end_col)
    return (text.data[:a] + new.encode() + text.data[b:]).decode()


def mutate(source: str, site: Site) -> str:
    """``source`` with the one change ``site`` names (module docstring)."""
    lines = source.splitlines(keepends=True)
    if site.operator == "remove_assign":
        indent = lines[site.line - 1][: len(lines[site.line - 1]) - len(lines[site.line - 1].lstrip())]
        return "".join(lines[: site.line - 1] + lines[site.end_line:]) if indent else source
    if site.operator == "swap_statements":
        a, b = lines[site.line - 1], lines[site.end_line - 1]
        return "".join(lines[: site.line - 1] + [b, a] + lines[site.end_line:])
    tree = parse_python(source)
    node = _node_at(tree, site)
    out = _splice(source, site, _in_place(source, site, node))
    if site.operator in ("compare", "binop", "boolop"):  # the same tree as the node rebuilt with its partner
        if ast.dump(parse_python(out)) != ast.dump(parse_python(_splice(source, site, _mutated_text(node, site.operator)))):
            raise ValueError(f"the operator at {site} could not be swapped in place")
    else:
        parse_python(out)
    return out
