"""Failing differently never pays (issue 21, "Reward accounting"; the table is docs/contracts.md's).

A policy that is going to fail a task can choose how: answer wrong, run long, time out, get cut by
the runner's limits, end without an answer, spend extra attempts, make its environment raise, or
drop its group. For each way, a scripted group [pass, fail, fail, X] goes through the project's own
accounting -- the trainer's ``sample_episodes`` (``run_batch``) where the way is an episode's,
``rewards_of``, every group advantage estimator (``ADVANTAGES``, with and without the std) and
``build_batch`` -- under every kind of reward weighting a recipe can set, and X's effective advantage
(0 where its row gets no gradient) must not exceed what answering wrong in its place earns.

The tool episodes are ``configs/tiny-tool-episodes.yaml``'s as ``posttrain run`` builds them
(``episode_spec``: its step limit, token budget and completion cap, over its train tasks) with the
embedded default's chat template; the policy is a script (what is under test is the accounting,
not a model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from posttrain.algo import ADVANTAGES
from posttrain.cli import open_service
from posttrain.cli.pipeline import episode_spec
from posttrain.config import apply_overrides, load_yaml, parse_config
from posttrain.envs import get_domain
from posttrain.errors import ConfigError
from posttrain.policy import ChatTemplate, Generation, Policy, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch
from posttrain.sched import StepError
from posttrain.train._credit import process_advantages
from posttrain.train.grpo import build_batch, group_advantages, rewards_of, sample_episodes
from posttrain.train.recipe import Recipe, RLConfig, recipe_tasks
from posttrain.types import Observation, StepResult, Task, Trajectory, Turn, Verdict
from posttrain.verify.rewards import RewardWeights, combine, failure_floor

ROOT = Path(__file__).resolve().parents[2]

WEIGHTINGS = {
    "outcome": RewardWeights(),
    "format": RewardWeights(format=0.2),
    "process": RewardWeights(format=0.2, process=0.5),
    "length": RewardWeights(length=1.0, max_tokens=60, overlong_buffer=40),
    "all": RewardWeights(format=0.2, process=0.5, length=0.5, max_tokens=60, overlong_buffer=40),
}
ESTIMATORS = [(name, std) for name in ADVANTAGES for std in (True, False)]


def recipe(name: str, *overrides: str) -> Recipe:
    """The recipe as ``posttrain run`` parses it (its input checks, which build the model, skipped)."""
    return parse_config(Recipe, apply_overrides(load_yaml(ROOT / "configs" / name), list(overrides)))


def effective_advantages(groups: Sequence[Sequence[Trajectory]], weights: RewardWeights, estimator: tuple[str, bool],
                         *, attempt_discount: float = 1.0) -> torch.Tensor:  # (B,)
    """Each episode's advantage as the update applies it: 0 where its row has no gradient."""
    rewards, _ = rewards_of(groups, weights, attempt_discount=attempt_discount)
    name, std = estimator
    adv = ADVANTAGES[name](rewards, scale_by_std=std).reshape(-1)
    trained = build_batch(groups, rewards, pad_id=0).loss_mask.sum(-1) > 0
    return torch.where(trained, adv, torch.zeros_like(adv))


def assert_never_pays(mode: Trajectory, honest: Trajectory, others: Sequence[Trajectory]) -> None:
    """``mode`` in place of ``honest`` in the group ``[*others, .]`` earns no more, for every weighting
    and estimator; and its row keeps its gradient (a failure is never shielded by a mask)."""
    for label, w in WEIGHTINGS.items():
        for est in ESTIMATORS:
            got = float(effective_advantages([[*others, mode]], w, est)[-1])
            ref = float(effective_advantages([[*others, honest]], w, est)[-1])
            assert got <= ref + 1e-6, (label, est, got, ref)
    rewards, _ = rewards_of([[*others, mode]], RewardWeights())
    assert build_batch([[*others, mode]], rewards, pad_id=0).loss_mask[-1].sum() == sum(mode.loss_mask)


# -- scripted tool episodes under the recipe's limits ----------------------------------------------

class ScriptedSampler:
    """Each episode's actions in order (the chat template's ids plus EOS, cut at the cap as a sampler
    cuts). An episode is known by its context: round 0 in order, then the context that continues
    what it was given last time."""

    def __init__(self, chat: ChatTemplate, scripts: Sequence[Sequence[str]]) -> None:
        self.chat, self.scripts = chat, [list(s) for s in scripts]
        self.seen: list[tuple[int, ...] | None] = [None] * len(scripts)

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        out, taken = [], set()
        for ids in map(tuple, prompts):
            i = next(k for k, seen in enumerate(self.seen)
                     if k not in taken and (seen is None or ids[: len(seen)] == seen))
            taken.add(i)
            text = self.scripts[i].pop(0)
            action, stop = (*self.chat.encode(text), self.chat.eos_token_id), "eos"
            if len(action) > params.max_new_tokens:
                action, stop = action[: params.max_new_tokens], "length"
                text = self.chat.tokenizer.decode(list(action), skip_special_tokens=True)
            self.seen[i] = ids + action
            out.append(Generation(ids, action, (0.0,) * len(action), text, stop))
        return out


@pytest.fixture(scope="module")
def tool_setup():
    r = recipe("tiny-tool-episodes.yaml")
    train, _ = recipe_tasks(r)
    policy = Policy(None, build_char_tokenizer())  # the embedded default's tokenizer; a script samples
    with open_service(["tool"]) as svc:  # what the episodes verify through (the nested lane)
        yield r, train, policy, episode_spec(r.rl, policy, train, svc)


def play(tool_setup, task: Task, scripts: Sequence[Sequence[str]]) -> list[Trajectory]:
    """One group of ``task``, one episode per script, as the trainer samples it."""
    r, _, policy, spec = tool_setup
    cfg = dataclasses.replace(r.rl, group_size=len(scripts))
    [group] = sample_episodes(policy, [task], None, cfg, group_ids=[f"g/{task.id}"], policy_version=0,
                              episodes=spec, generator=ScriptedSampler(ChatTemplate(policy.tokenizer), scripts))
    return group


SPRAY = '<tool_call>{"name": "a"}</tool_call>' * 3
"""Three calls of a tool that does not exist per action: each answered by an error message."""


def test_a_tool_episode_cut_for_spraying_calls_costs_what_answering_wrong_costs(tool_setup):
    _, train, policy, _ = tool_setup
    task, chat = train[0], ChatTemplate(policy.tokenizer)
    right = [chat.write_tool_calls(calls) for calls in get_domain("tool").demonstration_steps(task)] + ["Done."]
    spray = play(tool_setup, task, [right, ["Done."], ["Done."], [SPRAY] * 8])
    honest = play(tool_setup, task, [right, ["Done."], ["Done."], ["Done."]])
    assert [t.verdicts[-1].outcome for t in spray[:3]] == ["pass", "fail", "fail"]
    cut = spray[3]
    assert cut.cut_by == "max_tokens" and cut.verdicts == ()  # the budget ran out before a verdict
    assert honest[3].verdicts[-1].outcome == "fail"
    assert_never_pays(cut, honest[3], spray[:3])
    # the figures: the cut got advantage 0 (masked) while the honest failure got -0.577
    adv = effective_advantages([spray], RewardWeights(), ("grpo", True))
    assert adv[3].item() == pytest.approx(adv[1].item()) == pytest.approx(-0.5, abs=1e-5)


NASTY = ["", "\x00" * 50, "<tool_call>" + "[" * 500 + "</tool_call>", '<tool_call>{"name": 1e309}</tool_call>',
         '<tool_call>{"name": "get_weather", "arguments": "' + "[" * 300 + '"}</tool_call>',
         '{"tool_calls": [{"type": "function", "function": {"name": "x", "arguments": {"a": ' + "[" * 200 + "}}}]}"]


def test_no_action_drops_a_tool_episodes_group(tool_setup):
    """Dropping its group (an infra error) would give a failing episode advantage 0: no action the
    policy can write makes a tool episode's step infra, or raise."""
    trajs = play(tool_setup, tool_setup[1][1], [[text] * 4 for text in NASTY])
    rewards, _ = rewards_of([trajs], WEIGHTINGS["all"])
    assert not torch.isnan(rewards).any()
    assert all(t.cut_by is not None or t.verdicts[-1].outcome == "fail" for t in trajs)


class RaisingEnv:
    """An environment whose step raises on a given action (an error of its own, not infra)."""

    def reset(self, task: Task) -> Observation:
        return Observation((1, 2), task.prompt)

    def step(self, action: Generation) -> StepResult:
        if action.text == "poison":
            raise ValueError("the environment cannot handle this action")
        return StepResult(Observation(()), Verdict("fail", 0.0), True)

    def close(self) -> None:  # the episode protocol's lifecycle (issue 20): nothing held
        pass


def test_an_environment_that_raises_stops_the_run_and_drops_nothing():
    """Making its environment raise (an exception that is not infra) earns nothing: the runner raises
    ``StepError`` naming the environment; no group is dropped, no episode scored."""
    task = Task(id="t", domain="test", prompt="p", fields={})
    runs = [Episode(task, RaisingEnv(), "g", i) for i in range(2)]

    class Script:
        def generate(self, prompts, params):
            return [Generation(tuple(p), (5,), (0.0,), text, "eos") for p, text in zip(prompts, ["ok", "poison"],
                                                                                            strict=True)]

    with pytest.raises(StepError, match="RaisingEnv.*ValueError"):
        run_batch(Script(), runs, SamplingParams(max_new_tokens=4), max_turns=1)


# -- the other ways, as the runner records them -----------------------------------------------------

def turn(n: int, verdict: Verdict | None, stop: str = "eos", obs: int = 3) -> Turn:
    return Turn(tuple(range(1, obs + 1)), tuple(range(10, 10 + n)), (-0.5,) * n, stop, verdict)


def fail(fmt: float = 0.0, process: float = 0.0, error_class: str = "wrong_answer") -> Verdict:
    return Verdict("fail", 0.0, error_class=error_class, components={"outcome": 0.0, "format": fmt, "process": process})


PASS = Verdict("pass", 1.0)


def episode(*turns: Turn, cut_by: str | None = None, idx: int = 0) -> Trajectory:
    verdicts = [t.verdict for t in turns if t.verdict is not None]
    return Trajectory("t", "g", idx, turns, verdicts[-1].reward if verdicts else 0.0,
                      truncated=cut_by is not None or turns[-1].stop_reason == "length", cut_by=cut_by)


OTHERS = [episode(turn(5, PASS)), episode(turn(8, fail(1.0, 0.5))), episode(turn(12, fail()))]

MODES = {  # way of failing -> (the episode, answering wrong in its place: same tokens, the same credit)
    "times out": (episode(turn(40, fail(1.0, error_class="timeout"))), episode(turn(40, fail(1.0)))),
    "runs to max_new_tokens": (episode(turn(80, fail(), "length")), episode(turn(80, fail()))),
    "cut by the token budget": (episode(turn(30, None), turn(50, None, "length"), cut_by="max_tokens"),
                                episode(turn(30, None), turn(50, fail()))),
    "cut by the step limit": (episode(turn(20, fail(1.0)), turn(20, fail(1.0)), cut_by="max_turns"),
                              episode(turn(20, fail(1.0)), turn(20, fail(1.0)))),
    "ends with no verdict": (episode(turn(70, None)), episode(turn(70, fail()))),
    "spends extra attempts": (episode(turn(10, fail()), turn(10, fail()), turn(10, fail())),
                              episode(turn(30, fail()))),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_no_way_of_failing_beats_answering_wrong(mode):
    bad, honest = MODES[mode]
    assert_never_pays(bad, honest, OTHERS)
    for discount in (1.0, 0.5):  # and with a discount per extra attempt
        for w in WEIGHTINGS.values():
            for est in ESTIMATORS:
                got = effective_advantages([[*OTHERS, bad]], w, est, attempt_discount=discount)[-1]
                ref = effective_advantages([[*OTHERS, honest]], w, est, attempt_discount=discount)[-1]
                assert float(got) <= float(ref) + 1e-6, (mode, discount, w, est)


def test_truncation_masking_is_not_a_recipe_option():
    """DAPO's overlong filtering (``rl.mask_truncated``) gave a failure cut at max_new_tokens no
    gradient: a failing policy learnt to run long. Like the masked or zero-scored cut episodes
    (``rl.cut_episodes``) it is gone; ``reward.length`` is the way to discourage length."""
    for key in ("rl.mask_truncated=true", "rl.cut_episodes=mask", "rl.cut_episodes=zero"):
        with pytest.raises(ConfigError, match="mask_truncated|cut_episodes"):
            recipe("tiny-grpo.yaml", key)


def test_the_failure_floor_is_below_every_failure():
    """What a cut episode (or one with no verdict) scores is the least any failure can: for every
    weighting, length, format and process credit; a component outside [0, 1], which could score
    below it, is refused as the verifier's bug."""
    for w in WEIGHTINGS.values():
        floor = failure_floor(w).total
        for n in (0, 10, 59, 60, 100, 10_000):
            for fmt in (0.0, 1.0):
                for process in (0.0, 0.5, 1.0):
                    assert floor <= combine(fail(fmt, process), w, completion_tokens=n).total
    for bad in (-0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="component 'process'"):
            combine(fail(process=bad), WEIGHTINGS["process"])


def test_extra_failed_attempts_never_shrink_the_length_penalty():
    """configs/tiny-repair.yaml with rl.attempt_discount=0.5 and the length penalty on: three failed
    attempts used to score -0.25 against one failed attempt's -1.0 (the discount multiplied the
    penalty); the discount is on the success only, so a success still earns less per extra attempt."""
    r = recipe("tiny-repair.yaml", "rl.attempt_discount=0.5", "reward.length=1.0", "reward.max_tokens=20",
               "reward.overlong_buffer=10")
    w, d = r.reward_weights, r.rl.attempt_discount
    one = episode(turn(30, fail()), idx=1)
    three = episode(turn(10, fail()), turn(10, fail()), turn(10, fail()), idx=2)
    pass_first, pass_third = episode(turn(5, PASS)), episode(turn(2, fail()), turn(2, fail()), turn(2, PASS), idx=3)
    rewards, _ = rewards_of([[pass_first, one, three, pass_third]], w, attempt_discount=d)
    assert rewards[0].tolist() == pytest.approx([1.0, -1.0, -1.0, 0.25])
    for est in ESTIMATORS:
        adv = effective_advantages([[pass_first, one, three]], w, est, attempt_discount=d)
        assert adv[2] <= adv[1] + 1e-6, est


def test_a_copy_of_a_failure_costs_what_answering_wrong_costs():
    """``rl.dedup`` counts a repeated completion once in its group's baseline. It used to give the later
    copies reward NaN, so no gradient: a copy of a failure escaped its negative advantage (0 where
    answering wrong got -0.5). Every copy is trained with its first copy's advantage."""
    copy = dataclasses.replace(OTHERS[2], sample_idx=3)  # the same ids as the honest failure before it
    other = dataclasses.replace(copy.turns[0], action_ids=tuple(range(50, 62)))
    honest = episode(other, idx=3)  # the same verdict and length, another completion
    for label, w in WEIGHTINGS.items():
        for name, std in ESTIMATORS:
            cfg = RLConfig(advantage=name, scale_by_std=std, dedup=True)
            got, ref = [], []
            for x, out in ((copy, got), (honest, ref)):
                group = [[*OTHERS, x]]
                rewards, _ = rewards_of(group, w)
                adv = group_advantages(group, rewards, cfg).reshape(-1)
                trained = build_batch(group, rewards, pad_id=0).loss_mask.sum(-1) > 0
                out.append(float(torch.where(trained, adv, torch.zeros_like(adv))[-1]))
                assert bool(trained[-1]), (label, name, std)
            assert got[0] <= ref[0] + 1e-6, (label, name, std, got, ref)
    rewards, _ = rewards_of([[*OTHERS, copy]], RewardWeights())
    adv = group_advantages([[*OTHERS, copy]], rewards, RLConfig(dedup=True))[0]
    assert adv[3] == adv[2] == pytest.approx(-0.57735, abs=1e-4)  # the copy costs what its first does


def test_a_reward_model_score_that_is_not_finite_never_masks_its_sample():
    """A NaN from the reward model (on a policy's input) made that one sample's reward NaN: advantage 0
    and no gradient, out of its group's baseline. It counts as the least score, 0."""
    group = [[*OTHERS, episode(turn(9, fail()), idx=3)]]
    scores = {"nan": float("nan"), "least": 0.0}
    got = {}
    for k, score in scores.items():
        rewards, _ = rewards_of(group, RewardWeights(), reward_model=lambda views, s=score: torch.tensor([0.9, 0.5, 0.5, s]),
                                reward_model_weight=1.0)
        assert torch.isfinite(rewards).all(), k
        trained = build_batch(group, rewards, pad_id=0).loss_mask.sum(-1) > 0
        assert trained.all(), k
        got[k] = [float(ADVANTAGES[name](rewards, scale_by_std=std)[0, -1]) for name, std in ESTIMATORS]
    assert got["nan"] == got["least"] and max(got["nan"]) < 0


def test_process_credit_never_pays_for_extra_failed_attempts():
    """``rl.process_coef`` credits an attempt for its verdict against the last one's. It compared an
    attempt's reward with its own length penalty to the last's with the whole episode's, so two failed
    attempts of 40 tokens earned their first attempt +0.5 over one failed attempt of the same 80 tokens
    (-0.725 against -1.225 under the length weighting). Verdicts are compared without the penalty."""
    two = episode(turn(40, fail()), turn(40, fail()), idx=3)
    one = episode(turn(80, fail(), obs=6), idx=3)  # the same tokens in one attempt
    for label, w in WEIGHTINGS.items():
        for name, std in ESTIMATORS:
            for coef in (0.1, 1.0):
                per_token = []
                for x in (two, one):
                    group = [[*OTHERS, x]]
                    rewards, _ = rewards_of(group, w)
                    batch = build_batch(group, rewards, pad_id=0)
                    adv = process_advantages(group, ADVANTAGES[name](rewards, scale_by_std=std), batch.input_ids.shape[1],
                                             w, process_coef=coef)
                    per_token.append(adv[-1][batch.loss_mask[-1] > 0])
                assert float(per_token[0].max()) <= float(per_token[1].min()) + 1e-6, (label, name, std, coef)
