"""The doc domain: the document format and locations, the conclusion rule (FinQA's rounding, TAT-QA's
scale folding), one-to-one evidence, FinQA's execution accuracy and TAT-QA's EM/F1 on hand-computed
cases, the FinQA/TAT-QA loaders on hand-written files in their formats, the generator against the
figures it planted, the PDF's text layer, and the CLI on one task."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from validate_cli import check_tasks_validate

from posttrain.envs import get_domain, task_to_record
from posttrain.envs.doc import (
    finqa_execute,
    finqa_execution_accuracy,
    load_finqa,
    load_tatqa,
    pdf_pages,
    render_pdf,
    tatqa_em_f1,
    tatqa_scores,
)
from posttrain.envs.doc._anchors import finqa_exe_match, tatqa_metrics
from posttrain.envs.doc._check import check_doc, conclusion_problem, evidence_problems
from posttrain.envs.doc._document import DocumentError, parse_document, resolve
from posttrain.envs.doc._env import build_task
from posttrain.envs.doc._gen import build_report
from posttrain.errors import TaskError
from posttrain.tasks import load_tasks

ENV = get_domain("doc")
DATA = Path(__file__).with_name("data")
ROOT = Path(__file__).resolve().parents[2]

DOC = """<!-- page 1 -->

# 1. Overview

Revenue of the Cloud segment was $12,400,000 in fiscal 2023.

**Table 1: Income (in thousands of U.S. dollars)**

| Item | 2023 | 2022 |
|---|---|---|
| Revenue | 12,345 | 11,000 |
| Net income | (1,200) | 900 |

<!-- page 2 -->

## Note 3. Debt

If the leverage ratio exceeds 3.0, the margin is 2.75%; otherwise it is 1.50%.
"""


def test_the_document_format_and_its_locations() -> None:
    doc = parse_document(DOC)
    assert doc.pages == 2 and list(doc.tables) == ["table 1"]
    cell = {"page": 1, "table": "table 1", "row": "net income", "column": "2023"}
    assert resolve(doc, cell) == ("(1,200)", None)
    assert resolve(doc, {"page": 2, "section": "Note 3"})[0] == [
        "If the leverage ratio exceeds 3.0, the margin is 2.75%; otherwise it is 1.50%."]
    assert resolve(doc, {**cell, "page": 2})[1] == "Table 1 is not on page 2"
    assert resolve(doc, {**cell, "row": "EBITDA"})[1] == "Table 1 has no row 'EBITDA'"
    assert resolve(doc, {"page": 1, "section": "Note 3"})[1] == "section 'Note 3' has no text on page 1"
    for bad, said in [("<!-- page 2 -->\nx", "page marker 2"), ("| a | b |\n|---|---|\n| 1 | 2 |", "caption"),
                      ("**Table 1: x**\n| a | b |\n|---|---|\n| 1 |", "1 cells"),
                      ("**Table 1: x**\n| a | b |\n|---|---|\n| r | 1 |\n| r | 2 |", "two rows")]:
        with pytest.raises(DocumentError, match=said):
            parse_document(bad)


@pytest.mark.parametrize(("gold", "answer", "scale", "ok"), [
    ({"number": "12345000"}, 12345000, "", True), ({"number": "12345000"}, 12345, "thousand", True),
    ({"number": "12345000"}, "12,345,000", "", True), ({"number": "12345000"}, 12345, "", False),
    ({"number": "12.34", "scale": "percent"}, Decimal("0.1234"), "", True),
    ({"number": "12.34", "scale": "percent"}, Decimal("12.34"), "", False),
    ({"number": "0.01639"}, Decimal("0.016394"), "", True),  # FinQA: both sides to 5 decimals
    ({"number": "0.01639"}, Decimal("0.01640"), "", False),
    ({"text": "yes"}, "Yes.", "", True), ({"text": ["Europe", "North America"]}, ["north america", "europe"], "", True),
    ({"text": ["Europe", "North America"]}, ["Europe"], "", False)])
def test_the_conclusion_rule(gold, answer, scale, ok) -> None:
    assert (conclusion_problem(gold, answer, scale) is None) is ok


def test_evidence_pairs_off_one_to_one() -> None:
    doc = parse_document(DOC)
    rev = {"page": 1, "table": "Table 1", "row": "Revenue", "column": "2023"}
    net = {"page": 1, "table": "Table 1", "row": "Net income", "column": "2023"}
    clause = {"page": 2, "section": "Note 3. Debt"}
    facts = [{"at": [rev]}, {"at": [clause], "contains": "exceeds 3.0"}]
    good = [{"location": rev, "quote": "12,345"},
            {"location": clause, "quote": "If the leverage ratio exceeds 3.0, the margin is 2.75%"}]
    assert evidence_problems(doc, facts, good) == []
    assert evidence_problems(doc, facts, good[::-1]) == []
    cases = {
        "the quote at another cell": [{"location": net, "quote": "12,345"}, good[1]],
        "a clause quote without its condition": [good[0], {"location": clause, "quote": "the margin is 2.75%"}],
        "one figure twice": [good[0], good[0], good[1]],
        "an extra, valid citation": [*good, {"location": net, "quote": "(1,200)"}],
        "a figure left out": good[:1],
        "a quote not in the document": [good[0], {"location": clause, "quote": "The margin is 0%."}],
    }
    for name, cites in cases.items():
        assert evidence_problems(doc, facts, cites), name


def test_the_verdict_on_a_hand_written_task() -> None:
    answer = {"number": "1.50", "scale": "percent"}
    facts = [{"at": [{"page": 2, "section": "Note 3"}], "contains": "exceeds 3.0"}]
    cite = {"location": {"page": 2, "section": "Note 3"}, "quote": "exceeds 3.0, the margin is 2.75%; otherwise it is 1.50%"}
    verdict = check_doc(DOC, answer, facts, json.dumps({"answer": 1.5, "scale": "percent", "evidence": [cite]}))
    assert verdict.passed, verdict.feedback
    wrong = check_doc(DOC, answer, facts, json.dumps({"answer": 2.75, "scale": "percent", "evidence": [cite]}))
    assert wrong.error_class == "wrong_answer" and "1.5" not in wrong.feedback


def test_finqa_execution_on_hand_computed_programs() -> None:
    table = [["", "2019", "2018"], ["revenue", "$ 5829", "$ 5735"], ["costs", "( 210 )", "( 198 )"]]
    assert finqa_execute("subtract(5829, 5735), divide(#0, 5735)") == round((5829 - 5735) / 5735, 5) == 0.01639
    assert finqa_execute("table_average(revenue, none)", table) == 5782.0
    assert finqa_execute("table_max(costs, none)", table) is None  # FinQA cannot read "( 210 )": invalid
    assert finqa_execute("greater(5, 3)") == "yes" and finqa_execute("multiply(50%, const_100)") == 50.0
    assert finqa_execute("exp(2, 3), subtract(#0, const_m1)") == 9.0
    for bad in ("divide(1, 0)", "add(1)", "remove(1, 2)", "add(#3, 1)", "__import__('os')", "exp(10, 100000)"):
        assert finqa_execute(bad) is None, bad
    examples = json.loads((DATA / "finqa_sample.json").read_text())
    predictions = {examples[0]["id"]: "subtract(5829, 5735), divide(#0, 5735)", examples[1]["id"]: 767.666671,
                   examples[2]["id"]: "greater(790, 812)"}
    assert finqa_execution_accuracy(predictions, examples) == pytest.approx(2 / 3)


def test_tatqa_em_f1_on_hand_computed_cases() -> None:
    arith = {"answer": 83, "answer_type": "arithmetic", "scale": "million"}
    assert tatqa_em_f1("83", "million", arith) == (1.0, 1.0)
    assert tatqa_em_f1("83000000", "", arith) == (1.0, 1.0)  # the scale folded in
    assert tatqa_em_f1("83", "", arith) == (0.0, 0.0)
    spans = {"answer": ["Europe", "North America"], "answer_type": "multi-span", "scale": ""}
    assert tatqa_em_f1(["North America", "Europe"], "", spans) == (1.0, 1.0)
    # one span of two: the bags are {europe} vs {europe, north, america}: F1 = 2 * 1 * 1/3 / (1 + 1/3) = 0.5
    assert tatqa_em_f1(["Europe"], "", spans) == (0.0, 0.5)
    assert tatqa_metrics(["the Cloud", "Retail"], ["retail", "cloud"]) == (1.0, 1.0)
    assert tatqa_em_f1("", "", arith) == (0.0, 0.0)
    dataset = json.loads((DATA / "tatqa_sample.json").read_text())
    scores = tatqa_scores({"q-1": [83, "million"], "q-2": [["Europe"], ""], "q-3": [["39.0%"], ""],
                           "q-4": [5.87, "percent"]}, dataset)
    assert scores == {"em": 0.75, "f1": pytest.approx((1 + 0.5 + 1 + 1) / 4), "scale": 1.0, "questions": 4.0}


def test_finqa_and_tatqa_files_load_as_doc_tasks_that_verify() -> None:
    finqa, tatqa = load_finqa(DATA / "finqa_sample.json"), load_tatqa(DATA / "tatqa_sample.json")
    assert [t.fields["answer"] for t in finqa] == [{"number": "0.01639", "scale": ""},
                                                   {"number": "767.66667", "scale": ""}, {"text": "yes"}]
    verify = ENV.make_verifier(None)
    cite = lambda row, col, quote: {"location": {"page": 1, "table": "Table 1", "row": row, "column": col}, "quote": quote}  # noqa: E731
    answer = json.dumps({"answer": 0.016391, "scale": "", "evidence": [cite("net revenues", "2019", "$ 5829"),
                                                                       cite("net revenues", "2018", "$ 5735")]})
    assert verify(finqa[0], answer).passed
    by_text = json.dumps({"answer": 0.01639, "scale": "", "evidence": [
        {"location": {"page": 1, "section": "Text before the table"}, "quote": "net revenues were $ 5829 million in 2019"},
        cite("net revenues", "2018", "$ 5735")]})
    assert verify(finqa[0], by_text).passed
    spans = json.dumps({"answer": ["North America", "Europe"], "scale": "", "evidence": []})
    assert verify(tatqa[1], spans).passed
    pct = json.dumps({"answer": 0.0587, "evidence": [cite("Revenue", "2018", "1,413"), cite("Revenue", "2019", "1,496")]})
    assert verify(tatqa[3], pct).passed


def test_the_generated_answers_agree_with_the_planted_figures() -> None:
    for seed in range(10):
        task = build_task(random.Random(seed), 2, "t", "total")
        report = build_report(random.Random(seed), 2)  # the same draws: the same report
        assert report.text == task.fields["document"]
        year = int(task.prompt.split("fiscal ")[1][:4])
        a, b = task.prompt.split("revenue of the ")[1].split(" segments")[0].split(" and ")
        i = report.facts["years"].index(year)
        assert Decimal(task.fields["answer"]["number"]) == report.facts["seg_rev"][a][i] + report.facts["seg_rev"][b][i]
        pages = [fact["at"][0]["page"] for fact in task.fields["evidence"]]
        assert pages[0] != pages[1]  # a total across tables on different pages
        for kind in ("total", "contradiction", "covenant", "dividend"):  # the FinQA program computes the gold
            other = build_task(random.Random(seed), 4, "p", kind)
            assert finqa_exe_match(other.fields["program"], float(other.fields["answer"]["number"])), (kind, seed)
        restated = build_task(random.Random(seed), 3, "r", "restated")
        rep3 = build_report(random.Random(seed), 3)
        assert Decimal(restated.fields["answer"]["number"]) == rep3.facts["restatement"]["original_net"]


def test_every_level_passes_its_reference_and_fails_its_no_op() -> None:
    verify = ENV.make_verifier(None)
    sizes = {}
    for level in range(1, 6):
        tasks = ENV.generate_level(2 if level < 5 else 1, level=level, seed=5)
        sizes[level] = min(len(t.fields["document"]) for t in tasks)
        for task in tasks:
            assert task.difficulty == level
            assert verify(task, str(task.reference)).passed, (task.id, verify(task, str(task.reference)).feedback)
            assert verify(task, ENV.noop_response(task)).outcome == "fail"
    assert sizes[1] >= 7_000 and sizes[5] >= 400_000  # ~2k to ~120k tokens at 4 characters a token


def test_the_pdf_keeps_every_page_and_every_figure() -> None:
    report = build_report(random.Random(11), 3)
    pages = pdf_pages(render_pdf(report.text))
    small = build_report(random.Random(11), 1).text
    assert render_pdf(small) == render_pdf(small)
    assert len(pages) == parse_document(report.text).pages
    missing = [c for c in report.cells if c.text not in pages[c.page - 1]]
    assert missing == []
    task = build_task(random.Random(2), 2, "p", "figure")
    pdf_task = ENV.parse_task({**task_to_record(task), "pdf": True}, "test")
    assert "[Page 1]" in ENV.render_prompt(pdf_task) and "<!-- page" not in ENV.render_prompt(pdf_task)


def test_bad_records_name_their_field() -> None:
    task = build_task(random.Random(0), 2, "t", "total")
    record = json.loads(json.dumps(task_to_record(task)))
    loc = record["evidence"][0]["at"][0]
    cases = {
        "document": {**record, "document": "<!-- page 3 -->\n"},
        "answer": {**record, "answer": {"number": "NaN"}},
        "evidence": {**record, "evidence": [{"at": [{**loc, "row": "No such row"}]}]},
        "program": {**record, "program": "__import__('os').system('x')"},
    }
    for field, bad in cases.items():
        with pytest.raises(TaskError, match=f"field '{field}'"):
            ENV.parse_task(bad, "test")


def test_posttrain_verify_on_one_doc_task(tmp_path: Path) -> None:
    task = build_task(random.Random(3), 1, "cli-task", "figure")
    (tmp_path / "task.json").write_text(json.dumps(task_to_record(task)))
    (tmp_path / "good.txt").write_text(str(task.reference))
    out = subprocess.run([sys.executable, "-m", "posttrain.cli", "verify", "--task", str(tmp_path / "task.json"),
                          "--response", str(tmp_path / "good.txt")], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["outcome"] == "pass", out.stderr


def test_hostile_responses_fail_and_never_cost_the_host() -> None:
    """Each runs in the check worker under its CPU budget: a fail, never an infra error, never a hang."""
    task = ENV.generate_level(1, level=4, seed=1)[0]
    verify = ENV.make_verifier(None)
    ref = json.loads(str(task.reference))
    section = {"page": 2, "section": "x" * 1000}
    responses = {
        "a 90k-character quote": {**ref, "evidence": [{"location": {"page": 3, "section": "2"}, "quote": "y" * 90_000}]},
        "a 90k-character row name": {**ref, "evidence": [{"location": {"page": 1, "table": "Table 1", "row": "r" * 90_000,
                                                                        "column": "2020"}, "quote": "1"}]},
        "a page beyond any document": {**ref, "evidence": [{"location": {"page": 10 ** 18, "section": "1"}, "quote": "a"}]},
        "16 citations of 5k characters": {**ref, "evidence": [{"location": section, "quote": "z" * 5000}] * 16},
        "an answer of 90k digits": {**ref, "answer": "9" * 90_000},
    }
    for name, response in responses.items():
        verdict = verify(task, json.dumps(response))
        assert verdict.outcome == "fail" and not str(verdict.error_class).startswith("infra"), (name, verdict)


def test_a_long_number_in_a_text_answer_is_read_in_linear_time() -> None:
    """TAT-QA's number reading searched a token of 20k digits in quadratic time: ten CPU seconds of the
    check worker for one 20 kB response (then a ``timeout``). Now a wrong answer at once; the span's
    other forms still pass."""
    task = load_tatqa(DATA / "tatqa_sample.json")[2]  # gold: the span "39.0%", judged on its conclusion alone
    verify = ENV.make_verifier(None)
    verdict = verify(task, json.dumps({"answer": "9." + "9" * 20_000, "scale": "", "evidence": []}))
    assert (verdict.outcome, verdict.error_class) == ("fail", "wrong_answer"), verdict
    for form in ("39.0%", "39%", "0.39"):
        assert verify(task, json.dumps({"answer": form, "scale": "", "evidence": []})).passed, form


@pytest.mark.parametrize("hedge", ["39.0% or 40%", "39.0%, 40.0%", "0.39 or 0.40", "39.0% 39.0%", "39.0 % (maybe 41%)",
                                   "about 39.0%", "39.0%\u200b", "39.0%" + " " * 5_000 + "1"])
def test_a_text_answer_hedged_around_the_right_number_fails(hedge: str) -> None:
    """TAT-QA's number reading takes the first number of a span, and a policy would put the right one
    first and more after it (or pad it): the span as a whole must be the gold's, so each is a wrong
    answer, never the first number's pass."""
    task = load_tatqa(DATA / "tatqa_sample.json")[2]  # gold: the span "39.0%"
    verdict = ENV.make_verifier(None)(task, json.dumps({"answer": hedge, "scale": "", "evidence": []}))
    assert (verdict.outcome, verdict.error_class) == ("fail", "wrong_answer"), verdict


def test_canaries_fail_the_honest_response() -> None:
    from posttrain.envs import HasCanaries

    assert isinstance(ENV, HasCanaries)
    verify = ENV.make_verifier(None)
    rng = random.Random("doc-canary-2")
    plain = [build_task(rng, 1 + i % 3, f"doc-canary-2-{i}") for i in range(4)]
    for canary, task in zip(ENV.canary_tasks(4, seed=2), plain, strict=True):
        assert "canary" in canary.tags and canary.reference is None
        assert ENV.parse_task(json.loads(json.dumps(task_to_record(canary))), "canary") == canary
        assert verify(task, str(task.reference)).passed and not verify(canary, str(task.reference)).passed


@pytest.mark.parametrize("module", ["posttrain.envs.doc", "posttrain.envs.doc._document", "posttrain.envs.doc._check",
                                    "posttrain.envs.doc._anchors", "posttrain.envs.doc._episode",
                                    "posttrain.envs.doc._anchor_cli"])
def test_docstring_examples(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_generator_params_pick_kinds_length_and_pdf() -> None:
    verify = ENV.make_verifier(None)
    short = ENV.generate_params(2, level=1, params={"kinds": ["figure"], "filler": 0, "pdf": False})
    assert [t.tags for t in short] == [("doc", "figure")] * 2 and not any(t.fields.get("pdf") for t in short)
    assert max(len(t.fields["document"]) for t in short) < 5000 < min(
        len(t.fields["document"]) for t in ENV.generate_level(2, level=1))
    assert all(verify(t, str(t.reference)).passed for t in short)
    assert ENV.generate_params(2, seed=3) == ENV.generate_params(2, seed=3)
    for params, said in [({"kind": ["figure"]}, "unknown generator param"), ({"kinds": ["nope"]}, "unknown kind"),
                         ({"kinds": ["covenant"]}, "needs level 4"), ({"filler": -1}, "filler"), ({"pdf": 1}, "pdf")]:
        with pytest.raises(ValueError, match=said):
            ENV.generate_params(1, level=2, params=params)


def test_credit_only_for_a_wrong_conclusion_from_rightly_cited_figures() -> None:
    """Under any reward weights: the no-op totals 0, citations that do not hold (sprayed, repeated,
    invented, misplaced) earn no format credit; only a wrong conclusion from valid evidence does."""
    verify = ENV.make_verifier(None)
    task = build_task(random.Random(4), 1, "credit", "figure")
    ref = json.loads(str(task.reference))
    assert verify(task, ENV.noop_response(task)).components["format"] == 0.0
    sprayed = json.dumps({**ref, "evidence": ref["evidence"] * 2})
    assert verify(task, sprayed).error_class == "evidence" and verify(task, sprayed).components["format"] == 0.0
    wrong = json.dumps({**ref, "answer": ref["answer"] + 1000})
    assert verify(task, wrong).error_class == "wrong_answer" and verify(task, wrong).components["format"] == 1.0


def test_a_users_finqa_and_tatqa_files_convert_and_score_as_the_anchors_do(tmp_path: Path) -> None:
    """``python -m posttrain.envs.doc convert|score``: the anchors' files become doc tasks, and answers to
    them (posttrain's records) score with the anchor's own metric, whatever their evidence."""
    for anchor, name, n in (("finqa", "finqa_sample.json", 3), ("tatqa", "tatqa_sample.json", 4)):
        out = subprocess.run([sys.executable, "-m", "posttrain.envs.doc", "convert", anchor, str(DATA / name),
                              str(tmp_path / f"{anchor}.jsonl")], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr
        assert len(load_tasks(tmp_path / f"{anchor}.jsonl")) == n
    say = lambda answer, scale="": json.dumps({"answer": answer, "scale": scale, "evidence": []})  # noqa: E731
    records = [  # FinQA: 1.639 % folds to 0.01639 (hit); 767.7 misses 767.66667; a repair attempt never counts
        {"task_id": "finqa-ACME/2019/page_12.pdf-1", "completion": say(1.639, "percent")},
        {"task_id": "finqa-ACME/2019/page_12.pdf-2", "completion": say(767.7)},
        {"task_id": "finqa-ACME/2019/page_12.pdf-2", "completion": say(767.66667), "attempt": 1},
        {"task_id": "finqa-ACME/2019/page_12.pdf-3", "completion": "```json\n" + say("yes") + "\n```"},
        # TAT-QA: q-1 right with its scale; q-2 one span of two (EM 0, F1 0.5); q-3 does not parse; q-4 no answer
        {"task_id": "tatqa-q-1", "completion": say(83, "million")},
        {"task_id": "tatqa-q-2", "response": say(["Europe"])},
        {"task_id": "tatqa-q-3", "completion": "the gross margin was 39.0%"}]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    got = {}
    for anchor, name in (("finqa", "finqa_sample.json"), ("tatqa", "tatqa_sample.json")):
        out = subprocess.run([sys.executable, "-m", "posttrain.envs.doc", "score", anchor, str(DATA / name),
                              str(tmp_path / "records.jsonl")], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert out.returncode == 0, out.stderr
        got[anchor] = json.loads(out.stdout)
    assert got["finqa"]["finqa_execution_accuracy"] == pytest.approx(2 / 3) and got["finqa"]["answered"] == 3
    assert got["tatqa"]["tatqa_em"] == 0.25 and got["tatqa"]["tatqa_f1"] == pytest.approx((1 + 0.5) / 4)
    assert got["tatqa"]["answered"] == 2 and got["tatqa"]["questions"] == 4
    # the same numbers the functions give on the anchors' own prediction files
    examples = json.loads((DATA / "finqa_sample.json").read_text())
    assert finqa_execution_accuracy({examples[0]["id"]: 0.01639, examples[1]["id"]: 767.7,
                                     examples[2]["id"]: "yes"}, examples) == pytest.approx(2 / 3)
    bad = subprocess.run([sys.executable, "-m", "posttrain.envs.doc", "score", "finqa", str(tmp_path / "none.json"),
                          str(tmp_path / "records.jsonl")], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "none.json" in bad.stderr


def test_tasks_validate_from_the_command_line(tmp_path: Path) -> None:
    """``posttrain tasks validate`` on doc examples (references pass, no-ops fail) and on a bad record."""
    check_tasks_validate(tmp_path, "doc", "answer", {"number": "NaN"})
