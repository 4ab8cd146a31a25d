"""Diversity metrics, in-group deduplication and what it does to advantages, and the per-task
temperature and token-budget controllers (posttrain/rollout/_adaptive.py)."""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.algo import ADVANTAGES
from posttrain.rollout._adaptive import (
    BudgetController,
    TemperatureController,
    dedup_advantages,
    dedup_rewards,
    diversity,
    diversity_metrics,
    edit_distance,
)
from posttrain.train.grpo import build_batch, group_advantages
from posttrain.train.recipe import RLConfig
from posttrain.types import Trajectory, Turn, Verdict


def traj(ids, reward=1.0, group="g"):
    v = Verdict("pass" if reward == 1.0 else "fail", reward) if not math.isnan(reward) else Verdict.infra("x")
    return Trajectory("m", group, 0, (Turn((1, 2), tuple(ids), (-0.1,) * len(ids), "eos", v),), reward)


def test_metrics_on_hand_computed_groups():
    d = diversity([(1, 2, 3), (1, 2, 3), (4, 5, 6), (1, 2, 7)])
    assert d["dup_rate"] == 0.25
    assert d["distinct_1"] == pytest.approx(7 / 12) and d["distinct_2"] == pytest.approx(5 / 8)
    # pairs: 0 (dup), 1, 1, 1/3, 1/3, 1 over 6 pairs
    assert d["edit_distance"] == pytest.approx((0 + 1 + 1 / 3 + 1 + 1 / 3 + 1) / 6)
    assert edit_distance((1, 2, 3, 4), (2, 3, 4, 5)) == 2
    m = diversity_metrics([[traj((1,)), traj((1,))], [traj((1,)), traj((2,))]])
    assert m["diversity/dup_rate"] == 0.25


def test_dedup_counts_each_distinct_completion_once_in_the_advantage():
    groups = [[traj((5, 6)), traj((5, 6)), traj((5, 6)), traj((7,), 0.0)]]
    rewards = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    plain = ADVANTAGES["grpo"](rewards)
    assert plain.tolist()[0] == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-5)
    deduped, keep = dedup_rewards(groups, rewards)  # the baseline's view
    assert keep.tolist() == [[True, False, False, True]]
    assert ADVANTAGES["grpo"](deduped).tolist()[0] == pytest.approx([0.70710, 0.0, 0.0, -0.70710], abs=1e-4)
    adv = dedup_advantages(groups, rewards, ADVANTAGES["grpo"])  # every copy its first copy's, capped by
    # the plain one: copies of a pass never earn more than distinct passes, nor soften the failure
    assert adv.tolist()[0] == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-5)
    fails = [[traj((5, 6)), traj((7,), 0.0), traj((7,), 0.0), traj((7,), 0.0)]]  # copies of a failure
    assert dedup_advantages(fails, torch.tensor([[1.0, 0.0, 0.0, 0.0]]), ADVANTAGES["grpo"]).tolist()[0] == \
        pytest.approx([0.70710, -0.70710, -0.70710, -0.70710], abs=1e-4)  # pay more than distinct ones' -0.5
    assert torch.equal(group_advantages(groups, rewards, RLConfig(dedup=True)), adv)  # what the trainer applies
    batch = build_batch(groups, rewards, pad_id=0)  # the copies are trained, never masked
    assert batch.loss_mask.sum(-1).tolist() == [2.0, 2.0, 2.0, 1.0]


def test_dedup_keeps_infra_errors_and_all_distinct_groups_as_they_are():
    groups = [[traj((1,)), traj((2,), float("nan")), traj((3,), 0.0)]]
    rewards = torch.tensor([[1.0, float("nan"), 0.0]])
    deduped, keep = dedup_rewards(groups, rewards)
    assert keep.all() and torch.equal(torch.isnan(deduped), torch.isnan(rewards))
    assert torch.equal(deduped.nan_to_num(-9), rewards.nan_to_num(-9))


def test_temperature_rises_while_a_task_repeats_itself_and_returns():
    c = TemperatureController(base=1.0, high=1.3, step=1.1, target_dup=0.25)
    same = [traj((1, 2))] * 4
    temps = [c.observe("t", same) for _ in range(5)]
    assert temps[0] == pytest.approx(1.1) and temps[-1] == pytest.approx(1.3)  # capped at high
    varied = [traj((i,)) for i in range(4)]
    back = [c.observe("t", varied) for _ in range(5)]
    assert back[-1] == pytest.approx(1.0) and c.temperature("other") == 1.0
    c2 = TemperatureController()
    c2.load_state(c.state())
    assert c2.temperature("t") == c.temperature("t")
    with pytest.raises(ValueError):
        TemperatureController(low=2.0)


def test_budget_follows_difficulty():
    b = BudgetController(base=64, low=8, high=256)
    easy = [traj(range(10)), traj(range(12)), traj(range(9)), traj(range(11))]
    assert b.observe("easy", easy) == 15  # 1.25 x the longest pass (12)
    hard = [traj(range(64), 0.0)] * 4
    assert [b.observe("hard", hard) for _ in range(3)] == [96, 144, 216]
    assert b.observe("hard", hard) == 256  # at most high
    assert b.observe("mid", [traj((1,)), traj((2,), 0.0)]) == 64  # in between: unchanged
    assert b.observe("inf", [traj((1,), float("nan"))]) == 64  # infra errors say nothing


def test_batched_edit_distance_equals_the_plain_one():
    import random

    from posttrain.rollout._adaptive import edit_distances

    rng = random.Random(0)
    pairs = [(tuple(rng.randrange(4) for _ in range(rng.randrange(0, 30))),
              tuple(rng.randrange(4) for _ in range(rng.randrange(0, 30)))) for _ in range(200)]
    assert edit_distances(pairs) == [edit_distance(a, b) for a, b in pairs]


class _CoinEnv:
    """An agent environment that judges the same action otherwise from one episode to the next (a
    flaky test, a command whose output is random): this episode's is ``outcome``."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome

    def reset(self, task):
        from posttrain.types import Observation

        return Observation((1, 2), "go")

    def step(self, action):
        from posttrain.types import Observation, StepResult

        return StepResult(Observation(()), Verdict(self.outcome, 1.0 if self.outcome == "pass" else 0.0), True)

    def close(self) -> None:
        pass


def test_a_copy_judged_otherwise_keeps_its_own_verdict_s_advantage():
    """rl.dedup: identical actions whose environment failed one and passed the other are two distinct
    completions. Keyed by the actions alone, the failing copy was trained with the passing first copy's
    advantage (+0.707 in [S pass, S fail, T fail, T fail]): a failure pushed up by another's verdict."""
    from posttrain.policy import Generation, SamplingParams
    from posttrain.rollout import Episode, run_batch
    from posttrain.train._credit import rewards_of
    from posttrain.types import Task
    from posttrain.verify.rewards import RewardWeights

    class Script:
        def generate(self, prompts, params):
            return [Generation(tuple(p), ids, (-0.1,) * len(ids), "s" if ids == (5,) else "t", "eos")
                    for p, ids in zip(prompts, [(5,), (5,), (6,), (6,)], strict=True)]

    task = Task(id="m", domain="tool", prompt="go", fields={})
    runs = [Episode(task, _CoinEnv(o), "0/0/m", i) for i, o in enumerate(["pass", "fail", "fail", "fail"])]
    groups = [run_batch(Script(), runs, SamplingParams(max_new_tokens=2), max_turns=1)]
    rewards, _ = rewards_of(groups, RewardWeights())
    assert rewards.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    adv = group_advantages(groups, rewards, RLConfig(dedup=True)).tolist()[0]
    assert adv[0] > 0 and adv[1] < 0 and adv[1] == pytest.approx(adv[2]) == pytest.approx(adv[3])
    assert adv == pytest.approx([1.1547, -0.5774, -0.5774, -0.5774], abs=1e-4)  # distinct: S pass, S fail, T
    assert dedup_rewards(groups, rewards)[1].tolist() == [[True, True, True, False]]


def test_turns_are_copies_only_turn_by_turn():
    two = Trajectory("m", "g", 0, (Turn((1,), (5, 6), (0.0, 0.0), "length", None), Turn((9,), (7,), (0.0,), "eos",
                                                                                          Verdict("fail", 0.0))), 0.0)
    one = Trajectory("m", "g", 1, (Turn((1,), (5, 6, 7), (0.0,) * 3, "eos", Verdict("fail", 0.0)),), 0.0)
    assert dedup_rewards([[one, two]], torch.tensor([[0.0, 0.0]]))[1].tolist() == [[True, True]]
    # copies judged alike stay copies when their rewards differ in the last bits (KL in the reward)
    same = [traj((5, 6), 0.0), traj((5, 6), 0.0)]
    assert dedup_rewards([same], torch.tensor([[-0.1, -0.1000001]]))[1].tolist() == [[True, False]]
