"""The recall domain (long horizon): a fact is given among a few notes, ``len(notes)`` notes follow,
then a question about the fact.

Task fields (docs/tasks.md): ``key`` (what the fact names: "the locker code"), ``value`` (4 digits),
``notes`` (the notes that follow the fact, strings) and, optional, ``before`` (notes shown before
the fact; none when absent). As an episode (``RecallEpisode``) the prompt is the instructions; each
reply (any text) gets the next observation: the notes before, the fact, each note, then the question,
whose answer is verified. As a single response (``render_prompt``) the prompt holds everything at
once.

Verification: the answer's 4-digit numbers must be exactly one, equal to ``value`` (``check_answer``); the
answer is what follows the response's reasoning (a ``<think>`` block), as in the other domains. Listing
many numbers, copying the question, or an empty answer fail; a wrong number ends a repair episode
(``evidence["final"]``: the next code tried would be one of the few left). Notes hold other 4-digit
numbers on purpose (distractors), so a policy cannot pass by repeating the last number it saw. The
generated tasks also state 5-9 other keys' codes (``The door code is 5123.``), each alone in its note
as the fact is, all 6-10 in the notes ``fact_distances(level)`` before the question, the fact one of
them drawn at random once their places, keys and values are drawn; a task's keys are of one kind
(they share their last word: "... code" or "... number"), its values distinct, and no thing's shelf
is a code: only the question's key tells which code it asks for, and a rule that does not read it
passes 1 / (the number of codes) on average, about 0.13. Before, every generated fact was the first
number of its episode (answering that passed 190 of 190 tasks); then the last code stated alone in
the first 7 notes (58 % of ``generate_tasks``, 93 % at level 64); then the fact was exactly
``level`` notes before the question, and the curriculum trains one level at a time: "the code L
notes back" passed 350 of 350 tasks at each of levels 1, 2, 4, 8, 16 and 64; then the fact was one
of 4-6 codes in those notes with 1-2 other codes before and 1-2 after them, so a rule that skipped
the outer codes passed one in 4-6 where chance was one in 6-10: "the middle code" up to 50 of 200
tasks of a level, "the first code at least L back" 58 of 200 (0.29), and keys of two kinds let a
reader of the key's last word pass 82 of 200. Now every rule tried (first, middle, last code, the
code nearest the question or L notes back, the largest, beside a thing, the rank or distance that
paid most on another seed, the first code whose key ends as the question's) passes at most 1.12
times chance over 1,400 tasks of levels 1-64 (tests/envs/test_recall_attacks4.py pins 1.25), at most
49 of 300 (chance 39) at each of levels 1, 2, 4, 8, 16, 64 (tests/envs/test_recall_levels.py) and 60
of 400 over a mix of levels (tests/envs/test_recall_attacks2.py).

A generated task's ``prompt`` is ``render_prompt``'s text: what a single response is shown, so that
nothing which shows or compares ``Task.prompt`` (task files, eval records and reports, the check that
refuses demonstrations on held-out prompts) tells more than the policy sees. Before, it was the
instructions and the notes through the fact's line: its last number was the answer in 776 of 776
generated tasks (tests/envs/test_recall_prompt.py). ``fact_first`` tasks keep their prompt (the
instructions and the fact, their first note: a place the family tells anyway).

Levels: ``generate_level(n, level=L)`` puts the fact ``fact_distances(L)`` notes before the question:
L to L + max(10, L // 4) - 1 (levels 1..64), so the fact is further back, on average, level by level.
``fact_first=True`` generates the tasks the long-horizon comparison (``posttrain bench recall``,
README "Long episodes") and the long-episode memory measure were run on: the fact is the first
observation, exactly L notes before the question, and no other key is stated, the earliest
observation being what a rule summary keeps longest; their figures are for that family, generated
draw for draw as before.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Mapping
from typing import Any

from posttrain.envs._base import RecordReader, fail, guard, parse_common, passed
from posttrain.strict_json import after_reasoning
from posttrain.types import Observation, StepResult, Task, Verdict, Verifier

NAME = "recall"
DOMAIN_KEYS = frozenset({"key", "value", "notes", "before"})
INTRO = "Read each note and reply ok. At the end, answer the question with the number only."
_NUMBER = re.compile(r"(?<!\d)\d{4}(?!\d)")
_KEYS = ("locker code", "door code", "bike lock code", "safe code", "room number", "badge number")
_KINDS = (("locker code", "door code", "bike lock code", "safe code", "gate code", "alarm code", "garage code",
           "mailbox code", "vault code", "cabinet code", "shed code", "padlock code"),
          ("room number", "badge number", "ticket number", "seat number", "table number", "flight number",
           "platform number", "order number", "account number", "member number", "bus number"))
"""The keys of the generated tasks with other keys' codes (``fact_first`` draws from ``_KEYS``): a task
states keys of one kind, which share their last word, so that only the key's own word tells its code
(keys of both kinds let "the code whose key ends as the question's" pass 41 % where chance was 13 %)."""
_THINGS = ("the boxes", "the lamps", "the chairs", "the forms", "the keys", "the cups", "the maps")
_PLACES = ("hall", "shelf", "desk", "attic", "garage", "office", "porch")


def fact_line(key: str, value: str, index: int = 0) -> str:
    return f"Note {index}: {fact_text(key, value)}"


def fact_text(key: str, value: str) -> str:
    return f"The {key} is {value}."


def note_line(i: int, note: str) -> str:
    return f"\nNote {i}: {note}"


def question(key: str) -> str:
    return f"\nQuestion: What is the {key}? Answer:"


def check_answer(task: Task, response: str) -> Verdict:
    """Exactly one 4-digit number in the answer, equal to the task's ``value``. The answer is what follows
    the response's reasoning (``strict_json.after_reasoning``), as in math, rg and json: read whole, a
    reasoning model's right answer after thoughts that weighed the other codes held several numbers and
    failed every generated task; a number drafted there is no second answer, nor an answer at all.

    A wrong number ends a repair episode (``Verdict.ends_repair``, as rg's few-answer generators and
    doc's closed answers do): told wrong, the answer is among the few codes left, and a policy that
    tried the codes one an attempt, never reading the key, passed 200 of 200 level-8 tasks with 10
    attempts (81 with 3, 28 with 1: tests/envs/test_recall_attacks5.py). A format failure (no number,
    several) says nothing of the value and is still repaired."""
    found = sorted(set(_NUMBER.findall(after_reasoning(response))))
    evidence: dict[str, Any] = {"numbers": found[:8]}
    if not found:
        return fail("No 4-digit number in the answer.", "format", evidence)
    if len(found) > 1:
        return fail("More than one number in the answer: give one.", "format", evidence)
    if found[0] != task.fields["value"]:
        return fail("Wrong number.", "wrong_answer", evidence | {"final": True}, {"format": 1.0})
    return passed("Correct.", evidence)


class RecallEpisode:
    """One recall episode (an ``Env`` of the episode runner): the prompt is the instructions; each
    reply gets the next piece as an observation: the notes before the fact (``before``), the fact,
    each note after it, then the question, whose answer is verified. The fact is an observation, not the prompt: a context manager that pins the
    prompt does not pin the fact."""

    def __init__(self, encode_prompt: Any, encode: Any) -> None:
        """``encode_prompt``: text -> the prompt's ids (``Policy.encode_prompt``); ``encode``: text ->
        an observation's ids (no special tokens)."""
        self.encode_prompt, self.encode = encode_prompt, encode
        self.pieces: list[str] = []
        self.task: Task | None = None
        self.shown = 0

    def reset(self, task: Task) -> Observation:
        self.task, self.shown = task, 0
        self.pieces = [*_pieces(task), question(task.fields["key"])]
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
        before = reader.record.get("before", [])
        if not isinstance(before, list) or not all(isinstance(n, str) for n in before):
            raise reader.fail("before", "a list of strings (notes shown before the fact)", before)
        fields = {"key": key, "value": value, "notes": list(notes)} | ({"before": list(before)} if before else {})
        return parse_common(reader, fields, reference=value)

    def render_prompt(self, task: Task) -> str:
        return INTRO + "".join(_pieces(task)) + question(task.fields["key"])

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return guard(NAME, check_answer)

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """Answers that must fail: every number at once, the first or last number seen, the first or
        last code stated, the last code stated alone in the first 7 notes (the fact's place before
        generated tasks moved it: tests/envs/test_recall_attacks2.py), the question echoed. A code
        chosen by place is the fact in one task in 6-10, as any code (chance:
        tests/envs/test_recall_attacks4.py): these are on the first level-6 task (seed 99) where
        none is."""
        for task in self.generate_level(20, level=6, seed=99):
            seen = self.render_prompt(task).split("Question")[0]
            numbers, codes = _NUMBER.findall(seen), re.findall(r"The [a-z ]+ is (\d{4})\.", seen)
            early = [c for i, c in re.findall(r"Note (\d+): The [a-z ]+ is (\d{4})\.\n", seen) if int(i) < 7]
            places = [numbers[-1], numbers[0], codes[0], codes[-1], *early[-1:]]
            if task.fields["value"] not in places:
                break
        every = " ".join(f"{i:04d}" for i in range(10000))
        return [("every 4-digit number", task, every), ("the last number of the notes", task, numbers[-1]),
                ("the first number of the episode", task, numbers[0]),
                ("the first code stated", task, codes[0]), ("the last code stated", task, codes[-1]),
                ("the last code stated alone in the first 7 notes", task, (early or codes)[-1]),
                ("the question echoed", task, question(task.fields["key"])),
                ("the fact with another number beside it", task, f"{task.fields['value']} or {numbers[-1]}")]

    def level_range(self) -> tuple[int, int]:
        return 1, 64

    def generate_level(self, n: int, *, level: int, seed: int = 0, fact_first: bool = False) -> list[Task]:
        """``n`` tasks whose fact is ``fact_distances(level)`` notes before the question; ``fact_first``:
        the long-horizon comparison's family (module docstring): the fact first, exactly ``level`` notes
        before the question, no other key's code."""
        rng = random.Random(f"recall-{seed}-{level}")
        return [_generate_one(rng, f"recall-{seed}-L{level}-{i}", level, fact_first) for i in range(n)]

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        rng = random.Random(f"recall-{seed}")
        return [_generate_one(rng, f"recall-gen-{seed}-{i}", rng.randint(2, 12)) for i in range(n)]


def _pieces(task: Task) -> list[str]:
    """The observations before the question: the notes before the fact, the fact, the notes after,
    numbered from 0 in the order shown."""
    return _lines(task.fields["key"], task.fields["value"], task.fields.get("before", []), task.fields["notes"])


def _lines(key: str, value: str, before: list[str], notes: list[str]) -> list[str]:
    at = len(before)
    return [*(note_line(i, n) for i, n in enumerate(before)), "\n" + fact_line(key, value, at),
            *(note_line(at + 1 + i, n) for i, n in enumerate(notes))]


def _other(rng: random.Random, taken: str | Collection[str]) -> str:
    """A 4-digit number not in ``taken`` (one value, or the task's codes)."""
    pool = {taken} if isinstance(taken, str) else taken  # one value: drawn as before, draw for draw
    other = f"{rng.randint(1000, 9999)}"
    while other in pool:
        other = f"{rng.randint(1000, 9999)}"
    return other


def _thing_note(rng: random.Random, taken: str | Collection[str]) -> str:
    other = _other(rng, taken)
    return f"{rng.choice(_THINGS).capitalize()} went to the {rng.choice(_PLACES)}, shelf {other}."


def fact_distances(level: int) -> range:
    """The notes a generated task of level ``level`` puts between the fact and the question (not
    ``fact_first``): ``level`` to ``level + max(10, level // 4) - 1``, where every code the task
    states is, the fact one of them drawn at random; the further back the harder, on average, level
    by level."""
    return range(level, level + max(10, level // 4))


def _among_codes(rng: random.Random, level: int) -> tuple[str, str, list[str], list[str]]:
    """(key, value, notes before the fact, notes after it) of a generated task: 6-10 codes of keys of
    one kind, distinct values, each alone in its note, all in the notes ``fact_distances(level)``
    before the question, the fact one of them drawn at random after their places, keys and values;
    other notes a thing, whose shelf is no code. Which code is the fact is independent of everything
    but the key: a rule that does not read the key (by place, by value, by the notes around) passes
    1 / (the number of codes), on average, at any level."""
    window = fact_distances(level)
    keys = list(rng.choice(_KINDS))
    rng.shuffle(keys)
    n = rng.randint(6, 10)
    held = set(rng.sample(window, n))
    values = [str(v) for v in rng.sample(range(1000, 10000), n)]
    fact = rng.randrange(n)  # the fact's rank among the codes, in the order shown
    seq = [_thing_note(rng, values) for _ in range(rng.randint(0, 2))]
    stated, at = 0, -1
    for j in range(window.stop - 1, -1, -1):  # j: the notes between this one and the question
        if j not in held:
            seq.append(_thing_note(rng, values))
            continue
        if stated == fact:
            at = len(seq)
        seq.append(fact_text(keys[stated], values[stated]))
        stated += 1
    return keys[fact], values[fact], seq[:at], seq[at + 1:]


def _generate_one(rng: random.Random, tid: str, level: int, fact_first: bool = False) -> Task:
    if fact_first:  # the comparison's family, draw for draw and byte for byte as it was generated
        key = rng.choice(_KEYS)
        value = f"{rng.randint(1000, 9999)}"
        before, notes = [], [_thing_note(rng, value) for _ in range(level)]
        shown = INTRO + "\n" + fact_line(key, value)  # its fact is its first note: the prompt tells no place
    else:  # the prompt is what a single response is shown (``render_prompt``), never one ending at the fact
        key, value, before, notes = _among_codes(rng, level)
        shown = INTRO + "".join(_lines(key, value, before, notes)) + question(key)
    fields: dict[str, Any] = {"key": key, "value": value, "notes": notes} | ({"before": before} if before else {})
    return Task(id=tid, domain=NAME, prompt=shown, fields=fields, reference=value, difficulty=float(level))


ENV = RecallDomain()
