"""The recall domain (long horizon): a fact is given in the first note, ``len(notes)`` notes follow,
then a question about the fact.

Task fields (docs/tasks.md): ``key`` (what the fact names: "the locker code"), ``value`` (4 digits),
``notes`` (the notes that follow the fact, strings). As an episode (``RecallEpisode``) the prompt
is the instructions; each reply (any text) gets the next observation: the fact, each note, then the
question, whose answer is verified. As a single response (``render_prompt``) the prompt holds
everything at once.

Verification: the answer's 4-digit numbers must be exactly one, equal to ``value`` (``check_answer``).
Listing many numbers, copying the question, or an empty answer fail. Notes hold other 4-digit
numbers on purpose (distractors), so a policy cannot pass by repeating the last number it saw.

Levels: ``generate_level(n, level=L)`` puts L notes between the fact and the question (1..64).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from posttrain.envs._base import RecordReader, fail, guard, parse_common, passed
from posttrain.types import Observation, StepResult, Task, Verdict, Verifier

NAME = "recall"
DOMAIN_KEYS = frozenset({"key", "value", "notes"})
INTRO = "Read each note and reply ok. At the end, answer the question with the number only."
_NUMBER = re.compile(r"(?<!\d)\d{4}(?!\d)")
_KEYS = ("locker code", "door code", "bike lock code", "safe code", "room number", "badge number")
_THINGS = ("the boxes", "the lamps", "the chairs", "the forms", "the keys", "the cups", "the maps")
_PLACES = ("hall", "shelf", "desk", "attic", "garage", "office", "porch")


def fact_line(key: str, value: str) -> str:
    return f"Note 0: The {key} is {value}."


def note_line(i: int, note: str) -> str:
    return f"\nNote {i}: {note}"


def question(key: str) -> str:
    return f"\nQuestion: What is the {key}? Answer:"


def check_answer(task: Task, response: str) -> Verdict:
    """Exactly one 4-digit number in the answer, equal to the task's ``value``."""
    found = sorted(set(_NUMBER.findall(response)))
    evidence = {"numbers": found[:8]}
    if not found:
        return fail("No 4-digit number in the answer.", "format", evidence)
    if len(found) > 1:
        return fail("More than one number in the answer: give one.", "format", evidence)
    if found[0] != task.fields["value"]:
        return fail("Wrong number.", "wrong_answer", evidence, {"format": 1.0})
    return passed("Correct.", evidence)


class RecallEpisode:
    """One recall episode (an ``Env`` of the episode runner): the prompt is the instructions; each
    reply gets the next piece as an observation: the fact, then each note, then the question, whose
    answer is verified. The fact is an observation, not the prompt: a context manager that pins the
    prompt does not pin the fact."""

    def __init__(self, encode_prompt: Any, encode: Any) -> None:
        """``encode_prompt``: text -> the prompt's ids (``Policy.encode_prompt``); ``encode``: text ->
        an observation's ids (no special tokens)."""
        self.encode_prompt, self.encode = encode_prompt, encode
        self.pieces: list[str] = []
        self.task: Task | None = None
        self.shown = 0

    def reset(self, task: Task) -> Observation:
        key = task.fields["key"]
        self.task, self.shown = task, 0
        self.pieces = ["\n" + fact_line(key, task.fields["value"]),
                       *(note_line(i + 1, n) for i, n in enumerate(task.fields["notes"])), question(key)]
        return Observation(tuple(self.encode_prompt(INTRO)), INTRO)

    def step(self, action: Any) -> StepResult:
        assert self.task is not None, "RecallEpisode.step before reset"
        if self.shown == len(self.pieces):  # the question was shown: this is the answer
            return StepResult(Observation(()), check_answer(self.task, action.text), True)
        text = self.pieces[self.shown]
        self.shown += 1
        return StepResult(Observation(tuple(self.encode(text)), text), None, False)

    def close(self) -> None:
        """Nothing to release (``Env.close``)."""


class RecallDomain:
    """The recall domain (module docstring)."""

    name = NAME
    needs_sandbox = False

    def capabilities(self) -> tuple[str, ...]:
        """The capability labels of ``posttrain tasks list`` (facts recalled from a long context)."""
        return ("long-context", "recall")

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        key = reader.present("key")
        if not isinstance(key, str) or not key.strip():
            raise reader.fail("key", "a non-empty string", key)
        value = reader.present("value")
        if not isinstance(value, str) or not re.fullmatch(r"\d{4}", value):
            raise reader.fail("value", "a string of 4 digits", value)
        notes = reader.present("notes")
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise reader.fail("notes", "a list of strings", notes)
        return parse_common(reader, {"key": key, "value": value, "notes": list(notes)}, reference=value)

    def render_prompt(self, task: Task) -> str:
        notes = task.fields["notes"]
        return (INTRO + "\n" + fact_line(task.fields["key"], task.fields["value"])
                + "".join(note_line(i + 1, n) for i, n in enumerate(notes)) + question(task.fields["key"]))

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return guard(NAME, check_answer)

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """Answers that must fail: every number at once, the last number seen, the question echoed."""
        [task] = self.generate_level(1, level=6, seed=99)
        last = _NUMBER.findall(self.render_prompt(task).split("Question")[0])[-1]
        every = " ".join(f"{i:04d}" for i in range(10000))
        return [("every 4-digit number", task, every), ("the last number of the notes", task, last),
                ("the question echoed", task, question(task.fields["key"])),
                ("the fact with another number beside it", task, f"{task.fields['value']} or {last}")]

    def level_range(self) -> tuple[int, int]:
        return 1, 64

    def generate_level(self, n: int, *, level: int, seed: int = 0) -> list[Task]:
        rng = random.Random(f"recall-{seed}-{level}")
        return [_generate_one(rng, f"recall-{seed}-L{level}-{i}", level) for i in range(n)]

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        rng = random.Random(f"recall-{seed}")
        return [_generate_one(rng, f"recall-gen-{seed}-{i}", rng.randint(2, 12)) for i in range(n)]


def _generate_one(rng: random.Random, tid: str, level: int) -> Task:
    key = rng.choice(_KEYS)
    value = f"{rng.randint(1000, 9999)}"
    notes = []
    for _ in range(level):
        other = f"{rng.randint(1000, 9999)}"
        while other == value:
            other = f"{rng.randint(1000, 9999)}"
        notes.append(f"{rng.choice(_THINGS).capitalize()} went to the {rng.choice(_PLACES)}, shelf {other}.")
    return Task(id=tid, domain=NAME, prompt=INTRO + "\n" + fact_line(key, value), fields={"key": key, "value": value,
                "notes": notes}, reference=value, difficulty=float(level))


ENV = RecallDomain()
