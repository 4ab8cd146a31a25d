"""A domain from outside posttrain (tests and the docs/tasks.md example): reverse one word.

Task fields: ``word`` (letters only). The reference is the word reversed; the verifier passes a
response that is exactly the reversed word (surrounding whitespace ignored). It uses only
posttrain's public surface: ``posttrain.envs`` and ``posttrain.types``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from posttrain.envs import RecordReader, Verifier, fail, guard, parse_common, passed
from posttrain.types import Task, Verdict

NAME = "reverse"


class ReverseEnv:
    name = NAME
    needs_sandbox = False

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(frozenset({"word"}))
        word = reader.string("word")
        if not word.isalpha():
            raise reader.fail("word", "letters only", word)
        return parse_common(reader, {"word": word}, reference=word[::-1])

    def render_prompt(self, task: Task) -> str:
        return f"{task.prompt}\nWord: {task.fields['word']}"

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        def verify(task: Task, response: str) -> Verdict:
            if response.strip() == task.fields["word"][::-1]:
                return passed("Correct.")
            return fail("Not the word reversed.", "wrong_answer")

        return guard(NAME, verify)

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        task = self.parse_task({"id": "rev-x", "prompt": "Reverse the word.", "word": "posttrain"}, "fixtures")
        return [("echo the word", task, "posttrain"), ("the reversed word twice", task, "niarttsop niarttsop")]

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        rng = random.Random(seed)
        records = [{"id": f"rev-{seed}-{i}", "prompt": "Reverse the word.",
                    "word": "".join(rng.choice("abcdefgh") for _ in range(6)) + "z"} for i in range(n)]
        return [self.parse_task(r, f"generator {NAME}") for r in records]


ENV = ReverseEnv()
