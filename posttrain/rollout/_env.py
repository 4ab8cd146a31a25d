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
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from posttrain.policy import Generation
from posttrain.sched import GroupDropped, Result, Service, Verify
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


@runtime_checkable
class SubmitsSteps(Protocol):
    """An ``Env`` whose step can be started now and awaited later (the runner starts every episode's
    step of a round first, so the service sees them all at once and runs them on its workers)."""

    def submit_step(self, action: Generation) -> Future[tuple[Observation, Verdict | None, bool]]: ...


class SingleTurnEnv:
    """A one-step episode verified through the execution service: the prompt, one answer, its verdict.

    Behaviour is today's single-turn RL: the prompt is ``render(task)`` (default: the task's
    domain's ``render_prompt``, which shows tool schemas; exactly ``task.prompt`` for math and code)
    encoded with ``encode_prompt`` (``Policy.encode_prompt``); the answer's decoded text is one
    ``Verify(task, text, group_id, sample_idx)`` job of ``service`` (``posttrain.sched``), which owns
    infra retries, the verdict cache and dedup. When a sample of the group ran out of infra retries,
    the service drops the group and the verdict is ``infra_error`` (``infra:group_dropped``): never
    scored; the trainer drops the whole group.

    >>> # env = SingleTurnEnv(service, policy.encode_prompt, group_id="0/3/m1", sample_idx=2)
    """

    def __init__(
        self,
        service: Service,
        encode_prompt: Callable[[str], list[int]],
        *,
        group_id: str = "",
        sample_idx: int = 0,
        render: Callable[[Task], str] | None = None,
    ) -> None:
        self.service, self.encode_prompt, self.render = service, encode_prompt, render
        self.group_id, self.sample_idx = group_id, sample_idx
        self.task: Task | None = None

    def reset(self, task: Task) -> Observation:
        self.task = task
        text = self.render(task) if self.render is not None else render_prompt(task)
        return Observation(tuple(self.encode_prompt(text)), text)

    def submit_step(self, action: Generation) -> Future[tuple[Observation, Verdict | None, bool]]:
        if self.task is None:
            raise RuntimeError("SingleTurnEnv.step before reset")
        job = self.service.submit(Verify(self.task, action.text, self.group_id, self.sample_idx))
        out: Future[tuple[Observation, Verdict | None, bool]] = Future()

        def settle(f: Future[Result]) -> None:
            try:
                result = f.result()
                verdict = result if isinstance(result, Verdict) else Verdict.infra(f"not a verdict: {result!r}")
            except GroupDropped as e:
                verdict = Verdict.infra(str(e), error_class="infra:group_dropped")
            except Exception as e:  # noqa: BLE001 - the service closed under us: infra, never scored
                verdict = Verdict.infra(f"{type(e).__name__}: {e}", error_class="infra:service")
            out.set_result((Observation(()), verdict, True))

        job.add_done_callback(settle)
        return out

    def step(self, action: Generation) -> tuple[Observation, Verdict | None, bool]:
        return self.submit_step(action).result()
