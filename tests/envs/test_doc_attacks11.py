"""A helper's eleventh read of the doc verifier: a negative amount in the notations a document prints.

The false negative: a right negative answer written with the minus sign (U+2212, ``−1,234``), the en dash
typeset statements use for it, or in accounting's parentheses (``(1,234)``, as the generated tables print a
negative: ``_gen.thousands``) was a ``format`` fail. Counted outside the suite (the real ``check_doc``, the
reference's answer rewritten as a string) over 800 generated numeric tasks, 78 with a negative gold (75
growth, 3 contradiction): 78 of 624 right-negative notations passed before (the ASCII ``-`` alone), 624
of 624 after; over 124 negative contradictions of level 4, the table's own ``(12,345)`` with ``thousand``
passed 0 of 124 before, 124 after.

The notations a policy would stretch stay shut: a positive gold's other sign in each new notation is a
wrong answer exactly as ``-1,234`` is (and ends a repair: ``is_rescaled``); a hedge (both signs in one
answer), two signs (``−(1,234)``, ``(−1,234)``), an unpaired parenthesis, a percent sign, an aside in
parentheses, a sign apart from the digits, the figure dash and the em dash (a table's nil) are ``format``
fails with no format credit. Cheats passed 0 of 10,824 before and 0 of 10,824 after (same 800 tasks);
refused notations of the right amount 0 of 1,872 before and after.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest

from posttrain.envs.doc._check import as_number, check_doc
from posttrain.envs.doc._env import build_task
from posttrain.types import Task, Verdict


def _verdict(task: Task, answer: object, scale: str | None = None) -> Verdict:
    f, ref = task.fields, json.loads(str(task.reference))
    body = {**ref, "answer": answer, "scale": ref["scale"] if scale is None else scale}
    return check_doc(f["document"], f["answer"], f["evidence"], json.dumps(body), f.get("program"), f.get("closed", False))


def _first(kind: str, level: int, negative: bool) -> Task:
    for i in range(40):
        task = build_task(random.Random(f"doc-a11-{kind}-{i}"), level, f"doc-a11-{kind}-{i}", kind, filler=0, pdf=False)
        if task.fields["answer"]["number"].startswith("-") is negative and task.fields["answer"]["number"] != "0":
            return task
    raise AssertionError(f"no {kind} task with that sign")


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {"contradiction": _first("contradiction", 4, True), "growth": _first("growth", 2, True),
            "figure": _first("figure", 1, False)}


def _magnitude(task: Task) -> str:
    answer = json.loads(str(task.reference))["answer"]
    return format(abs(Decimal(repr(answer)) if isinstance(answer, float) else Decimal(answer)), ",f")


@pytest.mark.parametrize(("text", "value"), [
    ("-1,234", "-1234"), ("\u22121,234", "-1234"), ("\u20131,234.5", "-1234.5"), ("(1,234)", "-1234"),
    ("(1234.5)", "-1234.5"), ("( 210 )", "-210"), (" (1,234) ", "-1234"), ("(0)", "0"), ("1,234", "1234"),
    ("\uff08\uff11\uff09", None), ("(\uff11\uff12)", "-12"), ("-(1,234)", None), ("\u2212(1,234)", None),
    ("(-1,234)", None), ("(\u22121,234)", None), ("--1,234", None), ("(1,234", None), ("1,234)", None),
    ("((1,234))", None), ("(12.5%)", None), ("(  1,234  )", None), ("- 1,234", None), ("\u2212 1,234", None),
    ("\u2212\u20091,234", None), ("\u20121,234", None), ("\u20141,234", None), ("\uff0d1,234", None),
    ("1,234 (in thousands)", None), ("the change (2023 vs 2022) was -15", None), ("1,234 (1,234)", None),
    ("(1,234) 1,234", None), ("(1,234)(1,234)", None), ("(12,34)", None), ("+1,234", None)])
def test_the_one_number_a_string_reads_as(text: str, value: str | None) -> None:
    assert as_number(text) == (None if value is None else Decimal(value))


def test_a_right_negative_amount_passes_in_the_documents_notations(tasks) -> None:
    for kind in ("contradiction", "growth"):
        task, m = tasks[kind], _magnitude(tasks[kind])
        assert _verdict(task, f"-{m}").passed, kind
        for form in (f"\u2212{m}", f"\u2013{m}", f"({m})", f"( {m} )", f"({m.replace(',', '')})"):
            assert _verdict(task, form).passed, (kind, form)
    task = tasks["contradiction"]  # the difference as the table prints it, in thousands
    thousands = format(abs(Decimal(task.fields["answer"]["number"])) / 1000, ",f")
    assert _verdict(task, f"({thousands})", "thousand").passed


def test_another_sign_a_hedge_or_two_signs_never_pay(tasks) -> None:
    task, m = tasks["figure"], _magnitude(tasks["figure"])
    assert _verdict(task, m).passed
    ascii_minus = _verdict(task, f"-{m}")
    for form in (f"({m})", f"\u2212{m}", f"\u2013{m}", f"( {m} )"):  # the other sign: as the ASCII minus is judged
        got = _verdict(task, form)
        assert (got.outcome, got.error_class, got.ends_repair) == ("fail", "wrong_answer", True) and \
            got.components == ascii_minus.components, form
    for kind in ("figure", "contradiction"):
        task, m = tasks[kind], _magnitude(tasks[kind])
        for form in (f"{m} ({m})", f"({m}) {m}", f"{m} or ({m})", f"\u2212{m} / {m}", [m, f"({m})"], f"\u2212({m})",
                     f"(\u2212{m})", f"(-{m})", f"-({m})", f"({m}", f"{m})", f"({m}%)", f"({m}) (in thousands)",
                     f"the change (2023 vs 2022) was -{m}", f"- {m}", f"\u2014{m}", f"\u2012{m}"):
            got = _verdict(task, form)
            assert (got.outcome, got.error_class, got.components["format"]) == ("fail", "format", 0.0), (kind, form)


def test_a_right_negative_padded_with_breaks_tabs_or_invisible_characters_is_a_format_fail(tasks) -> None:
    """Three responses (the stop hook's read) that stretch the parentheses' one allowed space: a
    line break, a tab, a zero-width space inside them. A right amount, so nothing is gained by them,
    but the parser reads one notation, not what a lenient strip would make of it."""
    for kind in ("contradiction", "growth"):
        task, m = tasks[kind], _magnitude(tasks[kind])
        assert _verdict(task, f"({m})").passed, kind
        for form in (f"(\n{m}\n)", f"(\t{m})", f"({m}\u200b)"):
            got = _verdict(task, form)
            assert (got.outcome, got.error_class, got.components["format"]) == ("fail", "format", 0.0), (kind, form)
