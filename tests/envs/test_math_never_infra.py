"""Every answer against every gold the math domain accepts gets its own verdict (pass or fail),
never an infra error: an infra error drops the whole group from training, so a policy that could
cause one would escape its negative advantage ("failing differently never pays").

The gap these tests close: the load-time check (``_check.unreadable_gold``) took a gold the pure
reader (``_read.py``) reads as readable, and latex2sympy, in the checker's worker, could not parse
some of those spellings (``\\frac12``, ``1{,}000``, ``\\lg 10``, ``x \\ast y``,
``\\operatorname{sin} x``, ...): every answer that had to go to the worker then came back
``infra:bad_task``. Real verifier, real checker workers.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from posttrain.envs import get_domain
from posttrain.envs.math import make_math_verifier
from posttrain.envs.math._check import MathChecker, unreadable_gold
from posttrain.errors import TaskError
from posttrain.types import Task, Verdict

ENV = get_domain("math")


@pytest.fixture(scope="module")
def verify():
    checker = MathChecker(size=2)
    yield make_math_verifier(checker)
    checker.close()


def task(gold: str, form: str | None = None, prompt: str = "Compute it.") -> Task:
    record = {"id": "g", "domain": "math", "prompt": prompt, "answer": gold, **({"form": form} if form else {})}
    return ENV.parse_task(record, "test")


@pytest.mark.parametrize(
    ("gold", "right", "wrong"),
    [
        ("\\frac12", "\\sin(\\pi/6)", "\\sin(\\pi/4)"),
        ("1{,}000", "10^3", "\\sqrt{1000}"),
        ("\\lg 10", "1", "\\ln 10"),
        ("x \\ast y", "y x", "x + y"),
        ("\\operatorname{sin} x", "\\sin x", "\\cos x"),
        ("\\tfrac12", "\\cos(\\pi/3)", "\\sqrt{2}"),
        ("\\sqrt[3]2", "2^{1/3}", "\\sqrt{2}"),
        ("x^-1", "\\frac{1}{x}", "x"),
        ("2^\\frac12", "\\sqrt{2}", "2"),
        ("\\mathrm{e}^2", "e^2", "e^3"),
        ("\\varnothing", "\\emptyset", "\\{1\\}"),
        ("\\begin{Bmatrix} 1 & 2 \\end{Bmatrix}", "\\begin{bmatrix} 1 & 2 \\end{bmatrix}",
         "\\begin{bmatrix} 2 & 1 \\end{bmatrix}"),
        ("\\begin{smallmatrix} 1 & 2 \\end{smallmatrix}", "\\begin{pmatrix} 1 & 2 \\end{pmatrix}",
         "\\begin{pmatrix} 1 & 3 \\end{pmatrix}"),
        ("\\frac{\\sqrt2}2", "\\frac{1}{\\sqrt{2}}", "\\sqrt{2}"),
        ("\\left. 3 \\right.", "3", "4"),
        ("2 \\cdotp 3", "6", "5"),
    ],
)
def test_a_spelling_the_reader_reads_is_compared_not_an_infra_error(verify, gold: str, right: str, wrong: str
                                                                    ) -> None:
    """Each gold is one the load-time check accepts; the right answer in another spelling passes,
    a wrong one fails as a wrong answer (each answer goes to the worker: a function, a surd, a
    variable, a set, a matrix)."""
    t = task(gold, form="expression")
    v = verify(t, f"\\boxed{{{right}}}")
    assert v.passed, v
    v = verify(t, f"\\boxed{{{wrong}}}")
    assert (v.outcome, v.error_class) == ("fail", "wrong_answer"), v


GOLDS = [
    "42", "\\frac{3}{4}", "-7", "0.5", "x^2+2x+1", "2\\sqrt{2}", "\\frac{\\sqrt{2}}{2}", "\\pi", "\\frac{\\pi}{4}",
    "[1, 3)", "(-\\infty, 3) \\cup (4, \\infty)", "\\{1,2\\}", "(1, 2)", "50\\%", "x = 3", "\\ln 2", "e^{2}", "3+2i",
    "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "10^{100}", "x_1 + x_2", "\\alpha", "\\sin^{-1} x",
    "\\frac12", "1{,}000", "\\lg 10", "x \\ast y", "\\operatorname{sin} x", "\\dfrac{1}{2}", "\\tfrac12", "\\sqrt[3]8",
    "x^-1", "2^\\frac12", "\\mathrm{e}", "\\mathbf{3}", "\\varnothing", "\\begin{Bmatrix} 1 & 2 \\end{Bmatrix}",
    "\\begin{smallmatrix} 1 & 2 \\end{smallmatrix}", "30^\\circ", "\\$5", "1.", "0.\\overline{3}", "x^23",
    "\\frac{1}{2}\\,\\text{cm}", "3\\!", "1\\,000",
]
ANSWERS = [
    "42", "-1", "\\frac{1}{2}", "0.5", "1000", "10^{20} + 1", "\\sqrt{2}", "\\sin(\\pi/6)", "\\log_2 8", "\\lg 10",
    "\\frac12", "\\operatorname{sin} 1", "x", "x^2+2x+1", "(x+1)^2", "\\cos x", "x \\ast y", "\\{1, 2\\}", "[1, 3)",
    "(1, 2)", "x = 3", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\frac{}{}", "\\left(", ")(", "\\sqrt[0]{2}",
    "0^0", "1/0", "\\infty - \\infty", "10^{10^{10}}", "9^{9^{9^{9}}}", "@#!", "\\undefinedcommand", "é",
    "x^{^{}}", "\\boxed{}", "e_1", "\\sin(1, 2)", "\\mathrm{e}", "\\varnothing", "\\sqrt[3]8", "2^\\frac12",
    "\\begin{Bmatrix} 1 & 2 \\end{Bmatrix}", "x^-1", "\\frac{1}{2}\\,\\text{cm}",
]


WORKER_ANSWERS = ["\\sin(\\pi/6)", "x + 1"]
"""Answers that reach the worker against every gold in the ``expression`` form: a function of
numbers, an expression with a variable."""


def test_no_answer_against_an_accepted_gold_is_an_infra_error(verify) -> None:
    """Readable golds (ordinary ones, and spellings the reader and latex2sympy read differently)
    x answer shapes (numbers, fractions, functions of numbers, expressions with variables, sets,
    garbage LaTeX, huge numbers), in the gold's own form and in the ``expression`` form (where
    more answers reach the worker): a pass or a fail, every one. Each gold meets
    ``WORKER_ANSWERS`` and three of ``ANSWERS`` in turn (each answer meets three golds), to keep
    the checks (~350, most of them in the worker) to seconds."""
    cases = []
    for i, gold in enumerate(GOLDS):
        assert unreadable_gold(gold) is None, gold  # the list is of golds the load-time check accepts
        answers = [ANSWERS[(3 * i + j) % len(ANSWERS)] for j in range(3)]
        for form in (None, "expression"):
            try:
                t = task(gold, form)
            except TaskError:  # not an expression gold (text, percent): its own form only
                continue
            cases += [(t, answer) for answer in answers + (WORKER_ANSWERS if form else [])]
    with ThreadPoolExecutor(2) as ex:
        verdicts = list(ex.map(lambda case: verify(case[0], f"\\boxed{{{case[1]}}}"), cases))
    bad = [(t.fields["answer"], t.fields.get("form"), answer, v.error_class, v.evidence.get("detail"))
           for (t, answer), v in zip(cases, verdicts, strict=True) if v.outcome not in ("pass", "fail")]
    assert not bad, bad


@pytest.mark.parametrize(
    "gold",
    ["e_1 + e_2", "\\sin(1, 2)", "(1, 2) \\cup 3", "10^{10^{100}}", "\\infty_1"],
)
def test_a_gold_the_worker_cannot_read_is_refused_when_the_task_is_parsed(gold: str) -> None:
    """The reader reads these, latex2sympy does not (or refuses the number as too large to
    compare): accepted, every answer but the gold's own spelling was an infra error; now the file
    is refused, one line naming the task."""
    with pytest.raises(TaskError, match="expected a gold answer the checker can read") as e:
        task(gold)
    assert "task 'g'" in str(e.value) and "\n" not in str(e.value)


def test_an_infra_message_is_not_overwritten_by_the_evidence_detail() -> None:
    """``Verdict.infra(message, evidence=...)``: the evidence's own ``detail`` replaced the message,
    so "task X: gold ... is not parseable" never reached the report, only the worker's parse error."""
    v = Verdict.infra("task t: gold answer 'g' is not parseable (E)", error_class="infra:bad_task",
                      evidence={"detail": "E", "gold": "g"})
    assert v.evidence["detail"] == "task t: gold answer 'g' is not parseable (E)"
    assert v.evidence["gold"] == "g"


def test_a_gold_built_in_code_that_is_not_parseable_says_so(verify) -> None:
    """A task built without ``parse_task`` (its gold never checked): the infra verdict names the task and
    the gold."""
    t = Task(id="built", domain="math", prompt="p", fields={"answer": "\\sin(1, 2)", "form": "expression"})
    v = verify(t, "\\boxed{\\sqrt{2}}")
    assert (v.outcome, v.error_class) == ("infra_error", "infra:bad_task"), v
    assert v.evidence["detail"].startswith("task built: gold answer"), v.evidence


ORDINARY = [("42", "Compute it."), ("\\frac{3}{4}", "Compute it."), ("x^2+2x+1", "Compute it."),
            ("(x-1)(x+1)", "Factor $x^2-1$."), ("[1, 3)", "Compute it."), ("\\{1,2\\}", "Compute it."),
            ("2\\sqrt{2}", "Compute it."), ("50\\%", "Compute it."), ("x = 3", "Compute it."),
            ("y = x+1", "Simplify: $y = \\frac{x^2-1}{x-1}$.")]
ATTACKS = [
    "-" * 399 + "1", "+-" * 199 + "1", "(" * 60 + "1" + ")" * 60, "\\left(" * 30 + "1", "{" * 150 + "1" + "}" * 150,
    "\\frac{" * 40 + "1" + "}{2}" * 40, "x^{" * 8 + "2" + "}" * 8, "\\sqrt{" * 60 + "2" + "}" * 60, "1+" * 199 + "1",
    "x^" * 199 + "2", "!" * 400, "\\cdot" * 79, "2" + "^{2}" * 130, "é", "１２", "\ud800", "\x00", "x²", "½", "√2",
    "\\boxed{\\boxed{}}", "\\left( 1", "\\frac{}{}", "\\frac{1}{}", "^{^{}}", "x^{^{}}", "\\sqrt[0]{2}", "\\sqrt[]{2}",
    "0^0", "1/0", "\\frac{0}{0}", "\\infty-\\infty", "10^{10^{10}}", "10^{-10^{10}}", "9^{9^{9^{9}}}",
    "10^{10^{10}} \\cdot 0", "(10^{10})!", "\\binom{10^{10}}{10^5}", "\\Gamma(10^{10})", "(x+1)^{1000}",
    "(x+1)^{100000}", "(x-1)^{10^{10}}(x+1)", "\\overline{}", "0.\\overline{}", "\\overline{12}", "0.\\overline{9}",
    "\\begin{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 \\end{pmatrix}", "\\begin{pmatrix} 1 & 1 \\\\ 1 & 1 \\end{pmatrix}^{-1}",
    "\\begin{vmatrix} 1 \\end{vmatrix}", "\\{", "\\{1,\\{2\\}\\}", "[3, 1)", "x = ", "=", "x = 3 = 3", "e_1", "\\infty_1",
    "\\sin(1, 2)", "\\operatorname{}", "\\mathrm{", "\\\\", "\\", "\\input{/etc/passwd}", "__import__('os')",
]


@pytest.mark.parametrize(("gold", "prompt"), ORDINARY, ids=[gold for gold, _ in ORDINARY])
def test_no_attack_gets_an_infra_error_or_a_timeout(verify, gold: str, prompt: str) -> None:
    """Answers a policy would try against ordinary golds: deep nesting, 400 characters of operators,
    unicode, nested boxes, empty groups, undefined values, huge numbers, degrees and factorials,
    ``\\overline`` forms, broken matrices. Each is a pass or a fail, and none uses up the CPU budget:
    ``-`` 399 times then ``1`` made ``_form.has_variable`` raise RecursionError (an infra error,
    ``infra:verifier_crash``); ``(10^{10})!``, ``\\Gamma(10^{10})`` and ``(x+1)^{100000}`` took the
    whole budget, ``(x-1)^{10^{10}}(x+1)`` ran the worker out of memory, ``(x+1)^{1000}`` took 6 s."""
    t = task(gold, prompt=prompt)
    with ThreadPoolExecutor(2) as ex:
        verdicts = list(ex.map(lambda answer: verify(t, f"\\boxed{{{answer}}}"), ATTACKS))
    bad = [(answer[:40], v.outcome, v.error_class, str(v.evidence.get("detail"))[:80])
           for answer, v in zip(ATTACKS, verdicts, strict=True)
           if v.outcome not in ("pass", "fail") or v.error_class == "answer_timeout"]
    assert not bad, bad


@pytest.mark.parametrize("answer", ["(x-1)^{10^{10}}(x+1)", "(10^{10})!", "\\Gamma(10^{10})", "\\binom{10^{10}}{10^5}"])
def test_a_value_too_large_to_compare_fails_by_its_size(verify, answer: str) -> None:
    """Refused before sympy computes it, as ``10^{10^{10}}`` was: the degree ``10^{10}`` ran the
    worker out of memory, the factorial and the gamma function used up the CPU budget."""
    v = verify(task("x^2+2x+1"), f"\\boxed{{{answer}}}")
    assert (v.outcome, v.error_class) == ("fail", "unparseable"), v
    assert "bits or a power of degree above" in v.evidence["detail"], v.evidence
