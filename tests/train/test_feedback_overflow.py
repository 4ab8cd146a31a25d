"""A failed attempt whose feedback overflows the context (or the episode's token budget) ends the
episode on its own verdict (``cut_by="feedback_overflow"``), never on the cut's floor.

Repair episodes as the trainer builds and samples them (``make_episodes("repair", ...)`` over the
embedded default, 256 positions, through ``sample_episodes`` and a ``Service``); ``rewards_of`` and
the group advantages score them. The verifier is a double whose feedback quotes the answer (as a
code task's ``NameError`` or a schema error quotes what it was given), so a longer answer makes
longer feedback. Checked: (1) the real tiny model's failed attempt whose feedback does not fit
scores its verdict, not the floor (-1 under the length penalty); (2) a policy that pads its wrong
answer so that the feedback overflows gets exactly what the padded answer gets as the last attempt,
and no more than answering plainly wrong (``attempt_discount`` 1, a turn for every attempt); (3) the
other cuts (the attempt itself filling the context, the step limit) still score the floor.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from test_failing_never_pays import ESTIMATORS, WEIGHTINGS, ScriptedSampler, effective_advantages

from posttrain.policy import ChatTemplate, Policy, build_embedded_default, load_policy
from posttrain.rollout.episodes import make_episodes
from posttrain.sched import LocalBackend, Service
from posttrain.train.grpo import EpisodeSpec, rewards_of, sample_episodes
from posttrain.train.recipe import RLConfig
from posttrain.types import Task, Trajectory, Verdict
from posttrain.verify.rewards import RewardWeights, combine, failure_floor

TASK = Task(id="t0", domain="test", prompt="Add 1 and 2. Answer:", fields={}, reference="3")
TAILS = {"context": " The checks were: " + "f(1, 2) == 3; " * 22, "budget": " The checks were: " + "f(1, 2) == 3; " * 7}
"""What the verifier adds after the answer it quotes: 326 characters (past the 256 positions with any
answer), 116 (within them, past a budget of 100 after the prompt)."""


def verifier(tail: str = ""):
    """Passes the reference; any other answer is a wrong answer of the right form (format credit, as
    math's ``wrong_answer``), its feedback quoting the answer and then ``tail``."""
    def verify(task: Task, response: str) -> Verdict:
        answer = response.strip()
        if answer == task.reference:
            return Verdict("pass", 1.0)
        return Verdict("fail", 0.0, feedback=f"Wrong answer: got {response}.{tail}", error_class="wrong_answer",
                       components={"outcome": 0.0, "format": 1.0, "process": 0.0})
    return verify


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Policy:
    return load_policy(build_embedded_default(tmp_path_factory.mktemp("m") / "m"))


def play(policy: Policy, *, tail: str = "", attempts: int = 2, turns: int | None = None,
         budget: int | None = None, scripts: Sequence[Sequence[str]] | None = None, n: int = 4,
         cap: int = 200) -> list[Trajectory]:
    """One group of ``TASK`` as the trainer samples it: the tiny model's answers, or ``scripts``."""
    plan = make_episodes("repair", [TASK], policy, service=None, verify=verifier(tail), max_attempts=attempts,
                         max_turns=turns, max_tokens=budget)
    assert plan.max_context == 256  # the embedded default's positions
    sampler = None if scripts is None else ScriptedSampler(ChatTemplate(policy.tokenizer), scripts)
    cfg = RLConfig(group_size=n if scripts is None else len(scripts), max_new_tokens=cap, temperature=1.0)
    with Service(LocalBackend({})) as svc:
        [group] = sample_episodes(policy, [TASK], svc, cfg, group_ids=["0/0/t0"], policy_version=0,
                                  episodes=EpisodeSpec(plan), generator=sampler)
    return group


def verdict_reward(t: Trajectory, w: RewardWeights) -> float:
    """What the episode's last verdict is worth (its length term over all its action tokens)."""
    return combine(t.verdicts[-1], w, completion_tokens=sum(len(turn.action_ids) for turn in t.turns)).total


@pytest.mark.parametrize("limit", ["context", "budget"])
def test_a_failed_attempt_whose_feedback_overflows_scores_its_verdict(policy, limit):
    torch.manual_seed(0)
    group = play(policy, tail=TAILS[limit], cap=32, budget=100 if limit == "budget" else None)
    for t in group:  # every answer of the tiny model fails; its feedback cannot fit
        assert t.cut_by == "feedback_overflow" and t.truncated and t.attempts == 1
        assert t.verdicts[-1].outcome == "fail" and len(t.turns) == 1  # the feedback never entered
    for w in (RewardWeights(format=0.2), RewardWeights(length=1.0, max_tokens=256, overlong_buffer=64)):
        rewards, _ = rewards_of([group], w)
        assert rewards[0].tolist() == pytest.approx([verdict_reward(t, w) for t in group])
        assert (rewards > failure_floor(w).total).all()  # the cut's floor: 0 and -1.0 on the old code


PAD = "8, because " + "I think so " * 14
"""A wrong answer padded to make its feedback long: 165 characters, quoted back in the feedback."""


def test_padding_a_wrong_answer_to_overflow_the_feedback_never_pays(policy):
    padded = play(policy, scripts=[["3"], ["8", "8"], ["8", "8"], [PAD, "8"]])
    last = play(policy, scripts=[[PAD], [PAD]], attempts=1)[0]  # the same padded answer as the last attempt
    plain = play(policy, scripts=[["3"], ["8", "8"], ["8", "8"], ["8", "8"]])
    x = padded[3]
    assert x.cut_by == "feedback_overflow" and x.attempts == 1 and last.cut_by is None and last.attempts == 1
    assert [t.cut_by for t in plain] == [None] * 4 and plain[3].attempts == 2
    for label, w in WEIGHTINGS.items():
        got = float(rewards_of([padded], w)[0][0, 3])
        assert got == pytest.approx(float(rewards_of([[last]], w)[0][0, 0])), label  # its verdict, as the last
        assert got <= float(rewards_of([plain], w)[0][0, 3]) + 1e-6, label  # no more than answering wrong
        for est in ESTIMATORS:
            adv = float(effective_advantages([padded], w, est)[3])
            assert adv <= float(effective_advantages([plain], w, est)[3]) + 1e-6, (label, est)
    assert float(rewards_of([padded], WEIGHTINGS["format"])[0][0, 3]) == pytest.approx(0.2)  # the floor's 0 before


def test_the_other_cuts_still_score_the_floor(policy):
    """The attempt itself filling the context (the feedback had no room to take) and the step limit
    stay ``max_tokens`` and ``max_turns`` at the floor; beside them in the same group, the answer whose
    feedback overflowed is the only one scored on its verdict."""
    room = 256 - len(policy.encode_prompt(TASK.prompt))
    fill = "8" * 300  # cut at the completion cap, which is the context's room: none is left for the feedback
    group = play(policy, scripts=[[fill], [PAD], ["8"]], turns=1, attempts=2, cap=room)  # the step limit: 1
    assert [t.cut_by for t in group] == ["max_tokens", "max_tokens", "max_turns"]
    assert group[0].turns[0].stop_reason == "length"
    group2 = play(policy, scripts=[[fill], [PAD], ["8", "8"]], cap=room)  # two attempts allowed, two turns
    assert [t.cut_by for t in group2] == ["max_tokens", "feedback_overflow", None]
    for w in WEIGHTINGS.values():
        floor = failure_floor(w).total
        assert rewards_of([group], w)[0][0].tolist() == pytest.approx([floor] * 3)
        r = rewards_of([group2], w)[0][0].tolist()
        assert r[0] == pytest.approx(floor) and r[1] == pytest.approx(verdict_reward(group2[1], w))
    assert rewards_of([group2], WEIGHTINGS["format"])[0][0, 1] == pytest.approx(0.2)  # 0, the floor, before


@pytest.mark.parametrize("setting", ["discount", "step_limit"])
def test_padding_never_pays_where_later_attempts_would_cost_more(policy, setting):
    """An overflow at the first attempt skips the attempts after it. Under ``attempt_discount`` 0.5 a
    plain wrong answer's second failure is worth half (0.1 under format 0.2): the overflow scores the
    floor there. With 3 attempts and a step limit of 2, failing plainly ends in a ``max_turns`` cut
    (the floor): the overflow is no ``feedback_overflow`` there but ``max_tokens``, the floor too.
    Before, padding got 0.2 against 0.1 and 0.0."""
    kw = {"attempts": 3, "turns": 2} if setting == "step_limit" else {}
    discount = 0.5 if setting == "discount" else 1.0
    padded = play(policy, scripts=[["3"], ["8", "8", "8"], [PAD, "8", "8"]], **kw)
    plain = play(policy, scripts=[["3"], ["8", "8", "8"], ["8", "8", "8"]], **kw)
    assert padded[2].attempts == 1 and plain[2].attempts == 2
    assert padded[2].cut_by == ("max_tokens" if setting == "step_limit" else "feedback_overflow")
    for label, w in WEIGHTINGS.items():
        got = float(rewards_of([padded], w, attempt_discount=discount)[0][0, 2])
        assert got <= float(rewards_of([plain], w, attempt_discount=discount)[0][0, 2]) + 1e-6, label
        assert got == pytest.approx(failure_floor(w).total), label


@pytest.mark.parametrize(("padded_script", "plain_script", "cut"), [
    pytest.param(["8", PAD, "8"], ["8", "8", "8"], "feedback_overflow", id="pad-the-second-of-three"),
    # two feedbacks in, the padded answer leaves the 256 positions no room: cut (max_tokens), the floor
    pytest.param(["8", "8", PAD, "8"], ["8", "8", "8", "8"], "max_tokens", id="pad-the-third-of-four"),
    pytest.param([PAD + PAD, "8", "8"], ["8", "8", "8"], "feedback_overflow", id="pad-twice-as-long"),
])
def test_padding_at_any_attempt_beside_a_pass_never_pays(policy, padded_script, plain_script, cut):
    """Three more tries of the same policy (the stop hook's read of 4c5386c): the overflow at a later
    attempt, with more attempts allowed, and a longer pad; each in a group where another episode passes.
    The padded episode scores what the same failed answer gets as the last attempt, never more than
    failing plainly to the end, and its advantage is never above the plain one's, under every weighting
    and estimator."""
    attempts = len(plain_script)
    padded = play(policy, scripts=[["3"], padded_script], attempts=attempts)
    plain = play(policy, scripts=[["3"], plain_script], attempts=attempts)
    x, at = padded[1], next(i for i, answer in enumerate(padded_script) if answer.startswith(PAD)) + 1
    assert (x.cut_by, x.attempts) == (cut, at)
    assert plain[1].cut_by is None and plain[1].attempts == attempts and padded[0].verdicts[-1].passed
    for label, w in WEIGHTINGS.items():
        assert float(rewards_of([padded], w)[0][0, 1]) <= float(rewards_of([plain], w)[0][0, 1]) + 1e-6, label
        for est in ESTIMATORS:
            adv = float(effective_advantages([padded], w, est)[1])
            assert adv <= float(effective_advantages([plain], w, est)[1]) + 1e-6, (label, est)
