"""The episode runner: a ``Sampler`` and ``Env``s in lockstep, one ``Trajectory`` per episode.

    context = env.reset(task).ids
    repeat: action = sampler.generate(context); observation, verdict, done = env.step(action)
            context += action ids + observation ids              # ids, never decoded and re-encoded

Episodes of one call advance together: each round samples every unfinished episode in one
``Sampler.generate`` call (the local sampler batches them), then steps their environments all at
once, and the runner waits for them all:

- an environment that verifies through the execution service (``SubmitsSteps``:
  ``SingleTurnEnv``) submits its step to it as a stateless ``Verify`` job (the service owns its
  infra retries, cache and dedup);
- with a ``service``, any other (stateful: repair, tool, BFCL) environment's step is a
  ``sched.Step`` job run on that episode's own environment, which stays where it was built. A step
  is never retried on its own: on an infra error the runner restarts the whole episode from its
  initial state in a fresh environment (``Episode.make_env``), replays the recorded actions to
  rebuild the state, and steps the failed action again -- the environment is deterministic given
  its actions, so a replayed observation (or verdict outcome) that differs from the recorded one
  makes the episode an infra loss. Tries per episode are capped by the service's
  ``SchedPolicy.max_tries``, with its backoff before each restart, and counted (``restarts``; every
  step try is in ``Service.attempts``); an episode out of tries (or with no ``make_env``) gives its
  whole group up (``Service.give_up``: dropped, counted, never scored) and ends with an
  ``infra_error`` verdict; the group's other episodes are not sampled again: each ends at once
  with a last turn that has no action and an ``infra:group_dropped`` verdict;
- with no service, such an environment steps on a thread of its own, and an infra verdict ends
  its episode (the caller drops its group).

What is infra, for a stateful step: an ``infra_error`` verdict the environment returns (its own way
to say the machinery under it failed: a sandbox job killed, a backend that did not answer), or an
exception of the machinery's kinds (``INFRA_EXCEPTIONS``: ``OSError`` -- a process or pipe that
died, a timeout --, ``EOFError``, ``MemoryError``, ``subprocess.SubprocessError``, the sandbox's
``PoolClosed``). Those restart the episode as above. Any other exception raised by a step
(``TypeError``, ``AttributeError``, ``KeyError``, ``ValueError``, ``RuntimeError``, a ``UserError``
...) is an error of the environment: no restart, no dropped group; ``run_batch`` raises
``sched.StepError`` (one line naming the task, the environment, the step and the exception; the
exception is its cause). So is an exception about the environment's own files
(``REPEAT_IS_A_BUG``: ``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``,
``NotADirectoryError``) that repeats identically (same type, same message) on the restarted
episode's same step: a deterministic bug, not a flaky machine. Resource and timeout kinds
(``MemoryError``, ``TimeoutError``, a broken pipe or connection, ``EOFError``, subprocess errors,
``PoolClosed``) stay infra however often they repeat: restarted until the tries run out, then the
group is dropped. An environment whose failures are infra returns an infra verdict (never
repeat-checked) rather than raising.

The service's workers (sized from the sandbox pool) set the concurrency. A single-turn batch is
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
import subprocess
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from posttrain.policy import Generation, Sampler, SamplingParams
from posttrain.rollout._env import Env, Observation, SubmitsSteps
from posttrain.sandbox.errors import PoolClosed
from posttrain.sched import GroupDropped, Result, Service, Step, StepError
from posttrain.types import Rollout, Task, Trajectory, Turn, Verdict

StepResult = tuple[Observation, Verdict | None, bool]

INFRA_EXCEPTIONS: tuple[type[BaseException], ...] = (OSError, EOFError, MemoryError, subprocess.SubprocessError,
                                                     PoolClosed)
"""Exceptions from a stateful step that are infra (the machinery under the environment failed);
any other is an error of the environment (module docstring)."""

REPEAT_IS_A_BUG: tuple[type[OSError], ...] = (FileNotFoundError, PermissionError, IsADirectoryError,
                                              NotADirectoryError)
"""Infra kinds about the environment's own files: one that repeats identically on the restarted
episode is the environment's bug (``StepError``); other infra kinds stay infra (module docstring)."""


@dataclass(frozen=True)
class Episode:
    """What to run: a task, a fresh environment for it, and where the episode belongs.

    ``make_env``: builds another fresh environment for the task, to restart the episode after an
    infra error (module docstring); None: the episode cannot be restarted."""

    task: Task
    env: Env
    group_id: str
    sample_idx: int = 0
    make_env: Callable[[Task], Env] | None = None


@dataclass
class _State:
    env: Env
    prompt: tuple[int, ...]
    context: list[int]
    pending: tuple[int, ...]  # observation ids not yet followed by an action
    turns: list[Turn]
    used: int = 0  # tokens after the prompt
    done: bool = False
    actions: list[Generation] = field(default_factory=list)  # every action stepped, for a replay
    steps: list[StepResult] = field(default_factory=list)  # and what each step gave
    tries: int = 1  # of the episode: 1 + restarts
    seq: int = 0  # step jobs submitted (replays included): each its own job key
    group_size: int = 1  # episodes of its group in this batch (what giving the group up drops)


def run_batch(
    sampler: Sampler,
    episodes: Sequence[Episode],
    params: SamplingParams,
    *,
    max_turns: int = 1,
    max_tokens: int | None = None,
    policy_version: int = 0,
    service: Service | None = None,
) -> list[Trajectory]:
    """Run every episode to its end; trajectories come back in the order of ``episodes``.
    ``service``: where stateful environments' steps run as jobs (module docstring)."""
    if max_turns < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError(f"max_turns and max_tokens must be >= 1, got {max_turns} and {max_tokens}")
    states = []
    sizes = Counter(ep.group_id for ep in episodes)
    for ep in episodes:
        prompt = ep.env.reset(ep.task).ids
        states.append(_State(ep.env, tuple(prompt), context=list(prompt), pending=tuple(prompt), turns=[],
                             group_size=sizes[ep.group_id]))
    for turn in range(max_turns):
        active = [i for i, s in enumerate(states) if not s.done and _room(s, max_tokens) > 0]
        if not active:
            break
        gens = _sample(sampler, [states[i] for i in active], params, max_tokens, seed_offset=turn)
        results = _step_all([episodes[i] for i in active], [states[i] for i in active], gens, service)
        for i, g, (obs, verdict, done) in zip(active, gens, results, strict=True):
            s = states[i]
            s.turns.append(Turn(s.pending, g.completion_ids, g.logprobs, g.stop_reason, verdict, g.text))
            s.context += [*g.completion_ids, *obs.ids]
            s.pending, s.done = tuple(obs.ids), done
            s.used += len(g.completion_ids) + len(obs.ids)
            s.actions.append(g)
            s.steps.append((obs, verdict, done))
        if service is not None:
            for i in active:
                if not states[i].done and service.is_dropped(episodes[i].group_id):
                    _end_dropped(states[i], episodes[i].group_id)
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


def _step_all(eps: Sequence[Episode], states: Sequence[_State], gens: Sequence[Generation],
              service: Service | None) -> list[StepResult]:
    """Every environment's step of one round, started together; results in order. Stateful steps
    that met an infra error are done again in a restarted episode (module docstring)."""
    envs = [s.env for s in states]
    if service is None and len(envs) == 1 and not isinstance(envs[0], SubmitsSteps):
        return [_stepper(eps[0], envs[0], gens[0], len(states[0].steps))()]
    threads = 0 if service is not None else sum(not isinstance(env, SubmitsSteps) for env in envs)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as ex:
        futures: list[Future[StepResult]] = [
            env.submit_step(g) if isinstance(env, SubmitsSteps)
            else _submit_step(service, ep, s, g, len(s.steps)) if service is not None
            else ex.submit(_stepper(ep, env, g, len(s.steps)))
            for ep, s, env, g in zip(eps, states, envs, gens, strict=True)
        ]
        results = [f.result() for f in futures]
    if service is None:
        return results
    failed = [k for k, (env, r) in enumerate(zip(envs, results, strict=True))
              if not isinstance(env, SubmitsSteps) and _is_infra(r) and not service.is_dropped(eps[k].group_id)]
    if failed:
        with ThreadPoolExecutor(max_workers=len(failed)) as ex:  # restarts replay concurrently
            again = list(ex.map(lambda k: _restart(service, eps[k], states[k], gens[k], results[k]), failed))
        for k, r in zip(failed, again, strict=True):
            results[k] = r
    return results


def _is_infra(result: StepResult) -> bool:
    return result[1] is not None and result[1].is_infra_error


def _stepper(ep: Episode, env: Env, action: Generation, index: int) -> Callable[[], StepResult]:
    """``env.step(action)``, where an exception that is not infra (module docstring), or a result that
    is not ``(observation, verdict, done)``, raises ``StepError`` naming the task, the env and step ``index``."""
    def run() -> StepResult:
        try:
            result = env.step(action)
        except INFRA_EXCEPTIONS:
            raise
        except Exception as e:
            raise StepError(_env_error(ep, env, index, f"{type(e).__name__}: {e}")) from e
        if not (isinstance(result, tuple) and len(result) == 3):
            raise StepError(_env_error(ep, env, index, f"it gave {type(result).__name__}, not (observation, verdict, done)"))
        return result

    return run


def _env_error(ep: Episode, env: Env, index: int, what: str) -> str:
    return (f"task {ep.task.id!r} (domain {ep.task.domain!r}, sample {ep.sample_idx}): environment "
            f"{type(env).__name__}, step {index}: {what} -- an error of the environment, not infra")


def _submit_step(service: Service, ep: Episode, s: _State, action: Generation, index: int, *,
                 delay_s: float = 0.0) -> Future[StepResult]:
    """Step ``index`` of the episode (``action``) on ``s.env`` as a ``Step`` job of the episode's
    group; a dropped group is an infra verdict, an error of the environment raises ``StepError``."""
    job = service.submit(Step(ep.task, _stepper(ep, s.env, action, index), ep.group_id, ep.sample_idx,
                              seq=s.seq, delay_s=delay_s))
    s.seq += 1
    out: Future[StepResult] = Future()

    def settle(f: Future[Result]) -> None:
        try:
            obs, verdict, done = f.result()
            out.set_result((obs if isinstance(obs, Observation) else Observation(()), verdict, bool(done)))
        except StepError as e:
            out.set_exception(e)
        except GroupDropped as e:
            out.set_result((Observation(()), Verdict.infra(str(e), error_class="infra:group_dropped"), True))
        except Exception as e:  # noqa: BLE001 - the service closed under us: infra, never scored
            out.set_result((Observation(()), Verdict.infra(f"{type(e).__name__}: {e}", error_class="infra:service"), True))

    job.add_done_callback(settle)
    return out


def _restart(service: Service, ep: Episode, s: _State, action: Generation, failed: StepResult) -> StepResult:
    """Restart the episode in fresh environments until ``action``'s step runs without an infra error,
    replaying the recorded actions first; give the group up when tries run out or a replay differs."""
    policy = service.sched.policy
    last = previous = failed
    index = len(s.steps)
    while True:
        if ep.make_env is None or s.tries >= policy.max_tries:
            why = "no make_env to restart it" if ep.make_env is None else f"{s.tries} tries"
            return _give_up(service, ep, s, f"{why}, last {last[1].error_class if last[1] else None}")
        s.tries += 1
        service.restarted(ep.group_id)
        s.env = env = ep.make_env(ep.task)
        if tuple(env.reset(ep.task).ids) != s.prompt:
            return _give_up(service, ep, s, "the restarted episode's prompt differs from the recorded one")
        delay = policy.backoff(s.tries - 1)
        for k, (recorded, replay) in enumerate(zip(s.steps, s.actions, strict=True)):
            last = _submit_step(service, ep, s, replay, k, delay_s=delay if k == 0 else 0.0).result()
            if _is_infra(last):
                break
            if not _same_step(last, recorded):
                return _give_up(service, ep, s, f"replayed step {k} differs from the recorded one")
        else:
            last = _submit_step(service, ep, s, action, index, delay_s=0.0 if s.steps else delay).result()
            if not _is_infra(last):
                return last
            if (raised := _raised(last)) is not None and raised == _raised(previous):
                raise StepError(_env_error(ep, s.env, index, f"{raised}, again, identically, on the restarted episode"))
            previous = last
        if service.is_dropped(ep.group_id):
            return last


def _raised(result: StepResult) -> str | None:
    """``"<type>: <message>"`` of the exception an infra step result came from (the service's
    ``infra:worker`` verdict) when its type is one of ``REPEAT_IS_A_BUG``, else None (another infra
    kind, or an infra verdict the environment returned)."""
    v = result[1]
    if v is None or v.error_class != "infra:worker":
        return None
    detail = str(v.evidence.get("detail"))
    return detail if detail.partition(":")[0] in {c.__name__ for c in REPEAT_IS_A_BUG} else None


def _same_step(a: StepResult, b: StepResult) -> bool:
    va, vb = a[1], b[1]
    same_verdict = (va is None) == (vb is None) and (va is None or vb is None or
                                                      (va.outcome, va.reward, va.feedback) == (vb.outcome, vb.reward, vb.feedback))
    return tuple(a[0].ids) == tuple(b[0].ids) and a[2] == b[2] and same_verdict


def _give_up(service: Service, ep: Episode, s: _State, why: str) -> StepResult:
    if service.is_dropped(ep.group_id):  # another episode of the group gave it up already
        return Observation(()), Verdict.infra(f"group {ep.group_id!r} dropped", error_class="infra:group_dropped"), True
    service.give_up(ep.group_id, members=s.group_size)
    detail = f"task {ep.task.id!r} sample {ep.sample_idx}: episode out of tries ({why})"
    return Observation(()), Verdict.infra(detail, error_class="infra:exhausted"), True


def _end_dropped(s: _State, group_id: str) -> None:
    """End an episode whose group was given up (by another of its episodes) without sampling for it
    again: one last turn with no action carries the ``infra:group_dropped`` verdict (never scored;
    its record is the attempt that was not made)."""
    verdict = Verdict.infra(f"group {group_id!r} dropped", error_class="infra:group_dropped")
    s.turns.append(Turn(s.pending, (), (), "eos", verdict, ""))
    s.pending, s.done = (), True


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
