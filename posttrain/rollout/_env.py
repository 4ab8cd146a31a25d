"""``SingleTurnEnv``: today's verifiers as one-step episodes through the execution service.

The episode protocol itself, ``Env`` (``reset(task) -> Observation``, ``step(action) ->
StepResult``), lives with the domains (``posttrain.envs.Env``), which build their own episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Protocol, runtime_checkable

from posttrain.envs import model_prompt
from posttrain.sched import GroupDropped, Result, Service, StepError, Verify
from posttrain.types import Generation, Observation, StepResult, Task, Verdict, Verifier


def verify_by_domain(verifiers: Mapping[str, Verifier]) -> Verifier:
    """One ``Verifier`` over many domains: each task verified by its own domain's (``EpisodeContext.verify``).

    >>> from posttrain.types import Task, Verdict
    >>> verify = verify_by_domain({"d": lambda task, response: Verdict("pass", 1.0)})
    >>> verify(Task(id="t", domain="d", prompt="?"), "x").outcome
    'pass'
    """
    def verify(task: Task, response: str) -> Verdict:
        return verifiers[task.domain](task, response)

    return verify


@runtime_checkable
class SubmitsSteps(Protocol):
    """An ``Env`` whose step can be started now and awaited later (the runner starts every episode's
    step of a round first, so the service sees them all at once and runs them on its workers)."""

    def submit_step(self, action: Generation) -> Future[StepResult]: ...


@runtime_checkable
class CountsAttempts(Protocol):
    """An ``Env`` that says how many attempts its episode may still make (``envs._repair.RepairEnv``): the
    runner scores a failed attempt whose feedback overflows as that attempt's verdict only where the step
    limit leaves a turn for each of them (``_limits.cut_by``)."""

    @property
    def attempts_left(self) -> int: ...


class SingleTurnEnv:
    """A one-step episode verified through the execution service: the prompt, one answer, its verdict.

    Behaviour is today's single-turn RL: the prompt is ``render(task)`` (default: the task's
    domain's ``render_prompt``, which shows tool schemas; exactly ``task.prompt`` for math and code)
    encoded with ``encode_prompt`` (``Policy.encode_prompt``); the answer's decoded text is one
    ``Verify(task, text, group_id, sample_idx)`` job of ``service`` (``posttrain.sched``), which owns
    infra retries, the verdict cache and dedup. When a sample of the group ran out of infra retries,
    the service drops the group and the verdict is ``infra_error`` (``infra:group_dropped``): never
    scored; the trainer drops the whole group. A verifier that crashed alike on every try of the
    answer (the service's ``StepError``: its bug, not infra) is raised out of ``run_batch``, as a
    stateful step's is: made an infra verdict, it dropped the answer's group unscored.

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
        text = self.render(task) if self.render is not None else model_prompt(task)
        return Observation(tuple(self.encode_prompt(text)), text)

    def submit_step(self, action: Generation) -> Future[StepResult]:
        if self.task is None:
            raise RuntimeError("SingleTurnEnv.step before reset")
        job = self.service.submit(Verify(self.task, action.text, self.group_id, self.sample_idx))
        out: Future[StepResult] = Future()

        def settle(f: Future[Result]) -> None:
            try:
                result = f.result()
                verdict = result if isinstance(result, Verdict) else Verdict.infra(f"not a verdict: {result!r}")
            except GroupDropped as e:
                verdict = Verdict.infra(str(e), error_class="infra:group_dropped")
            except StepError as e:  # the verifier crashed alike on every try: its bug, out of run_batch
                out.set_exception(e)  # (as a stateful step's); an infra verdict dropped the group unscored
                return
            except Exception as e:  # noqa: BLE001 - the service closed under us: infra, never scored
                verdict = Verdict.infra(f"{type(e).__name__}: {e}", error_class="infra:service")
            out.set_result(StepResult(Observation(()), verdict, True))

        job.add_done_callback(settle)
        return out

    def step(self, action: Generation) -> StepResult:
        return self.submit_step(action).result()

    def close(self) -> None:
        """Nothing to release: its one job is the service's (``Env.close``)."""
