"""Shared by the math attack tests: a task from a prompt and its gold, a math verifier on a
checker pool of its own (closed after), and the outcome of one boxed answer."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from posttrain.envs import get_domain
from posttrain.envs.math import make_math_verifier
from posttrain.envs.math._check import MathChecker
from posttrain.types import Task, Verifier

ENV = get_domain("math")


def task(prompt: str, gold: str) -> Task:
    return ENV.parse_task({"id": "a", "domain": "math", "prompt": prompt, "answer": gold}, "test")


@contextmanager
def math_verifier() -> Iterator[Verifier]:
    checker = MathChecker(size=2)
    try:
        yield make_math_verifier(checker)
    finally:
        checker.close()


def outcome(verify: Verifier, t: Task, answer: str) -> tuple[str, str | None]:
    """The verdict's outcome and error class for ``answer`` boxed."""
    v = verify(t, f"\\boxed{{{answer}}}")
    return v.outcome, v.error_class


def outcomes(verify: Verifier, cases: list[tuple[str, str, str]]) -> list[tuple[str, str | None]]:
    """``outcome`` of each ``(prompt, gold, answer)``, two at a time (the checker pool's size)."""
    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(lambda case: outcome(verify, task(case[0], case[1]), case[2]), cases))
