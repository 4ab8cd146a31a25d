"""Math: what "Simplify" asks of an answer (``posttrain/envs/math/_simplify.py``): an expression no
longer than the gold (plus one), the question itself refused only where it is longer than the
gold, numbers in their simplest form.

Before, "Simplify" had only the echo check (``_prompt.is_echo``): the question's expression, as
the form reader reads it, failed, and nothing else did. Two holes:
(a) a rewritten echo passed: "Simplify $2x+3x$" (gold ``5x``) took ``3x+2x``, ``2x + 3x + 0``,
    ``(2+3)x``, ``5x+0``;
(b) the echo check failed a right answer that was already simple: "Simplify $\\frac34$" (gold
    ``0.75``) refused ``\\frac34``.
Each test named for a hole failed on that code. Real verifier: a failing answer is refused before
sympy runs; a passing one is compared in the checker's worker.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posttrain.envs import get_domain
from posttrain.types import Task

ENV = get_domain("math")
VERIFY = ENV.make_verifier(None)
SUFFIX = " Put your final answer in \\boxed{}."

SIMPLIFY = ("Simplify $2x+3x$.", "5x")
CANCEL = ("Simplify $\\frac{x^2-1}{x-1}$.", "x+1")


def task(prompt: str, gold: str, form: str | None = None) -> Task:
    record = {"id": "s", "domain": "math", "prompt": prompt + SUFFIX, "answer": gold, **({"form": form} if form else {})}
    return ENV.parse_task(record, "test.jsonl:1")


def verdict(question: tuple[str, str], answer: str):
    return VERIFY(task(*question), f"\\boxed{{{answer}}}")


# ---------------------------------------------------------------- (a) the question rewritten or padded


@pytest.mark.parametrize("attack", [
    "3x+2x", "2x + 3x + 0", "0+2x+3x", "2x+3x-0", "1\\cdot(2x+3x)", "(2x+3x)^1", "2x+2x+x", "x+x+x+x+x",
    "2·x+3·x", "5x+0", "5x \\cdot 1", "5x^1", "5x^{1}", "-(-5x)", "\\frac{10x}{2}", "\\frac{5x}{1}", "1\\cdot 5x",
    "5x+x-x", "6x-x", "2.5x+2.5x", "\\frac{5}{2}x\\cdot 2", "5 \\cdot x \\cdot 1", "5\\frac{x^2}{x}", "5x+0x",
    "\\frac{15x}{3}", "\\frac{5x}{5}5",
])
def test_a_rewritten_or_padded_question_fails_simplify(attack: str) -> None:
    v = verdict(SIMPLIFY, attack)
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "form:expression"), (attack, v)
    assert v.evidence["detail"] == "an expression longer than the simplified answer", (attack, v)


@pytest.mark.parametrize(("question", "attack"), [
    (CANCEL, "\\frac{(x-1)(x+1)}{x-1}"), (CANCEL, "\\frac{x^2-1}{x-1}+0"), (CANCEL, "\\frac{-1+x^2}{-1+x}"),
    (CANCEL, "x+1+0"), (CANCEL, "1+x+x-x"), (("Simplify $\\frac{a}{c}+\\frac{b}{c}$.", "\\frac{a+b}{c}"), "\\frac{b}{c}+\\frac{a}{c}"),
    (("Simplify $x^2 \\cdot x^3$.", "x^5"), "x^3 x^2"), (("Simplify $x^2 \\cdot x^3$.", "x^5"), "x \\cdot x^4"),
    (("Simplify $\\frac{\\sin x}{\\cos x}$.", "\\tan x"), "\\frac{\\sin x}{\\cos x} \\cdot 1"),
])
def test_a_rewritten_question_fails_simplify_beyond_sums(question: tuple[str, str], attack: str) -> None:
    v = verdict(question, attack)
    assert (v.outcome, v.error_class) == ("fail", "form:expression"), (attack, v)


@pytest.mark.parametrize(("attack", "detail"), [
    ("(2+3)x", "an operation on numbers"), ("x(2+3)", "an operation on numbers"), ("(3+2) \\cdot x", "an operation on numbers"),
    ("\\sqrt{25}x", "a surd that is not simplified"), ("5x^{2-1}", "an operation on numbers"),
    ("5x^{\\frac{2}{2}}", "a fraction not in lowest terms"), ("\\frac{10}{2}x", "a fraction not in lowest terms"),
    ("\\frac{5}{1}x", "an operation on numbers"),
])
def test_numbers_left_to_compute_in_an_expression_fail_simplify(attack: str, detail: str) -> None:
    v = verdict(SIMPLIFY, attack)
    assert (v.outcome, v.error_class, v.evidence["detail"]) == ("fail", "form:expression", detail), (attack, v)


def test_a_surd_the_question_gave_is_simplified_in_an_expression() -> None:
    question = ("Simplify $\\sqrt{12}x$.", "2\\sqrt{3}x")
    assert verdict(question, "\\sqrt{12}x").error_class == "form:expression"
    assert verdict(question, "2x\\sqrt{3}").passed
    assert verdict(("Simplify $\\frac{2x}{10^{6}}$.", "\\frac{x}{10^{6}}"), "x/10^{6}").passed  # the gold writes it so


def test_a_rewritten_question_in_a_relation_fails_side_by_side() -> None:
    question = ("Simplify: $y = \\frac{x^2-1}{x-1}$.", "y = x+1")
    for attack in ("y = \\frac{x^2-1}{x-1}", "\\frac{x^2-1}{x-1} = y", "y = \\frac{(x+1)(x-1)}{x-1}"):
        assert verdict(question, attack).error_class == "form:expression", attack
    for answer in ("y = x+1", "x+1 = y", "y = 1+x"):
        assert verdict(question, answer).passed, answer
    assert verdict(("Simplify: $2y = 2x + x + 1$.", "2y = 3x+1"), "2y = 1+3x").passed  # 2y is not measured against 3x+1


# ---------------------------------------------------------------- (b) the question, already simple


@pytest.mark.parametrize(("prompt", "gold", "answer"), [
    ("Simplify $\\frac34$.", "0.75", "\\frac34"), ("Simplify $\\frac34$.", "0.75", "\\frac{3}{4}"),
    ("Simplify $\\frac{1}{2}$.", "0.5", "\\frac{1}{2}"), ("Simplify $0.5$.", "\\frac{1}{2}", "0.5"),
    ("Simplify $\\frac{\\sqrt{2}}{2}$.", "\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"),
    ("Simplify $2\\sqrt{3}$.", "\\sqrt{12}", "2\\sqrt{3}"),
    ("Simplify $\\frac{x}{2}$.", "0.5x", "\\frac{x}{2}"), ("Simplify $\\frac{1}{x}$.", "x^{-1}", "\\frac{1}{x}"),
    ("Simplify $\\frac{x+1}{2}$.", "\\frac{x}{2}+\\frac{1}{2}", "\\frac{x+1}{2}"),
    ("Simplify $\\frac{1}{\\cos x}$.", "\\sec x", "\\frac{1}{\\cos x}"),
    ("Simplify: $y = \\frac{x}{2}$.", "y = 0.5x", "y = \\frac{x}{2}"),
])
def test_the_question_already_as_simple_as_the_gold_passes(prompt: str, gold: str, answer: str) -> None:
    v = VERIFY(task(prompt, gold), f"\\boxed{{{answer}}}")
    assert v.passed, (prompt, answer, v)


@pytest.mark.parametrize(("prompt", "gold", "answer", "error_class"), [
    ("Simplify $x - (-y)$.", "x+y", "x - (-y)", "form:expression"),
    ("Simplify $\\frac{\\cos x}{\\sin x}$.", "\\cot x", "\\frac{\\cos x}{\\sin x}", "form:expression"),
    ("Simplify $\\sqrt{8}$.", "2\\sqrt{2}", "\\sqrt{8}", "form:closed"),
    ("Simplify $\\frac{6}{8}$.", "\\frac{3}{4}", "\\frac{6}{8}", "form:number"),
    ("Simplify $|x| + |x|$.", "2|x|", "|x|+|x|", "form:expression"),  # not read: the echo check
])
def test_the_question_longer_than_the_gold_still_fails(prompt: str, gold: str, answer: str, error_class: str) -> None:
    v = VERIFY(task(prompt, gold), f"\\boxed{{{answer}}}")
    assert (v.outcome, v.error_class) == ("fail", error_class), (prompt, answer, v)


# ---------------------------------------------------------------- honest answers spelled otherwise


@pytest.mark.parametrize(("gold", "answer"), [
    ("5x", "5x"), ("5x", "x \\cdot 5"), ("5x", "5 x"), ("5x", "(5x)"), ("5x", "\\left(5x\\right)"), ("5x", "5.0x"),
    ("\\frac{x}{2}", "0.5x"), ("\\frac{x}{2}", "\\frac12 x"), ("\\frac{x}{2}", "x/2"), ("\\frac{2}{3}x", "\\frac{2x}{3}"),
    ("\\frac{2x}{3}", "\\frac23x"), ("-\\frac{x}{2}", "\\frac{-x}{2}"), ("-\\frac{x}{2}", "-0.5x"),
    ("\\frac{x+1}{2}", "\\frac{1}{2}x+\\frac{1}{2}"), ("\\frac{x+1}{2}", "0.5(x+1)"), ("x+6", "6+x"), ("y-x", "-x+y"),
    ("x^2-1", "(x-1)(x+1)"), ("x^2-1", "(x+1)(x-1)"), ("x^2-1", "-1+x^2"), ("(x-1)(x+1)", "x^2-1"),
    ("2x^2+x", "x(2x+1)"), ("(x+1)^2", "x^2+2x+1"), ("x^4-1", "(x-1)(x+1)(x^2+1)"), ("x^3+x", "x(x^2+1)"),
    ("x^3-x", "x(x-1)(x+1)"), ("2x-2", "2(x-1)"), ("\\frac{2}{x}", "2x^{-1}"), ("\\frac{y}{x}", "yx^{-1}"),
    ("\\frac{x}{z}", "xz^{-1}"), ("\\frac{1}{\\sqrt{x}}", "x^{-\\frac{1}{2}}"), ("\\sqrt{x}", "x^{\\frac{1}{2}}"),
    ("e^{2x}", "(e^x)^2"), ("\\sec x", "\\frac{1}{\\cos x}"), ("\\cot x", "\\frac{\\cos x}{\\sin x}"),
    ("\\frac{x+y}{xy}", "\\frac{1}{x}+\\frac{1}{y}"), ("\\frac{\\sqrt{2}}{2}x", "\\frac{x}{\\sqrt{2}}"),
    ("\\frac{x+1}{x-1}", "\\frac{-x-1}{1-x}"), ("\\{x, -x\\}", "\\{-x, x\\}"), ("x_1 + x_2", "x_2+x_1"),
])
def test_a_right_answer_spelled_otherwise_passes_simplify(gold: str, answer: str) -> None:
    v = VERIFY(task("Simplify the expression.", gold), f"\\boxed{{{answer}}}")
    assert v.passed, (gold, answer, v)


def test_the_rule_is_simplify_s_alone() -> None:
    """Without the instruction an ``expression`` task takes any equal expression, as before, unless
    a value of its prompt has the gold's value ("What is $2x+3x$?": test_math_attacks5.py)."""
    for prompt in ("What is $x$ times five?", "Compute it.", "Can you simplify it?"):
        assert VERIFY(task(prompt, "5x"), "\\boxed{3x+2x}").passed, prompt
    assert VERIFY(task("Expand $\\ln(ab)$.", "\\ln a + \\ln b"), "\\boxed{\\ln(ab)}").error_class == "form:expression"


# ---------------------------------------------------------------- random linear combinations


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(coefficients=st.lists(st.integers(1, 9), min_size=2, max_size=4), constant=st.integers(1, 9), data=st.data())
def test_random_like_terms_fail_uncombined_and_pass_combined(coefficients: list[int], constant: int, data) -> None:
    """"Simplify $a x + b x + ... + c$": the question's terms in any order fail, and so does the
    sum with a zero added; the combined ``(a+b+...)x + c`` passes in either order."""
    total = sum(coefficients)
    terms = [f"{a}x" for a in coefficients] + [str(constant)]
    t = task("Simplify $" + "+".join(terms) + "$.", f"{total}x+{constant}")
    shuffled = data.draw(st.permutations(terms))
    padded = shuffled + ["0"] if data.draw(st.booleans()) else shuffled
    v = VERIFY(t, "\\boxed{" + "+".join(padded) + "}")
    assert (v.outcome, v.error_class) == ("fail", "form:expression"), (padded, v)
    for answer in (f"{total}x+{constant}", f"{constant}+{total}x", f"{constant} + {total} \\cdot x"):
        assert VERIFY(t, f"\\boxed{{{answer}}}").passed, answer
