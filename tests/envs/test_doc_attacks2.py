"""Policy attacks on the doc verifier through repair feedback, each a standing case (real generated tasks,
the real verifier in its worker, the real ``RepairEnv``; no mocks):

- probing the evidence check: a wrong answer citing every candidate cell, to read from the feedback which
  citations were "not a figure the answer rests on" and answer from the one left (before: the restatement
  trap passed 27 of 27, figures 48 of 51): the feedback now says the pairing fails, never which citation
  or figure is at fault;
- guess-and-check on a conditional question: the amount of one branch of the covenant or dividend
  condition, then, told "wrong answer", the other's (before: 40 of 40 passed on the second try): the
  gold program compares (``greater``), so the answer is one of two and a wrong one ends the repair, as a
  wrong yes/no does;
- guess-and-check on the restated question: the restated figure, then the original (30 of 30): the task
  says the answer is one of two (``closed``), and a wrong one ends the repair (16 of 30 by chance after);
- a text answer holding a long run of digits, which made TAT-QA's normalisation raise out of the check
  (``exception:ValueError`` / ``OverflowError``, and no end to the repair of a yes/no): a wrong answer now;
- a task record whose ``answer.scale`` is a list or an object: a one-line error, not a ``TypeError``.
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import pytest

from posttrain.envs import RepairEnv, get_domain
from posttrain.envs.doc._document import parse_document
from posttrain.envs.doc._env import build_task
from posttrain.types import Generation, Task

ENV = get_domain("doc")
PAIRING = "do not pair off one to one"


@pytest.fixture(scope="module")
def verify():
    return ENV.make_verifier(None)


def _ref(task: Task) -> dict:
    return json.loads(str(task.reference))


def _candidates(task: Task) -> list[tuple[dict, str]]:
    """What a lazy policy cites without reading the question through: every cell of a row the question
    names, in a column of a year it names (or of a table about that year): ``(citation, table title)``."""
    doc = parse_document(task.fields["document"])
    question, years = task.prompt.casefold(), set(re.findall(r"\b20\d\d\b", task.prompt))
    out = []
    for table in doc.tables.values():
        for row in table.rows:
            if not row[0] or row[0].casefold() not in question:
                continue
            for col, cell in zip(table.columns[1:], row[1:], strict=True):
                about_year = not re.fullmatch(r"\d{4}", col) and any(y in table.title for y in years)
                if (col in years or about_year) and cell.strip():
                    out.append(({"location": {"page": table.page, "table": table.id, "row": row[0], "column": col},
                                 "quote": cell}, table.title))
    return out[:16]


def _dollars(quote: str, title: str) -> int:
    value = Decimal(quote.strip("()").replace(",", "")) * (10**6 if "millions" in title else 1000)
    return int(-value if quote.startswith("(") else value)


def _probe(verify, task: Task) -> bool:
    """Two attempts: the candidates sprayed with a wrong answer, then the answer from the cells the
    feedback did not call extra, citing them."""
    cands = _candidates(task)
    first = verify(task, json.dumps({"answer": 0, "scale": "", "evidence": [c for c, _ in cands]}))
    flagged = {int(i) for i in re.findall(r"evidence\[(\d+)\] \([^)]*\): not a figure", first.feedback)}
    left = [cands[i] for i in range(len(cands)) if i not in flagged]
    answer = _dollars(left[0][0]["quote"], left[0][1]) if left else 0
    return verify(task, json.dumps({"answer": answer, "scale": "", "evidence": [c for c, _ in left]})).passed


def test_the_evidence_feedback_does_not_say_which_cited_cell_is_a_gold_figure(verify) -> None:
    rng = random.Random("doc-attacks2-probe")
    tasks = [build_task(rng, 3, f"doc-a2-restated-{i}", "restated", pdf=False) for i in range(4)]
    assert all(verify(t, str(t.reference)).passed for t in tasks)
    assert all(len(_candidates(t)) >= 3 for t in tasks)  # the trap: more than one net income to choose from
    assert sum(_probe(verify, t) for t in tasks) == 0
    task = tasks[0]
    gold = _ref(task)["evidence"]
    others = [c for c, _ in _candidates(task) if c not in gold]
    with_gold = verify(task, json.dumps({"answer": 0, "scale": "", "evidence": [*others, *gold]}))
    without = verify(task, json.dumps({"answer": 0, "scale": "", "evidence": others}))
    assert with_gold.feedback == without.feedback and PAIRING in with_gold.feedback
    assert with_gold.evidence["unpaired"] == list(range(len(others)))  # the log keeps which, for a person
    assert without.evidence["uncited"] == 1


def test_a_wrong_cited_location_is_still_named(verify) -> None:
    """What the feedback may say: a citation the document does not bear out names its place."""
    task = build_task(random.Random("doc-attacks2-moved"), 1, "doc-a2-moved", "figure", pdf=False)
    ref = _ref(task)
    cite = ref["evidence"][0]
    moved = {"location": {**cite["location"], "column": "No such year"}, "quote": cite["quote"]}
    got = verify(task, json.dumps({**ref, "evidence": [moved]}))
    assert got.error_class == "evidence" and "No such year" in got.feedback and PAIRING in got.feedback


def _branches(task: Task) -> list[str]:
    """The two amounts of a conditional question, read off the cited figures and the clause's two rates,
    the condition never evaluated."""
    ev = _ref(task)["evidence"]
    if task.tags[1] == "covenant":
        debt = Decimal(ev[1]["quote"].replace(",", "")) * 1000
        amounts = [debt * Decimal("2.75") / 100, debt * Decimal("1.50") / 100]
    else:
        shares = Decimal(ev[2]["quote"].replace(",", "")) * 1000
        amounts = [shares * Decimal("0.40"), shares * Decimal("0.15")]
    gold = Decimal(task.fields["answer"]["number"])
    return [format(a, "f") for a in sorted(amounts, key=lambda a: a == gold)]  # the wrong branch first


@pytest.mark.parametrize("kind", ["covenant", "dividend"])
def test_guess_and_check_on_a_conditional_question_ends_at_the_wrong_branch(verify, kind) -> None:
    rng = random.Random(f"doc-attacks2-{kind}")
    tasks = [build_task(rng, 4, f"doc-a2-{kind}-{i}", kind, pdf=False) for i in range(2)]
    for task in tasks:
        ref = _ref(task)
        env = RepairEnv(verify, lambda t: [1], lambda t: [2], max_attempts=3)
        env.reset(task)
        outcomes = []
        for amount in _branches(task):
            step = env.step(Generation((), (), (), json.dumps({**ref, "answer": amount}), "eos"))
            outcomes.append((step.verdict.outcome, step.verdict.error_class))
            if step.done:
                break
        assert outcomes == [("fail", "wrong_answer")], (task.id, outcomes)


def test_guess_and_check_on_the_restated_question_ends_at_the_restated_figure(verify) -> None:
    """The document prints the restated net income and the originally reported one: answered with the
    restated, told wrong, the original passed on the second try (30 of 30). The task says the answer is
    one of two (``closed``); a wrong one ends the repair."""
    rng = random.Random("doc-attacks2-restated")
    for i in range(3):
        task = build_task(rng, 3, f"doc-a2-restated-{i}", "restated", pdf=False)
        gold = int(Decimal(task.fields["answer"]["number"]))
        others = sorted({_dollars(c["quote"], title) for c, title in _candidates(task)} - {gold})
        assert task.fields["closed"] is True and others, task.id  # the restated figure is in the document
        ref = _ref(task)
        env = RepairEnv(verify, lambda t: [1], lambda t: [2], max_attempts=3)
        env.reset(task)
        step = env.step(Generation((), (), (), json.dumps({**ref, "answer": others[0]}), "eos"))
        assert (step.verdict.outcome, step.verdict.error_class, step.done) == ("fail", "wrong_answer", True), task.id


@pytest.mark.parametrize("wrong", ["zero", "restated in millions"])
def test_the_restated_question_ends_on_an_off_target_probe_or_a_rescaled_trap(verify, wrong) -> None:
    """Two dodges of the rule above: probe with an answer that is neither figure (0), to keep the two
    tries for the figures; or give the restated figure in another scale, hoping a rescaled trap is
    not the trap. Each is a wrong conclusion to a one-of-two answer: the repair ends there."""
    task = build_task(random.Random("doc-attacks2-restated-dodge"), 3, "doc-a2-restated-dodge", "restated", pdf=False)
    gold = int(Decimal(task.fields["answer"]["number"]))
    trap = sorted({_dollars(c["quote"], title) for c, title in _candidates(task)} - {gold})[0]
    answer = {"answer": 0, "scale": ""} if wrong == "zero" else {"answer": str(Decimal(trap) / 10**6), "scale": "million"}
    env = RepairEnv(verify, lambda t: [1], lambda t: [2], max_attempts=3)
    env.reset(task)
    step = env.step(Generation((), (), (), json.dumps({**_ref(task), **answer}), "eos"))
    assert (step.verdict.outcome, step.verdict.error_class, step.done) == ("fail", "wrong_answer", True)


def test_a_wrong_amount_of_an_unconditional_question_is_still_repaired(verify) -> None:
    task = build_task(random.Random("doc-attacks2-total"), 2, "doc-a2-total", "total", pdf=False)
    ref = _ref(task)
    env = RepairEnv(verify, lambda t: [1], lambda t: [2], max_attempts=3)
    env.reset(task)
    assert not env.step(Generation((), (), (), json.dumps({**ref, "answer": ref["answer"] + 1000}), "eos")).done
    assert env.step(Generation((), (), (), str(task.reference), "eos")).verdict.passed


@pytest.mark.parametrize("scale", [[], {"a": 1}])
def test_a_record_whose_answer_scale_is_not_a_string_is_refused_in_one_line(scale) -> None:
    """A task file's ``answer.scale`` given as a list or an object: the record's one-line error, not a
    ``TypeError`` traceback (``scale in SCALES`` hashed it)."""
    from posttrain.errors import UserError

    task = build_task(random.Random("doc-attacks2-scale"), 1, "doc-a2-scale", "figure", pdf=False)
    record = {"id": task.id, "domain": "doc", "prompt": task.prompt, **task.fields,
              "answer": {**task.fields["answer"], "scale": scale}}
    with pytest.raises(UserError) as got:
        ENV.parse_task(record, "tasks.jsonl")
    assert "answer" in str(got.value) and "\n" not in str(got.value).strip()


@pytest.mark.parametrize("answer", ["1" * 5000, "1" * 400 + "%", "(" + "\u0663" * 5000 + ")", ["Retail", "9" * 4400]])
def test_a_text_answer_of_a_long_digit_run_is_a_wrong_answer_not_a_checker_error(verify, answer) -> None:
    """TAT-QA's normalisation read a token of digits as an int: past 4,300 digits ``int()`` raised
    ``ValueError``, past ~300 digits times a percent ``OverflowError``, out of the check (``exception:``,
    and a wrong yes/no that raised never ended the repair). Each is a wrong answer now; a closed one's is final."""
    base = build_task(random.Random("doc-attacks2-text"), 1, "doc-a2-text", "figure", pdf=False)
    ref = _ref(base)
    for gold in ("yes", "Net income"):
        task = Task(id=f"{base.id}-{gold}", domain="doc", prompt="Which?", fields={**base.fields, "answer": {"text": gold}},
                    tags=base.tags, limits=base.limits)
        got = verify(task, json.dumps({"answer": answer, "scale": "", "evidence": ref["evidence"]}))
        assert (got.outcome, got.error_class) == ("fail", "wrong_answer"), (gold, got.feedback)
        assert got.ends_repair  # every wrong text answer: a span is one of a few (test_docfiles_attacks4.py)
