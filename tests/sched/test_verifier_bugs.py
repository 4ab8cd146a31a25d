"""A verifier that raises on one response every time is a bug of the verifier, not infra.

Before, its crash (``envs.guard``: an ``infra:verifier_crash`` verdict) was retried until the tries ran
out and the sample's whole group was dropped, unscored: a response that crashes the verifier (a plugin
domain's, a bug in a built-in one) escaped its verdict in training and left evaluation's
denominators (``verify_pairs``: ``infra:exhausted``, excluded from the rates). Now the same crash line
on every try stops with a ``StepError`` naming the task and the crash, in one line -- on the service's
``Verify`` jobs (single answers, evaluation) and in a stateful episode whose step verifies through the
nested lane. A crash that differs between tries, or of a resource kind (a broken pipe, memory), stays
infra: retried, then dropped, as before."""

from __future__ import annotations

import itertools

import pytest

from posttrain.envs import get_domain, guard
from posttrain.policy import Generation, SamplingParams
from posttrain.rollout import Episode, run_batch
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service, StepError
from posttrain.types import Observation, StepResult, Task

TASK = Task(id="m", domain="math", prompt="1+1?", fields={"answer": "2"})
POLICY = SchedPolicy(max_tries=3, backoff_s=0.0, breaker_threshold=99)


def crashing(error: Exception | None = None):
    """The real math verifier behind a plugin-like wrapper that raises on a response holding "boom"
    (``error``; None: a KeyError whose message differs every call)."""
    real, n = get_domain("math").make_verifier(None), itertools.count()

    def verify(task: Task, response: str):
        if "boom" in response:
            raise error if error is not None else KeyError(f"call {next(n)}")
        return real(task, response)

    return guard("math", verify)


def test_the_same_crash_on_every_try_stops_with_one_line_and_drops_nothing():
    with Service(LocalBackend({"math": DomainHooks(crashing(KeyError("x")))}), POLICY) as svc:
        with pytest.raises(StepError) as e:
            svc.verify_pairs([(TASK, "\\boxed{2}"), (TASK, "boom")])
        stats = svc.stats()
    line = str(e.value)
    assert "\n" not in line and "task 'm': the math verifier crashed on each of 3 tries" in line
    assert "KeyError: 'x'" in line and "not infra" in line
    assert (stats["groups_dropped"], stats["samples_dropped"]) == (0, 0)


@pytest.mark.parametrize("error", [None, BrokenPipeError(32, "Broken pipe"), MemoryError()],
                         ids=["differs", "broken-pipe", "memory"])
def test_a_crash_that_differs_or_of_a_resource_kind_stays_infra(error):
    with Service(LocalBackend({"math": DomainHooks(crashing(error))}), POLICY) as svc:
        right, boom = svc.verify_pairs([(TASK, "\\boxed{2}"), (TASK, "boom")])
    assert right.passed and boom.error_class == "infra:exhausted"


class _Judged:
    """A stateful environment whose one step verifies the action's text through the service's nested
    lane, as a repair or agent environment verifies an attempt."""

    def __init__(self, verify) -> None:
        self.verify, self.task = verify, None

    def reset(self, task):
        self.task = task
        return Observation((1, 2))

    def step(self, action):
        return StepResult(Observation(()), self.verify(self.task, action.text), True)

    def close(self):
        pass


class _Says:
    def __init__(self, text: str) -> None:
        self.text = text

    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (7,), (0.0,), self.text, "eos") for p in prompt_ids]


def test_a_step_whose_verification_crashes_identically_on_the_restart_stops_the_batch():
    with Service(LocalBackend({"math": DomainHooks(crashing(ValueError("bad latex")))}), POLICY) as svc:
        verify = svc.verifier()
        runs = [Episode(TASK, _Judged(verify), "g", i, make_env=lambda _: _Judged(verify)) for i in range(2)]
        with pytest.raises(StepError, match=r"math verifier crashed: ValueError: bad latex, again, identically"):
            run_batch(_Says("boom"), runs, SamplingParams(max_new_tokens=1), max_turns=1, service=svc)
        assert svc.stats()["groups_dropped"] == 0
