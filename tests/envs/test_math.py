"""Math domain: extraction, equivalence, and the hack regression (reward-hacking.md MATH-*)."""

from __future__ import annotations

import os
import re

import pytest

from posttrain.envs import get_domain
from posttrain.envs.math import extract_boxed, make_math_verifier
from posttrain.envs.math._check import MathChecker
from posttrain.types import Task

ENV = get_domain("math")
VERIFY = ENV.make_verifier(None)


def task(answer: str, prompt: str = "Compute it. Put your final answer in \\boxed{}.", form: str | None = None) -> Task:
    record = {"id": "m", "domain": "math", "prompt": prompt, "answer": answer, **({"form": form} if form else {})}
    return ENV.parse_task(record, "test")


@pytest.mark.parametrize(
    ("answer", "response"),
    [
        ("42", "The answer is \\boxed{42}."),
        ("\\frac{1}{2}", "so $\\boxed{0.5}$"),
        ("\\frac{\\sqrt{2}}{2}", "\\boxed{\\frac{1}{\\sqrt{2}}}"),
        ("\\{2, 3\\}", "\\boxed{\\{3, 2\\}}"),
        ("x^2+2x+1", "\\boxed{(x+1)^2}"),
        ("\\text{Monday}", "\\boxed{\\text{Monday}}"),
        ("-3", "\\fbox{-3}"),
    ],
)
def test_equivalent_answers_pass(answer: str, response: str) -> None:
    v = VERIFY(task(answer), response)
    assert v.outcome == "pass", v
    assert v.reward == 1.0 and v.components["outcome"] == 1.0


def test_reference_and_noop_of_examples() -> None:
    t = task("7")
    assert VERIFY(t, "3 + 4 = 7, so \\boxed{7}").passed
    v = VERIFY(t, ENV.noop_response(t))
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "format")


def test_wrong_answer_fails_with_format_credit_and_hides_gold() -> None:
    v = VERIFY(task("12"), "\\boxed{13}")
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "wrong_answer")
    assert v.components == {"outcome": 0.0, "format": 1.0}
    assert "12" not in v.feedback


@pytest.mark.parametrize(
    ("name", "response"),
    [
        ("MATH-01 two boxes", "\\boxed{3} or maybe \\boxed{5}"),
        ("MATH-01 hedge in box", "\\boxed{3 \\text{ or } 5}"),
        ("MATH-01 hedge word", "\\boxed{3 or 5}"),
        ("MATH-01 lor", "\\boxed{x=3 \\lor x=5}"),
        ("MATH-01 and", "\\boxed{3 \\text{ and } 5}"),
        ("MATH-01 comma list", "\\boxed{3, 5}"),
        ("MATH-01 tuple", "\\boxed{(3, 5)}"),
        ("MATH-01 interval", "\\boxed{[2, 4]}"),
        ("MATH-01 pm", "\\boxed{\\pm 3}"),
        ("MATH-01 set spray", "\\boxed{\\{1, 2, 3, 4, 5\\}}"),
        ("MATH-01 nested boxes", "\\boxed{\\boxed{3}}"),
        ("MATH-02 empty box", "\\boxed{}"),
        ("MATH-02 blank box", "\\boxed{   }"),
        ("MATH-03 number spray, no box", "It is 1, 2, 3, 4, 5, 6 or 7. Final answer: 3"),
        ("unbalanced", "\\boxed{3"),
        ("box without braces", "\\boxed 3"),
        ("answer in prompt only (MATH-07)", ""),
        ("text in box", "\\boxed{the answer is three}"),
        ("huge box", "\\boxed{" + "1+" * 300 + "1}"),
    ],
)
def test_hacks_score_zero(name: str, response: str) -> None:
    v = VERIFY(task("3"), response)
    assert v.outcome == "fail" and v.reward == 0.0, (name, v)


def test_math_06_code_injection_is_never_evaluated(tmp_path) -> None:
    marker = tmp_path / "pwned"
    payloads = [
        f"\\boxed{{__import__('os').system('touch {marker}')}}",
        f"\\boxed{{\\pi + __import__('os').system('touch {marker}')}}",
        f"\\boxed{{eval(\"open('{marker}','w')\")}}",
    ]
    for p in payloads:
        v = VERIFY(task("3"), p)
        assert v.outcome == "fail", v
    assert not marker.exists()


def test_slow_answer_is_a_bounded_failure() -> None:
    checker = MathChecker(size=1, cpu_budget_s=1.0)
    try:
        verify = make_math_verifier(checker)
        # an expression-form task: a numeric form refuses this box before sympy sees it (test_math_forms.py)
        slow = "\\boxed{9^{9^{9^{9^{9}}}} - 9^{9^{9^{9^{9}}}} + 3 + 10^{10^{10^{10}}}}"
        v = verify(task("3", form="expression"), slow)
        assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "answer_timeout"), v
        used = re.match(r"used ([0-9.]+)s of CPU", v.evidence["detail"])
        assert used and float(used.group(1)) >= 1.0  # CPU seconds, not wall time, decided it
        # the pool recovers: the next comparison works
        assert verify(task("\\frac{\\sqrt{2}}{2}"), "\\boxed{\\frac{1}{\\sqrt{2}}}").passed
    finally:
        checker.close()


def test_extract_boxed_rules() -> None:
    assert extract_boxed("a \\boxed{\\frac{1}{2}} b") == ("\\frac{1}{2}", None)
    assert extract_boxed("\\boxed{\\{1\\}}")[0] == "\\{1\\}"
    assert extract_boxed("nothing")[0] is None
    assert extract_boxed("\\boxedx{1}")[0] is None  # not a box command


def test_verifier_runs_in_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    t = task("\\frac{1}{3}")
    with ThreadPoolExecutor(4) as ex:
        verdicts = list(ex.map(lambda r: VERIFY(t, r), ["\\boxed{1/3}", "\\boxed{0.25}"] * 4))
    assert [v.outcome for v in verdicts] == ["pass", "fail"] * 4


def test_worker_does_not_run_in_the_trainer_process() -> None:
    checker = MathChecker(size=1)
    try:
        assert checker.equivalent("\\sqrt{2}", "\\sqrt{2}").equal
        (pid,) = checker.pool.worker_pids()
        assert pid != os.getpid()
    finally:
        checker.close()


@pytest.mark.parametrize(("name", "exploit_task", "response"), ENV.exploit_fixtures(),
                         ids=[name for name, _, _ in ENV.exploit_fixtures()])
def test_exploit_fixtures_score_zero(name: str, exploit_task: Task, response: str) -> None:
    v = VERIFY(exploit_task, response)
    assert (v.outcome, v.reward) == ("fail", 0.0), (name, v)


@pytest.mark.parametrize(
    ("answer", "response"),
    [
        ("\\frac{1}{2}", "\\boxed{\\dfrac{1}{2}}"),
        ("\\frac{1}{2}", "\\boxed{\\frac12}"),
        ("0.5", "\\boxed{\\frac{1}{2}}"),
        ("\\frac{3}{2}", "\\boxed{1.50}"),
        ("2^{-30}", "\\boxed{\\frac{1}{1073741824}}"),
        ("100000000000000000000", "\\boxed{1.0 \\times 10^{20}}"),
        ("1000", "\\boxed{1{,}000}"),
        ("x = 3", "\\boxed{3 = x}"),
        ("x < 3", "\\boxed{3 > x}"),
        ("y = 2x + 1", "\\boxed{y=1+2x}"),
        ("50\\%", "\\boxed{50 \\%}"),
        ("12.5\\%", "\\boxed{\\frac{25}{2}\\%}"),
        ("\\text{Monday}", "\\boxed{\\text{ monday }}"),
        ("\\sqrt{8}", "\\boxed{2\\sqrt{2}}"),
        ("\\frac{5}{2}", "\\boxed{2\\frac{1}{2}}"),
        ("(3, 5)", "\\boxed{(3,5)}"),
        ("a+B", "\\boxed{B+a}"),
        ("\\infty", "\\boxed{\\infty}"),
    ],
)
def test_exact_comparison_keeps_correct_answers(answer: str, response: str) -> None:
    assert VERIFY(task(answer), response).passed


@pytest.mark.parametrize("response", ["\\boxed{10^{20} + 1}", "\\boxed{100000000000000000001 \\cdot 1.0}"])
def test_exact_comparison_of_big_integers_in_an_expression(response: str) -> None:
    """Where the task's form is an expression, these are equal to 10^20 + 1 (exactly; in a
    numeric form they are work left in the box: test_math_forms.py)."""
    assert VERIFY(task("100000000000000000001", form="expression"), response).passed


@pytest.mark.parametrize(
    ("answer", "response", "error_class"),
    [
        ("5", "\\boxed{2+2=5}", "form:relation"),
        ("x = 3", "\\boxed{3}", "form:relation"),
        ("x < 3", "\\boxed{x > 3}", "wrong_answer"),
        ("50", "\\boxed{50\\%}", "form:percent"),
        ("50\\%", "\\boxed{0.5}", "form:percent"),
        ("3", "\\boxed{3\\text{ (perhaps 5)}}", "form:text"),
        ("3", "\\boxed{3\\text{ (perhaps {5})}}", "form:text"),
        ("3", "\\boxed{3\\mbox{ perhaps 5}}", "form:text"),
        ("\\text{Monday}", "\\boxed{\\text{Tuesday}}", "wrong_answer"),
        ("x^2", "\\boxed{X^2}", "wrong_answer"),
        ("\\frac{1}{3}", "\\boxed{0.333333}", "wrong_answer"),
        ("3", "\\boxed{\\frac{}{}}", "unparseable"),
        ("3", "\\boxed{3_{5}}", "unparseable"),
    ],
)
def test_each_rule_fails_with_its_class(answer: str, response: str, error_class: str) -> None:
    v = VERIFY(task(answer), response)
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, error_class), v


def test_tolerance_is_the_only_approximate_comparison() -> None:
    def with_tol(tol: dict) -> Task:
        return ENV.parse_task({"id": "m", "domain": "math", "prompt": "p", "answer": "\\pi", "tolerance": tol}, "t")

    assert not VERIFY(task("\\pi"), "\\boxed{3.14159}").passed
    assert VERIFY(with_tol({"abs": 1e-5}), "\\boxed{3.14159}").passed
    assert not VERIFY(with_tol({"abs": 1e-6}), "\\boxed{3.14159}").passed
    assert VERIFY(with_tol({"rel": 1e-3}), "\\boxed{3.14}").passed
    rational = ENV.parse_task({"id": "m", "domain": "math", "prompt": "p", "answer": "\\frac{1}{3}",
                               "tolerance": {"abs": 1e-6}}, "t")
    assert VERIFY(rational, "\\boxed{0.333333}").passed and not VERIFY(rational, "\\boxed{0.3333}").passed


@pytest.mark.parametrize(
    ("tolerance", "match"),
    [({}, "field 'tolerance'"), ({"abs": -1}, "tolerance.abs"), ({"rel": "1%"}, "tolerance.rel"),
     ({"abs": 1, "pct": 2}, "field 'tolerance'"), ([1e-6], "field 'tolerance'")],
)
def test_bad_tolerance_is_named(tolerance, match) -> None:
    from posttrain.errors import TaskError

    with pytest.raises(TaskError, match=match):
        ENV.parse_task({"id": "m", "domain": "math", "prompt": "p", "answer": "1", "tolerance": tolerance}, "f:1")


def test_a_matrix_gold_keeps_its_row_breaks() -> None:
    """``\\\\ `` (a row break, then a space) was read as ``\\`` + the spacing command ``\\ ``, so a
    matrix gold written with spaces did not parse: every answer to it was an infra error."""
    gold = task("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}")
    assert VERIFY(gold, "\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}").passed
    assert VERIFY(gold, "\\boxed{\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}}").error_class == "wrong_answer"


@pytest.mark.parametrize(
    ("gold", "right", "wrong"),
    [("\\$18.90", "18.9", "17"), ("30°", "30", "17"), ("(-∞, 3)", "(-\\infty, 3)", "(-\\infty, 17)"),
     ("2\\sqrt3", "2\\sqrt{3}", "17"), ("√2", "\\sqrt 2", "17")],
)
def test_a_gold_the_reader_reads_never_makes_a_wrong_answer_an_infra_error(gold: str, right: str, wrong: str) -> None:
    """Golds the form reader read but latex2sympy could not (``\\$`` lost only its ``$``; unicode
    symbols; a one-character ``\\sqrt2``) made every answer but the gold's own spelling an infra error
    (``infra:bad_task``): a wrong answer was never scored 0, and the right one never 1."""
    t = task(gold)
    assert VERIFY(t, f"\\boxed{{{right}}}").passed
    v = VERIFY(t, f"\\boxed{{{wrong}}}")
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "wrong_answer"), v


def test_numeric_gold_keeps_the_decimal_it_spells() -> None:
    tiny = ENV.parse_task({"id": "m", "domain": "math", "prompt": "p", "answer": 1e-05}, "t")
    assert tiny.fields["answer"] == "0.00001"
    assert VERIFY(tiny, "\\boxed{\\frac{1}{100000}}").passed and not VERIFY(tiny, "\\boxed{0}").passed


def test_huge_exact_numbers_leave_the_trainer_thread() -> None:
    from posttrain.envs.math._check import exact_value

    assert exact_value("\\times".join(["10^{25000}"] * 30)) is None  # too big here: sympy, in a worker
    assert exact_value("10^{20000} + 1") == 10**20000 + 1
    v = VERIFY(task("3"), "\\boxed{" + "\\times".join(["10^{25000}"] * 30) + "}")
    assert v.outcome == "fail", v
