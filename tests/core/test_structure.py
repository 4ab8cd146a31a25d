"""The package structure: every import of posttrain (top-level, lazy inside a function, and under
``TYPE_CHECKING`` alike, read by an AST walk) against the layer order written once, in
docs/contracts.md ("Layers"). A package imports only packages of lower layers (or of its own layer,
without a cycle), never one its ``never`` line names; an import against the order is allowed only
where README's layout section names it, with its reason. No cycle between packages."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "posttrain"


def layers() -> tuple[dict[str, int], set[tuple[str, str]]]:
    """``{package: layer}`` and the ``never`` edges, read from docs/contracts.md's "Layers" table:
    ``| L3 | envs, sched | sched -> envs, policy, verify |``."""
    text = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    layer_of: dict[str, int] = {}
    never: set[tuple[str, str]] = set()
    for row in re.finditer(r"^\|\s*L(\d)\s*\|([^|]+)\|([^|]*)\|", section, re.M):
        for name in row.group(2).split(","):
            layer_of[name.strip().strip("`")] = int(row.group(1))
        for rule in filter(None, (r.strip() for r in row.group(3).split(";"))):
            src, _, dsts = rule.partition("->")
            never |= {(src.strip().strip("`"), d.strip().strip("`")) for d in dsts.split(",") if d.strip()}
    return layer_of, never


def allowed_exceptions() -> dict[tuple[str, str], str]:
    """README's layout section: ``- `A -> B`: why`` lines name the imports against the layer order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    return {(m.group(1), m.group(2)): m.group(3).strip()
            for m in re.finditer(r"^- `([\w.]+) -> ([\w.]+)`: (.+)$", section, re.M)}


def package_of(module: str) -> str:
    """``posttrain.envs.tool._domain`` -> ``envs``; a top-level module is its own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(package: Path = PACKAGE) -> list[tuple[str, str, int]]:
    """(importing module, imported posttrain module, line) for every import statement anywhere in a
    file of ``package`` (a folder named ``posttrain``): top-level, in functions, under TYPE_CHECKING."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_pkg else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out += [(module, a.name, node.lineno) for a in node.names if a.name.startswith("posttrain")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                if target == "posttrain" or target.startswith("posttrain."):
                    out.append((module, target, node.lineno))
    return out


def edges() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for src, dst, line in imports():
        a, b = package_of(src), package_of(dst)
        if a != b and b != "__init__":  # posttrain/__init__.py holds only __version__
            found[(a, b)].append(f"{src}:{line} imports {dst}")
    return found


def test_every_package_has_a_layer() -> None:
    layer_of, _ = layers()
    packages = {package_of(f"posttrain.{p.stem}") if p.suffix == ".py" else p.name
                for p in PACKAGE.iterdir() if (p.suffix == ".py" or (p / "__init__.py").is_file()) and p.name != "__init__.py"}
    assert packages - set(layer_of) == set(), f"packages without a layer in docs/contracts.md: {packages - set(layer_of)}"


def test_imports_follow_the_layer_order() -> None:
    layer_of, never = layers()
    allowed = allowed_exceptions()
    bad = []
    for (a, b), where in sorted(edges().items()):
        against = layer_of[a] < layer_of[b] or (a, b) in never
        if against and (a, b) not in allowed:
            bad.append(f"{a} (L{layer_of[a]}) -> {b} (L{layer_of[b]}): {where[0]}" + (f" (+{len(where) - 1})" if len(where) > 1 else ""))
    assert not bad, "imports against the layer order (docs/contracts.md, Layers), not named in README's layout:\n" + "\n".join(bad)


def test_every_named_exception_is_still_needed() -> None:
    """A line in README's layout section for an import that no longer exists is stale."""
    found = edges()
    stale = [f"{a} -> {b}" for a, b in allowed_exceptions() if (a, b) not in found]
    assert not stale, f"README's layout names imports that do not exist any more: {stale}"


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges():
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    where = edges()
    shown = [f"{c}: " + "; ".join(where[(a, b)][0] for a in c for b in c if (a, b) in where) for c in cycles]
    assert not cycles, "import cycles between packages:\n" + "\n".join(shown)


def test_the_walker_sees_lazy_relative_and_type_checking_imports(tmp_path) -> None:
    """The walk finds imports inside functions, under TYPE_CHECKING and relative ones, not only
    top-level absolute ones (a made-up package laid out like posttrain)."""
    pkg = tmp_path / "posttrain"
    (pkg / "sched").mkdir(parents=True)
    (pkg / "sched" / "__init__.py").write_text("from ._core import x\n")
    (pkg / "sched" / "_core.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from posttrain.cli import main\n"
        "def f():\n    import posttrain.envs.tool\n    from ..policy import Policy\n")
    found = {(a, b) for a, b, _ in imports(pkg)}
    assert found == {("posttrain.sched", "posttrain.sched._core"), ("posttrain.sched._core", "posttrain.cli"),
                     ("posttrain.sched._core", "posttrain.envs.tool"), ("posttrain.sched._core", "posttrain.policy")}
