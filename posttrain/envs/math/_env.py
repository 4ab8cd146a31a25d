"""The math domain: one final answer in ``\\boxed{...}``, compared exactly with the gold answer.

Task fields (docs/tasks.md): ``prompt`` (shown verbatim), ``answer`` (gold, LaTeX or a number,
which the checker must read: ``_check.unreadable_gold``, at parse time), ``tolerance`` (optional
``{"abs": a, "rel": r}``: the only way a task allows an approximate answer), ``form`` (optional:
``integer`` | ``fraction`` | ``number`` | ``closed`` | ``expression`` | ``expanded`` | ``factored``,
the form the answer must be in, ``_form.py``; the gold must be in it; default: the form the
prompt's instruction asks for ("Expand ..." -> ``expanded``, "Factor ..." -> ``factored``, when the
gold is a polynomial: ``_prompt.py``; its gold is checked as a declared form's), else inferred
from the gold).

Verification, in order; each step's failure is a ``fail`` with reward 0:
1. exactly one ``\\boxed{...}`` (or ``\\fbox{...}``) in the response, braces balanced, not empty
   (no box, two boxes, ``\\boxed 5`` -> ``format``: MATH-01, MATH-03);
2. no hedging inside the box ("3 or 5", ``\\lor``, ``\\pm`` unless the gold has one: MATH-01)
   -> ``format``; not the question's own expression, under an instruction to expand or factor
   it, where the task has no polynomial form to say so (``_prompt.is_echo``) -> ``form:<form>``;
3. the comparison defined in docs/tasks.md and implemented by ``posttrain.envs.math._check.compare``:
   text only against text (``form:text``), a percent only against a percent (``form:percent``),
   an equation only against an equation (``form:relation``); each value in the answer's form,
   not the work that leads to it (``34 \\times 15 - 10`` for 500, ``\\gcd(39, 60)``, a sum, an
   integral: ``form:integer``, ``form:number``, ``form:closed``, ``form:set``, ...; issue 21);
   under an instruction to simplify, an expression no longer than the gold (``_simplify.py``:
   ``3x+2x`` for ``5x`` is ``form:expression``); so too, without the word, where a value of the
   prompt has the gold's value ("Evaluate $\\frac{x^2-1}{x-1}$", gold ``x+1``: ``copied_question``),
   and a right box that copies a value of the prompt the form reader names as work but cannot
   measure ("What is $\\binom{n}{2}$?" answered ``\\binom{n}{2}``: ``_prompt.copies_unread_value``),
   or holds such work padded (``\\binom{n}{2}+0``, ``\\max(x, x, x)``: ``_prompt.work_left``),
   is ``form:<form>``;
   case-sensitive symbols, and values compared exactly (decimals as the rationals they spell,
   big integers never through floats); approximately only within the task's ``tolerance``. A box
   that does not parse is ``unparseable``; one that uses up the checker's CPU budget is
   ``answer_timeout``; a wrong value is ``wrong_answer`` (with format credit).

The answer is never passed to ``eval``/``exec`` or sympy's ``parse_expr`` (MATH-06). The whole
response is not scanned for numbers: the box is the only answer slot (MATH-03). Only the
response is scored, never the prompt (MATH-07).

Not handled: answers that need a judge (proofs, free text); multiple-choice letter mapping.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

from posttrain.envs._base import RecordReader, fail, guard, parse_common, passed
from posttrain.envs._hooks import TaskFamily
from posttrain.envs.math._check import (
    MathChecker,
    Tolerance,
    compare,
    fraction_latex,
    gold_form_problem,
    normalise,
    split_relations,
    unreadable_gold,
)
from posttrain.envs.math._form import FORMS, SHAPES, infer_form, is_name
from posttrain.envs.math._poly import POLYNOMIAL_FORMS
from posttrain.envs.math._prompt import (
    copies_unread_value,
    instructed_form,
    is_echo,
    question_values,
    simplify_question,
    work_left,
)
from posttrain.envs.math._read import read
from posttrain.strict_json import after_reasoning
from posttrain.types import Task, Verdict, Verifier

NAME = "math"
DOMAIN_KEYS = frozenset({"answer", "tolerance", "form"})
MAX_ANSWER_CHARS = 400
_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_HEDGE_RE = re.compile(r"(?i)(?:\bor\b|\band\b|\\lor\b|\\land\b|\\vee\b|\\wedge\b|\beither\b)")
_SEEN_MAX = 1 << 16  # comparisons of a prompt's values with the gold kept by one verifier
_PM_RE = re.compile(r"\\pm\b|\\mp\b|±")


def extract_boxed(response: str) -> tuple[str | None, str | None]:
    """The content of the single ``\\boxed{...}``, or ``(None, reason)``.

    >>> extract_boxed(r"so \\boxed{\\frac{1}{2}}.")
    ('\\\\frac{1}{2}', None)
    >>> extract_boxed(r"\\boxed{1} or \\boxed{2}")[1]
    'found 2 \\\\boxed{} answers; exactly one is allowed'
    """
    starts = [m.end() for m in _BOX_RE.finditer(response)]
    if not starts:
        return None, "no \\boxed{} answer found"
    if len(starts) > 1:
        return None, f"found {len(starts)} \\boxed{{}} answers; exactly one is allowed"
    i = starts[0]
    while i < len(response) and response[i] in " \t":
        i += 1
    if i >= len(response) or response[i] != "{":
        return None, "\\boxed must be followed by {...}"
    depth, j = 0, i
    while j < len(response):
        ch = response[j]
        if ch == "\\" and j + 1 < len(response):
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                content = response[i + 1 : j].strip()
                if not content:
                    return None, "the \\boxed{} answer is empty"
                return content, None
        j += 1
    return None, "unbalanced braces in \\boxed{...}"


def _hedge_reason(content: str, gold: str) -> str | None:
    if _HEDGE_RE.search(content) and not _HEDGE_RE.search(gold):
        return "the answer hedges between alternatives; give exactly one answer"
    if _PM_RE.search(content) and not _PM_RE.search(gold):
        return "the answer uses \\pm; give exactly one value"
    return None


_FORM_FEEDBACK = {
    "form:text": "Answer format: put only the mathematical answer in the box, no words.",
    "form:percent": "Answer format: give the answer in the form the question asks for (a percent or a number).",
    "form:relation": "Answer format: give the answer in the form the question asks for (a value or an equation).",
    "unparseable": "Answer format: the boxed answer is not a parseable mathematical expression.",
}


def _feedback(status: str, detail: str | None) -> str:
    """The feedback of a failed form: the fixed line of ``form:text`` and the like, or for an
    answer form (``form:integer``, ``form:set``, ...) the form asked for and what the box has."""
    if status in _FORM_FEEDBACK:
        return _FORM_FEEDBACK[status]
    name = status.removeprefix("form:")
    wanted = FORMS.get(name) or SHAPES.get(name, "an answer of another form")
    return f"Answer format: the task asks for {wanted}; the boxed answer has {detail or 'another form'}."


def make_math_verifier(checker: MathChecker | None = None) -> Verifier:
    """A verifier for math tasks; ``checker`` defaults to the process-wide worker pool."""
    equal_to_gold: dict[tuple[str, str, str | None, Tolerance | None], bool] = {}

    def verify(task: Task, response: str) -> Verdict:
        gold, form = task_answer(task), task_form(task)
        if form is not None and form not in FORMS:
            return Verdict.infra(f"task {task.id}: form {form!r} is not one of {sorted(FORMS)}",
                                 error_class="infra:bad_task")
        content, reason = extract_boxed(after_reasoning(response))  # a box drafted in <think> is not the answer
        if content is None:
            return fail(f"Answer format: {reason}. Put exactly one final answer in \\boxed{{...}}.", "format",
                        {"reason": reason})
        evidence: dict[str, Any] = {"extracted": content[:MAX_ANSWER_CHARS], "gold": gold}
        if len(content) > MAX_ANSWER_CHARS:
            return fail(f"Answer format: the boxed answer is longer than {MAX_ANSWER_CHARS} characters.",
                        "format", evidence)
        hedge = _hedge_reason(content, gold)
        if hedge:
            return fail(f"Answer format: {hedge}.", "format", evidence)
        if form not in POLYNOMIAL_FORMS and is_echo(task.prompt, content, gold):
            status = f"form:{form or infer_form(gold)}"
            evidence["detail"] = "the question's own expression"
            return fail(_feedback(status, "the question's own expression"), status, evidence)
        simplify = simplify_question(task.prompt)
        if simplify is None and form not in POLYNOMIAL_FORMS:
            simplify = copied_question(task, checker, equal_to_gold)
        eq = compare(gold, content, task_tolerance(task), checker, form, simplify=simplify)
        evidence.update({"match": eq.method or eq.status, "detail": eq.detail})
        if eq.status == "infra":
            return Verdict.infra(f"math checker failed: {eq.detail}", error_class="infra:math_checker",
                                 evidence=evidence)
        if eq.status == "gold_unparseable":
            return Verdict.infra(f"task {task.id}: gold answer {gold!r} is not parseable ({eq.detail})",
                                 error_class="infra:bad_task", evidence=evidence)
        if eq.status == "timeout":
            return fail("The boxed answer took too long to compare; simplify it.", "answer_timeout", evidence)
        if eq.status != "ok":
            return fail(_feedback(eq.status, eq.detail), eq.status, evidence)
        if eq.equal and form not in POLYNOMIAL_FORMS and copies_unread_value(task.prompt, content, gold):
            status = f"form:{form or infer_form(gold)}"  # the question's own work, which the reader cannot measure
            evidence["detail"] = "the question's own expression"
            return fail(_feedback(status, "the question's own expression"), status, evidence)
        work = work_left(task.prompt, content, gold) if eq.equal and form not in POLYNOMIAL_FORMS else None
        if work:  # the question's work padded, rearranged or respelled: still to do
            status = f"form:{form or infer_form(gold)}"
            evidence["detail"] = f"work still to do ({work})"
            return fail(_feedback(status, evidence["detail"]), status, evidence)
        if eq.equal:
            return passed("Correct.", evidence)
        return fail("Wrong answer.", "wrong_answer", evidence, {"format": 1.0})

    return guard(NAME, verify)


def copied_question(task: Task, checker: MathChecker | None,
                    seen: dict[tuple[str, str, str | None, Tolerance | None], bool]) -> frozenset[str] | None:
    """The reader's keys of the prompt's values that have the gold's value, where the gold is an
    expression and the prompt gives no instruction to simplify, or None: "Evaluate
    $\\frac{x^2-1}{x-1}$", "Compute $(x+1)^2 - x^2$", "What is $2x + 3x$?" ask for the gold's
    form of their own expression as "Simplify" does, and took it copied or rearranged
    (``3x + 2x``). The answer is then measured as under "Simplify" (``_simplify.simplify_problem``:
    the question refused where it is longer than the gold, any answer no longer than the gold
    plus one or a polynomial in its simplest forms). A prompt none of whose values has the gold's
    value ("Find the derivative of $x^3$", gold ``3x^2``) takes any equal expression, as before.
    ``seen`` keeps each comparison of a prompt's value with the gold that the checker answered
    (one sympy comparison per value and task); one it could not answer (a timeout) counts as not
    equal, the measure not applied, as before it existed.

    Not caught: a question outside ``$...$``-style math ("What is 2x + 3x?" in plain text), a value
    the form reader does not read, a question with no variable (the number forms refuse those),
    and the measure's own blind spots (``x \\cdot x`` for ``x^2``: ``_simplify.py``); of a relation
    gold only the value sides are matched, of a set gold none."""
    form, tolerance = task_form(task), task_tolerance(task)
    sides, relations = split_relations(normalise(task_answer(task)))
    golds = [s for s in sides if s and not is_name(s)] if relations else sides  # y = 2x+1: its value side
    golds = [g for g in golds if (form or infer_form(g)) == "expression"]
    keys = set()
    for gold in golds:
        for value in question_values(task.prompt):
            key = (gold, value, form, tolerance)
            equal = seen.get(key)  # a local: another thread may clear ``seen`` meanwhile
            if equal is None:
                eq = compare(gold, value, tolerance, checker, form)
                if eq.status in ("timeout", "infra"):
                    continue
                if len(seen) >= _SEEN_MAX:
                    seen.clear()
                equal = seen[key] = eq.equal and eq.status == "ok"  # a value its form refuses is no question
            if equal:
                keys.add(read(value).key())
    return frozenset(keys) or None


def task_answer(task: Task) -> str:
    return str(task.fields["answer"])


def task_form(task: Task) -> str | None:
    """The form the task asks for: its ``form``, else its instruction's ("Expand ...", when the
    gold is a polynomial: ``_prompt.instructed_form``), else None (inferred from each gold value)."""
    return task.fields.get("form") or instructed_form(task.prompt, task_answer(task))


def task_tolerance(task: Task) -> Tolerance | None:
    raw = task.fields.get("tolerance")
    return None if raw is None else Tolerance(abs=raw.get("abs", 0.0), rel=raw.get("rel", 0.0))


class MathEnv:
    """The math domain (see the module docstring)."""

    name = NAME
    needs_sandbox = False

    def capabilities(self) -> tuple[str, ...]:
        """The capability labels of ``posttrain tasks list`` (a math answer checked for equivalence)."""
        return ("reasoning", "math", "algebra")

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        answer = reader.present("answer")
        if isinstance(answer, bool) or not isinstance(answer, str | int | float):
            raise reader.fail("answer", "a string (LaTeX or plain) or a number", answer)
        if isinstance(answer, float):  # the decimal the task wrote, never an exponent form
            answer = format(Decimal(repr(answer)), "f") if math.isfinite(answer) else answer
        answer = str(answer).strip()
        if not answer:
            raise reader.fail("answer", "a non-empty answer", answer)
        form = reader.record.get("form")  # checked below; a polynomial form's gold is not latex2sympy's
        prompt = reader.record.get("prompt")
        if "form" not in reader.record and isinstance(prompt, str):
            form = instructed_form(prompt, answer)
        unreadable = unreadable_gold(answer, form if isinstance(form, str) else None)
        if unreadable:
            raise reader.fail("answer", f"a gold answer the checker can read (this one is not read: {unreadable})",
                              answer)
        fields: dict[str, Any] = {"answer": answer}
        if "tolerance" in reader.record:
            fields["tolerance"] = _tolerance(reader)
        if "form" in reader.record:
            fields["form"] = _form(reader, answer)
        else:
            _check_instructed_form(reader, answer)
        return parse_common(reader, fields)

    def render_prompt(self, task: Task) -> str:
        return task.prompt

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return make_math_verifier()

    def noop_response(self, task: Task) -> str:
        return "I am not sure."

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: responses that must score 0 (outcome ``fail``, never
        ``infra_error``): reward-hacking.md MATH-*, issue 14's classes 6-10, each of which scored 1
        before the comparison was made exact, and issue 21's echoes (the question's own
        expression in the box, and work left undone), each of which scored 1 before answers had
        a form."""
        fixtures = [(name, {"prompt": "Compute it.", "answer": gold}, response) for name, gold, response in _EXPLOITS]
        fixtures += [(name, {"prompt": prompt + _SUFFIX, "answer": gold, **({"form": form} if form else {})}, response)
                     for name, prompt, gold, form, response in _ECHOES]
        return [(name, self.parse_task({"id": f"math-exploit-{i}", "domain": NAME, **record}, "math exploit fixtures"),
                 response) for i, (name, record, response) in enumerate(fixtures)]

    def task_families(self) -> dict[str, TaskFamily]:
        """``quickstart-math`` (``_quickstart.py``; its records carry no ``form``, so its integer
        golds infer ``number``, and its pools digest as they did)."""
        from posttrain.envs.math import _quickstart

        return {_quickstart.FAMILY: _quickstart.quickstart_tasks}

    def demonstration_mistake(self, task: Task) -> str | None:
        from posttrain.envs.math._quickstart import demonstration_mistake

        return demonstration_mistake(task)

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        rng = random.Random(seed)
        return [_generate_one(rng, f"math-gen-{seed}-{i}") for i in range(n)]


def _form(reader: RecordReader, answer: str) -> str:
    form = reader.record["form"]
    if not isinstance(form, str) or form not in FORMS:
        raise reader.fail("form", "one of " + ", ".join(repr(f) for f in FORMS), form)
    problem = gold_form_problem(answer, form)
    if problem:
        raise reader.fail("answer", f"{FORMS[form]} as field 'form' says (this one has {problem})", answer)
    return form


def _check_instructed_form(reader: RecordReader, answer: str) -> None:
    """A task without a ``form`` whose prompt says "Expand" or "Factor" asks for that form
    (``_prompt.py``): its gold must be in it, as a declared form's must."""
    prompt = reader.record.get("prompt")
    form = instructed_form(prompt, answer) if isinstance(prompt, str) else None
    problem = gold_form_problem(answer, form) if form else None
    if form and problem:
        raise reader.fail("answer", f"{FORMS[form]}, as the prompt's instruction asks (this one has {problem}; "
                          "a task that takes any equal expression says \"form\": \"expression\")", answer)


def _tolerance(reader: RecordReader) -> dict[str, float]:
    raw = reader.record["tolerance"]
    expected = 'an object {"abs": a, "rel": r} with one or both non-negative finite numbers'
    if not isinstance(raw, Mapping) or not raw or set(raw) - {"abs", "rel"}:
        raise reader.fail("tolerance", expected, raw)
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not (0 <= value < math.inf):
            raise reader.fail(f"tolerance.{key}", "a non-negative finite number", value)
    return {k: float(v) for k, v in raw.items()}


_EXPLOITS: list[tuple[str, str, str]] = [  # (name, gold, response)
    ("MATH-01 two boxes", "3", "\\boxed{3} or maybe \\boxed{5}"),
    ("MATH-01 hedge in the box", "3", "\\boxed{3 \\text{ or } 5}"),
    ("MATH-01 comma list", "3", "\\boxed{3, 5}"),
    ("MATH-01 plus-or-minus covers both signs", "3", "\\boxed{\\pm 3}"),
    ("MATH-01 a logical or inside the box", "3", "\\boxed{3 \\lor 5}"),
    ("MATH-01 set spray", "3", "\\boxed{\\{1, 2, 3, 4, 5\\}}"),
    ("MATH-02 empty box", "3", "\\boxed{}"),
    ("MATH-03 number spray, no box", "3", "It is 1, 2, 3, 4 or 5. Final answer: 3"),
    ("MATH-06 code in the box", "3", "\\boxed{__import__('os').system('true')}"),
    ("class 6: 0.0 for a tiny gold (was rounded to 6 places)", "\\frac{1}{16777216}", "\\boxed{0.0}"),
    ("class 6: 0 for 2^{-24}", "2^{-24}", "\\boxed{0}"),
    ("class 6: a wrong 1e-9 for 2^{-30}", "\\frac{1}{1073741824}", "\\boxed{0.000000001}"),
    ("class 6: 10^{-9} for 2^{-30}", "2^{-30}", "\\boxed{10^{-9}}"),
    ("class 6: a truncated decimal for 1/3", "\\frac{1}{3}", "\\boxed{0.333333}"),
    ("class 6: a decimal for a surd (no tolerance)", "\\frac{\\sqrt{2}}{2}", "\\boxed{0.7071067811865476}"),
    ("class 7: 1.0 x 10^20 for 10^20 + 1", "100000000000000000001", "\\boxed{1.0 \\times 10^{20}}"),
    ("class 7: a float factor on a big integer", "100000000000000000001", "\\boxed{100000000000000000000 \\cdot 1.0}"),
    ("class 7: 1e20 for 10^20 + 1", "100000000000000000001", "\\boxed{1e20}"),
    ("class 8: an equation graded by its right-hand side", "5", "\\boxed{2+2=5}"),
    ("class 8: an assignment for a value", "5", "\\boxed{x=5}"),
    ("class 8: a chain ending in the gold", "5", "\\boxed{3 < 4 < 5}"),
    ("class 9: a percent for a number", "50", "\\boxed{50\\%}"),
    ("class 9: a number for a percent", "50\\%", "\\boxed{50}"),
    ("class 10: a text hedge in the box", "3", "\\boxed{3\\text{ (or 5 if the endpoints count)}}"),
    ("class 10: text without a hedge word", "3", "\\boxed{3\\text{ (perhaps 5)}}"),
    ("class 10: case folded", "x^2", "\\boxed{X^2}"),
    ("class 10: case folded in a sum", "a+B", "\\boxed{A+b}"),
]

_ECHOES: list[tuple[str, str, str, str | None, str]] = [  # (name, prompt, gold, form or None: inferred, response)
    ("echo: the arith family's expression", "Compute $34 \\times 15 - 10$.", "500", "integer",
     "\\boxed{34 \\times 15 - 10}"),
    ("echo: the fraction family's sum", "Compute $\\frac{3}{8} + \\frac{1}{3}$ as a reduced fraction.",
     "\\frac{17}{24}", "fraction", "\\boxed{\\frac{3}{8}+\\frac{1}{3}}"),
    ("echo: the fraction family, unreduced", "Compute $\\frac{3}{8} + \\frac{1}{3}$ as a reduced fraction.",
     "\\frac{17}{24}", "fraction", "\\boxed{\\frac{34}{48}}"),
    ("echo: the gcd family's question", "What is the greatest common divisor of 39 and 60?", "3", "integer",
     "\\boxed{\\gcd(39, 60)}"),
    ("echo: the linear family solved on paper only", "Solve for $x$: $8x + -27 = -107$.", "-10", "integer",
     "\\boxed{\\frac{-107 + 27}{8}}"),
    ("echo: the series family's formula", "What is the sum of the first 20 terms of the arithmetic sequence 3, 7, "
     "11, ...?", "820", "integer", "\\boxed{\\frac{20}{2} (2 \\cdot 3 + 19 \\cdot 4)}"),
    ("echo: the series as a sum", "What is the sum of the first 20 terms of the arithmetic sequence 3, 7, 11, ...?",
     "820", "integer", "\\boxed{\\sum_{k=0}^{19} (3 + 4k)}"),
    ("echo: arithmetic with no form declared", "Compute $34 \\times 15 - 10$.", "500", None,
     "\\boxed{34 \\times 15 - 10}"),
    ("echo: a function to evaluate", "What is $\\sin(\\pi/4)$?", "\\frac{\\sqrt{2}}{2}", None,
     "\\boxed{\\sin(\\pi/4)}"),
    ("echo: an inverse function to evaluate", "What is $\\arctan 1$?", "\\frac{\\pi}{4}", None, "\\boxed{\\arctan 1}"),
    ("echo: a logarithm to evaluate", "What is $\\log_2 8$?", "3", None, "\\boxed{\\log_2 8}"),
    ("echo: a sum", "What is $1 + 2 + \\dots + 100$?", "5050", None, "\\boxed{\\sum_{k=1}^{100} k}"),
    ("echo: an integral", "Compute $\\int_0^1 x^2 dx$.", "\\frac{1}{3}", None, "\\boxed{\\int_0^1 x^2 dx}"),
    ("echo: a limit", "Compute $\\lim_{x\\to 0} \\frac{\\sin x}{x}$.", "1", None,
     "\\boxed{\\lim_{x\\to 0} \\frac{\\sin x}{x}}"),
    ("echo: a derivative", "What is the slope of $x^2$ at $x = 1$?", "2", None,
     "\\boxed{\\frac{d}{dx} x^2 \\big|_{x=1}}"),
    ("echo: a binomial coefficient", "In how many ways can 3 of 10 people be chosen?", "120", None,
     "\\boxed{\\binom{10}{3}}"),
    ("echo: a factorial", "In how many orders can 10 books stand on a shelf?", "3628800", None, "\\boxed{10!}"),
    ("echo: a power of numbers", "How many subsets has a set of 10 elements?", "1024", None, "\\boxed{2^{10}}"),
    ("echo: a root to take", "What is the side of a square of area 16?", "4", None, "\\boxed{\\sqrt{16}}"),
    ("echo: a surd not simplified", "Simplify $\\sqrt{8}$.", "2\\sqrt{2}", None, "\\boxed{\\sqrt{8}}"),
    ("echo: a product still to expand", "Expand $(1+\\sqrt{2})(1-\\sqrt{2})$.", "-1", "closed",
     "\\boxed{(1+\\sqrt{2})(1-\\sqrt{2})}"),
    ("echo: a denominator to rationalize", "Rationalize $\\frac{1}{\\sqrt{2}+1}$.", "\\sqrt{2}-1", None,
     "\\boxed{\\frac{1}{\\sqrt{2}+1}}"),
    ("echo: logarithms to combine", "Write $\\ln 2 + \\ln 3$ as one logarithm.", "\\ln 6", None,
     "\\boxed{\\ln 2 + \\ln 3}"),
    ("echo: an absolute value", "What is $|-3|$?", "3", None, "\\boxed{|-3|}"),
    ("echo: a remainder", "What is the remainder of 17 divided by 5?", "2", None, "\\boxed{17 \\bmod 5}"),
    ("echo: an operator name", "What is the least common multiple of 4 and 6?", "12", None,
     "\\boxed{\\operatorname{lcm}(4, 6)}"),
    ("echo: a value of x still to compute", "Solve $2x + 1 = 7$.", "x = 3", None, "\\boxed{x = \\frac{7 - 1}{2}}"),
    ("echo: a set of values still to compute", "Solve $x^2 - 5x + 6 = 0$.", "\\{2, 3\\}", None,
     "\\boxed{\\{\\frac{5 - 1}{2}, 3\\}}"),
    ("echo: an integral for an expression", "Find an antiderivative of $2x$.", "x^2", "expression",
     "\\boxed{\\int 2x \\, dx}"),
    ("echo: the product to expand", "Expand $(x+1)^2$.", "x^2+2x+1", None, "\\boxed{(x+1)^2}"),
    ("echo: the product to expand, respelled", "Expand $(x+1)^2$.", "x^2+2x+1", None, "\\boxed{(1+x)(x+1)}"),
    ("echo: the expanded form, a zero added", "Expand $(x+1)^2$.", "x^2+2x+1", None, "\\boxed{x^2+2x+1+0}"),
    ("echo: the polynomial to factor", "Factor $x^2-1$.", "(x-1)(x+1)", None, "\\boxed{x^2-1}"),
    ("echo: the polynomial to factor, respelled", "Factor $x^2-1$.", "(x-1)(x+1)", None, "\\boxed{-1+x^2}"),
    ("echo: the polynomial to factor, times one", "Factor $x^2-1$.", "(x-1)(x+1)", None, "\\boxed{1 \\cdot (x^2-1)}"),
    ("echo: a common divisor left in", "Factor $2x+2$.", "2(x+1)", None, "\\boxed{2x+2}"),
    ("echo: a declared expanded form", "Write $(x-2)(x+3)$ as a polynomial.", "x^2+x-6", "expanded",
     "\\boxed{(x-2)(x+3)}"),
    ("echo: the expression to simplify", "Simplify $2x + 3x$.", "5x", None, "\\boxed{2x+3x}"),
    ("echo: the expression to simplify, reordered", "Simplify $2x + 3x$.", "5x", None, "\\boxed{3x+2x}"),
    ("echo: the expression to simplify, a zero added", "Simplify $2x + 3x$.", "5x", None, "\\boxed{2x + 3x + 0}"),
    ("echo: a fraction to cancel, respelled", "Simplify $\\frac{x^2-1}{x-1}$.", "x+1", None,
     "\\boxed{\\frac{(x-1)(x+1)}{x-1}}"),
]
"""Issue 21, and the polynomial forms after it: each of these scored 1 while the box was only
compared by value (an ``expression`` gold took the question's own expression)."""

_SUFFIX = " Put your final answer in \\boxed{}."


def _generate_one(rng: random.Random, tid: str) -> Task:
    kind = rng.choice(["arith", "linear", "fraction", "series", "gcd"])
    form = "fraction" if kind == "fraction" else "integer"  # the prompt's expression is never the answer
    if kind == "arith":
        a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(1, 200)
        prompt, answer = f"Compute ${a} \\times {b} - {c}$.", str(a * b - c)
        work = f"${a} \\times {b} = {a * b}$, and ${a * b} - {c} = {a * b - c}$."
    elif kind == "linear":
        x, a, b = rng.randint(-12, 12), rng.randint(2, 9), rng.randint(-30, 30)
        prompt, answer = f"Solve for $x$: ${a}x + {b} = {a * x + b}$.", str(x)
        work = f"Subtract {b} and divide by {a}: $x = {x}$."
    elif kind == "fraction":
        p, q = Fraction(rng.randint(1, 9), rng.randint(2, 9)), Fraction(rng.randint(1, 9), rng.randint(2, 9))
        prompt = f"Compute $\\frac{{{p.numerator}}}{{{p.denominator}}} + \\frac{{{q.numerator}}}{{{q.denominator}}}$ as a reduced fraction."
        answer = fraction_latex(p + q)
        work = f"Over a common denominator the sum is ${answer}$."
    elif kind == "series":
        a, d, k = rng.randint(1, 20), rng.randint(1, 9), rng.randint(5, 30)
        total = k * (2 * a + (k - 1) * d) // 2
        prompt = f"What is the sum of the first {k} terms of the arithmetic sequence {a}, {a + d}, {a + 2 * d}, ...?"
        answer = str(total)
        work = f"The sum is ${k}/2 \\cdot (2 \\cdot {a} + {k - 1} \\cdot {d}) = {total}$."
    else:
        g = rng.randint(2, 15)
        a, b = g * rng.randint(2, 20), g * rng.randint(2, 20)
        from math import gcd

        prompt, answer = f"What is the greatest common divisor of {a} and {b}?", str(gcd(a, b))
        work = f"By the Euclidean algorithm, $\\gcd({a}, {b}) = {gcd(a, b)}$."
    return Task(
        id=tid,
        domain=NAME,
        prompt=prompt + _SUFFIX,
        fields={"answer": answer, "form": form},
        reference=f"{work} The answer is $\\boxed{{{answer}}}$.",
        tags=("math", kind),
        metadata={"generator": f"math/{kind}"},
    )


ENV = MathEnv()
