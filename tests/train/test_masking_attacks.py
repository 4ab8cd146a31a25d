"""Masking attacks: what a policy can write to take a failing answer out of its negative advantage.

The path from verdicts to per-token advantages, as a single-turn GRPO step walks it: the trainer's own
``sample_episodes`` (the episode runner, ``SingleTurnEnv``, a real execution ``Service`` over the real
math and function verifiers), ``rewards_of``, ``group_advantages`` under every estimator with and
without the std (``rl.dedup`` where copies are the way), and ``build_batch``'s loss mask. The policy is
a script over the embedded default's character tokenizer (what is under test is the accounting, not a
model). For each way X -- a response that crashes its verifier, one that never ends (cut at
``max_new_tokens``), one of nothing but EOS, one that makes a user's reward function return NaN, copies
of a wrong answer, a reward model that cannot score it -- X's row must be trained (its loss mask on every
action token), its advantage no greater than an honest wrong answer's in the same group, and its group
must stand, the others keeping their own rewards and rows.

Two were holes: a response that crashed its verifier alike on every try came back from a single-turn
episode as an ``infra:service`` verdict, which dropped its whole group (the pass +1.5 -> 0, the crash's
0 where an honest wrong answer got -0.5, GRPO); and a reward model's NaN counted as 0 beside a scorer's
negative raw scores, above every wrong answer it read (the empty answer -0.13 where the honest wrong ones
got -0.66; now -0.5 each).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from posttrain.algo import ADVANTAGES
from posttrain.cli import open_service
from posttrain.envs import get_domain, guard
from posttrain.policy import Generation, Policy, SamplingParams, build_char_tokenizer
from posttrain.rollout import as_rollout
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service, StepError
from posttrain.train.grpo import build_batch, group_advantages, rewards_of, sample_episodes
from posttrain.train.recipe import RLConfig
from posttrain.types import Rollout, Task, Trajectory
from posttrain.verify.rewards import RewardWeights

POLICY = Policy(None, build_char_tokenizer())
TOK = POLICY.tokenizer
MATH = Task(id="m", domain="math", prompt="1+1?", fields={"answer": "2"})
CAP = 16
"""``rl.max_new_tokens`` of the scripted group."""
WEIGHTINGS = {
    "outcome": RewardWeights(),
    "format": RewardWeights(format=0.2),
    "length": RewardWeights(format=0.2, length=1.0, max_tokens=CAP, overlong_buffer=4),
}
ESTIMATORS = [(name, std) for name in ADVANTAGES for std in (True, False)]


class Script:
    """Answers the prompts of one round with ``texts`` in order: each encoded, EOS appended, cut at the
    round's cap as a sampler cuts (no EOS, ``"length"``), decoded as a sampler decodes."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt, text in zip(prompts, self.texts, strict=True):
            ids, stop = (*TOK.encode(text, add_special_tokens=False), TOK.eos_token_id), "eos"
            if len(ids) > params.max_new_tokens:
                ids, stop = ids[: params.max_new_tokens], "length"
            out.append(Generation(tuple(prompt), ids, (-0.5,) * len(ids), TOK.decode(list(ids), skip_special_tokens=True),
                                  stop))
        return out


def group(service: Service, task: Task, texts: Sequence[str], **rl: object) -> list[Trajectory]:
    """One group of ``task``, one single-turn episode per text, as the trainer samples it."""
    cfg = RLConfig(group_size=len(texts), max_new_tokens=CAP, **rl)
    [g] = sample_episodes(POLICY, [task], service, cfg, group_ids=[f"0/0/{task.id}"], policy_version=0,
                          generator=Script(texts))
    return g


def effective(g: Sequence[Trajectory], weights: RewardWeights, estimator: tuple[str, bool], *, dedup: bool = False,
              reward_model=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rewards (G,), advantages as the update applies them (G,): 0 where a row has no gradient, and
    the trained tokens of each row (G,))."""
    rewards, _ = rewards_of([g], weights, reward_model=reward_model, reward_model_weight=1.0 if reward_model else 0.0)
    name, std = estimator
    adv = group_advantages([g], rewards, RLConfig(advantage=name, scale_by_std=std, dedup=dedup)).reshape(-1)
    trained = build_batch([g], rewards, pad_id=TOK.pad_token_id).loss_mask.sum(-1)
    return rewards.reshape(-1), torch.where(trained > 0, adv, torch.zeros_like(adv)), trained


def assert_never_escapes(g: Sequence[Trajectory], x: int, honest: int, *, dedup: bool = False, reward_model=None) -> None:
    """Row ``x`` of the group is trained on every action token and gets no more than row ``honest`` (an
    honest wrong answer), under every weighting and estimator; the group stands, every row trained."""
    for label, w in WEIGHTINGS.items():
        for est in ESTIMATORS:
            rewards, adv, trained = effective(g, w, est, dedup=dedup, reward_model=reward_model)
            assert not torch.isnan(rewards).any(), (label, est, "the group was dropped")
            assert trained.tolist() == [len(t.turns[-1].action_ids) for t in g], (label, est)
            assert float(adv[x]) <= float(adv[honest]) + 1e-6, (label, est, adv.tolist())


@pytest.fixture(scope="module")
def service():
    with open_service(["math", "function"]) as svc:
        yield svc


# -- a response that crashes its verifier --------------------------------------------------------------

def crashing_math():
    """The real math verifier behind a plugin-like wrapper that raises on a response holding "boom"
    (``guard``: an ``infra:verifier_crash`` verdict, the same line on every try)."""
    real = get_domain("math").make_verifier(None)

    def verify(task: Task, response: str):
        if "boom" in response:
            raise KeyError("x")
        return real(task, response)

    return guard("math", verify)


def test_a_response_that_crashes_its_verifier_stops_the_step_and_drops_no_group():
    """Crashing the verifier alike on every try is its bug, never infra (``sched``: a ``StepError``).
    The single-turn episode made it an ``infra:service`` verdict: the group dropped, the crash's
    advantage 0 where the honest wrong answer beside it got -0.5 and the pass +1.5 -> 0."""
    rules = SchedPolicy(max_tries=3, backoff_s=0.0, breaker_threshold=99)
    with Service(LocalBackend({"math": DomainHooks(crashing_math())}), rules) as svc:
        with pytest.raises(StepError, match=r"math verifier crashed on each of 3 tries.*KeyError: 'x'"):
            group(svc, MATH, ["\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "boom"])
        stats = svc.stats()
        assert (stats["groups_dropped"], stats["samples_dropped"]) == (0, 0)
        honest = group(svc, MATH, ["\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "\\boxed{5}"])  # the service lives on
    assert [t.verdicts[-1].outcome for t in honest] == ["pass", "fail", "fail", "fail"]


# -- answers the verifier reads, through the real service -------------------------------------------------

def test_an_answer_that_never_ends_is_trained_as_a_wrong_answer(service):
    """Cut at ``max_new_tokens`` (no EOS): ``truncated``, never ``cut_by``, scored by its verdict (a box
    read or none, as the same answer ended would be; the whole length penalty), every token trained."""
    g = group(service, MATH, ["\\boxed{2}", "\\boxed{3}", "no box", "\\boxed{3}" + " and so on" * 10,
                              "no box" + " and so on" * 10])
    for x in g[3:]:
        assert x.turns[-1].stop_reason == "length" and x.truncated and x.cut_by is None
        assert len(x.turns[-1].action_ids) == CAP and x.verdicts[-1].outcome == "fail"
    assert_never_escapes(g, 3, honest=1)  # each beside the honest wrong answer of its form
    assert_never_escapes(g, 4, honest=2)


def test_an_answer_of_nothing_but_eos_is_trained_as_a_wrong_answer(service):
    """The least a policy can write: EOS alone, an empty text. One action token, trained, scored a fail."""
    g = group(service, MATH, ["\\boxed{2}", "\\boxed{3}", "no box", ""])
    assert g[3].turns[-1].action_ids == (TOK.eos_token_id,) and g[3].verdicts[-1].outcome == "fail"
    assert_never_escapes(g, 3, honest=1)
    assert_never_escapes(g, 3, honest=2)


def test_a_reward_function_that_returns_nan_on_the_answer_scores_it_a_fail(service):
    """A user's reward function (``_broken.ratio``: NaN on an empty completion) beside ``exact_match``:
    the answer that makes it NaN is ``reward_function:nan``, a fail of reward 0, below the graded wrong
    answers (0.5, 0.25); never NaN, never a dropped group."""
    task = get_domain("function").parse_task(
        {"id": "f", "prompt": "2+2?", "data": {"answer": "4"},
         "reward": ["posttrain.envs.function.examples:exact_match", "posttrain.envs.function._broken:ratio"]}, "doc")
    g = group(service, task, ["4", "5", "55", ""])
    assert [t.verdicts[-1].reward for t in g] == [1.0, 0.5, 0.25, 0.0]
    assert g[3].verdicts[-1].error_class == "reward_function:nan"
    assert_never_escapes(g, 3, honest=1)
    assert_never_escapes(g, 3, honest=2)


def test_copies_of_a_wrong_answer_are_each_trained_as_the_wrong_answer_they_are(service):
    """Three copies of one wrong answer (one verify job for all: the service's dedup), ``rl.dedup`` on:
    each copy trained, none above a distinct wrong answer in its place."""
    copies = group(service, MATH, ["\\boxed{2}", "\\boxed{3}", "\\boxed{3}", "\\boxed{3}"])
    distinct = group(service, MATH, ["\\boxed{2}", "\\boxed{3}", "\\boxed{4}", "\\boxed{5}"])
    for dedup in (False, True):
        assert_never_escapes(copies, 3, honest=1, dedup=dedup)
        for w in WEIGHTINGS.values():
            for est in ESTIMATORS:
                _, got, _ = effective(copies, w, est, dedup=dedup)
                _, ref, _ = effective(distinct, w, est, dedup=dedup)
                assert bool((got[1:] <= ref[1:] + 1e-6).all()), (dedup, est, got.tolist(), ref.tolist())


# -- a reward model that cannot score the answer -------------------------------------------------------------

def raw_scorer(rollouts: Sequence[Rollout]) -> torch.Tensor:
    """A reward model of raw scores (no sigmoid): +2 for a pass's text, -1 for any other, NaN where it
    cannot read the answer (an empty one)."""
    return torch.tensor([float("nan") if not r.text else 2.0 if r.text == "\\boxed{2}" else -1.0 for r in rollouts])


def test_a_reward_model_score_that_is_not_finite_counts_as_its_least(service):
    """NaN from the reward model on the policy's answer counted as 0, above the -1 it gave every wrong
    answer it read: the empty answer got -0.13 where the honest wrong ones got -0.66 (GRPO, outcome
    weights; now -0.5 each). It counts as the least score of the batch (sigmoid's 0 where that is the least)."""
    g = group(service, MATH, ["\\boxed{2}", "\\boxed{3}", "no box", ""])
    assert [r.text for r in map(as_rollout, g)][3] == ""
    assert_never_escapes(g, 3, honest=1, reward_model=raw_scorer)
    assert_never_escapes(g, 3, honest=2, reward_model=raw_scorer)
    rewards, _ = rewards_of([g], RewardWeights(), reward_model=raw_scorer, reward_model_weight=1.0)
    assert rewards.tolist() == [[3.0, -1.0, -1.0, -1.0]]
    sigmoid = lambda rs: torch.sigmoid(raw_scorer(rs))  # noqa: E731 - the shipped scorer's range: NaN counts 0
    rewards, _ = rewards_of([g], RewardWeights(), reward_model=sigmoid, reward_model_weight=1.0)
    assert rewards[0, 3].item() == 0.0
