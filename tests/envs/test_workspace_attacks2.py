"""A workspace agent that is going to fail chooses how, on the real sandbox: stall in prose until the
step limit, write calls that cannot be read until it, submit nothing (again while attempts are
left), or run into the episode's token budget. The four are members of one group ``[pass, wrong,
wrong, *ways]`` of a doc task played by the episode runner (``run_batch``, the kit's ``WorkspaceEnv``
through the domain's ``episode_env``), scored by the trainer's accounting (``rewards_of``,
``build_batch``) under outcome-only, format+process and format+length weightings, with every
advantage estimator with and without the std: each way's advantage is at most the wrong answers' in
the same group and below zero, and its row is trained -- never cut into a better score, never
masked, never infra. The kit's budgets grade the workspace as it is, so each way ends with a verdict
of its own (docs/contracts.md, "Reward accounting"; tests/train/test_failing_never_pays.py has the
tool episodes'). Standing cases: no way paid before this file (no check changed).
"""

from __future__ import annotations

import functools
import random

import pytest
from agent_play import CHAT, action, call

from posttrain.algo import ADVANTAGES
from posttrain.envs import EpisodeContext, get_domain
from posttrain.envs.doc._agents import _submit, _wrong, reference
from posttrain.envs.doc._env import build_task
from posttrain.policy import SamplingParams
from posttrain.rollout import Episode, run_batch
from posttrain.train._credit import rewards_of
from posttrain.train.grpo import build_batch
from posttrain.verify.rewards import RewardWeights

ENV = get_domain("doc")
TASK = build_task(random.Random(8), 1, "doc-ways-of-failing", "figure", pdf=False)
STEPS, BUDGET = 3, 900
REF = reference(TASK)
PASS = CHAT.write_tool_calls([_submit(REF)])
WRONG = CHAT.write_tool_calls([_submit({**REF, "answer": _wrong(REF["answer"])})])
WAYS = {
    "stall in prose to the step limit": ["Let me think about it."] * STEPS,
    "unreadable calls to the step limit": ['<tool_call>{"name": "submit", "arguments": {</tool_call>'] * STEPS,
    "submit nothing": [CHAT.write_tool_calls([call("submit")])] * STEPS,
    "run into the token budget": ["Still reading the report, line by line. " * 12] * STEPS,
}
WEIGHTINGS = [RewardWeights(), RewardWeights(format=0.2, process=0.5),
              RewardWeights(format=0.2, length=1.0, max_tokens=60, overlong_buffer=40)]


class Script:
    """Each episode's actions in order; an episode known by the context it continues (round 0 in order)."""

    def __init__(self, scripts: list[list[str]]) -> None:
        self.scripts, self.seen = [list(s) for s in scripts], [None] * len(scripts)

    def generate(self, prompts, params: SamplingParams):
        out, taken = [], set()
        for ids in map(tuple, prompts):
            i = next(k for k, seen in enumerate(self.seen)
                     if k not in taken and (seen is None or ids[: len(seen)] == seen))
            taken.add(i)
            g = action(self.scripts[i].pop(0))
            g = type(g)(ids, g.completion_ids[: params.max_new_tokens], g.logprobs[: params.max_new_tokens],
                        g.text, "eos" if len(g.completion_ids) <= params.max_new_tokens else "length")
            self.seen[i] = ids + g.completion_ids
            out.append(g)
        return out


@pytest.fixture(scope="module")
def group(pool):
    """One group, played by the runner at once: ``[pass, wrong, wrong, *WAYS]``."""
    ctx = EpisodeContext(CHAT, pool, STEPS, ENV.make_verifier(None), BUDGET)
    scripts = [[PASS], [WRONG] * STEPS, [WRONG] * STEPS, *WAYS.values()]  # wrong: again while attempts are left
    runs = [Episode(TASK, ENV.episode_env(TASK, ctx), "g", i) for i in range(len(scripts))]
    return run_batch(Script(scripts), runs, SamplingParams(max_new_tokens=400), max_turns=STEPS, max_tokens=BUDGET)


def test_each_way_of_failing_ends_in_its_own_verdict(group) -> None:
    assert [t.verdicts[-1].outcome for t in group] == ["pass"] + ["fail"] * (len(group) - 1), group
    assert all(t.cut_by is None for t in group)
    ended = [t.verdicts[-1].evidence["ended"] for t in group[3:]]
    assert ended == ["max_steps", "max_steps", "submit", "max_tokens"], ended
    assert group[1].verdicts[-1].components["format"] == 1.0  # the wrong answer has the answer's shape


@pytest.mark.parametrize("weights", WEIGHTINGS, ids=["outcome", "format+process", "format+length"])
def test_no_way_of_failing_a_workspace_episode_beats_answering_wrong(group, weights: RewardWeights) -> None:
    """Each way's advantage (every estimator, with and without the std) is at most the wrong answers'
    in the same group, below zero, and its row is trained."""
    rewards, _ = rewards_of([group], weights)
    trained = build_batch([group], rewards, pad_id=0).loss_mask.sum(-1) > 0
    assert bool(trained.all())
    for name in ADVANTAGES:
        for std in (True, False):
            adv = functools.partial(ADVANTAGES[name], scale_by_std=std)(rewards).reshape(-1)
            wrong = float(adv[1:3].min())
            for way, got in zip(WAYS, adv[3:].tolist(), strict=True):
                assert got <= wrong + 1e-6 and got < 0, (way, name, std, got, wrong)
