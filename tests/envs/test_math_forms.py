"""Math answer forms (issue 21): an expression is not an answer.

Before answers had a form, the comparison evaluated the box before comparing it, so the
question's own expression scored 1 (``\\boxed{34 \\times 15 - 10}`` for 500, ``\\gcd(39, 60)``,
``\\sin(\\pi/4)``, a sum, an integral, a limit, ``\\binom{10}{3}``, ``10!``), and the generated
arithmetic, fraction and gcd families were passed by echoing the prompt. Each test here that
names an echo failed on the code before (recorded in /work/coord/notes-math.md); the forms that
are equally final still pass.
"""

from __future__ import annotations

import doctest
import importlib
import json
import re
from pathlib import Path

import pytest

from posttrain.envs import get_domain
from posttrain.errors import TaskError
from posttrain.types import Task

ENV = get_domain("math")
VERIFY = ENV.make_verifier(None)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "math.jsonl"


def task(answer: str, form: str | None = None, prompt: str = "Compute it. Put your final answer in \\boxed{}.") -> Task:
    record = {"id": "m", "domain": "math", "prompt": prompt, "answer": answer, **({"form": form} if form else {})}
    return ENV.parse_task(record, "test")


ISSUE_ECHOES = [  # (gold, the question's expression), no form declared: the form is inferred from the gold
    ("500", "34 \\times 15 - 10"),
    ("\\frac{17}{24}", "\\frac{3}{8}+\\frac{1}{3}"),
    ("3", "\\gcd(39, 60)"),
    ("\\frac{\\sqrt{2}}{2}", "\\sin(\\pi/4)"),
    ("5050", "\\sum_{k=1}^{100} k"),
    ("\\frac{1}{3}", "\\int_0^1 x^2 dx"),
    ("1", "\\lim_{x\\to 0} \\frac{\\sin x}{x}"),
    ("120", "\\binom{10}{3}"),
    ("3628800", "10!"),
]


@pytest.mark.parametrize(("gold", "echo"), ISSUE_ECHOES)
def test_the_questions_expression_is_not_an_answer(gold: str, echo: str) -> None:
    v = VERIFY(task(gold), f"The answer is \\boxed{{{echo}}}.")
    assert (v.outcome, v.reward) == ("fail", 0.0), v
    assert v.error_class.startswith("form:") and v.components["format"] == 0.0, v
    assert "asks for" in v.feedback and gold not in v.feedback


def _echo(t: Task) -> str:
    """What a policy that copies the question into the box writes, per generated family."""
    kind = t.tags[1]
    if kind in ("arith", "fraction"):
        return re.search(r"\$(.+?)\$", t.prompt).group(1)
    if kind == "gcd":
        a, b = re.findall(r"\d+", t.prompt)
        return f"\\gcd({a}, {b})"
    if kind == "linear":
        a, b, c = re.fullmatch(r"Solve for \$x\$: \$(\d+)x \+ (-?\d+) = (-?\d+)\$\..*", t.prompt).groups()
        return f"\\frac{{{c} - ({b})}}{{{a}}}"
    k, a, second = re.search(r"first (\d+) terms of the arithmetic sequence (-?\d+), (-?\d+)", t.prompt).groups()
    return f"\\sum_{{j=0}}^{{{int(k) - 1}}} ({a} + {int(second) - int(a)}j)"


def test_no_generated_family_is_passed_by_echoing_its_prompt() -> None:
    tasks = ENV.generate_tasks(60, seed=5)
    assert {t.tags[1] for t in tasks} == {"arith", "linear", "fraction", "series", "gcd"}
    for t in tasks:
        assert VERIFY(t, str(t.reference)).passed, t
        v = VERIFY(t, f"\\boxed{{{_echo(t)}}}")
        assert (v.outcome, v.error_class) == ("fail", f"form:{t.fields['form']}"), (t.prompt, _echo(t), v)


def test_example_files_are_not_passed_by_echoing_their_prompts() -> None:
    tasks = [ENV.parse_task(json.loads(line), str(EXAMPLES)) for line in EXAMPLES.read_text().splitlines()]
    echoed = 0
    for t in tasks:
        assert VERIFY(t, str(t.reference)).passed, t
        m = re.search(r"\$(.+?)\$", t.prompt)
        if m and "=" not in m.group(1):
            echoed += 1
            v = VERIFY(t, f"\\boxed{{{m.group(1)}}}")
            assert v.outcome == "fail" and v.error_class.startswith("form:"), (t.id, v)
    assert echoed >= 6


def test_the_quickstart_family_keeps_its_answers() -> None:
    from posttrain.envs.math._quickstart import demonstration_mistake, quickstart_tasks

    tasks = quickstart_tasks(seed=0)
    assert all("form" not in t.fields for t in tasks)  # its records as they were: the number form, inferred
    for t in tasks[:40]:
        assert VERIFY(t, str(t.reference)).passed
        v = VERIFY(t, str(demonstration_mistake(t)))  # the sign error stays a wrong answer, with format credit
        assert (v.error_class, v.components["format"]) == ("wrong_answer", 1.0)
        assert VERIFY(t, f"\\boxed{{0+{t.fields['answer']}}}").error_class == "form:number"


@pytest.mark.parametrize(
    ("gold", "form", "answer"),
    [
        ("1000", "integer", "1{,}000"),
        ("-12", "integer", "-12"),
        ("\\frac{17}{24}", "fraction", "17/24"),
        ("-\\frac{7}{3}", "fraction", "\\frac{-7}{3}"),
        ("\\frac{5}{2}", "fraction", "2\\frac{1}{2}"),
        ("3", "fraction", "3"),
        ("\\frac{1}{2}", None, "0.5"),
        ("0.5", "number", "\\frac{1}{2}"),
        ("\\frac{3}{2}", "number", "1.50"),
        ("602000000000000000000000", None, "6.02 \\times 10^{23}"),
        ("\\frac{\\sqrt{2}}{2}", None, "\\frac{1}{\\sqrt{2}}"),
        ("\\frac{1}{\\sqrt{2}}", None, "\\frac{\\sqrt{2}}{2}"),
        ("\\frac{\\sqrt{2}}{2}", "closed", "\\sqrt{2}/2"),
        ("\\sqrt{8}", None, "2\\sqrt{2}"),
        ("\\frac{2\\sqrt{3}}{3}", None, "\\frac{2}{\\sqrt{3}}"),
        ("\\frac{1+\\sqrt{5}}{2}", None, "\\frac{\\sqrt{5}+1}{2}"),
        ("\\sqrt[3]{4}", None, "\\sqrt[3]{4}"),
        ("2\\pi", None, "2\\pi"),
        ("\\frac{1+\\sqrt{5}}{2}", None, "\\frac{1}{2}(1+\\sqrt{5})"),
        ("\\frac{-1+\\sqrt{3}i}{2}", None, "-\\frac{1}{2}+\\frac{\\sqrt{3}}{2}i"),
        ("\\frac{1}{e}", None, "e^{-1}"),
        ("e + 1", None, "1 + e"),  # e unevaluated is exp(1): it failed as "a function to evaluate"
        ("\\frac{e}{2}", None, "\\frac{1}{2}e"),
        ("1\\,000", None, "1000"),  # a thin space between thousands: it was read 1 \cdot 000
        ("1000", None, "1\\,000"),
        ("2^{2/3}", None, "\\sqrt[3]{4}"),
        ("\\frac{\\ln 3}{\\ln 2}", None, "\\log_2 3"),
        ("\\{2, 3\\}", None, "\\{3, 2\\}"),
        ("\\{2, 3\\}", None, "3, 2"),
        ("-12; -11", None, "\\{-11, -12\\}"),
        ("\\begin{pmatrix} 1 \\\\ \\frac{1}{2} \\end{pmatrix}", None, "\\begin{pmatrix}1\\\\0.5\\end{pmatrix}"),
        ("(-\\infty, 3]", None, "(-\\infty, 3]"),
        ("x = 3", "integer", "3 = x"),
        ("x^2+2x+1", None, "(x+1)^2"),
        ("x^2+2x+1", "expression", "x(x+2)+1"),
        ("500", "expression", "34 \\times 15 - 10"),
        ("\\frac{1}{2}", "expression", "\\frac{2}{4}"),
        ("50\\%", None, "50 \\%"),
    ],
)
def test_equally_final_forms_pass(gold: str, form: str | None, answer: str) -> None:
    v = VERIFY(task(gold, form), f"\\boxed{{{answer}}}")
    assert v.passed, v


@pytest.mark.parametrize(
    ("gold", "form", "answer", "error_class"),
    [
        ("3", "integer", "3.0", "form:integer"),
        ("3", "integer", "\\frac{6}{2}", "form:integer"),
        ("\\frac{1}{2}", "fraction", "0.5", "form:fraction"),
        ("\\frac{1}{2}", "fraction", "\\frac{2}{4}", "form:fraction"),
        ("\\frac{1}{2}", None, "\\frac{2}{4}", "form:number"),
        ("100000000000000000001", None, "10^{20} + 1", "form:number"),
        ("1024", None, "2^{10}", "form:number"),
        ("4", None, "\\sqrt{16}", "form:number"),
        ("2\\sqrt{2}", None, "\\sqrt{8}", "form:closed"),
        ("\\frac{\\sqrt{2}}{2}", None, "\\sqrt{\\frac{1}{2}}", "form:closed"),
        ("2\\sqrt{2}", None, "\\sqrt{2}+\\sqrt{2}", "form:closed"),
        ("\\frac{\\sqrt{2}}{2}", None, "\\frac{2\\sqrt{2}}{4}", "form:closed"),
        ("\\sqrt{2}", None, "\\frac{2}{\\sqrt{2}}", "form:closed"),
        ("6\\sqrt{2}", None, "2 \\cdot 3\\sqrt{2}", "form:closed"),
        ("\\sqrt{6}", None, "\\sqrt{2}\\sqrt{3}", "form:closed"),
        ("\\frac{1}{2}", "closed", "\\cos(\\pi/3)", "form:closed"),
        ("2", None, "e^{\\ln 2}", "form:number"),
        ("\\frac{\\pi}{4}", None, "\\arctan 1", "form:closed"),
        ("3", None, "\\operatorname{gcd}(39, 60)", "form:number"),
        ("3", None, "\\lfloor 3.5 \\rfloor", "form:number"),
        ("4", None, "\\max(3, 4)", "form:number"),
        ("\\{2, 3\\}", None, "(2, 3)", "form:set"),
        ("3", None, "3, 5", "form:number"),
        ("\\{2, 3\\}", None, "\\{2, 1+2\\}", "form:number"),
        ("x = 3", None, "x = 1 + 2", "form:number"),
        ("x = 3", None, "1 + 2 = x", "form:number"),
        ("x^2", None, "\\int 2x \\, dx", "form:expression"),
        ("\\frac{n(n+1)}{2}", None, "\\sum_{k=1}^{n} k", "form:expression"),
        ("50\\%", None, "\\frac{100}{2}\\%", "form:number"),
        ("3", None, "\\begin{vmatrix} 3 \\end{vmatrix}", "form:number"),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", None, "\\begin{pmatrix} 1 \\\\ 1+1 \\end{pmatrix}", "form:number"),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", None, "\\{1, 2\\}", "form:matrix"),
        ("-1", "closed", "(1+\\sqrt{2})(1-\\sqrt{2})", "form:closed"),
        ("\\sqrt{2}-1", None, "\\frac{1}{\\sqrt{2}+1}", "form:closed"),
        ("\\sqrt{2}", None, "\\frac{\\sqrt{6}}{\\sqrt{3}}", "form:closed"),
        ("3+2\\sqrt{2}", None, "(1+\\sqrt{2})^2", "form:closed"),
        ("\\ln 6", None, "\\ln 2 + \\ln 3", "form:closed"),
        ("\\frac{5\\pi}{6}", None, "\\frac{\\pi}{2}+\\frac{\\pi}{3}", "form:closed"),
    ],
)
def test_work_left_in_the_box_fails_by_form(gold: str, form: str | None, answer: str, error_class: str) -> None:
    v = VERIFY(task(gold, form), f"\\boxed{{{answer}}}")
    assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, error_class), v


def test_a_wrong_final_answer_is_still_a_wrong_answer() -> None:
    for gold, form, answer in [("500", "integer", "510"), ("\\frac{17}{24}", "fraction", "\\frac{17}{23}"),
                               ("\\frac{\\sqrt{2}}{2}", None, "\\frac{\\sqrt{3}}{2}"), ("\\ln 2", None, "\\ln 3")]:
        v = VERIFY(task(gold, form), f"\\boxed{{{answer}}}")
        assert (v.error_class, v.components["format"]) == ("wrong_answer", 1.0), (gold, answer, v)


def test_the_feedback_names_the_form_asked_for() -> None:
    v = VERIFY(task("\\frac{17}{24}", "fraction"), "\\boxed{0.7083}")
    assert v.feedback.startswith("Answer format: the task asks for an integer or a fraction in lowest terms")
    assert "a decimal" in v.feedback and "17" not in v.feedback
    v = VERIFY(task("\\{2, 3\\}"), "\\boxed{(2, 3)}")
    assert (v.error_class, v.evidence["detail"]) == ("form:set", "a tuple or an interval where a set is expected")


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"answer": "3", "form": "integers"}, "field 'form': expected one of 'integer', 'fraction'"),
        ({"answer": "3", "form": 3}, "field 'form'"),
        ({"answer": "2^{10}", "form": "integer"}, "field 'answer': expected an integer as field 'form' says \\(this one has an operation on numbers\\)"),
        ({"answer": "\\frac{6}{4}", "form": "fraction"}, "field 'answer'.*has a fraction not in lowest terms"),
        ({"answer": "0.5", "form": "fraction"}, "field 'answer'.*a decimal"),
        ({"answer": "\\text{Monday}", "form": "number"}, "field 'answer'.*text answer"),
    ],
)
def test_a_declared_form_is_checked_at_parse_time(record: dict, match: str) -> None:
    with pytest.raises(TaskError, match=match) as e:
        ENV.parse_task({"id": "m", "domain": "math", "prompt": "p", **record}, "f.jsonl:1")
    assert "f.jsonl:1" in str(e.value) and "\n" not in str(e.value)


def test_a_declared_form_round_trips_and_a_gold_with_work_accepts_itself() -> None:
    from posttrain.envs import task_to_record

    t = task("x = 3", "integer")
    assert ENV.parse_task(json.loads(json.dumps(task_to_record(t))), "rt") == t
    assert "form" not in task("3").fields  # an inferred form is not written into the task
    assert VERIFY(task("2^{-30}"), "\\boxed{2^{-30}}").passed  # the task's own spelling
    assert VERIFY(task("2^{-30}"), "\\boxed{\\frac{1}{1073741824}}").passed


def test_an_unknown_form_on_a_task_built_in_code_is_the_tasks_fault() -> None:
    t = Task(id="m", domain="math", prompt="p", fields={"answer": "3", "form": "integers"})
    v = VERIFY(t, "\\boxed{3}")
    assert (v.outcome, v.error_class) == ("infra_error", "infra:bad_task")


def test_the_echo_set_fails_through_the_service() -> None:
    from posttrain.cli import open_service

    fixtures = [(name, t, r) for name, t, r in ENV.exploit_fixtures() if name.startswith("echo:")]
    assert len(fixtures) >= 20
    with open_service(["math"]) as svc:
        verdicts = svc.verify_pairs([(t, r) for _, t, r in fixtures])
    assert [(name, v.outcome) for (name, _, _), v in zip(fixtures, verdicts, strict=True)] == [
        (name, "fail") for name, _, _ in fixtures]
    assert all(v.error_class.startswith("form:") and v.reward == 0.0 for v in verdicts)


@pytest.mark.parametrize("module", ["posttrain.envs.math", "posttrain.envs.math._read", "posttrain.envs.math._form",
                                    "posttrain.envs.math._check", "posttrain.envs.math._env", "posttrain.envs.math._poly",
                                    "posttrain.envs.math._prompt", "posttrain.envs.math._simplify"])
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
