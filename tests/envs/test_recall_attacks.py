"""The recall domain read as a policy would: a fact was always the first number of its episode, so
answering the first number (ignoring the question's key) passed 190 of 190 generated tasks. Generated
tasks now state other keys' codes before the fact and after it; every answer by place passes at most
a third (the first or last code stated, as any rule by place, one in 6-10: chance,
tests/envs/test_recall_attacks4.py), the gold passes all, and an episode shows the notes before the
fact first.
``fact_first`` keeps the long-horizon comparison's family, draw for draw."""

from __future__ import annotations

import json
import re

import pytest

from posttrain.envs.recall import ENV, RecallEpisode
from posttrain.envs.recall._domain import _NUMBER
from posttrain.types import Generation

VERIFY = ENV.make_verifier(None)


def _say(text: str) -> Generation:
    return Generation((), (), (), text, "eos")


TASKS = ENV.generate_tasks(150, seed=3) + [t for level in (1, 2, 40) for t in ENV.generate_level(50, level=level, seed=5)]


def _by_place(task) -> dict[str, str]:
    seen = ENV.render_prompt(task).split("Question")[0]
    numbers, codes = _NUMBER.findall(seen), re.findall(r"The [a-z ]+ is (\d{4})\.", seen)
    alone = re.findall(r"Note \d+: The [a-z ]+ is (\d{4})\.\n", seen + "\n")
    places = {"first number": numbers[0], "last number": numbers[-1], "first alone": alone[0],
              "last alone": alone[-1]}
    for k in range(4):
        places[f"code {k + 1} from the start"] = codes[k] if k < len(codes) else "0000"
        places[f"code {k + 1} from the end"] = codes[-1 - k] if k < len(codes) else "0000"
    return places


def test_no_answer_by_place_passes_more_than_a_third() -> None:
    passes: dict[str, int] = {}
    for task in TASKS:
        assert VERIFY(task, task.reference).passed
        for name, answer in _by_place(task).items():
            passes[name] = passes.get(name, 0) + VERIFY(task, answer).passed
    assert passes["last number"] == 0  # a thing's shelf: no code is stated in the last L notes
    assert max(passes.values()) <= len(TASKS) / 3, passes


def test_the_comparisons_family_is_unchanged() -> None:
    """fact_first: the fact is the first number and the only code (what the hole was), as generated
    before; the bench's published figures are for these tasks."""
    tasks = ENV.generate_level(20, level=8, seed=0, fact_first=True)
    assert all(_by_place(t)["first number"] == t.reference for t in tasks)
    assert all("before" not in t.fields for t in tasks)
    first = (tasks[0].fields["key"], tasks[0].reference, tasks[0].fields["notes"][0])
    assert first == ("bike lock code", "6934", "The cups went to the porch, shelf 5761.")  # as drawn before


def test_an_episode_shows_the_notes_before_the_fact_first() -> None:
    [task] = [t for t in TASKS if len(t.fields.get("before", [])) >= 2][:1]
    env = RecallEpisode(lambda text: [0], lambda text: [0])
    env.reset(task)
    shown = []
    for _ in range(len(task.fields["before"]) + len(task.fields["notes"]) + 2):
        step = env.step(_say("ok"))
        if step.done:
            break
        shown.append(step.observation.text)
    key, value = task.fields["key"], task.reference
    at = len(task.fields["before"])
    assert shown[at] == f"\nNote {at}: The {key} is {value}." and shown[-1].startswith("\nQuestion")
    assert "".join(shown[:at]).count(" is ") >= 1  # another key's code came first
    assert env.step(_say(value)).verdict.passed


def test_before_round_trips_and_is_checked() -> None:
    task = next(t for t in TASKS if "before" in t.fields)
    record = json.loads(json.dumps({"id": task.id, "domain": "recall", "prompt": task.prompt, **task.fields}))
    assert ENV.parse_task(record, "t.jsonl").fields == task.fields
    with pytest.raises(Exception, match="before.*a list of strings"):
        ENV.parse_task({**record, "before": "The door code is 1234."}, "t.jsonl")
