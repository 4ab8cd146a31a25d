"""A third read of the json domain alone, as a policy that wants reward without the right document:
through the repair kit, the constant answer, lenient forms of numbers and literals, hedges among
several documents, and documents meant to crash or stall the check (tests/envs/test_json*.py,
test_tool_json_attacks*.py and test_rg_tool_json_attacks3.py pin the earlier reads; none is repeated).

Found, and fixed: a repair episode (``rl.episodes: repair``, ``posttrain eval --episodes repair``) went
on after a wrong value, whose feedback ("Wrong value: $.library_member: wrong value.", "$.pets:
expected 2 items, got 0") names the field, so the answer was a guess away where the field holds few
values. Over 300 generated tasks (seed 31), a policy that read name, age and city from the text but
never pets or membership, cycling them by the feedback, passed 32 in one attempt, 165 in 3, 289 in 5;
one cycling the generator's 10 names 33, 83, 146, and 300 in 10, paid in full (``rl.attempt_discount``
1.0). A wrong value now ends the episode (``Verdict.ends_repair``, as recall's wrong number): 32 and
33 at any count, what the first attempt passes. A format or schema failure (which the expected value
does not decide) is still repaired.

Held (no source change), pinned as regression cases:

- the constant answer: over 300 generated tasks every document is drawn once (the commonest of seed
  31 appears once); the field-wise commonest document of seed 31 passes 0 of 300 tasks of seed 32 and
  earns the format credit of an honest schema-valid wrong answer, no more; an empty object, every
  field null, the schema from the prompt pasted as the answer earn nothing (``schema``);
- lenient forms: Python's ``True``, a hex, zero-led or plus-signed age, full-width or Arabic-Indic
  digits, a key stated twice through an escape (``"\\u0061ge"``): ``format``; 0 of 300 each;
- hedges: two documents joined by "or" in prose, JSON Lines with the right one last, the document and
  an alternative under two keys, the document as a JSON string, an array of alternatives after the
  right fence: 0 of 300 each;
- the heaviest documents: the 200,000-character document of most schema errors (99,000 wrong pets,
  ~4 s of the 5 s CPU budget on a loaded 2-core host, ``schema``; pinned with 20,000), 10 MB of prose,
  2.5 million fence openings, 5 million backticks: each a ``format`` or ``schema`` fail (or a
  ``timeout``, the candidate's too) through the real worker pool, never an ``infra_error``; an age of 36 spelled with 99,000 zeros (``360...0e-99000``) is 36 and
  passes, one with 199,000 fraction digits is no integer (``schema``).
"""

from __future__ import annotations

import collections
import itertools
import json
import re
from typing import Any

import pytest

from posttrain.envs import RepairEnv
from posttrain.envs._repair import FEEDBACK_HEAD
from posttrain.envs.json import ENV
from posttrain.envs.json._env import _NAMES, check_json
from posttrain.policy import Generation, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch
from posttrain.types import Task

VERIFY = ENV.make_verifier(None)
TOK = build_char_tokenizer()
TASKS = ENV.generate_tasks(300, seed=31)
PETS = ("cat", "dog", "parrot", "rabbit")
_TEXT = re.compile(r"Text: (\w+) is (\d+) years old and lives in (\w+)\.")


def _doc(task: Task, **changes: Any) -> str:
    return json.dumps({**task.fields["expected"], **changes})


def _check(task: Task, response: str) -> Any:
    return check_json(task.fields["schema"], task.fields["expected"], response)


def _read(seen: str) -> dict[str, Any]:
    """The document the task's text gives, read from the prompt (a response's first line of context)."""
    text = seen.split("Text: ")[1].split("\n")[0]
    name, age, city = _TEXT.findall(seen)[0]
    return {"name": name, "age": int(age), "city": city, "pets": [p for p in PETS if f"a {p}" in text],
            "library_member": "is a member" in text}


class FeedbackReader:
    """A scripted policy that reads the text but for its ``blind`` fields, which it takes from the
    feedback: pets and membership (none and false, then the feedback's count and wrong item, the other
    boolean), or the name (the generator's names, one an attempt)."""

    def __init__(self, blind: str) -> None:
        self.blind = blind

    def answer(self, seen: str) -> str:
        doc = _read(seen)
        feedback = [line for line in seen.split("\n") if "Wrong value" in line]
        if self.blind == "name":
            return json.dumps({**doc, "name": _NAMES[len(feedback) % len(_NAMES)]})
        doc.update(pets=[], library_member=False)
        subsets = [list(c) for k in range(4) for c in itertools.combinations(PETS, k)]
        for line in feedback:
            if "library_member" in line:
                doc["library_member"] = not doc["library_member"]
            elif count := re.search(r"\$\.pets: expected (\d+) items", line):
                subsets = [s for s in subsets if len(s) == int(count[1])]
                doc["pets"] = subsets[0]
            elif item := re.search(r"\$\.pets\[(\d+)\]: wrong value", line):
                i, guess = int(item[1]), doc["pets"]
                subsets = [s for s in subsets if s[:i] == guess[:i] and s[i] != guess[i]]
                doc["pets"] = subsets[0]
        return json.dumps(doc)

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in map(tuple, prompts):
            text = self.answer(TOK.decode(list(ids), skip_special_tokens=True))
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(ids, action, (0.0,) * len(action), text, "eos"))
        return out


def _repair(tasks: list[Task], attempts: int, sampler: Any) -> list[tuple]:
    runs = [Episode(t, RepairEnv(VERIFY, lambda s: TOK(s)["input_ids"],
                                 lambda s: TOK(s, add_special_tokens=False)["input_ids"], max_attempts=attempts),
                    f"g{i}") for i, t in enumerate(tasks)]
    return [tuple(e.verdicts) for e in run_batch(sampler, runs, SamplingParams(max_new_tokens=256),
                                                  max_turns=attempts)]


@pytest.mark.parametrize("blind", ["pets and membership", "name"])
def test_cycling_by_the_feedback_through_repair_pays_what_the_first_attempt_does(blind: str) -> None:
    tasks = TASKS[:40]
    policy = FeedbackReader(blind)
    first = sum(_check(t, policy.answer(t.prompt)).passed for t in tasks)
    episodes = _repair(tasks, 5, policy)
    passes = sum(v[-1].passed for v in episodes)
    assert passes == first <= 0.3 * len(tasks), (passes, first)  # were 40 and 21 of 40 (first 4 and 6)
    assert all(len(v) == 1 and (v[0].passed or v[0].ends_repair) for v in episodes)


class SchemaThenAnswer:
    """The age as a string (a schema failure the expected value does not decide), then the document."""

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in map(tuple, prompts):
            seen = TOK.decode(list(ids), skip_special_tokens=True)
            doc = _read(seen)
            text = json.dumps(doc) if FEEDBACK_HEAD.strip() in seen else json.dumps({**doc, "age": str(doc["age"])})
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(ids, action, (0.0,) * len(action), text, "eos"))
        return out


class FormatThenGuess:
    """The stop hook's read: a policy that buys its repair rounds with deliberate format failures (a
    cut document, which says nothing of the value and is still repaired), reading the text but for
    the name, which it guesses from the generator's 10, one a value round."""

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in map(tuple, prompts):
            seen = TOK.decode(list(ids), skip_special_tokens=True)
            rounds = seen.count(FEEDBACK_HEAD.strip())
            doc = {**_read(seen), "name": _NAMES[rounds // 2 % len(_NAMES)]}
            text = json.dumps(doc)[:12] if rounds % 2 == 0 else json.dumps(doc)
            action = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id)
            out.append(Generation(ids, action, (0.0,) * len(action), text, "eos"))
        return out


def test_format_failures_between_guesses_buy_no_second_guess() -> None:
    """Format, guess, format, guess, ...: the first wrong value still ends the episode, so it passes
    where its first guess is right and nowhere else (10 attempts)."""
    tasks = TASKS[:40]
    first = sum(t.fields["expected"]["name"] == _NAMES[0] for t in tasks)
    episodes = _repair(tasks, 10, FormatThenGuess())
    assert all([v.error_class for v in verdicts][:1] == ["format"] and len(verdicts) == 2 for verdicts in episodes)
    assert sum(v[-1].passed for v in episodes) == first <= 0.3 * len(tasks), first


def test_a_wrong_value_s_feedback_never_holds_the_value() -> None:
    """The round a wrong value ends is read by nobody, but its feedback is still the record's: a policy
    that wrote a wrong name or city (or an empty string) learns the path, never the text's value."""
    for task in TASKS[:40]:
        want = task.fields["expected"]
        for key in ("name", "city"):
            for wrong in ("", "Zz", want[key][::-1] if want[key][::-1] != want[key] else "Qq"):
                verdict = _check(task, _doc(task, **{key: wrong}))
                assert verdict.error_class == "wrong_answer" and verdict.ends_repair, verdict
                assert want[key] not in verdict.feedback and f"$.{key}" in verdict.feedback, verdict.feedback


def test_a_schema_failure_is_still_repaired() -> None:
    for verdicts in _repair(TASKS[:8], 3, SchemaThenAnswer()):
        assert [v.error_class for v in verdicts] == ["schema", None] and verdicts[-1].passed, verdicts


def test_the_constant_answer_earns_what_an_honest_wrong_answer_does() -> None:
    counts = collections.Counter(json.dumps(t.fields["expected"], sort_keys=True) for t in TASKS)
    assert counts.most_common(1)[0][1] == 1
    modal = {k: collections.Counter(json.dumps(t.fields["expected"][k]) for t in TASKS).most_common(1)[0][0]
             for k in TASKS[0].fields["expected"]}
    constant = json.dumps({k: json.loads(v) for k, v in modal.items()})
    others = ENV.generate_tasks(300, seed=32)
    verdicts = [_check(t, constant) for t in others]
    honest = [_check(t, _doc(t, age=t.fields["expected"]["age"] + 1)) for t in others]
    assert not any(v.passed for v in verdicts)
    assert {(v.error_class, tuple(sorted(v.components.items()))) for v in verdicts} == {
        (v.error_class, tuple(sorted(v.components.items()))) for v in honest} == {
        ("wrong_answer", (("format", 1.0), ("outcome", 0.0)))}
    for t in others[:100]:
        for response in ("{}", json.dumps({k: None for k in t.fields["expected"]}), json.dumps(t.fields["schema"])):
            v = _check(t, response)
            assert (v.outcome, v.error_class, v.components["format"]) == ("fail", "schema", 0.0), (response, v)


def _age(task: Task, literal: str) -> str:
    return _doc(task, age="@").replace('"@"', literal)


_DIGITS = {"full-width": 0xFF10, "Arabic-Indic": 0x0660}
LENIENT = {
    "Python True/False": lambda t: _doc(t).replace("true", "True").replace("false", "False"),
    "a hex age": lambda t: _age(t, hex(t.fields["expected"]["age"])),
    "a zero-led age": lambda t: _age(t, f"0{t.fields['expected']['age']}"),
    "a plus-signed age": lambda t: _age(t, f"+{t.fields['expected']['age']}"),
    **{f"{k} digits": (lambda t, base=base: _age(t, str(t.fields["expected"]["age"]).translate(
        {ord(c): base + int(c) for c in "0123456789"}))) for k, base in _DIGITS.items()},
    "a key twice through an escape": lambda t: _doc(t)[:-1] + f', "\\u0061ge": {t.fields["expected"]["age"]}}}',
}
HEDGES = {
    "two documents joined by 'or' in prose": lambda t: f"Either {_doc(t, age=1)} or {_doc(t)}",
    "JSON Lines, the right one last": lambda t: f"{_doc(t, age=1)}\n{_doc(t)}\n",
    "the document and an alternative under two keys": lambda t: json.dumps(
        {"answer": t.fields["expected"], "alternative": {**t.fields["expected"], "age": 1}}),
    "the document as a JSON string": lambda t: json.dumps(_doc(t)),
    "an array of alternatives after the right fence": lambda t: (
        f"```json\n{_doc(t)}\n```\nAlternatively [ {_doc(t, age=1)} ]"),
    # text_beside stripped the reasoning a second time: all before a second </think> went unread (40/40 passed)
    "a document before a second </think>, the right one fenced": lambda t: (
        f"<think>x</think>Or maybe {_doc(t, age=1)}</think>```json\n{_doc(t)}\n```"),
}


@pytest.mark.parametrize("name", list(LENIENT) + list(HEDGES))
def test_lenient_forms_and_hedges_fail_every_task(name: str) -> None:
    form = {**LENIENT, **HEDGES}[name]
    verdicts = [_check(t, form(t)) for t in TASKS]
    assert all(v.outcome == "fail" for v in verdicts), [v.feedback for v in verdicts if v.passed][:3]
    assert all(v.error_class in ("format", "schema") for v in verdicts), {v.error_class for v in verdicts}


def test_exact_spellings_of_the_age_far_past_float_precision() -> None:
    t = TASKS[0]
    age = t.fields["expected"]["age"]
    assert _check(t, _age(t, f"{age}{'0' * 99_000}e-99000")).passed  # the number 36, spelled long
    assert _check(t, _age(t, f"{age}.{'0' * 99_000}e0")).passed
    assert _check(t, _age(t, f"{age}.{'0' * 199_000}1")).error_class == "schema"  # no integer
    assert _check(t, _age(t, f"{age}e0000000000000000000001")).error_class == "wrong_answer"  # 10 times it


def test_the_heaviest_documents_fail_through_the_worker_pool_never_as_infra() -> None:
    t = TASKS[0]
    heavy = {
        "20,000 wrong pets": (json.dumps({**t.fields["expected"], "pets": [0] * 20_000}), "schema"),
        "5 MB of prose": ("I think " * 625_000, "format"),
        "a million fence openings": ("```a" * 1_000_000, "format"),
        "2 million backticks": ("`" * 2_000_000, "format"),
    }
    for name, (response, error_class) in heavy.items():
        v = VERIFY(t, response)
        assert v.outcome == "fail" and v.error_class in (error_class, "timeout"), (name, v.error_class, v.feedback)


def test_a_document_of_many_wrong_items_is_read_to_a_bounded_number_of_errors() -> None:
    """Every validation error was collected and sorted to report one: 39,000 wrong pets took 0.93 s of
    the check's CPU (99,000 in a 200,000-character answer: 4.1 s of its 5 s budget), on a loaded host
    a check near its deadline. The report is still the document's first error; the validator (the
    real one, its yields counted) is read to ``MAX_ERRORS``."""
    from posttrain.verify.json_schema import MAX_ERRORS, schema_error, validator_for

    task = TASKS[0]
    real = validator_for(task.fields["schema"])
    yielded = []

    class Counted:
        def iter_errors(self, instance: Any) -> Any:
            for error in real.iter_errors(instance):
                yielded.append(1)
                yield error

    doc = {**task.fields["expected"], "pets": ["x"] * 39000}
    assert schema_error(Counted(), doc).startswith("$.pets[0]: 'x' is not one of")  # type: ignore[arg-type]
    assert len(yielded) == MAX_ERRORS
    verdict = _check(task, json.dumps(doc))
    assert (verdict.outcome, verdict.error_class) == ("fail", "schema") and "$.pets[0]" in verdict.feedback
