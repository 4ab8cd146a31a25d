"""The token budget against observations: an environment's observation that does not fit what is
left of ``max_tokens`` is never sampled from and never enters the trajectory; the episode ends cut by
``max_tokens`` (truncated), or ``feedback_overflow`` where the attempt left room that the feedback
took, with the verdict of the last attempt kept. Real tiny model and sampler."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "policy"))
from _tiny_lm import tiny_llama  # noqa: E402

from posttrain.policy import Generation, LocalSampler, SamplingParams, build_char_tokenizer  # noqa: E402
from posttrain.rollout import Episode, run_batch  # noqa: E402
from posttrain.types import Observation, StepResult, Task, Verdict  # noqa: E402


class LongFeedbackEnv:
    """Every answer fails and is followed by ``feedback`` tokens of feedback (a repair-style env that
    does not say how many attempts it allows)."""

    def __init__(self, tok, feedback: int):
        self.tok, self.feedback, self.seen = tok, feedback, []

    def reset(self, task):
        return Observation(tuple(self.tok(task.prompt)["input_ids"]), task.prompt)

    def step(self, action: Generation):
        self.seen.append(len(action.completion_ids))
        obs = tuple(self.tok("x" * self.feedback, add_special_tokens=False)["input_ids"])
        return StepResult(Observation(obs, "x" * self.feedback), Verdict("fail", 0.0, feedback="no"), False)

    def close(self):
        pass


class CountedFeedbackEnv(LongFeedbackEnv):
    """The same, ``attempts`` times at most, and it says how many are left (``CountsAttempts``)."""

    def __init__(self, tok, feedback: int, attempts: int):
        super().__init__(tok, feedback)
        self.attempts = attempts

    @property
    def attempts_left(self) -> int:
        return self.attempts - len(self.seen)


def cut_by(left: int) -> str:
    """The cut of a failed attempt ending the episode with ``left`` tokens of room after it: its
    feedback took that room (``feedback_overflow``), or the attempt itself left none."""
    return "feedback_overflow" if left > 0 else "max_tokens"


@pytest.mark.parametrize("feedback", [5, 19, 20, 40])
def test_an_observation_past_the_budget_is_cut_not_appended(feedback):
    tok = build_char_tokenizer()
    sampler = LocalSampler(tiny_llama(tok, eos_like=None), tok)
    envs = [CountedFeedbackEnv(tok, feedback, attempts=5) for _ in range(3)]
    runs = [Episode(Task(id=f"t{i}", domain="test", prompt="12+3=", fields={}), env, "g", i)
            for i, env in enumerate(envs)]
    budget, new = 30, 10  # each action is exactly 10 tokens (no EOS in this model's reach)
    trajs = run_batch(sampler, runs, SamplingParams(max_new_tokens=new, seed=0), max_turns=5, max_tokens=budget)
    for traj, env in zip(trajs, envs, strict=True):
        after_prompt = len(traj.ids) - len(traj.prompt_ids)
        assert after_prompt <= budget
        assert traj.cut_by == cut_by(budget - after_prompt) and traj.truncated and traj.reward == 0.0
        # the feedback is in the trajectory only where an action followed it
        assert all(len(t.observation_ids) == feedback for t in traj.turns[1:])
        assert after_prompt == sum(env.seen) + feedback * (len(traj.turns) - 1)
        assert len(traj.verdicts) == len(traj.turns)  # every attempt's verdict is kept


@pytest.mark.parametrize("feedback", [7, 40, 400])
def test_the_context_never_outgrows_the_model(feedback):
    """``max_context`` (the model's positions, ``Episodes.max_context``): observations that grow the
    context past it (an agent's 12,000-character tool result) end the episode cut, as a budget does,
    and each action after the first is capped to fit; nothing past it is ever sampled from."""
    tok = build_char_tokenizer()
    sampler = LocalSampler(tiny_llama(tok, eos_like=None), tok)
    envs = [CountedFeedbackEnv(tok, feedback, attempts=20) for _ in range(2)]
    runs = [Episode(Task(id=f"t{i}", domain="test", prompt="12+3=", fields={}), env, "g", i)
            for i, env in enumerate(envs)]
    cap = 64
    trajs = run_batch(sampler, runs, SamplingParams(max_new_tokens=10, seed=0), max_turns=20, max_context=cap)
    for traj, env in zip(trajs, envs, strict=True):
        assert traj.cut_by == cut_by(cap - len(traj.ids)) and traj.truncated and traj.reward == 0.0
        sampled_from = len(traj.prompt_ids) + sum(env.seen) + feedback * (len(traj.turns) - 1)
        assert len(traj.ids) == sampled_from <= cap
        assert all(n >= 1 for n in env.seen)


def test_a_policy_s_context_length_is_its_positions(tmp_path):
    from posttrain.policy import build_embedded_default, context_length, load_policy

    policy = load_policy(build_embedded_default(tmp_path / "m"))
    assert context_length(policy) == policy.model.config.max_position_embeddings == 256
    assert context_length(object()) is None


@pytest.mark.parametrize("attempts", [None, 6, 5])
def test_an_overflow_the_step_limit_would_have_cut_anyway_is_max_tokens(attempts):
    """An environment that does not say how many attempts it has left, or has more than the step limit
    leaves turns for (6 against 5): failing on would end cut by ``max_turns`` at the floor, so the
    overflow is no ``feedback_overflow`` (its verdict) but ``max_tokens`` (the floor); 5 attempts in 5
    turns is a ``feedback_overflow``."""
    tok = build_char_tokenizer()
    sampler = LocalSampler(tiny_llama(tok, eos_like=None), tok)
    env = LongFeedbackEnv(tok, 25) if attempts is None else CountedFeedbackEnv(tok, 25, attempts)  # 10 + 25 > 30
    [traj] = run_batch(sampler, [Episode(Task(id="t", domain="test", prompt="12+3=", fields={}), env, "g", 0)],
                       SamplingParams(max_new_tokens=10, seed=0), max_turns=5, max_tokens=30)
    assert len(traj.ids) - len(traj.prompt_ids) == 10 and len(traj.turns) == 1  # room the feedback took
    assert traj.cut_by == ("feedback_overflow" if attempts == 5 else "max_tokens")
