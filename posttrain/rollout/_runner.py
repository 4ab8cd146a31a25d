"""The episode runner: a ``Sampler`` and ``Env``s in lockstep, one ``Trajectory`` per episode.

    context = env.reset(task).ids
    repeat: action = sampler.generate(context); observation, verdict, done = env.step(action)
            context += action ids + observation ids              # ids, never decoded and re-encoded

Episodes of one call advance together: each round samples every unfinished episode in one
``Sampler.generate`` call (the local sampler batches them), then steps their environments all at
once: an environment that verifies through the execution service (``SubmitsSteps``:
``SingleTurnEnv``) submits its step to it and the runner waits for them all, so the service's
workers (sized from the sandbox pool) set the concurrency; any other environment steps on a
thread of its own (its verifier or sandbox pool bounds the real work). A single-turn batch is
therefore exactly one ``generate`` call over all prompts, in order.

Limits: ``max_turns`` actions per episode, and ``max_tokens`` tokens after the prompt (actions and
observations together; each action gets at most what is left). An episode stopped by either
before its environment said done is ``truncated`` and names the limit (``cut_by``); an episode whose
last action hit its token cap is ``truncated`` too.

Not here: chat templates (an environment renders its observations to ids itself), tool calling.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from posttrain.policy import Generation, Sampler, SamplingParams
from posttrain.rollout._env import Env, Observation, SubmitsSteps
from posttrain.types import Rollout, Task, Trajectory, Turn, Verdict


@dataclass(frozen=True)
class Episode:
    """What to run: a task, a fresh environment for it, and where the episode belongs."""

    task: Task
    env: Env
    group_id: str
    sample_idx: int = 0


@dataclass
class _State:
    context: list[int]
    pending: tuple[int, ...]  # observation ids not yet followed by an action
    turns: list[Turn]
    used: int = 0  # tokens after the prompt
    done: bool = False


def run_batch(
    sampler: Sampler,
    episodes: Sequence[Episode],
    params: SamplingParams,
    *,
    max_turns: int = 1,
    max_tokens: int | None = None,
    policy_version: int = 0,
) -> list[Trajectory]:
    """Run every episode to its end; trajectories come back in the order of ``episodes``."""
    if max_turns < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError(f"max_turns and max_tokens must be >= 1, got {max_turns} and {max_tokens}")
    states = []
    for ep in episodes:
        prompt = ep.env.reset(ep.task).ids
        states.append(_State(context=list(prompt), pending=tuple(prompt), turns=[]))
    for turn in range(max_turns):
        active = [i for i, s in enumerate(states) if not s.done and _room(s, max_tokens) > 0]
        if not active:
            break
        gens = _sample(sampler, [states[i] for i in active], params, max_tokens, seed_offset=turn)
        results = _step_all([episodes[i].env for i in active], gens)
        for i, g, (obs, verdict, done) in zip(active, gens, results, strict=True):
            s = states[i]
            s.turns.append(Turn(s.pending, g.completion_ids, g.logprobs, g.stop_reason, verdict, g.text))
            s.context += [*g.completion_ids, *obs.ids]
            s.pending, s.done = tuple(obs.ids), done
            s.used += len(g.completion_ids) + len(obs.ids)
    return [_trajectory(ep, s, policy_version, max_tokens) for ep, s in zip(episodes, states, strict=True)]


def run_episode(
    sampler: Sampler,
    episode: Episode,
    params: SamplingParams,
    *,
    max_turns: int = 1,
    max_tokens: int | None = None,
    policy_version: int = 0,
) -> Trajectory:
    """One episode (``run_batch`` of one)."""
    return run_batch(sampler, [episode], params, max_turns=max_turns, max_tokens=max_tokens,
                        policy_version=policy_version)[0]


def _room(s: _State, max_tokens: int | None) -> int | float:
    return math.inf if max_tokens is None else max_tokens - s.used


def _sample(sampler: Sampler, states: Sequence[_State], params: SamplingParams, max_tokens: int | None,
            *, seed_offset: int) -> list[Generation]:
    """One ``generate`` call per distinct token cap (one call in all when no budget binds)."""
    caps = [int(min(params.max_new_tokens, _room(s, max_tokens))) for s in states]
    out: list[Generation | None] = [None] * len(states)
    for j, cap in enumerate(sorted(set(caps), reverse=True)):
        rows = [i for i, c in enumerate(caps) if c == cap]
        # round 0 of an unbudgeted batch is exactly one generate(params): same seed, same samples
        seed = None if params.seed is None else params.seed + 7919 * seed_offset + j
        sub = dataclasses.replace(params, max_new_tokens=cap, seed=seed)
        for i, g in zip(rows, sampler.generate([states[i].context for i in rows], sub), strict=True):
            out[i] = g
    return [g for g in out if g is not None]


def _step_all(envs: Sequence[Env], gens: Sequence[Generation]) -> list[tuple[Observation, Verdict | None, bool]]:
    """Every environment's step of one round, started together; results in order."""
    if len(envs) == 1 and not isinstance(envs[0], SubmitsSteps):
        return [envs[0].step(gens[0])]
    threads = sum(not isinstance(env, SubmitsSteps) for env in envs)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as ex:
        futures: list[Future[tuple[Observation, Verdict | None, bool]]] = [
            env.submit_step(g) if isinstance(env, SubmitsSteps) else ex.submit(env.step, g)
            for env, g in zip(envs, gens, strict=True)
        ]
        return [f.result() for f in futures]


def _trajectory(ep: Episode, s: _State, policy_version: int, max_tokens: int | None) -> Trajectory:
    verdicts = [t.verdict for t in s.turns if t.verdict is not None]
    reward = verdicts[-1].reward if verdicts else 0.0
    cut = bool(s.turns) and s.turns[-1].stop_reason == "length"
    cut_by = None if s.done else "max_tokens" if _room(s, max_tokens) <= 0 else "max_turns"
    return Trajectory(
        task_id=ep.task.id,
        group_id=ep.group_id,
        sample_idx=ep.sample_idx,
        turns=tuple(s.turns),
        reward=reward,
        truncated=not s.done or cut,
        policy_version=policy_version,
        cut_by=cut_by,
    )


def as_rollout(traj: Trajectory) -> Rollout:
    """A one-turn trajectory as the ``Rollout`` the GRPO update and the run records read today.

    >>> t = Trajectory("m1", "0/m1", 2, (Turn((1, 5), (7, 2), (-0.5, -0.1), "eos", Verdict("pass", 1.0), "7"),), 1.0)
    >>> r = as_rollout(t)
    >>> r.completion_ids, r.finish_reason, r.sample_idx
    ((7, 2), 'stop', 2)
    """
    if len(traj.turns) != 1:
        raise ValueError(f"as_rollout: trajectory {traj.group_id}#{traj.sample_idx} has {len(traj.turns)} turns, not 1")
    [turn] = traj.turns
    return Rollout(
        task_id=traj.task_id,
        sample_idx=traj.sample_idx,
        prompt_ids=turn.observation_ids,
        completion_ids=turn.action_ids,
        logprobs=turn.logprobs,
        text=turn.text,
        finish_reason="length" if turn.stop_reason == "length" else "stop",
        verdict=turn.verdict,
    )
