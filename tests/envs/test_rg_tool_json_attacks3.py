"""A third adversarial read of the rg, tool and json verifiers, played as a reward-hacking policy on
generated tasks through each domain's check (``_check.handle_check``, ``check_tool_calls``,
``check_json``, in process here).

Holes found (each test failed before its fix):

- rg copy of the question: string_insertion's answer was the input string unchanged (no pattern
  occurs) in 95% of its default tasks, so the question's last word passed them; string_manipulation's
  28%. Generation now holds the last word copied to the same share as a constant or a copied number
  (``_generate.guesses``), string_insertion drawing enough entries to meet it.
- rg honest answer refused: string_manipulation's rules can delete a string down to nothing, and its
  reference (the empty answer) failed, as the default scorer gives an empty answer 0.

Held (regression cases): rg near answers and hedges (a knights_knaves person given both roles, a
polynomial root given twice), tool calls with a confusable or re-cased name, a BOM or arguments
encoded twice, json with a BOM, trailing comma, a Python literal, two documents, a wrong fenced
document beside a right bare one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from posttrain.envs import get_domain
from posttrain.envs.json._env import check_json
from posttrain.envs.rg._check import CLOSE, OPEN, handle_check
from posttrain.envs.rg._domain import rg_domain
from posttrain.envs.rg._generate import MAX_SHARE
from posttrain.envs.tool._calls import check_tool_calls


def _rg(task: Any, answer: str) -> dict[str, Any]:
    request = {"generator": task.domain.removeprefix("rg/"), "spec": task.fields["config"], "question": task.prompt,
               "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"],
               "response": f"{OPEN}{answer}{CLOSE}"}
    return handle_check(request)


@pytest.mark.parametrize(("generator", "level"), [("string_insertion", None), ("string_insertion", 0),
                                                  ("string_insertion", 1), ("string_manipulation", None)])
def test_the_question_s_last_word_copied_passes_no_more_than_the_share(generator: str, level: int | None) -> None:
    domain = rg_domain(generator)
    tasks = domain.generate_tasks(40, seed=3) if level is None else domain.generate_level(40, level=level, seed=3)
    assert all(_rg(t, t.fields["answer"])["outcome"] == "pass" for t in tasks)
    copied = sum(_rg(t, t.prompt.split()[-1])["outcome"] == "pass" for t in tasks)
    assert copied <= MAX_SHARE * len(tasks)


def test_string_manipulation_s_empty_result_is_its_answer() -> None:
    tasks = rg_domain("string_manipulation").generate_level(40, level=3, seed=1)
    empty = [t for t in tasks if t.fields["answer"] == ""]
    assert empty, "no task reduced its string to nothing: pick another seed"
    for task in empty:
        assert _rg(task, "")["outcome"] == "pass"
        assert _rg(task, "a")["outcome"] == "fail"
    other = next(t for t in tasks if t.fields["answer"])
    assert _rg(other, "")["outcome"] == "fail"
    assert _rg(other, other.fields["answer"])["outcome"] == "pass"


def test_rg_hedges_fail() -> None:
    for task in rg_domain("knights_knaves").generate_tasks(6, seed=3):
        meta = task.fields["rg_metadata"]
        terms = meta["knight_knave_terms"]
        both = ", ".join(f"{n} is a {terms[role]}" for n in meta["names"] for role in ("knight", "knave"))
        assert _rg(task, both)["outcome"] == "fail", both
    for task in rg_domain("polynomial_equations").generate_tasks(6, seed=3):
        assert _rg(task, f"{task.fields['answer']}, {task.fields['answer']}")["outcome"] == "fail"


TOOL_TASKS = get_domain("tool").generate_tasks(20, seed=5)


def _calls(task: Any) -> list[dict[str, Any]]:
    return [{"name": c["name"], "arguments": dict(c["arguments"])} for c in task.fields["expected_calls"]]


def _tagged(calls: list[dict[str, Any]], prefix: str = "") -> str:
    return "".join(f"<tool_call>{prefix}{json.dumps(c)}</tool_call>" for c in calls)


TOOL_ATTACKS = {
    "a zero-width space after the name": lambda t: _tagged([{**c, "name": c["name"] + "\u200b"} for c in _calls(t)]),
    "the name upper-cased": lambda t: _tagged([{**c, "name": c["name"].upper()} for c in _calls(t)]),
    "a BOM before each call": lambda t: _tagged(_calls(t), "\ufeff"),
    "arguments encoded twice": lambda t: _tagged([{**c, "arguments": json.dumps(json.dumps(c["arguments"]))}
                                                  for c in _calls(t)]),
    "the calls as Python calls in prose": lambda t: "\n".join(
        f"{c['name']}({', '.join(f'{k}={v!r}' for k, v in c['arguments'].items())})" for c in _calls(t)),
}


@pytest.mark.parametrize("name", list(TOOL_ATTACKS))
def test_tool_forms_that_are_not_the_calls_fail(name: str) -> None:
    for task in TOOL_TASKS:
        f = task.fields
        verdict = check_tool_calls(f["tools"], f["expected_calls"], f["ordered"], TOOL_ATTACKS[name](task))
        assert verdict.outcome == "fail", (task.id, verdict.feedback)


JSON_TASKS = get_domain("json").generate_tasks(20, seed=5)


def _doc(task: Any, **changes: Any) -> str:
    return json.dumps({**task.fields["expected"], **changes})


JSON_ATTACKS = {
    "a BOM": lambda t: "\ufeff" + _doc(t),
    "a trailing comma": lambda t: _doc(t)[:-1] + ", }",
    "a Python literal": lambda t: repr(t.fields["expected"]),
    "two documents glued": lambda t: _doc(t) + _doc(t),
    "the right one bare, a wrong one fenced": lambda t: _doc(t) + f"\n```json\n{_doc(t, age=1)}\n```",
    "nested 200 deep": lambda t: "[" * 200 + "]" * 200,
}


@pytest.mark.parametrize("name", list(JSON_ATTACKS))
def test_json_forms_that_are_not_the_document_fail(name: str) -> None:
    for task in JSON_TASKS:
        verdict = check_json(task.fields["schema"], task.fields["expected"], JSON_ATTACKS[name](task))
        assert verdict.outcome == "fail", (task.id, verdict.feedback)


def test_codeio_runs_its_programs_away_from_the_trainer(tmp_path, monkeypatch, capfd) -> None:
    """codeio makes an entry by running its dataset's program in the generating process: at level 1
    (seed 1) one wrote ``sailor_performance.csv`` into the working directory (the user's project while a
    recipe trains; the repository's root under the suite) and another (seed 2) printed on the trainer's
    stdout. It is generated in a child interpreter in a directory of its own, with the same entries."""
    from posttrain.envs.rg._generate import generate_here

    monkeypatch.chdir(tmp_path)
    env = get_domain("rg/codeio")
    tasks = [t for seed in (1, 2) for t in env.generate_level(10, level=1, seed=seed)]
    assert list(tmp_path.iterdir()) == [] and capfd.readouterr().out == ""
    assert len(tasks) == 20 and all(t.reference for t in tasks)
    here = generate_here("codeio", {"level": 1}, n=10, seed=1)  # in this process, as before: the same entries
    assert [e["question"] for e in here] == [t.prompt for t in tasks[:10]]
    assert [p.name for p in tmp_path.iterdir()] == ["sailor_performance.csv"]  # and what it did here
