"""The current instruction under context management (posttrain/rollout/_context.py): a managed recall
episode whose policy searches at the question must still see the question when it answers.

Found: at budget 300 (one id a character), two searches at a recall question (``search:`` answered
by the manager, each result a turn of its own) moved the question's turn out of the recent turns,
and the context dropped it: the question was in no context this reader saw at its answering turn
in 200 of 200 generated tasks (``generate_tasks(200, seed=0)``; 26 of 200 with three searches, where
it was folded into a summary line that the budget later took; 200 of 200 with five); with
policy-written summaries and three searches, 148 of 200 (seed 1). Now the turn of the environment's
last observation is never folded while the turns after it are only searches and their results, and
the searches between it and the newest one give way first: 0 of 200 in each case, within the budget
(the reader, answering from what it sees, passed 0 of 200 with two searches; now 38). Where the
prompt, the question and the newest search alone exceed the budget, the context is cut from its
start: the budget holds and the question's end stays.
"""

from __future__ import annotations

import re

import pytest

from posttrain.envs.recall import ENV, RecallEpisode
from posttrain.policy import Generation, SamplingParams
from posttrain.rollout._context import SUMMARY_PROMPT, ContextPolicy, run_managed
from posttrain.types import Task

QUERIES = ("code", "Note", "shelf", "went", "number", "boxes", "lamps", "hall")


def _encode(text: str) -> list[int]:
    return [ord(c) + 1 for c in text]


def _decode(ids) -> str:
    return "".join(chr(i - 1) for i in ids)


class SearchThenAnswer:
    """A test double of a policy that reads its context only: "ok" to a note; at the question it
    searches ``QUERIES[0]``, after each result the next query, ``searches`` in all (the last query it
    sees tells which comes next), then answers the code its context gives for the question's key,
    "0000" where the context has the key but not its code, "none" where the context has no question.
    Asked for a summary, it writes "notes read"."""

    def __init__(self, searches: int) -> None:
        self.searches = searches

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out = []
        for ids in prompts:
            text = _decode(ids)
            last = text.rstrip().splitlines()[-1] if text.strip() else ""
            reply = "ok"
            if text.endswith(SUMMARY_PROMPT):
                reply = "notes read"
            elif last.startswith("Found:") or text.rstrip().endswith("Answer:"):
                asked = re.findall(r"search: (\w+)\nFound:", text) if last.startswith("Found:") else []
                j = QUERIES.index(asked[-1]) + 1 if asked else 0
                reply = f"search: {QUERIES[j]}" if j < self.searches else self.answer(text)
            action = tuple(_encode(reply))
            out.append(Generation(tuple(ids), action, (0.0,) * len(action), reply, "eos"))
        return out

    @staticmethod
    def answer(text: str) -> str:
        keys = re.findall(r"What is the (.+?)\? Answer:", text)
        if not keys:
            return "none"
        codes = re.findall(rf"The {re.escape(keys[-1])} is (\d{{4}})", text)
        return codes[-1] if codes else "0000"


def _question(task: Task) -> str:
    return f"What is the {task.fields['key']}? Answer:"


def _answering_contexts(tasks: list[Task], policy: ContextPolicy, searches: int) -> list[str]:
    runs = [(t, RecallEpisode(_encode, _encode), f"g{i}", 0) for i, t in enumerate(tasks)]
    eps = run_managed(SearchThenAnswer(searches), runs, SamplingParams(max_new_tokens=400), policy, _encode,
                      max_turns=80)
    assert all(e.done for e in eps)
    assert all(len(r.context_ids) <= policy.budget for e in eps for r in e.rows)
    assert all(sum(r.kind == "search" for r in e.rows) == searches for e in eps)
    return [_decode([r for r in e.rows if r.kind == "env"][-1].context_ids) for e in eps]


@pytest.mark.parametrize("searches", [2, 3, 5])
def test_the_question_is_in_view_when_the_policy_answers_after_searching(searches: int) -> None:
    tasks = ENV.generate_tasks(40, seed=0)
    seen = _answering_contexts(tasks, ContextPolicy(budget=300), searches)
    lost = [t.id for t, ctx in zip(tasks, seen, strict=True) if _question(t) not in ctx]
    assert lost == []  # before: 40 of 40 with 2 searches, 6 with 3, 40 with 5


def test_a_policy_written_summary_does_not_take_the_question() -> None:
    tasks = ENV.generate_tasks(40, seed=1)
    seen = _answering_contexts(tasks, ContextPolicy(budget=300, summarize="policy", summary_tokens=16), 3)
    lost = [t.id for t, ctx in zip(tasks, seen, strict=True) if _question(t) not in ctx]
    assert lost == []  # before: 32 of 40


def test_a_question_longer_than_the_budget_is_cut_from_its_start() -> None:
    """The prompt, the question's turn and the newest result alone exceed the budget: the context is
    cut from its start (as one overlong observation is), the budget holds and the question's end stays
    in view, followed by the search whose result is shown (before: the question's turn was dropped
    whole, the reader never answered)."""
    [task] = ENV.generate_tasks(1, seed=2)
    key = "code of the " + "very " * 60 + "long locker"
    task = Task(id="long", domain="recall", prompt=task.prompt, fields={**task.fields, "key": key},
                reference=task.reference)
    [ctx] = _answering_contexts([task], ContextPolicy(budget=200), 2)
    assert len(ctx) == 200 and "long locker? Answer:search: Note\nFound: " in ctx and ctx.endswith("\n")
