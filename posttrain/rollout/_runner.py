"""The episode runner: a ``Sampler`` and ``Env``s in lockstep, one ``Trajectory`` per episode.

    context = env.reset(task).ids
    repeat: action = sampler.generate(context); result = env.step(action)   # StepResult
            context += action ids + result.observation.ids       # ids, never decoded and re-encoded

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
- a ``Restorable`` environment (``posttrain.envs.Restorable``: a ``Workspace`` under it) is not
  rebuilt and replayed: the runner takes a snapshot after ``reset`` and after every step that did not
  end the episode (inside that step's job), and on an infra error ``restore``s the last one on the
  same environment and steps the failed action again -- a restart like the other (counted, capped by
  ``max_tries``, with its backoff), with no replay and no demand that observations repeat byte for
  byte (command output in a repository does not). A ``restore`` that raises an infra exception falls
  back to the fresh environment and the replay (or gives the group up without ``make_env``);
- with no service, such an environment steps on a thread of its own, and an infra verdict ends
  its episode (the caller drops its group).

Lifecycle: the runner owns the environments of the episodes it is given and closes each
(``Env.close``) on every path out of its episode: when it is done, cut by a limit, dropped with its
group, on an error of an environment (``StepError``) or of the sampler (any exception out of
``run_batch``), and every environment a restart replaces, as it is replaced. A ``close`` that raises
is a warning naming the task and the environment, never a lost batch.

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

Limits (``max_turns``, ``max_tokens``, ``max_context``: the model's positions) and the cut that names
the one that ended an episode (``cut_by``, ``"feedback_overflow"`` included): ``_limits``, shared.

Not here: chat templates (an environment renders its observations to ids itself), tool calling.
"""

from __future__ import annotations

import math
import subprocess
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from posttrain.envs import Env, Restorable
from posttrain.policy import Sampler, SamplingParams
from posttrain.rollout._env import SubmitsSteps
from posttrain.rollout._limits import check_limits, cut_by, sample_within
from posttrain.rollout._limits import sample_by_cap as sample_by_cap  # its home before _limits
from posttrain.sandbox.errors import PoolClosed
from posttrain.sched import GroupDropped, Result, Service, Step, StepError, verifier_bug
from posttrain.types import (
    CutBy,
    Generation,
    Observation,
    Rollout,
    StepResult,
    Task,
    Trajectory,
    Turn,
    Verdict,
)

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
    infra error (module docstring); None: the episode cannot be restarted (a ``Restorable``
    environment still restarts from its snapshot). The runner closes ``env`` (and every environment
    ``make_env`` builds for it) when the episode ends."""

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
    context_cap: float = math.inf  # run_batch's max_context: the most tokens the context may hold
    snapshot: object | None = None  # a Restorable env's state after reset or its last step that did not end it
    closed: bool = False


def run_batch(
    sampler: Sampler,
    episodes: Sequence[Episode],
    params: SamplingParams,
    *,
    max_turns: int = 1,
    max_tokens: int | None = None,
    policy_version: int = 0,
    service: Service | None = None,
    max_context: int | None = None,
) -> list[Trajectory]:
    """Run every episode to its end; trajectories come back in the order of ``episodes``.
    ``service``: where stateful environments' steps run as jobs; ``max_context``: the model's
    positions (module docstring: limits)."""
    states: list[_State] = []
    try:
        check_limits(max_turns, max_tokens, max_context)
        sizes = Counter(ep.group_id for ep in episodes)
        for ep in episodes:
            prompt = ep.env.reset(ep.task).ids
            states.append(_State(ep.env, tuple(prompt), context=list(prompt), pending=tuple(prompt), turns=[],
                                 group_size=sizes[ep.group_id],
                                 context_cap=math.inf if max_context is None else max_context))
            if service is not None:  # restarts need it (none without a service)
                states[-1].snapshot = _snapshot(ep.env)
        for turn in range(max_turns):
            active = [i for i, s in enumerate(states) if not s.done and _room(s, max_tokens) > 0]
            if not active:
                break
            gens = sample_within(sampler, [states[i].context for i in active], params,
                                 [_room(states[i], max_tokens) for i in active], seed_offset=turn)
            results = _step_all([episodes[i] for i in active], [states[i] for i in active], gens, service)
            for i, g, result in zip(active, gens, results, strict=True):
                s, obs = states[i], result.observation
                s.turns.append(Turn(s.pending, g.completion_ids, g.logprobs, g.stop_reason, result.verdict, g.text,
                                    result.calls))
                s.context += [*g.completion_ids, *obs.ids]
                s.pending, s.done = tuple(obs.ids), result.done
                s.used += len(g.completion_ids) + len(obs.ids)
                s.actions.append(g)
                s.steps.append(result)
                if s.done:
                    _close(episodes[i], s)
            if service is not None:
                for i in active:
                    if not states[i].done and service.is_dropped(episodes[i].group_id):
                        _end_dropped(states[i], episodes[i].group_id)
                        _close(episodes[i], states[i])
        return [_trajectory(ep, s, policy_version, max_tokens, max_turns, params.temperature)
                for ep, s in zip(episodes, states, strict=True)]
    finally:  # every path out: cut episodes, an error of an environment or of the sampler
        for ep, s in zip(episodes, states, strict=False):
            _close(ep, s)
        for ep in episodes[len(states):]:  # never reset (an earlier reset raised)
            _close_env(ep, ep.env)


def run_episode(
    sampler: Sampler,
    episode: Episode,
    params: SamplingParams,
    *,
    max_turns: int = 1,
    max_tokens: int | None = None,
    policy_version: int = 0,
    max_context: int | None = None,
) -> Trajectory:
    """One episode (``run_batch`` of one)."""
    return run_batch(sampler, [episode], params, max_turns=max_turns, max_tokens=max_tokens,
                     policy_version=policy_version, max_context=max_context)[0]


def _snapshot(env: Env) -> object | None:
    """A ``Restorable`` environment's snapshot now; None for any other."""
    return env.snapshot() if isinstance(env, Restorable) else None


def _close(ep: Episode, s: _State) -> None:
    """Close the episode's current environment, once."""
    if not s.closed:
        s.closed = True
        _close_env(ep, s.env)


def _close_env(ep: Episode, env: Env) -> None:
    """``env.close()``; one that raises is a warning naming the task and the environment (what it held
    may be left behind), never an error that loses the batch."""
    try:
        env.close()
    except Exception as e:  # noqa: BLE001 - a leak is said, the batch's trajectories are kept
        warnings.warn(f"task {ep.task.id!r} (sample {ep.sample_idx}): environment {type(env).__name__}.close() "
                      f"raised {type(e).__name__}: {e}; what it held may be left behind", stacklevel=3)


def _room(s: _State, max_tokens: int | None) -> int | float:
    """Tokens the next action may have: within the budget and, after the first action, the context's
    cap (a prompt too long for the model is the recipe's to refuse, before any work)."""
    budget = math.inf if max_tokens is None else max_tokens - s.used
    return min(budget, s.context_cap - len(s.context)) if s.turns else budget


def _step_all(eps: Sequence[Episode], states: Sequence[_State], gens: Sequence[Generation],
              service: Service | None) -> list[StepResult]:
    """Every environment's step of one round, started together; results in order, once every step
    has finished (an error of one is raised after the others are done: their environments are then
    closed, never while stepping). Stateful steps that met an infra error are done again in a
    restarted episode (module docstring)."""
    envs = [s.env for s in states]
    submits = [isinstance(env, SubmitsSteps) for env in envs]  # once: a protocol check costs ~30 us
    if service is None and len(envs) == 1 and not submits[0]:
        return [_stepper(eps[0], states[0], gens[0], len(states[0].steps))()]
    threads = 0 if service is not None else submits.count(False)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as ex:
        futures: list[Future[StepResult]] = [
            env.submit_step(g) if submit
            else _submit_step(service, ep, s, g, len(s.steps)) if service is not None
            else ex.submit(_stepper(ep, s, g, len(s.steps)))
            for ep, s, env, g, submit in zip(eps, states, envs, gens, submits, strict=True)
        ]
        wait(futures)
        results = [f.result() for f in futures]
    if service is None:
        return results
    failed = [k for k, (submit, r) in enumerate(zip(submits, results, strict=True))
              if not submit and _is_infra(r) and not service.is_dropped(eps[k].group_id)]
    if failed:
        with ThreadPoolExecutor(max_workers=len(failed)) as ex:  # restarts run concurrently
            again = [ex.submit(_restart, service, eps[k], states[k], gens[k], results[k]) for k in failed]
            wait(again)
        for k, r in zip(failed, again, strict=True):
            results[k] = r.result()
    return results


def _is_infra(result: StepResult) -> bool:
    return result.verdict is not None and result.verdict.is_infra_error


def _stepper(ep: Episode, s: _State, action: Generation, index: int, *, keep: bool = False
             ) -> Callable[[], StepResult]:
    """``s.env.step(action)``, where an exception that is not infra (module docstring), or a result that
    is not a ``StepResult``, raises ``StepError`` naming the task, the env and step ``index``. ``keep``:
    a ``Restorable`` environment's snapshot is taken after a step that did not end the episode (in
    the same job: nothing steps it in between) and kept as the one a restart restores."""
    env = s.env

    def run() -> StepResult:
        snap = None
        try:
            result = env.step(action)
            if keep and isinstance(result, StepResult) and not result.done and not _is_infra(result):
                snap = _snapshot(env)
        except INFRA_EXCEPTIONS:
            raise
        except Exception as e:
            raise StepError(_env_error(ep, env, index, f"{type(e).__name__}: {e}")) from e
        if not isinstance(result, StepResult):
            raise StepError(_env_error(ep, env, index, f"it gave {type(result).__name__}, not a StepResult"))
        if snap is not None:
            s.snapshot = snap
        return result

    return run


def _env_error(ep: Episode, env: Env, index: int, what: str) -> str:
    return (f"task {ep.task.id!r} (domain {ep.task.domain!r}, sample {ep.sample_idx}): environment "
            f"{type(env).__name__}, step {index}: {what} -- an error of the environment, not infra")


def _submit_step(service: Service, ep: Episode, s: _State, action: Generation, index: int, *,
                 delay_s: float = 0.0) -> Future[StepResult]:
    """Step ``index`` of the episode (``action``) on ``s.env`` as a ``Step`` job of the episode's
    group; a dropped group is an infra verdict, an error of the environment raises ``StepError``."""
    job = service.submit(Step(ep.task, _stepper(ep, s, action, index, keep=True), ep.group_id, ep.sample_idx,
                              seq=s.seq, delay_s=delay_s))
    s.seq += 1
    out: Future[StepResult] = Future()

    def settle(f: Future[Result]) -> None:
        try:
            result = f.result()
            out.set_result(result if isinstance(result, StepResult) else
                           StepResult(Observation(()), Verdict.infra(f"not a step result: {result!r}"), True))
        except StepError as e:
            out.set_exception(e)
        except GroupDropped as e:
            out.set_result(StepResult(Observation(()), Verdict.infra(str(e), error_class="infra:group_dropped"), True))
        except Exception as e:  # noqa: BLE001 - the service closed under us: infra, never scored
            out.set_result(StepResult(Observation(()), Verdict.infra(f"{type(e).__name__}: {e}", error_class="infra:service"),
                                      True))

    job.add_done_callback(settle)
    return out


def _restart(service: Service, ep: Episode, s: _State, action: Generation, failed: StepResult) -> StepResult:
    """Restart the episode until ``action``'s step runs without an infra error: from its last snapshot
    on the same environment (``Restorable``), else in a fresh environment with the recorded actions
    replayed first; give the group up when tries run out, a replay differs, or nothing can restart it."""
    rules = service.sched.policy  # the scheduling policy (tries, backoff), not the model
    last = previous = failed
    index = len(s.steps)
    while True:
        if s.tries >= rules.max_tries or (s.snapshot is None and ep.make_env is None):
            why = f"{s.tries} tries" if s.tries >= rules.max_tries else "no make_env to restart it"
            return _give_up(service, ep, s, f"{why}, last {last.verdict.error_class if last.verdict else None}")
        s.tries += 1
        service.restarted(ep.group_id)
        delay = rules.backoff(s.tries - 1)
        if s.snapshot is not None and _restore(ep, s, index):
            last = _submit_step(service, ep, s, action, index, delay_s=delay).result()
        elif ep.make_env is None:
            return _give_up(service, ep, s, "its snapshot could not be restored and there is no make_env")
        else:
            replayed = _replay(service, ep, s, delay)
            if isinstance(replayed, str):
                return _give_up(service, ep, s, replayed)
            if replayed is not None:  # a replayed step met an infra error: restart again
                last = replayed
                if service.is_dropped(ep.group_id):
                    return last
                continue
            last = _submit_step(service, ep, s, action, index, delay_s=0.0 if s.steps else delay).result()
        if not _is_infra(last):
            return last
        if (raised := _raised(last)) is not None and raised == _raised(previous):
            raise StepError(_env_error(ep, s.env, index, f"{raised}, again, identically, on the restarted episode"))
        previous = last
        if service.is_dropped(ep.group_id):
            return last


def _restore(ep: Episode, s: _State, index: int) -> bool:
    """Put ``s.env`` back to its last snapshot; False (and no snapshot any more) when ``restore`` raised
    an infra exception. Any other exception is an error of the environment (``StepError``)."""
    env = s.env
    assert isinstance(env, Restorable)  # a snapshot is taken of a Restorable environment only
    try:
        env.restore(s.snapshot)
    except INFRA_EXCEPTIONS:
        s.snapshot = None
        return False
    except Exception as e:
        raise StepError(_env_error(ep, s.env, index, f"restore raised {type(e).__name__}: {e}")) from e
    return True


def _replay(service: Service, ep: Episode, s: _State, delay: float) -> StepResult | str | None:
    """A fresh environment (the old one closed) reset and stepped through the recorded actions: None
    when they replayed as recorded, the infra step result of a replay that met one, or why the
    episode cannot go on (a prompt or a replayed step that differs)."""
    assert ep.make_env is not None
    old, s.env = s.env, ep.make_env(ep.task)
    _close_env(ep, old)
    if tuple(s.env.reset(ep.task).ids) != s.prompt:
        return "the restarted episode's prompt differs from the recorded one"
    s.snapshot = _snapshot(s.env)
    for k, (recorded, replay) in enumerate(zip(s.steps, s.actions, strict=True)):
        last = _submit_step(service, ep, s, replay, k, delay_s=delay if k == 0 else 0.0).result()
        if _is_infra(last):
            return last
        if not _same_step(last, recorded):
            return f"replayed step {k} differs from the recorded one"
    return None


def _raised(result: StepResult) -> str | None:
    """``"<type>: <message>"`` of the exception an infra step result came from (the service's
    ``infra:worker`` verdict) when its type is one of ``REPEAT_IS_A_BUG``; the crash line of a
    verifier that raised a programming error (``sched.verifier_bug``: a step that verified an attempt);
    else None (another infra kind, or an infra verdict the environment returned). Either, again and
    identically on the restarted episode, is a bug, not infra: given up, the group would go unscored
    for a response that crashes its verifier every time."""
    v = result.verdict
    if (bug := verifier_bug(v)) is not None:
        return bug
    if v is None or v.error_class != "infra:worker":
        return None
    detail = str(v.evidence.get("detail"))
    return detail if detail.partition(":")[0] in {c.__name__ for c in REPEAT_IS_A_BUG} else None


def _same_step(a: StepResult, b: StepResult) -> bool:
    va, vb = a.verdict, b.verdict
    same_verdict = (va is None) == (vb is None) and (va is None or vb is None or
                                                      (va.outcome, va.reward, va.feedback) == (vb.outcome, vb.reward, vb.feedback))
    return tuple(a.observation.ids) == tuple(b.observation.ids) and a.done == b.done and same_verdict


def _give_up(service: Service, ep: Episode, s: _State, why: str) -> StepResult:
    if service.is_dropped(ep.group_id):  # another episode of the group gave it up already
        return StepResult(Observation(()), Verdict.infra(f"group {ep.group_id!r} dropped", error_class="infra:group_dropped"),
                          True)
    service.give_up(ep.group_id, members=s.group_size)
    detail = f"task {ep.task.id!r} sample {ep.sample_idx}: episode out of tries ({why})"
    return StepResult(Observation(()), Verdict.infra(detail, error_class="infra:exhausted"), True)


def _end_dropped(s: _State, group_id: str) -> None:
    """End an episode whose group was given up (by another of its episodes) without sampling for it
    again: one last turn with no action carries the ``infra:group_dropped`` verdict (never scored;
    its record is the attempt that was not made)."""
    verdict = Verdict.infra(f"group {group_id!r} dropped", error_class="infra:group_dropped")
    s.turns.append(Turn(s.pending, (), (), "eos", verdict, ""))
    s.pending, s.done = (), True


def _trajectory(ep: Episode, s: _State, policy_version: int, max_tokens: int | None, max_turns: int,
                temperature: float) -> Trajectory:
    verdicts = [t.verdict for t in s.turns if t.verdict is not None]
    reward = verdicts[-1].reward if verdicts else 0.0
    cut = bool(s.turns) and s.turns[-1].stop_reason == "length"
    return Trajectory(
        task_id=ep.task.id,
        group_id=ep.group_id,
        sample_idx=ep.sample_idx,
        turns=tuple(s.turns),
        reward=reward,
        truncated=not s.done or cut,
        policy_version=policy_version,
        cut_by=_cut_by(s, max_tokens, max_turns),
        temperature=temperature,
    )


def _cut_by(s: _State, max_tokens: int | None, max_turns: int) -> CutBy | None:
    """The runner's limit that ended an unfinished episode (None: its environment ended it;
    ``_limits.cut_by``: ``"feedback_overflow"`` where a failed attempt's feedback took the room left)."""
    if s.done:
        return None
    return cut_by(s.env, s.turns[-1].verdict if s.turns else None, room=_room(s, max_tokens),
                  feedback=len(s.pending), turns_left=max_turns - len(s.turns))


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
