"""A fifth adversarial read of the math verifier, played as a reward-hacking policy: the question's
own expression, copied or rearranged, for a task that asks to compute an expression without the
word "simplify".

The domain's own tasks (``generate_tasks``: 300, the quickstart family: 120, the exploit
fixtures' echoes: 41) took no copy of their question: their golds are numbers, and the number
forms refuse work. But an expression gold took its question under "Evaluate", "Compute", "What
is", "Find", "Express ... as a polynomial": 18 of 42 such probes passed with the question's own
expression in the box (``\\frac{x^2-1}{x-1}`` for "Evaluate $\\frac{x^2-1}{x-1}$", gold ``x+1``), or
with its terms swapped (``3x + 2x`` for "What is $2x + 3x$?"). Now a prompt value that has the
gold's value is measured as under "Simplify" (``_env.copied_question``): 0 of 42 pass, and the
honest spellings of each gold (terms reordered, ``0.5x`` for ``\\frac{x}{2}``, a polynomial
factored or expanded) still do.

Real verifier, real checker workers; each case is one verdict.
"""

from __future__ import annotations

import pytest
from math_cases import math_verifier, outcome, task

from posttrain.envs.math._env import ENV


@pytest.fixture(scope="module")
def verify():
    with math_verifier() as v:
        yield v


COPIES = [
    ("Evaluate $\\frac{x^2-1}{x-1}$.", "x+1", "\\frac{x^2-1}{x-1}"),
    ("Evaluate $\\frac{x^2-1}{x-1}$.", "x+1", "(\\frac{x^2-1}{x-1})"),
    ("Compute $(x+1)^2 - x^2$.", "2x+1", "(x+1)^2 - x^2"),
    ("Compute $(x+1)^2 - x^2$.", "2x+1", "-x^2 + (x+1)^2"),
    ("What is $2x + 3x$?", "5x", "2x + 3x"),
    ("What is $2x + 3x$?", "5x", "3x + 2x"),
    ("Find $(a+b)^2 - (a-b)^2$.", "4ab", "(a+b)^2 - (a-b)^2"),
    ("Compute $x \\cdot x^2$.", "x^3", "x \\cdot x^2"),
    ("Compute $x \\cdot x^2$.", "x^3", "x^2 x"),
    ("What is $\\frac{6x}{3}$?", "2x", "\\frac{6x}{3}"),
    ("Evaluate $\\frac{x^3}{x}$.", "x^2", "\\frac{x^3}{x}"),
    ("Evaluate $e^{\\ln x}$ for $x > 0$.", "x", "e^{\\ln x}"),
    ("Compute $(2x)(3x)$.", "6x^2", "(2x)(3x)"),
    ("Evaluate $x(x+1) - x$.", "x^2", "x(x+1) - x"),
    ("Find $4x - x + 2$.", "3x+2", "2 + 4x - x"),
    ("Compute $(x-1)(x+1) + 1$.", "x^2", "1 + (x-1)(x+1)"),
    ("Evaluate $\\frac{x^2 + 2x}{x}$.", "x+2", "\\frac{x^2 + 2x}{x}"),
    ("What is $a^2 \\cdot a^3$?", "a^5", "a^3 \\cdot a^2"),
    ("Compute $\\frac{1}{x} + \\frac{1}{x}$.", "\\frac{2}{x}", "\\frac{1}{x} + \\frac{1}{x}"),
    ("Compute $\\log_2 x + \\log_2 x$.", "2\\log_2 x", "\\log_2 x + \\log_2 x"),
    ("Compute $3(x + 2) - 6$.", "3x", "3(x + 2) - 6"),
    ("Express $2(x+1) + 3(x-1)$ as a polynomial.", "5x-1", "3(x-1) + 2(x+1)"),
    ("Let $p = (x+1)^2 - x^2$. What is $p$?", "2x+1", "(x+1)^2 - x^2"),
    ("What is $2x + 3x$? Put your final answer in \\boxed{}.", "5x", "2x + 3x + 0"),
]
"""(prompt, gold, box): each passed before (the question's value is the gold's, no "simplify")."""


@pytest.mark.parametrize(("prompt", "gold", "answer"), COPIES)
def test_a_copy_of_the_question_is_not_its_answer(verify, prompt: str, gold: str, answer: str) -> None:
    t = task(prompt, gold)
    assert outcome(verify, t, answer) == ("fail", "form:expression")
    assert verify(t, f"\\boxed{{{gold}}}").passed


HONEST = [
    ("Compute $(x+1)^2 - x^2$.", "2x+1", ["1 + 2x", "2 x + 1", "x + x + 1"]),
    ("What is $2x + 3x$?", "5x", ["5 \\cdot x", "x \\cdot 5", "(5x)"]),
    ("Find $(a+b)^2 - (a-b)^2$.", "4ab", ["4ba", "4 \\cdot a \\cdot b"]),
    ("Compute $\\frac{1}{x} + \\frac{1}{x}$.", "\\frac{2}{x}", ["2/x", "2x^{-1}", "\\frac{2}{x}"]),
    ("What is $\\frac{x}{4} + \\frac{x}{4}$?", "\\frac{x}{2}", ["0.5x", "\\frac{1}{2}x", "x/2"]),
    ("Compute $(x+1)^2 - 1$.", "x^2+2x", ["x(x+2)", "2x + x^2", "(x+2)x"]),
    ("Evaluate $\\frac{x^2-1}{x-1}$.", "x+1", ["1+x", "x + 1"]),
    ("Express $2(x+1) + 3(x-1)$ as a polynomial.", "5x-1", ["-1 + 5x"]),
]
"""(prompt, gold, equal answers in the gold's form or one as short): each passes, before and after."""


@pytest.mark.parametrize(("prompt", "gold", "answers"), HONEST)
def test_the_gold_respelled_still_passes(verify, prompt: str, gold: str, answers: list[str]) -> None:
    t = task(prompt, gold)
    for answer in answers:
        assert verify(t, f"\\boxed{{{answer}}}").passed, answer


def test_a_relations_value_side_is_measured_too(verify) -> None:
    """A gold ``y = 2x+1``: the prompt's value equal to its value side is the question."""
    t = task("Let $y = (x+1)^2 - x^2$. Find $y$ in terms of $x$.", "y = 2x+1")
    assert outcome(verify, t, "y = (x+1)^2 - x^2") == ("fail", "form:expression")
    assert outcome(verify, t, "(x+1)^2 - x^2 = y") == ("fail", "form:expression")
    for answer in ("y = 2x+1", "y = 1 + 2x", "2x + 1 = y"):
        assert verify(t, f"\\boxed{{{answer}}}").passed, answer


def test_a_prompt_without_the_golds_value_takes_any_equal_expression(verify) -> None:
    """No value of the prompt has the gold's value: nothing was copied, so nothing is measured."""
    t = task("Find an antiderivative of $2x$.", "x^2")
    assert [outcome(verify, t, a)[0] for a in ("x^2", "x \\cdot x", "\\frac{2x^2}{2}", "x^3")] == [
        "pass", "pass", "pass", "fail"]
    t = task("Solve $y - x = 0$ for $y$.", "y = x")
    assert [outcome(verify, t, a)[0] for a in ("y = x", "y = 2x - x", "y = 2x")] == ["pass", "pass", "fail"]


def test_a_question_as_short_as_its_gold_is_its_answer(verify) -> None:
    """Where the prompt's value is no longer than the gold, it is an answer: ``b + a`` for ``a + b``."""
    t = task("What is $a + b$ when $c = 0$?", "a+b")
    assert [outcome(verify, t, a)[0] for a in ("a+b", "b + a", "a + b + c")] == ["pass", "pass", "fail"]


def test_a_wrong_answer_stays_wrong_and_a_number_keeps_its_form(verify) -> None:
    t = task("Evaluate $\\frac{x^2-1}{x-1}$.", "x+1")
    assert outcome(verify, t, "x-1") == ("fail", "wrong_answer")
    t = task("Compute $34 \\times 15 - 10$.", "500")
    assert outcome(verify, t, "34 \\times 15 - 10") == ("fail", "form:number")
    assert verify(t, "\\boxed{500}").passed


def test_the_domains_own_tasks_keep_their_references(verify) -> None:
    """The generator's references and the quickstart golds pass, and no copy of a prompt's math does."""
    from posttrain.envs.math._quickstart import quickstart_tasks

    tasks = ENV.generate_tasks(60, seed=5) + quickstart_tasks()[:40]
    for t in tasks:
        assert verify(t, t.reference or "").passed, t.prompt
        for value in ("34 \\times 15 - 10", t.prompt.split("$")[1] if "$" in t.prompt else "x"):
            assert not verify(t, f"\\boxed{{{value}}}").passed, (t.prompt, value)
