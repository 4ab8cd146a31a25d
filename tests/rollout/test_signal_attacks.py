"""The training signal from a failing policy's side: ways of failing a real recall episode
(``posttrain.envs.recall``) run by the episode runner, scored by the trainer's accounting
(``rewards_of``) and every group estimator (with and without the std, with and without dedup),
against answering wrong in their place. What the policy may choose: be cut by the token budget,
answer nothing, answer without EOS, spray every number, copy another failure, or be the one scored
member of a group whose others were lost to infra. None may earn more than a wrong answer, and none
may lose its row's gradient (docs/contracts.md, "Reward accounting").
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest
import torch

from posttrain.algo import ADVANTAGES
from posttrain.envs.recall import ENV, RecallEpisode
from posttrain.policy import Generation, SamplingParams, build_char_tokenizer
from posttrain.rollout import ContextPolicy, Episode, dedup_advantages, run_batch, run_managed
from posttrain.train._credit import rewards_of
from posttrain.train.grpo import build_batch
from posttrain.types import Trajectory, Turn, Verdict
from posttrain.verify.rewards import RewardWeights

WEIGHTINGS = {
    "outcome": RewardWeights(),
    "format": RewardWeights(format=0.2),
    "length": RewardWeights(length=1.0, max_tokens=60, overlong_buffer=40),
    "all": RewardWeights(format=0.2, process=0.5, length=0.5, max_tokens=60, overlong_buffer=40),
}
ESTIMATORS = [(name, std, dedup) for name in ADVANTAGES for std in (True, False) for dedup in (False, True)]
TOK = build_char_tokenizer()
[TASK] = ENV.generate_level(1, level=2, seed=3, fact_first=True)
WRONG = "1111" if TASK.fields["value"] != "1111" else "2222"
MAX_NEW, BUDGET = 24, 240


class Script:
    """Each episode's replies in order (ids + EOS, cut at the cap as a sampler cuts), the episode
    known by the context it continues (round 0 in order)."""

    def __init__(self, scripts: Sequence[Sequence[str]]) -> None:
        self.scripts = [list(s) for s in scripts]
        self.seen: list[tuple[int, ...] | None] = [None] * len(scripts)

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out, taken = [], set()
        for ids in map(tuple, prompts):
            i = 0 if len(self.scripts) == 1 else next(  # one: a managed context need not continue the last
                k for k, seen in enumerate(self.seen) if k not in taken and (seen is None or ids[: len(seen)] == seen))
            taken.add(i)
            text = self.scripts[i].pop(0)
            action, stop = (*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id), "eos"
            if text.endswith("<no-eos>"):
                text = text.removesuffix("<no-eos>")
                action, stop = tuple(TOK(text, add_special_tokens=False)["input_ids"]), "length"
            if len(action) > params.max_new_tokens:
                action, stop = action[: params.max_new_tokens], "length"
                text = TOK.decode(list(action), skip_special_tokens=True)
            self.seen[i] = ids + action
            out.append(Generation(ids, action, (0.0,) * len(action), text, stop))
        return out


def episode(answer: str, reply: str = "ok") -> list[str]:
    """Reply to the fact, each note and the question (recall's pieces), then answer."""
    return [reply] * (len(TASK.fields["notes"]) + 2) + [answer]


def play(scripts: Sequence[Sequence[str]]) -> list[Trajectory]:
    """One group of recall episodes through the runner, under its token budget."""
    runs = [Episode(TASK, RecallEpisode(lambda t: TOK(t)["input_ids"],
                                        lambda t: TOK(t, add_special_tokens=False)["input_ids"]), "g", i)
            for i in range(len(scripts))]
    return run_batch(Script(scripts), runs, SamplingParams(max_new_tokens=MAX_NEW), max_turns=len(scripts[0]),
                     max_tokens=BUDGET)


def effective(group: Sequence[Trajectory], weights: RewardWeights, est: tuple[str, bool, bool]) -> torch.Tensor:
    """Each episode's advantage as the update applies it (0 where its row has no gradient)."""
    rewards, _ = rewards_of([group], weights)
    name, std, dedup = est
    fn = functools.partial(ADVANTAGES[name], scale_by_std=std)
    adv = (dedup_advantages([group], rewards, fn) if dedup else fn(rewards)).reshape(-1)
    trained = build_batch([group], rewards, pad_id=0).loss_mask.sum(-1) > 0
    return torch.where(trained, adv, torch.zeros_like(adv))


OTHERS = [episode(TASK.fields["value"]), episode(WRONG), episode("3333")]
WAYS = {
    "cut by the token budget": episode(WRONG, reply="ok " * 20),
    "an empty answer": episode(""),
    "an answer without EOS": episode(f"{WRONG}<no-eos>"),
    "an answer past max_new_tokens": episode(f"{WRONG} " + "and so on " * 5),
    "every number": episode(" ".join(f"{i:04d}" for i in range(0, 10000, 1111))),
    "a copy of another failure": episode(WRONG),
}


def test_the_scripted_group_is_what_it_says() -> None:
    group = play([*OTHERS, *WAYS.values()])
    assert [t.verdicts[-1].outcome if t.verdicts else None for t in group[:3]] == ["pass", "fail", "fail"]
    cut, empty, no_eos, long, spray, copy = group[3:]
    assert cut.cut_by == "max_tokens" and not cut.verdicts
    assert empty.verdicts[-1].error_class == "format" and spray.verdicts[-1].error_class == "format"
    assert no_eos.turns[-1].stop_reason == "length" and long.turns[-1].stop_reason == "length"
    assert all(t.cut_by is None for t in (empty, no_eos, long, spray, copy))


@pytest.mark.parametrize("way", list(WAYS))
def test_no_way_of_failing_a_recall_episode_beats_answering_wrong(way: str) -> None:
    """[pass, wrong, wrong, X]: X's advantage never exceeds a wrong answer's in its place, and X's row
    is trained (e.g. GRPO with the std, outcome only: wrong -0.5; cut -0.5, empty -0.5)."""
    mode, honest = play([*OTHERS, WAYS[way]]), play([*OTHERS, episode("4444")])
    for label, w in WEIGHTINGS.items():
        for est in ESTIMATORS:
            got, ref = float(effective(mode, w, est)[-1]), float(effective(honest, w, est)[-1])
            assert got <= ref + 1e-6, (way, label, est, got, ref)
            assert got < 0, (way, label, est, got)
    rewards, _ = rewards_of([mode], RewardWeights())
    assert build_batch([mode], rewards, pad_id=0).loss_mask[-1].sum() == sum(mode[-1].loss_mask) > 0


def test_a_failure_s_copies_each_keep_the_failure_s_penalty() -> None:
    """Three copies of one wrong answer beside a pass: with dedup each copy is trained at its first's
    advantage (GRPO with the std: -0.707 each, below the -0.5 of three distinct wrong answers)."""
    copies = play([episode(TASK.fields["value"]), episode(WRONG), episode(WRONG), episode(WRONG)])
    distinct = play([episode(TASK.fields["value"]), episode(WRONG), episode("3333"), episode("4444")])
    for est in ESTIMATORS:
        got = effective(copies, RewardWeights(), est)[1:]
        ref = effective(distinct, RewardWeights(), est)[1:]
        assert bool((got <= ref.max() + 1e-6).all()) and bool((got < 0).all()), (est, got, ref)


def test_the_one_scored_member_of_an_infra_group_is_dropped_with_it() -> None:
    """A group whose other members were lost to infra: the scored failure is dropped with them (every
    reward NaN, no row trained), never kept as a group of one whose advantage escapes the baseline."""
    [scored] = play([episode(WRONG)])
    lost = [Trajectory(TASK.id, "g", i, (Turn((1,), (), (), "eos", Verdict.infra("sandbox died")),), float("nan"))
            for i in range(1, 4)]
    group = [scored, *lost]
    rewards, _ = rewards_of([group], RewardWeights(length=1.0, max_tokens=60, overlong_buffer=40))
    assert torch.isnan(rewards).all()
    assert build_batch([group], rewards, pad_id=0).loss_mask.sum() == 0
    for name in ADVANTAGES:  # a lone finite reward, as the estimators see it: no baseline, advantage 0
        assert ADVANTAGES[name](torch.tensor([[0.0, *[float("nan")] * 3]])).abs().sum() == 0


def test_a_compressed_turn_keeps_its_episode_s_advantage() -> None:
    """A managed recall episode whose early turns were folded into a summary: every row (compressed
    context or not) scores the episode's verdict, a wrong answer's format credit on each; cut by the
    token budget, every row scores the failure floor."""
    def managed(answer: str, max_tokens: int | None) -> list[Trajectory]:
        env = RecallEpisode(lambda t: TOK(t)["input_ids"], lambda t: TOK(t, add_special_tokens=False)["input_ids"])
        [ep] = run_managed(Script([episode(answer)]), [(TASK, env, "g", 0)], SamplingParams(max_new_tokens=MAX_NEW),
                           ContextPolicy(budget=160, keep_recent=1, retrieval=False),
                           lambda t: TOK(t, add_special_tokens=False)["input_ids"], max_turns=8, max_tokens=max_tokens)
        return ep.trajectories()

    rows = managed(WRONG, None)
    assert any("Earlier:" in TOK.decode(list(r.prompt_ids)) for r in rows)  # turns were folded
    rewards, _ = rewards_of([rows], RewardWeights(format=0.2))
    assert rewards.tolist() == [[pytest.approx(0.2)] * len(rows)]
    cut = managed(WRONG, 20)
    rewards, _ = rewards_of([cut], RewardWeights(format=0.2))
    assert all(r.cut_by == "max_tokens" for r in cut) and rewards.tolist() == [[0.0] * len(cut)]
