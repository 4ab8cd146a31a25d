"""Env: an episode's environment, token level. ``SingleTurnEnv``: today's verifiers as one step.

An ``Env`` holds the state of one episode (never shared between episodes; build one per episode):

    observation = env.reset(task)                          # the prompt, as token ids
    observation, verdict, done = env.step(generation)      # after each sampled action

Observations are token ids the environment inserts into the context; the runner appends them to
what was sampled as ids (never decoding and re-encoding the context). ``verdict`` is the verdict on
the action when it was an attempt at the task (a repair episode's every answer), ``None`` for other
steps (a tool call); ``done`` ends the episode.

Not here: multi-turn domains (repair, tools; issue 10 builds them on this protocol), chat templates.
The domain ``Env`` in ``posttrain.envs`` (parse, render, verifier factory) is a different thing,
to be renamed when domains register by name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from posttrain.policy import Generation
from posttrain.types import Task, Verdict

Verifier = Callable[[Task, str], Verdict]


@dataclass(frozen=True)
class Observation:
    """Token ids the environment inserts into the context, and their text (for records only)."""

    ids: tuple[int, ...]
    text: str = ""


class Env(Protocol):
    """One episode's environment. ``step`` may be called from a worker thread."""

    def reset(self, task: Task) -> Observation: ...

    def step(self, action: Generation) -> tuple[Observation, Verdict | None, bool]: ...


class VerdictCache:
    """Thread-safe memo of verdicts keyed by (task id, response). Infra errors are never cached.

    ``compute`` runs a verification once for concurrent identical keys: the others wait for it.
    """

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], Verdict] = {}
        self._running: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: tuple[str, str]) -> Verdict | None:
        with self._lock:
            v = self._data.get(key)
            self.hits += v is not None
            return v

    def put(self, key: tuple[str, str], verdict: Verdict) -> None:
        if not verdict.is_infra_error:
            with self._lock:
                self._data[key] = verdict

    def compute(self, key: tuple[str, str], verify: Callable[[], Verdict]) -> Verdict:
        while True:
            with self._lock:
                if (v := self._data.get(key)) is not None:
                    self.hits += 1
                    return v
                running = self._running.get(key)
                if running is None:
                    self._running[key] = threading.Event()
                    break
            running.wait()  # then look again: an infra error was not cached, so this one verifies
        try:
            verdict = verify()
            self.put(key, verdict)
            return verdict
        finally:
            with self._lock:
                self._running.pop(key).set()


def render_prompt(task: Task) -> str:
    """The prompt the model sees: the task's domain renders it (tool schemas, json schema, ...); a
    task of no registered domain (a test double) is shown its ``prompt``."""
    from posttrain.envs import model_prompt

    return model_prompt(task)


def verify_with_retries(verify: Verifier, task: Task, response: str, *, infra_retries: int) -> Verdict:
    """``verify`` once, and again while the verdict is an infra error, ``infra_retries`` times at most.
    A persisting infra error stays one (reward NaN): never scored 0 or 1."""
    verdict = verify(task, response)
    for _ in range(infra_retries):
        if not verdict.is_infra_error:
            break
        verdict = verify(task, response)
    return verdict


class SingleTurnEnv:
    """A one-step episode over a verifier: the prompt, one answer, its verdict, done.

    Behaviour is today's single-turn RL: the prompt is ``render(task)`` (default: the task's
    domain's ``render_prompt``, which shows tool schemas; exactly ``task.prompt`` for math and code) encoded with
    ``encode_prompt`` (``Policy.encode_prompt``), the answer's decoded text is verified, an infra
    error is retried ``infra_retries`` times, and verdicts are shared through ``cache``.

    >>> # env = SingleTurnEnv(verifier, policy.encode_prompt)
    """

    def __init__(
        self,
        verify: Verifier,
        encode_prompt: Callable[[str], list[int]],
        *,
        render: Callable[[Task], str] | None = None,
        infra_retries: int = 2,
        cache: VerdictCache | None = None,
    ) -> None:
        self.verify, self.encode_prompt, self.render = verify, encode_prompt, render
        self.infra_retries, self.cache = infra_retries, cache
        self.task: Task | None = None

    def reset(self, task: Task) -> Observation:
        self.task = task
        text = self.render(task) if self.render is not None else render_prompt(task)
        return Observation(tuple(self.encode_prompt(text)), text)

    def step(self, action: Generation) -> tuple[Observation, Verdict | None, bool]:
        task = self.task
        if task is None:
            raise RuntimeError("SingleTurnEnv.step before reset")

        def run() -> Verdict:
            return verify_with_retries(self.verify, task, action.text, infra_retries=self.infra_retries)

        verdict = run() if self.cache is None else self.cache.compute((task.id, action.text), run)
        return Observation(()), verdict, True
