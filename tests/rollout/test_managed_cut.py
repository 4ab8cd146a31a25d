"""A managed episode (``run_managed``) cut by its limits after a failed attempt scores the least a failure
can, like the runner's: the row it was cut on carries that earlier attempt's verdict, and without
``cut_by`` the credit paid it that verdict's format credit -- being cut after a half-right attempt paid
more than answering wrong."""

from __future__ import annotations

from posttrain.policy import Generation, SamplingParams
from posttrain.rollout._context import ContextPolicy, run_managed
from posttrain.train._credit import rewards_of
from posttrain.types import Observation, StepResult, Task, Verdict
from posttrain.verify.rewards import RewardWeights

TASK = Task(id="t", domain="math", prompt="?", fields={})
WEIGHTS = RewardWeights(format=0.5)


class _Env:
    """Every attempt fails with its format right; the episode goes on (attempts never run out)."""

    def reset(self, task: Task) -> Observation:
        return Observation((1, 2), "prompt")

    def step(self, action: Generation) -> StepResult:
        return StepResult(Observation((3,), "wrong, again"), Verdict("fail", 0.0, components={"format": 1.0}), False)

    def close(self) -> None:
        pass


class _Sampler:
    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (7, 8), (-0.1, -0.1), "x", "eos") for p in prompt_ids]


def test_a_cut_managed_episode_scores_the_failure_floor() -> None:
    for max_turns, max_tokens, limit in ((2, None, "max_turns"), (9, 5, "max_tokens")):
        [ep] = run_managed(_Sampler(), [(TASK, _Env(), "g", 0)], SamplingParams(max_new_tokens=2),
                           ContextPolicy(budget=64, retrieval=False), lambda text: [0] * len(text),
                           max_turns=max_turns, max_tokens=max_tokens)
        rows = ep.trajectories()
        rewards, _ = rewards_of([rows], WEIGHTS)
        assert not ep.done and rows[-1].verdicts
        assert rewards.tolist() == [[0.0] * len(rows)]  # not the last attempt's 0.5 of format credit
        assert ep.cut_by == limit and all(t.cut_by == limit for t in rows)


class _Solves(_Env):
    """The second attempt passes and ends the episode."""

    def __init__(self) -> None:
        self.n = 0

    def step(self, action: Generation) -> StepResult:
        self.n += 1
        if self.n == 2:
            return StepResult(Observation((), ""), Verdict("pass", 1.0, components={"format": 1.0}), True)
        return super().step(action)


def test_every_row_of_a_finished_managed_episode_scores_its_verdict() -> None:
    """Each row is a one-turn trajectory: with the verdict on the last row alone, the rows before it
    had none and scored the failure floor in a passing episode."""
    [ep] = run_managed(_Sampler(), [(TASK, _Solves(), "g", 0)], SamplingParams(max_new_tokens=2),
                       ContextPolicy(budget=64, retrieval=False), lambda text: [0] * len(text), max_turns=5)
    rows = ep.trajectories()
    rewards, _ = rewards_of([rows], WEIGHTS)
    assert ep.done and ep.cut_by is None and len(rows) == 2
    assert rewards.tolist() == [[1.5, 1.5]]  # the pass and its format credit on both (before: [[0.0, 1.5]])
