"""The per-task token budget and temperature read as a policy would (posttrain/rollout/_adaptive.py):
failing so that its task's cap shrinks or its temperature moves to its benefit, sandbagging a task
for more tokens later. Standing cases: each holds with the code as it is.

Every way of failing a group (a wrong answer, an answer cut at the cap, an episode cut by the token
budget or the step limit, one ended with no verdict, an empty completion) is read by the budget as a
failure: it never shrinks the cap (only a pass rate of ``easy`` does), and a cap shrunk by passes
never goes below ``margin`` x the longest pass seen, so no pass the policy has shown is cut later.
Sandbagging grows the cap only while the task stays hard: once it is easy the cap is the passes'
again, whatever was grown before. A group's duplicates move only its temperature, which changes no
advantage.
"""

from __future__ import annotations

import math

import pytest
import torch

from posttrain.rollout._adaptive import AdaptiveSampling, BudgetController, TemperatureController
from posttrain.train.grpo import group_advantages
from posttrain.train.recipe import RLConfig
from posttrain.types import Trajectory, Turn, Verdict


def episode(ids, outcome="fail", *, stop="eos", cut_by=None, verdict=True, temperature=1.0):
    v = Verdict("pass", 1.0) if outcome == "pass" else Verdict("fail", 0.0)
    turn = Turn((1, 2), tuple(ids), (-0.1,) * len(ids), stop, v if verdict else None)
    reward = v.reward if verdict else 0.0
    return Trajectory("t", "g", 0, (turn,), reward, truncated=stop == "length" or cut_by is not None,
                      cut_by=cut_by, temperature=temperature)


FAILURES = {
    "wrong": lambda n: episode((7,) * n),
    "cut_at_cap": lambda n: episode((7,) * n, stop="length"),
    "cut_by_budget": lambda n: episode((7,) * n, stop="length", cut_by="max_tokens", verdict=False),
    "cut_by_turns": lambda n: episode((7,) * n, cut_by="max_turns", verdict=False),
    "no_verdict": lambda n: episode((7,) * n, verdict=False),
    "empty": lambda n: episode(()),
}


@pytest.mark.parametrize("way", sorted(FAILURES))
def test_no_way_of_failing_shrinks_a_task_s_budget(way):
    b = BudgetController(base=64, low=8, high=256)
    b.observe("t", [episode((5,) * 10, "pass")] * 8)  # easy: 1.25 x 10 = 13
    assert b.cap("t") == 13
    for n in (1, 13):  # short failures, then failures at the cap
        before = b.cap("t")
        after = b.observe("t", [FAILURES[way](n)] * 8)
        assert after == min(256, math.ceil(before * 1.5)) > before  # hard: grows, never shrinks


def test_a_shrunk_cap_never_cuts_a_pass_the_task_has_shown():
    b = BudgetController(base=64, low=8, high=256)
    longest = 0
    for lengths in ((40, 12, 12, 12, 12), (3, 3, 3, 3, 3), (20, 20, 20, 20, 20), (2, 2, 2, 2, 2)):
        b.observe("t", [episode((5,) * n, "pass") for n in lengths])
        longest = max(longest, *lengths)
        assert b.cap("t") == math.ceil(1.25 * longest) == math.ceil(1.25 * b.longest_pass["t"])


def test_sandbagging_buys_tokens_only_while_the_task_stays_hard():
    b = BudgetController(base=64, low=8, high=256)
    for _ in range(6):
        b.observe("t", [episode((7,) * 64, stop="length")] * 8)
    assert b.cap("t") == 256  # at high, never past it
    b.observe("t", [episode((5,) * 30, "pass")] * 7 + [episode((7,))])  # easy: the passes decide
    assert b.cap("t") == math.ceil(1.25 * 30)
    b.observe("t", [episode((7,) * 38, stop="length")] * 4 + [episode((5,) * 30, "pass")] * 4)  # in between
    assert b.cap("t") == math.ceil(1.25 * 30)


def test_an_infra_error_is_neither_a_pass_nor_a_failure_to_the_budget():
    b = BudgetController(base=64, low=8, high=256)
    nan = Trajectory("t", "g", 0, (Turn((1,), (5,), (0.0,), "eos", Verdict.infra("x")),), float("nan"))
    assert b.observe("t", [nan] * 8) == 64 and "t" not in b.caps
    assert b.observe("t", [nan] * 6 + [episode((5,) * 10, "pass")] * 2) == 13


def test_a_group_s_duplicates_move_its_temperature_but_no_advantage():
    """Identical failing completions raise the task's temperature (and distinct ones bring it back);
    the advantages of the group are the estimator's of its rewards at whatever temperature."""
    s = AdaptiveSampling(1.0, 64, temperatures=TemperatureController(low=1.0, high=1.5, step=1.25),
                         budgets=BudgetController(base=64))
    same = [episode((7, 7, 7))] * 7 + [episode((5,), "pass")]
    s.observe(["t"], [same])
    [(temp, cap)] = s.settings(["t"])
    assert temp == 1.25 and cap == math.ceil(64 * 1.5)  # 1/8 passed: hard
    hot = [episode((7, 7, 7), temperature=temp)] * 7 + [episode((5,), "pass", temperature=temp)]
    rewards = torch.tensor([[t.reward for t in same]])
    for dedup in (False, True):
        assert torch.equal(group_advantages([same], rewards, RLConfig(dedup=dedup)),
                           group_advantages([hot], rewards, RLConfig(dedup=dedup)))
    s.observe(["t"], [[episode((7,) * k) for k in range(1, 9)]])
    assert s.settings(["t"])[0][0] == 1.0  # distinct again: back to base, never below


def _group(n_pass, n_fail, *, pass_copies, fail_copies):
    """A group of ``n_pass`` passes then ``n_fail`` failures; copies are one completion repeated, else
    each member adds a trailing token (9: a space) per index: the same answer, not a copy."""
    passes = [episode((5, 6) + (() if pass_copies else (9,) * i), "pass") for i in range(n_pass)]
    fails = [episode((7,) + (() if fail_copies else (9,) * i)) for i in range(n_fail)]
    return passes + fails


@pytest.mark.parametrize("advantage", ["grpo", "rloo", "reinforce_pp"])
def test_repeating_a_completion_never_raises_an_advantage(advantage):
    """rl.dedup: a policy that repeats its passing answer verbatim and varies its failures by a trailing
    token solves no more than one whose completions all differ; no advantage of it is higher (its
    failures pushed down as hard, its passes up no harder), and a failure's copies pay at least what
    a distinct failure does. Over the distinct completions alone 22 of 25 of these groups paid the
    lever under each estimator (G = 8, 4 passes: failures -0.447 where distinct ones got -0.935, the
    passes +7.2 in all where distinct ones got +3.7)."""
    cfg, plain_cfg = RLConfig(dedup=True, advantage=advantage), RLConfig(dedup=False, advantage=advantage)
    for size in (4, 8, 16):
        for n_pass in range(1, size):
            honest = _group(n_pass, size - n_pass, pass_copies=False, fail_copies=False)
            rewards = torch.tensor([[t.reward for t in honest]])
            plain = group_advantages([honest], rewards, plain_cfg)
            assert torch.equal(group_advantages([honest], rewards, cfg), plain)  # nothing repeated
            for pass_copies, fail_copies in ((True, False), (True, True), (False, True)):
                lever = _group(n_pass, size - n_pass, pass_copies=pass_copies, fail_copies=fail_copies)
                adv = group_advantages([lever], rewards, cfg)
                assert (adv <= plain + 1e-6).all(), (size, n_pass, pass_copies, fail_copies, adv, plain)
