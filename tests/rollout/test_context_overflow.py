"""A managed episode (``run_managed``, hierarchical context management) whose failed attempt's feedback
overflows its token budget ends as the plain runner's does: ``cut_by="feedback_overflow"`` on that
attempt's verdict, under the same gating (the environment says how many attempts it has left, the
step limit leaves a turn for each) and the same scoring (the floor under ``attempt_discount`` < 1).
Before, every such overflow of a managed episode was a ``"max_tokens"`` cut at the floor.

Real repair episodes (``envs.RepairEnv``, plain prompts, the embedded default's tokenizer) over the
verifier double of ``tests/train/test_feedback_overflow.py`` (a wrong answer's feedback quotes it);
the policy is a script, each episode also run by ``run_batch`` under the same limits (the cut must be
the same). Checked: the honest overflow scores its verdict, folded context or not; the padding tries
of test_feedback_overflow (the pad at the second of three attempts, twice as long, under
``attempt_discount`` 0.5, under a step limit) never score more than failing plainly, every row, and
the episode's advantage is never above, under every weighting and estimator.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
from test_failing_never_pays import ESTIMATORS, WEIGHTINGS  # noqa: E402

from posttrain.algo import ADVANTAGES  # noqa: E402
from posttrain.envs import RepairEnv  # noqa: E402
from posttrain.policy import ChatTemplate, Generation, SamplingParams, build_char_tokenizer  # noqa: E402
from posttrain.rollout import ContextPolicy, Episode, ManagedEpisode, run_batch, run_managed  # noqa: E402
from posttrain.train._credit import rewards_of  # noqa: E402
from posttrain.types import Task, Verdict  # noqa: E402
from posttrain.verify.rewards import RewardWeights, combine, failure_floor  # noqa: E402

TOK = build_char_tokenizer()
CHAT = ChatTemplate(TOK)
TASK = Task(id="t0", domain="test", prompt="Add 1 and 2. Answer:", fields={}, reference="3")
PAD = "8, because " + "I think so " * 14
"""test_feedback_overflow's padded wrong answer: 165 characters, quoted back in the feedback."""
CAP, BUDGET = 200, 300
"""The completion cap and ``max_tokens``: three plain attempts (2 + 34 + 2 + 34 + 2 tokens) and one
padded attempt (166) fit; the padded attempt's feedback (198) does not."""
WIDE = ContextPolicy(budget=512, retrieval=False)
"""Managed, never folding here: the script recognises each episode by the context it continues."""


def verifier(tail: str = ""):
    """Passes the reference; any other answer fails with format credit, its feedback quoting it."""
    def verify(task: Task, response: str) -> Verdict:
        if response.strip() == task.reference:
            return Verdict("pass", 1.0)
        return Verdict("fail", 0.0, feedback=f"Wrong answer: got {response}.{tail}", error_class="wrong_answer",
                       components={"outcome": 0.0, "format": 1.0, "process": 0.0})
    return verify


class Script:
    """One episode's answers in order (ids + EOS, cut at the cap as a sampler cuts)."""

    def __init__(self, answers: Sequence[str]) -> None:
        self.answers = list(answers)

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        [ids] = prompts
        text = self.answers.pop(0)
        action, stop = (*CHAT.encode(text), CHAT.eos_token_id), "eos"
        if len(action) > params.max_new_tokens:
            action, stop = action[: params.max_new_tokens], "length"
            text = TOK.decode(list(action), skip_special_tokens=True)
        return [Generation(tuple(ids), action, (0.0,) * len(action), text, stop)]


def env(attempts: int, tail: str = "") -> RepairEnv:
    return RepairEnv(verifier(tail), lambda t: TOK(t)["input_ids"],
                     lambda t: TOK(t, add_special_tokens=False)["input_ids"], max_attempts=attempts, infra_retries=0)


def managed(answers: Sequence[str], *, attempts: int, turns: int | None = None, budget: int = BUDGET,
            tail: str = "", policy: ContextPolicy = WIDE, idx: int = 0) -> ManagedEpisode:
    """One managed episode; the plain runner's of the same answers and limits must be cut alike."""
    turns = attempts if turns is None else turns
    params = SamplingParams(max_new_tokens=CAP)
    [ep] = run_managed(Script(answers), [(TASK, env(attempts, tail), "g", idx)], params, policy,
                       lambda t: TOK(t, add_special_tokens=False)["input_ids"], max_turns=turns, max_tokens=budget)
    [plain] = run_batch(Script(answers), [Episode(TASK, env(attempts, tail), "g", idx)], params, max_turns=turns,
                        max_tokens=budget)
    assert (ep.cut_by, tuple(ep.verdicts)) == (plain.cut_by, plain.verdicts)  # as the runner cuts it
    return ep


def row_rewards(group: Sequence[ManagedEpisode], w: RewardWeights, discount: float) -> list[list[float]]:
    """Each episode's rows' rewards, the rows of the group scored together (``rewards_of``)."""
    rows = [t for ep in group for t in ep.trajectories()]
    flat = rewards_of([rows], w, attempt_discount=discount)[0][0].tolist()
    out, at = [], 0
    for ep in group:
        out.append(flat[at : at + len(ep.rows)])
        at += len(ep.rows)
    return out


def advantage(group: Sequence[ManagedEpisode], w: RewardWeights, discount: float, estimator) -> float:
    """The last episode's advantage over its group of episodes, each scoring its best row."""
    rewards = torch.tensor([[max(r) for r in row_rewards(group, w, discount)]])  # (1, G)
    name, std = estimator
    return float(ADVANTAGES[name](rewards, scale_by_std=std)[0, -1])


def assert_never_pays(padded: ManagedEpisode, plain: ManagedEpisode, *, discount: float = 1.0) -> None:
    """Beside a passing episode, every row of ``padded`` scores no more than every row of ``plain``
    (failing plainly to the end), and its advantage is never above, under every weighting and estimator."""
    passing = managed(["3"], attempts=3)
    assert passing.done and passing.verdicts[-1].passed
    for label, w in WEIGHTINGS.items():
        [_, got], [_, ref] = row_rewards([passing, padded], w, discount), row_rewards([passing, plain], w, discount)
        assert max(got) <= min(ref) + 1e-6, (label, got, ref)
        for est in ESTIMATORS:
            adv, ref_adv = advantage([passing, padded], w, discount, est), advantage([passing, plain], w, discount, est)
            assert adv <= ref_adv + 1e-6, (label, est, adv, ref_adv)


def verdict_reward(ep: ManagedEpisode, row: int, w: RewardWeights) -> float:
    """What the episode's last verdict is worth on one row (its length term over that row's tokens)."""
    return combine(ep.verdicts[-1], w, completion_tokens=len(ep.rows[row].action_ids)).total


TAIL = " The checks were: " + "f(1, 2) == 3; " * 4
"""74 characters after the quoted answer: each one-character wrong answer's feedback is 107 tokens."""


@pytest.mark.parametrize("policy", [
    pytest.param(ContextPolicy(budget=120, keep_recent=1, retrieval=False), id="folded"),
    pytest.param(ContextPolicy(budget=512, manage=False), id="unmanaged"),
])
def test_an_honest_overflow_scores_its_verdict(policy):
    """Three honest wrong answers, four attempts allowed: the third one's feedback takes what is left of
    250 tokens (2 + 107 + 2 + 107 + 2 = 220, the feedback's 107 past it). Folded (the context of 239 tokens
    over a budget of 120: the first turns summarised) or not, the episode ends on that verdict, as the
    runner's: its format credit on every row, never the floor (0, and -1.0 under the length penalty)."""
    ep = managed(["8", "9", "7"], attempts=4, budget=250, tail=TAIL, policy=policy)
    assert ep.cut_by == "feedback_overflow" and not ep.done and len(ep.verdicts) == 3 == len(ep.rows)
    assert ep.tokens == 220 + 107 and ep.verdicts[-1].outcome == "fail"
    if policy.manage:
        assert "Earlier:" in TOK.decode(list(ep.rows[-1].context_ids))  # the context was folded
    for label, w in WEIGHTINGS.items():
        [rewards] = row_rewards([ep], w, 1.0)
        assert rewards == pytest.approx([verdict_reward(ep, k, w) for k in range(3)]), label
        assert min(rewards) > failure_floor(w).total or label == "outcome", label  # a wrong answer's 0 is the floor
    assert row_rewards([ep], WEIGHTINGS["format"], 1.0) == [pytest.approx([0.2] * 3)]  # [0.0] * 3 before


@pytest.mark.parametrize(("padded_script", "cut"), [
    pytest.param(["8", PAD, "8"], "feedback_overflow", id="pad-the-second-of-three"),
    pytest.param([PAD + PAD, "8", "8"], "feedback_overflow", id="pad-twice-as-long"),
])
def test_padding_a_managed_wrong_answer_never_pays(padded_script, cut):
    """test_feedback_overflow's padding tries beside a pass, managed: the padded answer's feedback
    overflows (the overflow scores its verdict, as the runner's), and it scores no more than failing
    plainly to the end on any row, its advantage never above."""
    padded = managed(padded_script, attempts=3)
    plain = managed(["8", "8", "8"], attempts=3)
    at = next(i for i, answer in enumerate(padded_script) if answer.startswith(PAD)) + 1
    assert (padded.cut_by, len(padded.verdicts)) == (cut, at)  # max_tokens before
    assert plain.done and plain.cut_by is None and len(plain.verdicts) == 3
    for w in WEIGHTINGS.values():
        [rewards] = row_rewards([padded], w, 1.0)
        assert rewards == pytest.approx([verdict_reward(padded, k, w) for k in range(at)])
    assert_never_pays(padded, plain)


def test_padding_under_an_attempt_discount_scores_the_floor():
    """Under ``attempt_discount`` 0.5 the overflow (its later attempts, which the discount would have
    shrunk, never came) scores the floor, as the runner's: never more than failing plainly."""
    padded = managed([PAD, "8", "8"], attempts=3)
    plain = managed(["8", "8", "8"], attempts=3)
    assert padded.cut_by == "feedback_overflow" and len(padded.verdicts) == 1  # max_tokens before
    for label, w in WEIGHTINGS.items():
        assert row_rewards([padded], w, 0.5) == [pytest.approx([failure_floor(w).total])], label
    assert_never_pays(padded, plain, discount=0.5)


def test_padding_under_a_step_limit_is_gated_as_the_runner_gates_it():
    """Three attempts in a step limit of 2: failing plainly ends in a ``max_turns`` cut (the floor), so
    the overflow at the first attempt is ``max_tokens`` (the floor), not its verdict. With a turn for
    each attempt (a step limit of 3) it is a ``feedback_overflow``, as the runner's. Neither pays."""
    for turns, cut in ((2, "max_tokens"), (3, "feedback_overflow")):  # (2, max_tokens) held before; 3 did not
        padded = managed([PAD, "8", "8"], attempts=3, turns=turns)
        plain = managed(["8", "8", "8"], attempts=3, turns=turns)
        assert padded.cut_by == cut and len(padded.verdicts) == 1
        assert plain.cut_by == (None if turns == 3 else "max_turns")
        assert_never_pays(padded, plain)
    limited = managed([PAD, "8", "8"], attempts=3, turns=2)
    for label, w in WEIGHTINGS.items():
        assert row_rewards([limited], w, 1.0) == [pytest.approx([failure_floor(w).total])], label
