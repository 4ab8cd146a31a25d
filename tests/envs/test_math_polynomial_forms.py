"""Math: the question's own expression is not an answer to "Expand" or "Factor" (the polynomial
forms, ``posttrain/envs/math/_poly.py``), nor to "Simplify" (the echo check, ``_prompt.py``); a gold
neither reader reads is refused when the task is loaded, and repeating decimals are read.

Before these, an ``expression`` gold took any equal expression: "Expand $(x+1)^2$" (gold
``x^2+2x+1``) scored ``(x+1)^2`` 1, "Factor $x^2-1$" scored ``x^2-1`` 1, "Simplify $2x+3x$" scored
``2x+3x`` 1, and a gold ``0.\\overline{3}`` made every other answer an infra error. Each test
named for a hole failed on that code. The attacks are what a policy would try to pass a form
without doing the work; each is a fail (never an infra error), in bounded time.
"""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posttrain.envs import get_domain
from posttrain.errors import TaskError
from posttrain.types import Task

ENV = get_domain("math")
VERIFY = ENV.make_verifier(None)
SUFFIX = " Put your final answer in \\boxed{}."


def task(prompt: str, answer: str, form: str | None = None, tid: str = "m") -> Task:
    record = {"id": tid, "domain": "math", "prompt": prompt + SUFFIX, "answer": answer,
              **({"form": form} if form else {})}
    return ENV.parse_task(record, "test.jsonl:1")


EXPAND = ("Expand $(x+1)^2$.", "x^2+2x+1")
FACTOR = ("Factor $x^2-1$.", "(x-1)(x+1)")
FACTOR_CONTENT = ("Factor $2x^2-8$ completely.", "2(x-2)(x+2)")
SIMPLIFY = ("Simplify $2x + 3x$.", "5x")


# ---------------------------------------------------------------- the holes


@pytest.mark.parametrize(("question", "echo"), [(EXPAND, "(x+1)^2"), (FACTOR, "x^2-1"), (SIMPLIFY, "2x + 3x"),
                                                (("Factor $2x+2$.", "2(x+1)"), "2x+2")])
def test_the_questions_own_expression_fails(question: tuple[str, str], echo: str) -> None:
    v = VERIFY(task(*question), f"\\boxed{{{echo}}}")
    assert (v.outcome, v.reward) == ("fail", 0.0), v
    assert v.error_class.startswith("form:") and v.components["format"] == 0.0, v


@pytest.mark.parametrize("attack", [
    "(1+x)^2", "(x+1)(x+1)", "((x+1))^{2}", "x^2+2x+1+0", "0+x^2+2x+1", "x^2+2x+1-0", "x^2+x+x+1", "x(x+2)+1",
    "1x^2+2x+1", "x \\cdot x+2x+1", "x^2+2x+1^{1}", "x^2+2x+1 \\cdot 1", "x^{1}x+2x+1", "x^2+2 \\cdot 1x+1",
    "\\frac{2x^2+4x+2}{2}", "x^2+2x+\\frac{2}{2}", "(x+1)^2+0x", "x^2+2x+1+x-x", "x^2 + -(-2x) + 1",
])
def test_an_expand_task_refuses_work_left_undone(attack: str) -> None:
    v = VERIFY(task(*EXPAND), f"\\boxed{{{attack}}}")
    assert (v.outcome, v.reward) == ("fail", 0.0) and v.error_class == "form:expanded", (attack, v)


@pytest.mark.parametrize("attack", [
    "-1+x^2", "1*(x^2-1)", "1 \\cdot (x^2-1)", "(x^2-1)^1", "(x^2-1)^{1}", "(x-1)(x+1)+0", "(x-1)(x+1) - 0",
    "((x^2-1))", "(x^2-1) \\cdot 1", "-(1-x^2)", "2 \\cdot \\frac{1}{2}(x^2-1)", "(x-1)(x+1)^1",
    "(x+1)(x-1)+(x+1)-(x+1)", "\\frac{2x^2-2}{2}", "-(-(x-1)(x+1))", "(x-1)(x+1) \\cdot 1",
])
def test_a_factor_task_refuses_work_left_undone(attack: str) -> None:
    v = VERIFY(task(*FACTOR), f"\\boxed{{{attack}}}")
    assert (v.outcome, v.reward) == ("fail", 0.0) and v.error_class == "form:factored", (attack, v)


@pytest.mark.parametrize("attack", ["2(x^2-4)", "2x^2-8", "(2x-4)(x+2)", "(x-2)(2x+4)", "-8+2x^2", "4(\\frac{1}{2}x^2-2)"])
def test_factoring_completely_takes_the_common_divisor_out(attack: str) -> None:
    v = VERIFY(task(*FACTOR_CONTENT), f"\\boxed{{{attack}}}")
    assert (v.outcome, v.error_class) == ("fail", "form:factored"), (attack, v)


@pytest.mark.parametrize(("question", "attack"), [
    (SIMPLIFY, "2x+3x"), (SIMPLIFY, "{2x}+{3x}"), (SIMPLIFY, "\\left(2x + 3x\\right)"), (SIMPLIFY, "2x  +  3x."),
    (SIMPLIFY, "$2x+3x$"), (("Expand $\\ln(ab)$.", "\\ln a + \\ln b"), "\\ln(ab)"),
    (("Simplify: $y = \\frac{x^2-1}{x-1}$.", "y = x+1"), "y = \\frac{x^2-1}{x-1}"),
    (("Simplify: $y = \\frac{x^2-1}{x-1}$.", "x+1"), "\\frac{x^2-1}{x-1}"),
])
def test_a_simplify_task_refuses_its_own_expression(question: tuple[str, str], attack: str) -> None:
    v = VERIFY(task(*question), f"\\boxed{{{attack}}}")
    assert (v.outcome, v.error_class, v.evidence["detail"]) == ("fail", "form:expression",
                                                                 "the question's own expression"), (attack, v)


@pytest.mark.parametrize(("question", "answer"), [
    (EXPAND, "(x+1)^{99999999}"), (EXPAND, "x^{99999999}+2x+1"), (EXPAND, "x^{2^{100}}+2x+1"),
    (EXPAND, "x^{" + "9" * 300 + "}+1"), (FACTOR, "(x+1)^{99999999}"), (FACTOR, "(x-1)^{10^{9}}(x+1)"),
    (FACTOR, "(x-1)^{123456789}(x+1)^{987654321}"), (FACTOR, "(x^{99999999}-1)"), (FACTOR, "(x^{4}-1)^{99999}"),
    (FACTOR, "(x+1)^{" + "9" * 300 + "}"), (FACTOR, "(x-1)(x+1)" * 30),
])
def test_huge_powers_fail_in_bounded_time(question: tuple[str, str], answer: str) -> None:
    t0 = time.perf_counter()
    v = VERIFY(task(*question), f"\\boxed{{{answer}}}")
    assert v.outcome == "fail" and v.reward == 0.0, (answer, v)
    assert time.perf_counter() - t0 < 2.0, answer  # the degree check comes before any expansion


@pytest.mark.parametrize("attack", ["(x+1)²", "x²+2x+1", "(x＋1)^2", "x^2+2x+1\u200b", "(x+1)^2 \\text{ expanded}",
                                    "\\boxed{x^2+2x+1}", "x^2+2x+1, (x+1)^2", "\\{x^2+2x+1\\}", "\\begin{pmatrix}x^2+2x+1\\end{pmatrix}"])
def test_unicode_and_containers_are_no_way_around_the_form(attack: str) -> None:
    v = VERIFY(task(*EXPAND), f"\\boxed{{{attack}}}")
    assert v.outcome == "fail" and v.reward == 0.0, (attack, v)


# ---------------------------------------------------------------- what still passes


@pytest.mark.parametrize(("gold", "answer"), [
    ("x^2+2x+1", "x^2+2x+1"), ("x^2+2x+1", "1+2x+x^2"), ("x^2+2x+1", "2x+1+x^2"), ("x^2+2x+1", "x^{2} + 2 x + 1"),
    ("x^2+2x+1", "x^2+2\\cdot x+1"), ("x^2-2x+1", "x^2−2x+1"), ("x^2-2x+1", "1 - 2x + x^2"),
    ("\\frac{1}{2}x^2+x", "\\frac{x^2}{2}+x"), ("\\frac{1}{2}x^2+x", "0.5x^2+x"), ("\\frac{1}{2}x^2+x", "x+\\dfrac{1}{2}x^2"),
    ("x^2+2xy+y^2", "y^2+2yx+x^2"), ("6x^3-4x^2+7x", "7x - 4x^2 + 6x^3"), ("-x^2+1", "1-x^2"),
])
def test_an_expanded_answer_passes_in_any_term_order(gold: str, answer: str) -> None:
    v = VERIFY(task("Expand the product.", gold), f"\\boxed{{{answer}}}")
    assert v.passed, (gold, answer, v)


@pytest.mark.parametrize(("gold", "answer"), [
    ("(x-1)(x+1)", "(x+1)(x-1)"), ("(x-1)(x+1)", "-(1-x)(x+1)"), ("(x-1)(x+1)", "(1-x)(-1-x)"),
    ("(x-1)(x+1)", "(x-1) \\cdot (x+1)"), ("(x-1)(x+1)", "((x-1))((x+1))"), ("(x-1)(x+1)", "(-1+x)(1+x)"),
    ("2(x-2)(x+2)", "2(x+2)(x-2)"), ("2(x-2)(x+2)", "-2(2-x)(x+2)"), ("2(x-2)(x+2)", "(x-2) \\cdot 2 \\cdot (x+2)"),
    ("\\frac{1}{4}(2x-1)(2x+1)", "\\frac{(2x-1)(2x+1)}{4}"), ("(x+1)^2", "(x+1)(x+1)"), ("(x+1)^2", "(1+x)^2"),
    ("(x^2+1)(x-1)", "(x-1)(1+x^2)"), ("x^2(x+1)", "(x+1)x^2"), ("-29x^5(7x^6-2)", "29x^5(2-7x^6)"),
    ("(x-y)(x+y)", "(y+x)(x-y)"), ("x^2+4", "4+x^2"),
])
def test_a_factored_answer_passes_in_any_order_and_sign(gold: str, answer: str) -> None:
    v = VERIFY(task("Factor the polynomial.", gold), f"\\boxed{{{answer}}}")
    assert v.passed, (gold, answer, v)


def test_a_wrong_polynomial_is_a_wrong_answer_with_format_credit() -> None:
    for question, answer in [(EXPAND, "x^2+2x+2"), (EXPAND, "x^2+1"), (FACTOR, "(x-2)(x+2)"), (FACTOR, "-(x-1)(x+1)"),
                             (FACTOR_CONTENT, "3(x-2)(x+2)"), (EXPAND, "X^2+2X+1")]:
        v = VERIFY(task(*question), f"\\boxed{{{answer}}}")
        assert (v.error_class, v.components["format"]) == ("wrong_answer", 1.0), (answer, v)


@pytest.mark.parametrize(("prompt", "gold", "answer"), [
    ("What is $2+2$?", "4", "4"),
    ("What is the greatest common factor of 12 and 18?", "6", "6"),
    ("Simplify $\\sqrt{8}$.", "2\\sqrt{2}", "2\\sqrt{2}"),
    ("Expand $\\ln(ab)$.", "\\ln a + \\ln b", "\\ln b + \\ln a"),
    ("Which factor of $x^2-1$ is positive at $x=2$?", "x+1", "1+x"),
    ("What is $x(x+1)$ at $x = 2$?", "6", "6"),
])
def test_tasks_without_an_instruction_to_expand_or_factor_keep_their_forms(prompt: str, gold: str, answer: str) -> None:
    assert "form" not in task(prompt, gold).fields
    v = VERIFY(task(prompt, gold), f"\\boxed{{{answer}}}")
    assert v.passed, (prompt, answer, v)


def test_an_instruction_is_read_as_an_instruction_only() -> None:
    from posttrain.envs.math._prompt import instructed_form

    assert instructed_form("Completely factor the expression: $9x^2+3x$.", "3x(3x+1)") == "factored"
    assert instructed_form("Please expand $(a+b)^2$.", "a^2+2ab+b^2") == "expanded"
    assert instructed_form("Write $x^2-1$ in factored form.", "(x-1)(x+1)") == "factored"
    assert instructed_form("Factorise $x^2-1$.", "(x-1)(x+1)") == "factored"
    assert instructed_form("How many terms has the expanded form of $(x+1)^3$?", "4") is None
    assert instructed_form("Which factor of $x^2-1$ is positive at 2?", "x+1") is None
    assert instructed_form("Expand $(x+1)^2$, then factor it.", "x^2+2x+1") is None  # both: neither
    v = VERIFY(task("Write $x^2-1$ in factored form.", "(x-1)(x+1)"), "\\boxed{-1+x^2}")
    assert v.error_class == "form:factored", v


def test_a_declared_form_applies_whatever_the_prompt_says() -> None:
    t = task("Write $(x-2)(x+3)$ as a polynomial.", "x^2+x-6", form="expanded")
    assert VERIFY(t, "\\boxed{x^2+x-6}").passed
    assert VERIFY(t, "\\boxed{(x+3)(x-2)}").error_class == "form:expanded"
    any_form = task("Factor $x^2-1$.", "x^2-1", form="expression")  # the task says any equal expression will do
    assert VERIFY(any_form, "\\boxed{(x-1)(x+1)}").passed


# ---------------------------------------------------------------- golds checked at load


@pytest.mark.parametrize(("prompt", "gold", "form", "match"), [
    ("Compute it.", "(x+1)^2", "expanded", "expected a polynomial in expanded form.*a power still to expand"),
    ("Compute it.", "x^2-1", "factored", "expected a polynomial factored completely.*factors further"),
    ("Compute it.", "(2x+2)(x-1)", "factored", "common divisor 2"),
    ("Expand $(x+1)^2$.", "(x+1)^2", None, "expected a polynomial in expanded form.*, as the prompt's instruction asks"),
    ("Expand $(x+1)(x+2)$.", "x(x+3)+2", None, "as the prompt's instruction asks.*a product still to expand"),
    ("Factor $x^3-x$.", "x(x^2-1)", None, "as the prompt's instruction asks.*factors further"),
])
def test_a_gold_not_in_its_form_is_refused_at_load(prompt: str, gold: str, form: str | None, match: str) -> None:
    with pytest.raises(TaskError, match=match) as e:
        task(prompt, gold, form, tid="poly-7")
    assert "test.jsonl:1: task 'poly-7'" in str(e.value) and "\n" not in str(e.value)


def test_a_task_built_in_code_with_a_bad_gold_is_the_tasks_fault() -> None:
    """parse_task refuses these; a task built in code skips it, and its answers are not scored."""
    t = Task(id="code-1", domain="math", prompt="Expand $(x+1)^2$.", fields={"answer": "(x+1)(x+1)"})
    v = VERIFY(t, "\\boxed{x^2+2x+1}")
    assert (v.outcome, v.error_class) == ("infra_error", "infra:bad_task") and "expanded" in v.evidence["detail"], v
    t = Task(id="code-2", domain="math", prompt="Factor $x^3-x$.", fields={"answer": "x(x^2-1)"})
    v = VERIFY(t, "\\boxed{x(x-1)(x+1)}")
    assert (v.outcome, v.error_class) == ("infra_error", "infra:bad_task") and "factors further" in v.evidence["detail"]


def test_a_huge_factored_answer_compares_without_expanding() -> None:
    t = task("Factor the polynomial.", "(x+1)^{1000000}(x-1)", tid="huge")
    t0 = time.perf_counter()
    assert VERIFY(t, "\\boxed{(x-1)(1+x)^{1000000}}").passed
    assert VERIFY(t, "\\boxed{(x-1)(1+x)^{999999}(x+1)}").passed
    assert VERIFY(t, "\\boxed{(1-x)(1+x)^{1000000}}").error_class == "wrong_answer"
    assert VERIFY(t, "\\boxed{(x-1)(2+x)^{1000000}}").error_class == "wrong_answer"
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(TaskError, match="a factor of degree above 200"):
        task("Factor the polynomial.", "(x^{201}+2)", tid="too-big")


@pytest.mark.parametrize("gold", ["1, 2, \\ldots", "\\checkmark", "3 \\star 4"])
def test_a_gold_neither_reader_reads_is_refused_at_load(gold: str) -> None:
    with pytest.raises(TaskError, match="field 'answer': expected a gold answer the checker can read") as e:
        task("Compute it.", gold, tid="unread-3")
    assert "task 'unread-3'" in str(e.value) and repr(gold)[1:-1] in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("gold", "form", "answer"), [
    ("0.\\overline{3}", None, "\\frac{1}{3}"), ("0.\\overline{3}", None, "0.\\overline{3}"),
    ("\\frac{1}{3}", None, "0.\\overline{3}"), ("\\frac{1}{6}", None, "0.1\\overline{6}"),
    ("\\frac{14}{11}", "number", "1.\\overline{27}"), ("0.\\overline{3}", "expression", "\\frac{\\sqrt{9}}{9}"),
    ("1", None, "0.\\overline{9}"),
])
def test_a_repeating_decimal_is_read_exactly(gold: str, form: str | None, answer: str) -> None:
    v = VERIFY(task("Write it as a fraction.", gold, form), f"\\boxed{{{answer}}}")
    assert v.passed, (gold, answer, v)


def test_a_repeating_decimal_is_not_a_nearby_number_nor_a_fraction() -> None:
    t = task("Write it as a fraction.", "0.\\overline{3}")
    for answer in ("0.333", "0.3333333333", "\\frac{1}{4}"):
        assert VERIFY(t, f"\\boxed{{{answer}}}").error_class == "wrong_answer", answer
    v = VERIFY(task("Write it as a fraction.", "\\frac{1}{3}", "fraction"), "\\boxed{0.\\overline{3}}")
    assert (v.error_class, v.evidence["detail"]) == ("form:fraction", "a decimal")


# ---------------------------------------------------------------- random polynomials


def _linear(a: int, b: int) -> str:
    """``ax+b`` (a != 0, gcd 1), spelled as a person would."""
    head = {1: "x", -1: "-x"}.get(a, f"{a}x")
    return head if b == 0 else f"{head}{'+' if b > 0 else '-'}{abs(b)}"


def _expanded(coefficients: dict[int, int], order: list[int]) -> str:
    text = ""
    for e in order:
        c = coefficients[e]
        body = "" if e == 0 else "x" if e == 1 else f"x^{{{e}}}"
        magnitude = str(abs(c)) if abs(c) != 1 or e == 0 else ""
        text += ("-" if c < 0 else "+" if text else "") + magnitude + body
    return text


linear_factors = st.lists(st.tuples(st.integers(1, 5), st.integers(-6, 6)).filter(
    lambda ab: math.gcd(*ab) == 1 and ab[1] != 0), min_size=2, max_size=4)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(factors=linear_factors, data=st.data())
def test_random_products_pass_factored_and_expanded_and_fail_the_other(factors: list[tuple[int, int]], data) -> None:
    """A product of primitive linear factors: its factors in any order pass ``factored``, its
    terms in any order pass ``expanded``; each spelled the other way fails, and so does the
    product with two of its factors multiplied together (a reducible factor)."""
    coefficients = {0: 1}
    for a, b in factors:
        out: dict[int, int] = {}
        for e, c in coefficients.items():
            out[e + 1] = out.get(e + 1, 0) + c * a
            out[e] = out.get(e, 0) + c * b
        coefficients = {e: c for e, c in out.items() if c}
    shuffled = data.draw(st.permutations(factors))
    product = "".join(f"({_linear(a, b)})" for a, b in shuffled)
    terms = _expanded(coefficients, data.draw(st.permutations(sorted(coefficients))))
    gold_factored = "".join(f"({_linear(a, b)})" for a, b in factors)
    gold_expanded = _expanded(coefficients, sorted(coefficients, reverse=True))
    factor_task = task("Factor the polynomial.", gold_factored)
    expand_task = task("Expand the product.", gold_expanded)
    assert VERIFY(factor_task, f"\\boxed{{{product}}}").passed, product
    assert VERIFY(expand_task, f"\\boxed{{{terms}}}").passed, terms
    assert VERIFY(expand_task, f"\\boxed{{{product}}}").error_class == "form:expanded", product
    (a1, b1), (a2, b2), *rest = shuffled
    merged = _expanded({2: a1 * a2, 1: a1 * b2 + a2 * b1, 0: b1 * b2} if a1 * b2 + a2 * b1 else {2: a1 * a2, 0: b1 * b2},
                       [2, 1, 0] if a1 * b2 + a2 * b1 else [2, 0])
    partly = f"({merged})" + "".join(f"({_linear(a, b)})" for a, b in rest)
    v = VERIFY(factor_task, f"\\boxed{{{partly}}}")
    assert v.error_class == "form:factored", (partly, v)
    assert VERIFY(factor_task, f"\\boxed{{{terms}}}").error_class == "form:factored", terms
