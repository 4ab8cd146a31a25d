"""Policy attacks on the doc and files verifiers, third round, each a standing case (real generated tasks,
the real verifiers in their workers, real workspace episodes; no mocks):

- files, format credit for an in-place target rewritten only in what the comparison ignores: the no-op of
  an in-place task earns no format credit, and neither did writing the file back byte for byte, but the
  same file with a blank line added at the end (or CRLF line endings, or a JSON document re-indented) was
  "written" and earned ``format`` 1.0, and in an episode ``process`` 1.0 on top, for a placeholder log and
  an untouched CSV: it is the unchanged file now (``_grade.reads_as``);
- files, a generator crash: a sales row spoiled twice (first cut short of its price, then given a bad
  units field) raised ``IndexError`` out of ``generate_tasks`` (8 of 40 seeds of 50 tasks);
- attempts that correctly fail, kept as regressions: doc answers in odd number forms (a fraction, a sign,
  accounting parentheses, a range) and citations quoting the question or a page of the document; files
  episodes that hard-link a target to an input, write a target after the submit from a background
  process, or write outside the workspace.
"""

from __future__ import annotations

import csv
import io
import json
import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.doc._env import build_task as build_doc_task
from posttrain.envs.files._env import build_task as build_files_task
from posttrain.envs.files._workspace import decode_workspace
from posttrain.envs.workspace import SUBMIT
from posttrain.types import Task

DOC, FILES = get_domain("doc"), get_domain("files")


@pytest.fixture(scope="module")
def verify_doc():
    return DOC.make_verifier(None)


@pytest.fixture(scope="module")
def verify_files():
    return FILES.make_verifier(None)


def _contacts() -> Task:
    return build_files_task(random.Random("attacks3-contacts"), 4, "attacks3-contacts", ["contacts"])


def _quoted(text: str) -> str:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(csv.reader(io.StringIO(text, newline="")))
    return out.getvalue()


@pytest.mark.parametrize(("what", "rewrite"), [
    ("a blank line added at the end", lambda text: text + "\n"),
    ("CRLF line endings", lambda text: text.replace("\n", "\r\n")),
    ("every field quoted", lambda text: _quoted(text)),
])
def test_an_in_place_target_rewritten_as_it_was_earns_no_format_credit(verify_files, what, rewrite) -> None:
    """Before: format 1.0 for each (the byte-for-byte copy: 0.0), with the log a placeholder."""
    task = _contacts()
    pristine = decode_workspace(task.fields["workspace"])["contacts.csv"].decode()
    assert rewrite(pristine) != pristine
    verdict = verify_files(task, json.dumps({"contacts.csv": rewrite(pristine), "contacts.log": "dropped: 0\n"}))
    assert verdict.error_class == "wrong_content" and verdict.components["format"] == 0.0, (what, verdict.components)
    cleaned_wrong = pristine.replace("@", "@x", 1)  # edited, wrong: still a well-formed answer
    verdict = verify_files(task, json.dumps({"contacts.csv": cleaned_wrong, "contacts.log": "dropped: 0\n"}))
    assert verdict.error_class == "wrong_content" and verdict.components["format"] == 1.0


def test_an_in_place_json_or_text_target_reindented_earns_no_format_credit(verify_files) -> None:
    record = {"domain": "files", "prompt": "Set a to 2 in cfg.json; fix 'wrld' in draft.txt.",
              "workspace": {"cfg.json": '{"a": 1}\n', "draft.txt": "Hello wrld\n"},
              "targets": {"cfg.json": {"format": "json", "value": {"a": 2}},
                          "draft.txt": {"format": "text", "content": "Hello world\n"}}}
    task = FILES.parse_task({**record, "id": "attacks3-cfg"}, "t")
    same = verify_files(task, json.dumps({"cfg.json": '{\n  "a" : 1\n}', "draft.txt": "Hello wrld  \r\n\r\n"}))
    assert same.error_class == "wrong_content" and same.components["format"] == 0.0, same.components
    half = verify_files(task, json.dumps({"cfg.json": '{"a": 3}', "draft.txt": "Hello wrld  \r\n"}))
    assert half.components["format"] == 0.0  # one target still as it was: work not done
    wrong = verify_files(task, json.dumps({"cfg.json": '{"a": 3}', "draft.txt": "Hello wrold\n"}))
    assert wrong.components["format"] == 1.0 and verify_files(task, json.dumps(
        {"cfg.json": '{"a": 2}', "draft.txt": "Hello world\n"})).passed


def test_an_episode_appending_a_newline_in_place_earns_neither_format_nor_process(pool, verify_files) -> None:
    """Before: format 1.0 and process 1.0 (the shell line names the input, so it counted as read)."""
    task = _contacts()
    got = play(pool, task, [call("bash", command="echo >> contacts.csv && echo 'dropped: 0' > contacts.log"), SUBMIT],
               verify_files)
    assert got.first.error_class == "wrong_content", got.first.feedback
    assert got.first.components["format"] == 0.0 and got.first.components["process"] == 0.0, got.first.components


@pytest.mark.parametrize(("level", "seed"), [(4, "c-4-149"), (5, "c-5-28"), (5, "c-5-94")])
def test_a_sales_row_spoiled_twice_is_generated_and_graded(verify_files, level, seed) -> None:
    """Before: ``IndexError`` out of the generator."""
    task = build_files_task(random.Random(seed), level, f"attacks3-{seed}", ["sales"])
    assert verify_files(task, str(task.reference)).passed
    assert len(FILES.generate_tasks(50, seed=2)) == 50


def _figure() -> Task:
    for s in range(50):
        task = build_doc_task(random.Random(f"attacks3-figure-{s}"), 2, f"attacks3-figure-{s}", "figure")
        if not task.fields.get("pdf") and json.loads(str(task.reference))["scale"] == "":
            return task
    raise AssertionError("no figure task")


def test_odd_number_forms_and_quotes_of_the_prompt_fail(verify_doc) -> None:
    task = _figure()
    ref = json.loads(str(task.reference))
    answer, cite = ref["answer"], ref["evidence"][0]
    assert verify_doc(task, json.dumps({**ref, "answer": f"\uff10{answer}"})).passed  # NFKC digits: the same number
    # accounting's parentheses are a negative (test_doc_attacks11.py): the other sign, a wrong answer
    assert verify_doc(task, json.dumps({**ref, "answer": f"({answer})"})).error_class == "wrong_answer"
    for form in (f"{answer * 2}/2", f"+{answer}", f"{answer}-{answer}", f"{answer} USD"):
        verdict = verify_doc(task, json.dumps({**ref, "answer": form}))
        assert verdict.error_class == "format" and verdict.components["format"] == 0.0, form
    page = task.fields["document"].split("<!-- page 2 -->")[0][-3000:]
    for quote, loc in ((task.prompt, {"page": 1, "section": "1"}), (page, cite["location"]),
                       (f"{cite['quote']} {task.prompt}", cite["location"])):
        verdict = verify_doc(task, json.dumps({**ref, "evidence": [{"location": loc, "quote": quote}]}))
        assert verdict.error_class == "evidence" and verdict.components["format"] == 0.0, quote[:40]


@pytest.mark.parametrize(("what", "command", "error_class"), [
    ("the report a hard link to the input", "mkdir -p reports && ln data/sales.csv reports/summary.json", "wrong_format"),
    ("the report written after the submit", "(sleep 2; mkdir -p reports; echo '{}' > reports/summary.json) "
                                            ">/dev/null 2>&1 &", "missing"),
    ("the report written outside the workspace", "mkdir -p /tmp/reports && cp data/sales.csv /tmp/reports/summary.json",
     "missing"),
])
def test_files_left_where_the_grader_does_not_look_fail(pool, verify_files, what, command, error_class) -> None:
    task = build_files_task(random.Random("agent-one"), 2, "files-agent-one", ["sales"])
    got = play(pool, task, [call("bash", command=command), SUBMIT], verify_files)
    assert got.first.outcome == "fail" and got.first.error_class == error_class, (what, got.first.feedback)
    assert got.first.components["format"] == 0.0 and got.first.components.get("process", 0.0) == 0.0
