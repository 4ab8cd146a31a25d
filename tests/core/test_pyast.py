"""posttrain.pyast.parse: ast.parse for verifier threads (CPython gh-106905: the AST constructor's
recursion counter is shared by threads; a repo reference's verdict became infra:verifier_crash,
"AST constructor recursion depth mismatch (before=48, after=41)", under load)."""

from __future__ import annotations

import ast
import concurrent.futures
import doctest

import pytest

import posttrain.pyast
from posttrain.pyast import parse

DEEP = "x = " + "(" * 60 + "1" + ")" * 60 + "\n" + "\n".join(f"def f{i}(a, b=[1, {{2: 3}}]):\n    return a" for i in range(40))


def test_parses_from_many_threads_at_once_give_the_same_trees() -> None:
    want = ast.dump(ast.parse(DEEP))
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda _: ast.dump(parse(DEEP)), range(200)))
    assert set(got) == {want}


def test_the_shared_counter_error_is_retried_once_and_a_syntax_error_is_the_sources(monkeypatch) -> None:
    real, calls = ast.parse, []

    def flaky(*args, **kwargs):  # a test double of the CPython bug, beside the real parse above
        calls.append(args)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=48, after=41)")
        return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", flaky)
    assert isinstance(parse("y = 2"), ast.Module) and len(calls) == 2
    monkeypatch.setattr(ast, "parse", real)
    with pytest.raises(SyntaxError):
        parse("def (")


def test_docstring_examples() -> None:
    assert doctest.testmod(posttrain.pyast).failed == 0
