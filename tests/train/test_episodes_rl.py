"""RL over multi-turn episodes: the update reads ``Trajectory`` directly.

Real sampler, real tiny Qwen2 model, and a repair-style test double environment whose observations
are fixed feedback strings (the real environments are the domains' business). Checked: the loss
covers every model token of an episode and none of the environment's (gradient zero on observation
positions, equal to a hand computation on action positions); credit across attempts (discount);
per-turn process rewards; cut episodes scored as the worst failure and counted; the GRPO loop over
repair episodes writes one record per attempt.
"""

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer  # noqa: E402

from posttrain.policy import Generation, LocalSampler, SamplingParams, build_embedded_default, load_policy  # noqa: E402
from posttrain.rollout import Episode, run_batch  # noqa: E402
from posttrain.rollout.episodes import Episodes  # noqa: E402
from posttrain.sched import LocalBackend, Service  # noqa: E402
from posttrain.train._step import LossSpec, policy_loss  # noqa: E402
from posttrain.train.grpo import (  # noqa: E402
    EpisodeSpec,
    build_batch,
    process_advantages,
    rewards_of,
    step_metrics,
    train_grpo,
)
from posttrain.train.recipe import RLConfig  # noqa: E402
from posttrain.types import Observation, StepResult, Task, Trajectory, Turn, Verdict  # noqa: E402
from posttrain.verify.rewards import RewardWeights  # noqa: E402

FEEDBACK = " no. again:"


class FeedbackEnv:
    """Repair double: an attempt passes when ``passes(action)``; after a failed one the environment
    inserts the fixed feedback as ids and asks again, ``attempts`` times at most."""

    def __init__(self, encode, attempts: int = 3, passes=lambda action: False):
        self.encode, self.attempts, self.passes, self.n = encode, attempts, passes, 0

    def reset(self, task: Task) -> Observation:
        return Observation(tuple(self.encode(task.prompt)), task.prompt)

    def step(self, action: Generation) -> StepResult:
        self.n += 1
        ok = self.passes(action)
        verdict = Verdict("pass", 1.0) if ok else Verdict("fail", 0.0, feedback="no", error_class="assertion")
        done = ok or self.n >= self.attempts
        return StepResult(Observation(() if done else tuple(self.encode(FEEDBACK)), "" if done else FEEDBACK), verdict, done)

    @property
    def attempts_left(self) -> int:
        return self.attempts - self.n

    def close(self):
        pass


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _turn(obs, act, verdict=None, stop="eos"):
    return Turn(tuple(obs), tuple(act), tuple(-0.5 for _ in act), stop, verdict)


PASS, FAIL = Verdict("pass", 1.0), Verdict("fail", 0.0)


def test_loss_covers_every_action_token_and_no_observation_token(tok):
    model = make_model(tok, dtype=torch.float64)
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    task = Task(id="t", domain="test", prompt="1+2=", fields={})
    trajs = run_batch(LocalSampler(model, tok), [Episode(task, FeedbackEnv(encode), f"g{i}", 0)
                                                 for i in range(2)],
                      SamplingParams(temperature=1.0, max_new_tokens=5, seed=0), max_turns=3)
    assert all(len(t.turns) == 3 and not t.truncated or t.turns[-1].stop_reason == "length" for t in trajs)
    groups = [[t] for t in trajs]  # two groups of one: the plain (unshared) forward, hooked below
    batch = build_batch(groups, torch.zeros(2, 1), tok.pad_token_id)
    adv = torch.tensor([1.0, -0.5])
    batch = dataclasses.replace(batch, adv=adv)
    feedback = encode(FEEDBACK)
    for i, t in enumerate(trajs):  # rows are the episodes' ids; mask = action tokens; old = sampled logprobs
        ids, mask, old = [], [], []
        for k, turn in enumerate(t.turns):
            assert list(turn.observation_ids) == (encode(task.prompt) if k == 0 else feedback)
            ids += [*turn.observation_ids, *turn.action_ids]
            mask += [0.0] * len(turn.observation_ids) + [1.0] * len(turn.action_ids)
            old += [0.0] * len(turn.observation_ids) + list(turn.logprobs)
        n = len(ids)
        assert batch.input_ids[i, :n].tolist() == ids and batch.attention_mask[i, n:].sum() == 0
        assert batch.loss_mask[i].tolist() == mask + [0.0] * (batch.loss_mask.shape[1] - n)
        assert torch.equal(batch.old_logp[i, :n], torch.tensor(old, dtype=torch.float32))

    captured = {}

    def keep(module, inputs, out):
        out.retain_grad()
        captured["h"] = out

    handle = model.model.norm.register_forward_hook(keep)
    try:
        loss, _ = policy_loss(model, batch, LossSpec())
        loss.backward()
    finally:
        handle.remove()
    h, grad = captured["h"].detach(), captured["h"].grad  # (B, T, H): h[t-1] predicts token t
    width = h.shape[1]
    ids, mask = batch.input_ids[:, :width], batch.loss_mask[:, :width].double()
    weight = model.lm_head.weight.detach()
    p = torch.softmax(h @ weight.T, -1)  # (B, T, V)
    logp = torch.log(p[:, :-1].gather(-1, ids[:, 1:, None]))[..., 0]  # (B, T-1) log p(token t | < t)
    ratio = torch.exp(logp - batch.old_logp[:, 1:width].double())
    n_tok = mask.sum()
    # token-mean PPO loss, ratio inside the clip: dL/dlogp_t = -A ratio_t / N on action tokens, 0 elsewhere
    dlogp = -adv.double()[:, None] * ratio * mask[:, 1:] / n_tok
    onehot = torch.nn.functional.one_hot(ids[:, 1:], p.shape[-1]).double()
    expected = (dlogp[..., None] * (onehot - p[:, :-1])) @ weight  # (B, T-1, H)
    observed = grad[:, :-1]
    scored = mask[:, 1:] > 0
    assert (observed[~scored] == 0).all()  # observation, prompt and padding targets: exactly no gradient
    assert scored.sum() == n_tok and torch.allclose(observed[scored], expected[scored], atol=1e-12, rtol=1e-9)
    assert observed[scored].abs().sum() > 0


def _episodes():
    a = Trajectory("t", "g0", 0, (_turn([1, 2], [3], FAIL), _turn([9], [4], FAIL), _turn([9], [5], PASS)), 1.0)
    b = Trajectory("t", "g0", 1, (_turn([1, 2], [6, 7], PASS),), 1.0)
    c = Trajectory("t", "g1", 0, (_turn([1, 3], [3], FAIL), _turn([9], [8], FAIL)), 0.0, truncated=True,
                   cut_by="max_turns")
    d = Trajectory("t", "g1", 1, (_turn([1, 3], [5, 5, 5], None, "length"),), 0.0, truncated=True,
                   cut_by="max_tokens")  # a tool call and no answer before the budget ran out
    return [[a, b], [c, d]]


def test_credit_across_attempts_is_discounted_per_extra_attempt():
    groups = _episodes()
    plain, _ = rewards_of(groups, RewardWeights())
    assert plain[0].tolist() == [1.0, 1.0]  # default: the episode's reward on every model token
    discounted, _ = rewards_of(groups, RewardWeights(), attempt_discount=0.5)
    assert discounted[0].tolist() == [0.25, 1.0]  # passed at the third attempt: 0.5 ** 2
    w = RewardWeights(length=1.0, max_tokens=2, overlong_buffer=1)  # a's 3 action tokens: penalty -1
    assert rewards_of(groups, w, attempt_discount=0.5)[0][0].tolist() == [0.25 - 1.0, 1.0 - 1.0]  # penalty whole
    with pytest.raises(ValueError, match="attempt_discount"):
        EpisodeSpec(attempt_discount=0.0)


def test_cut_episodes_score_as_the_worst_failure_and_are_counted():
    groups = _episodes()
    tasks = [Task(id="t", domain="test", prompt="", fields={})] * 2
    for w, floor in ((RewardWeights(format=0.2), 0.0), (RewardWeights(length=0.5, max_tokens=8, overlong_buffer=4), -0.5)):
        rewards, _ = rewards_of(groups, w)
        batch = build_batch(groups, rewards, pad_id=0)
        assert rewards[1].tolist() == [floor, floor] and batch.loss_mask[2:].sum().item() == 2 + 3  # trained
        m = step_metrics(groups, tasks, rewards, {})
        assert m["truncation_rate"] == 0.5 and m["infra_error_rate"] == 0.0
        assert m["turns_mean"] == 7 / 4 and m["attempts_mean"] == 6 / 4


def test_process_rewards_from_intermediate_verdicts():
    partial = Verdict("fail", 0.5, components={"outcome": 0.0, "process": 0.5})
    t = Trajectory("t", "g", 0, (_turn([1, 2], [3, 3], partial), _turn([9], [4], None), _turn([9, 9], [5], PASS)), 1.0)
    w = RewardWeights(outcome=1.0, process=1.0)  # r_0 = 0.5, r_last = 2.0
    adv = process_advantages([[t]], torch.tensor([[0.5]]), 10, w, process_coef=0.2)
    mask = torch.tensor(t.loss_mask, dtype=torch.bool)
    # attempt 0: 0.5 + 0.2 * (0.5 - 2.0) = 0.2; the tool call (no verdict) and the last attempt: 0.5
    assert adv[0, :9][mask].tolist() == pytest.approx([0.2, 0.2, 0.5, 0.5])
    off = process_advantages([[t]], torch.tensor([[0.5]]), 10, w, process_coef=0.0)
    assert (off == 0.5).all()


def test_grpo_loop_over_repair_episodes(tmp_path):
    torch.manual_seed(0)
    policy = load_policy(build_embedded_default(tmp_path / "m"))
    tasks = [Task(id=f"t{i}", domain="test", prompt=f"say {i}:", fields={}) for i in range(4)]
    first_even = lambda action: action.completion_ids[0] % 2 == 0  # noqa: E731  (about half pass)
    make = lambda task: FeedbackEnv(policy.encode_prompt, attempts=3, passes=first_even)  # noqa: E731
    spec = EpisodeSpec(Episodes("repair", lambda task, group, i: make(task), make, 3), attempt_discount=0.9,
                       process_coef=0.1)
    cfg = RLConfig(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=6, checkpoint_every=2)
    seen = []
    with Service(LocalBackend({})) as svc:
        train_grpo(policy, tasks, svc, cfg, reward_weights=RewardWeights(), out=tmp_path / "run", seed=0,
                   episodes=spec, log=seen.append)
    assert [m["step"] for m in seen] == [0, 1]
    assert all(1.0 <= m["attempts_mean"] <= 3.0 and m["truncation_rate"] == 0.0 for m in seen)
    assert any(m["turns_mean"] > 1.0 for m in seen)
    records = [json.loads(x) for x in (tmp_path / "run" / "trajectories" / "rl.jsonl").read_text().splitlines()]
    by_episode = {}
    for r in records:
        by_episode.setdefault((r["step"], r["task_id"], r["sample_idx"]), []).append(r)
    assert len(by_episode) == 2 * 2 * 2
    for recs in by_episode.values():  # one record per attempt, each from the context it was sampled in
        assert [r["attempt"] for r in recs] == list(range(len(recs)))
        assert all(r["outcome"] == "fail" for r in recs[:-1])
        assert [r["feedback_source"] for r in recs] == ["none"] + ["hidden_tests"] * (len(recs) - 1)
        for prev, r in zip(recs, recs[1:], strict=False):
            assert r["prompt_ids"][: len(prev["prompt_ids"]) + len(prev["completion_ids"])] == (
                prev["prompt_ids"] + prev["completion_ids"])
    assert all(math.isfinite(m["loss"]) for m in seen) and any(m["grad_norm"] > 0 for m in seen)
    assert any(m["frac_zero_std"] < 1.0 for m in seen)


def test_ppo_advantages_over_an_episode_skip_observations(tmp_path):
    """PPO: the reward sits on the episode's last action token; GAE runs over action tokens only, so
    observation tokens get no advantage (and no gradient), whatever the critic says of them."""
    from posttrain.train._critic import Critic

    policy = load_policy(build_embedded_default(tmp_path / "m"))
    t = Trajectory("t", "g", 0, (_turn([1, 5, 6], [7, 8], FAIL), _turn([9, 9, 9], [10, 2], PASS)), 1.0)
    rewards = torch.tensor([[1.0]])
    batch = build_batch([[t]], rewards, policy.tokenizer.pad_token_id)
    critic = Critic(Path(policy.path), policy.tokenizer.pad_token_id, lr=1e-3, lam=1.0)
    adv, returns, _ = critic.advantages(batch, rewards.reshape(-1))
    mask = torch.tensor([t.loss_mask], dtype=torch.float32)
    assert (adv[mask == 0] == 0).all() and (returns[mask == 0] == 0).all()
    assert (adv[mask > 0] != 0).all()
    assert torch.allclose(returns[mask > 0], torch.ones(4))  # gamma = lam = 1: every action token's return is r


def test_the_runner_names_the_limit_that_cut_an_episode(tok):
    model = make_model(tok)
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    task = Task(id="t", domain="test", prompt="1+2=", fields={})
    sampler, params = LocalSampler(model, tok), SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)

    def run(**limits):
        episodes = [Episode(task, FeedbackEnv(encode, attempts=3), "g", i) for i in range(2)]
        return run_batch(sampler, episodes, params, **limits)

    assert all(t.cut_by is None and t.attempts == 3 for t in run(max_turns=3))  # the environment ended them
    assert all(t.cut_by == "max_turns" and t.truncated and t.attempts == 2 for t in run(max_turns=2))
    by_budget = run(max_turns=3, max_tokens=4)  # the 4 action tokens exhaust the budget
    assert all(t.cut_by == "max_tokens" and t.truncated for t in by_budget)
    rewards, _ = rewards_of([by_budget], RewardWeights())
    assert (rewards == 0.0).all() and build_batch([by_budget], rewards, pad_id=0).loss_mask.sum() > 0
    by_feedback = run(max_turns=3, max_tokens=6)  # 4 action tokens, then 11 feedback ids overflow it
    assert all(t.cut_by == "feedback_overflow" and t.truncated and t.attempts == 1 for t in by_feedback)


def test_a_group_of_multi_turn_episodes_shares_its_prompt_exactly(tok):
    """Episodes of one carried group are scored in one packed row (their prompt computed once),
    observation holes included: the same log-probs and gradients as scoring each row alone."""
    from posttrain.train._logprobs import _shared_groups, token_logprobs

    model = make_model(tok, dtype=torch.float64)
    encode = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    task = Task(id="t", domain="test", prompt="what is 12 + 30 ? answer:", fields={})
    trajs = run_batch(LocalSampler(model, tok), [Episode(task, FeedbackEnv(encode, attempts=2), "g", i)
                                                 for i in range(4)],
                      SamplingParams(temperature=1.0, max_new_tokens=3, seed=1), max_turns=2)
    batch = build_batch([trajs], torch.zeros(1, 4), tok.pad_token_id)
    assert _shared_groups(batch.input_ids, batch.attention_mask, batch.loss_mask, batch.group) is not None
    outs = []
    for groups in (batch.group, None):
        model.zero_grad(set_to_none=True)
        lp = token_logprobs(model, batch.input_ids, batch.attention_mask, loss_mask=batch.loss_mask, groups=groups)
        (lp * torch.linspace(-1, 1, lp.numel(), dtype=lp.dtype).reshape(lp.shape)).sum().backward()
        outs.append((lp.detach(), [p.grad.clone() for p in model.parameters()]))
    (lp_s, g_s), (lp_p, g_p) = outs
    assert torch.allclose(lp_s, lp_p, atol=1e-7) and (lp_s[batch.loss_mask == 0] == 0).all()
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(g_s, g_p, strict=True))


def test_dr_grpo_constant_covers_every_action_of_an_episode():
    from posttrain.train.grpo import loss_spec

    cfg = RLConfig(loss_agg="seq_mean_token_sum_norm", max_new_tokens=24)
    assert loss_spec(cfg).norm_const == 24.0 == loss_spec(cfg, EpisodeSpec()).norm_const
    def plan(max_turns, max_tokens=None):
        return EpisodeSpec(Episodes("repair", lambda task, group, i: None, None, max_turns, max_tokens))

    assert loss_spec(cfg, plan(3)).norm_const == 72.0
    assert loss_spec(cfg, plan(3, 50)).norm_const == 50.0
