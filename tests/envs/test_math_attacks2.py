"""A second adversarial read of the math verifier, played as a reward-hacking policy (none passed):
a second candidate hidden by a separator the hedge rule does not name (a unicode ∨, a fullwidth
comma, a TeX space or line break, ``cases``, ``\\substack``, ``\\overset``, a union of sets),
sympy's own names for constants (``oo``, ``zoo``, ``nan``, ``E``, ``I``, ``pi``), a ``\\pm`` with
more than the gold's two values, characters a tokenizer can leave in a string (a lone surrogate,
NUL), and deep nesting that the in-process reader must refuse as the answer's failure (an
exception there would be an ``infra_error``, which drops the group: "failing differently never
pays"). Each is a ``fail``; the right answer in each gold's own spelling still passes.

Real verifier, real checker workers; about 100 verdicts, most decided before the worker.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.envs import get_domain
from posttrain.envs.math import make_math_verifier
from posttrain.envs.math._check import MathChecker
from posttrain.types import Task

ENV = get_domain("math")
GOLDS = ["3", "\\frac{\\sqrt{2}}{2}", "x^2+1", "\\{2, 3\\}", "x = 3", "(1, 2)"]
SECOND_CANDIDATE = [
    "G ∨ 4", "G ⋁ 4", "G ∧ 4", "G，4", "G、4", "G ‖ 4", "G ； 4", "G \\parallel 4", "G \\vert 4", "G \\mid 4",
    "G \\text{/} 4", "G \\quad 4", "G \\; 4", "G \\\\ 4", "G \\newline 4", "G \\oplus 4", "G \\sqcup 4",
    "\\{G\\} \\cup \\{4\\}", "\\begin{cases} G \\\\ 4 \\end{cases}", "\\substack{G \\\\ 4}", "\\overset{4}{G}",
    "\\stackrel{4}{G}", "G \\tag{4}", "\\llap{4}G", "G_{\\text{or }4}", "G\u200b4",
]
"""Each with ``G`` the gold: the gold and a 4 in one box."""
NAMES = [("\\infty", "oo"), ("-\\infty", "-oo"), ("\\infty", "\\tilde{\\infty}"), ("e", "E"), ("i", "I"),
         ("2i", "2j"), ("\\pi", "pi"), ("\\pi", "\\Pi"), ("3", "zoo"), ("3", "nan"), ("3", "oo"), ("3", "S"),
         ("0", "\\frac{1}{\\infty}"), ("0", "\\emptyset"), ("1", "\\infty^0"), ("1", "1^\\infty"), ("x", "X"),
         ("x", "\\chi")]
"""(gold, answer): sympy's spellings of constants, and letters that look like the gold's."""
PLUS_MINUS = [("\\pm 2", "\\pm 2 \\pm 1"), ("\\pm 2", "\\pm 2, \\pm 3"), ("\\pm 2", "\\pm \\pm 2"),
              ("1 \\pm \\sqrt{2}", "1 \\pm \\sqrt{2} \\pm 1"), ("x = \\pm 2", "x=\\pm 2 \\pm 1")]
"""A gold with ``\\pm`` lets ``\\pm`` into the box; more values than its two still fail."""
NESTED = ["-" * 390 + "3", "-(" * 130 + "3" + ")" * 130, "|" * 190 + "3" + "|" * 190, "3" + "!" * 390,
          "\\sqrt{" * 60 + "x" + "}" * 60, "x^{" * 95 + "2" + "}" * 95, "e^{" * 95 + "x" + "}" * 95]


@pytest.fixture(scope="module")
def verify():
    checker = MathChecker(size=2)
    yield make_math_verifier(checker)
    checker.close()


def task(gold: str) -> Task:
    return ENV.parse_task({"id": "a", "domain": "math", "prompt": "Find it.", "answer": gold}, "test")


def _verdicts(verify, cases: list[tuple[Task, str]]):
    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(lambda case: verify(case[0], case[1]), cases))


def test_a_second_candidate_behind_any_separator_fails(verify) -> None:
    cases = [(task(gold), f"\\boxed{{{shape.replace('G', gold)}}}") for gold in GOLDS for shape in SECOND_CANDIDATE]
    cases += [(task(gold), f"\\boxed{{{gold}}}") for gold in GOLDS]
    verdicts = _verdicts(verify, cases)
    assert [v.outcome for v in verdicts[-len(GOLDS):]] == ["pass"] * len(GOLDS)
    assert [(c[1], v.outcome) for c, v in zip(cases, verdicts, strict=True)][:-len(GOLDS)] == [
        (c[1], "fail") for c in cases[:-len(GOLDS)]]


@pytest.mark.parametrize(("gold", "answer"), NAMES + PLUS_MINUS)
def test_sympy_names_and_extra_plus_minus_fail(verify, gold: str, answer: str) -> None:
    v = verify(task(gold), f"\\boxed{{{answer}}}")
    assert v.outcome == "fail", v


@pytest.mark.parametrize("answer", NESTED)
def test_deep_nesting_is_the_answer_s_failure(verify, answer: str) -> None:
    for gold in ("3", "x^2+1"):
        v = verify(task(gold), f"\\boxed{{{answer}}}")
        assert v.outcome == "fail", (gold, v)


@pytest.mark.parametrize("depth", [35, 190])
def test_redundant_brackets_are_refused_before_the_worker(verify, depth: int) -> None:
    """``(x)`` nested 35 deep (72 characters) used the worker's whole 10 s CPU budget against an
    ``expression`` gold (``timeout``; ``starved``, an infra error, under contention): now refused
    unsent (``_check.MAX_DEPTH``). Nesting as deep as the gold's, and the right answer's usual
    brackets, still reach the worker and pass."""
    t = task("x^2+1")
    for shape in ("(", ")"), ("[", "]"), ("{", "}"):
        v = verify(t, "\\boxed{" + shape[0] * depth + "x" + shape[1] * depth + "}")
        assert (v.outcome, v.error_class) == ("fail", "unparseable"), v
        assert "nested deeper" in str(v.evidence.get("detail")), v
    assert verify(t, "\\boxed{((x^{2})+(1))}").passed
    deep = "(" * 11 + "x" + ")" * 11
    assert verify(task(deep + "+1"), f"\\boxed{{{deep} + 1}}").passed


@pytest.mark.parametrize("response", ["\\boxed{\ud800}", "\\boxed{\\sqrt{2}\ud800}", "\\boxed{\\frac{\\sqrt{2}}{2}\x00}",
                                      "\\boxed{x\x00}", "\\boxed{\\frac{\\sqrt{2}}{2}\udc80}"])
def test_a_lone_surrogate_or_nul_in_the_box_fails(verify, response: str) -> None:
    v = verify(task("\\frac{\\sqrt{2}}{2}"), response)
    assert v.outcome == "fail", v
