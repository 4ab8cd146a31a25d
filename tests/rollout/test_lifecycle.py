"""The episode lifecycle (posttrain.envs.Env.close, posttrain.envs.Restorable): the runner closes every
environment on every path out of its episode, and restarts a Restorable one from its snapshot.

Paths out, each tested: done, cut by max_turns or max_tokens, the group dropped, an error of the
environment (StepError), an exception of the sampler, a reset that raises, every environment a
restart replaces. Restarts from a snapshot: on the same environment, no replay, observations that
never repeat; a restore that fails falls back to the replay; tries stay capped. Last, a real
``posttrain.sandbox.Workspace`` environment with nondeterministic command output: an infra error
injected mid-episode (after its command wrote to the workspace) restarts from the snapshot, the
episode completes, and no tmpfs or cgroup of the workspace is left.
"""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pytest

from posttrain.cli import open_service
from posttrain.policy import Generation, SamplingParams
from posttrain.rollout import Episode, run_batch
from posttrain.sched import SchedPolicy, StepError
from posttrain.types import Observation, StepResult, Task, Verdict

TASK = Task(id="life", domain="math", prompt="", fields={"answer": "1"})
PARAMS = SamplingParams(max_new_tokens=1)
_serial = itertools.count()


class Tracked:
    """A test double: steps ``done_at`` times (a pass at the last), each observation fresh (never the
    same twice: a replay could not rebuild it); ``fail_at``: the step that raises an infra
    exception (once, or ``fail_times``); counts its closes and whether it was stepped after one."""

    def __init__(self, done_at: int = 3, *, fail_at: int | None = None, fail_times: int = 1,
                 error: BaseException | None = None) -> None:
        self.done_at, self.fail_at, self.fail_times = done_at, fail_at, fail_times
        self.error = error or OSError("the sandbox job was killed")
        self.n = self.failed = self.closes = 0
        self.used_after_close = False

    def reset(self, task: Task) -> Observation:
        return Observation((1, 2))

    def step(self, action: Generation) -> StepResult:
        self.used_after_close |= self.closes > 0
        self.n += 1
        if self.n == self.fail_at and self.failed < self.fail_times:
            self.failed += 1
            raise self.error
        done = self.n >= self.done_at
        return StepResult(Observation(() if done else (100 + next(_serial) % 50,)),
                          Verdict("pass", 1.0) if done else None, done)

    def close(self) -> None:
        self.closes += 1


class Restoring(Tracked):
    """``Tracked`` whose state (its step count) can be saved and put back: a ``Restorable``."""

    def __init__(self, *args, restore_error: BaseException | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self.restore_error, self.restores, self.snapshots = restore_error, [], 0

    def snapshot(self) -> object:
        self.snapshots += 1
        return self.n

    def restore(self, snapshot: object) -> None:
        if self.restore_error is not None:
            raise self.restore_error
        self.restores.append(snapshot)
        self.n = snapshot


class Fixed:
    """A sampler that answers one token; ``fail_at``: the generate call that raises."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls, self.fail_at = 0, fail_at

    def generate(self, prompt_ids, params):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("the sampler's server went away")
        return [Generation(tuple(p), (7,), (0.0,), "x", "eos") for p in prompt_ids]


@pytest.fixture(scope="module")
def svc():
    with open_service(["math"], policy=SchedPolicy(max_tries=3, backoff_s=0.0)) as s:
        yield s


def _run(envs, *, service=None, sampler=None, max_turns=5, max_tokens=None, make=None):
    runs = [Episode(TASK, env, f"g{next(_serial)}", 0, make) for env in envs]  # a service forgets no dropped group
    return run_batch(sampler or Fixed(), runs, PARAMS, max_turns=max_turns, max_tokens=max_tokens, service=service)


@pytest.mark.parametrize("with_service", [False, True])
def test_done_and_cut_episodes_are_closed_once(with_service, svc):
    done, cut_turns = Tracked(done_at=1), Tracked(done_at=9)
    trajs = _run([done, cut_turns], service=svc if with_service else None, max_turns=3)
    assert [t.cut_by for t in trajs] == [None, "max_turns"]
    assert (done.closes, cut_turns.closes) == (1, 1) and not cut_turns.used_after_close
    cut_tokens = Tracked(done_at=9)
    [traj] = _run([cut_tokens], service=svc if with_service else None, max_tokens=2)
    assert traj.cut_by == "max_tokens" and cut_tokens.closes == 1


def test_an_episode_is_closed_when_it_ends_not_when_the_batch_does():
    early, late = Tracked(done_at=1), Tracked(done_at=4)

    class Watching(Fixed):
        seen = []

        def generate(self, prompt_ids, params):
            self.seen.append(early.closes)
            return super().generate(prompt_ids, params)

    _run([early, late], sampler=Watching())
    assert Watching.seen == [0, 1, 1, 1]  # closed after its last step, before the others' next round


def test_every_environment_of_a_dropped_group_is_closed(svc):
    made: list[Tracked] = []

    def make(task):
        made.append(Tracked(done_at=9, fail_at=1, fail_times=99))
        return made[-1]

    lost, sibling = Tracked(done_at=9, fail_at=2, fail_times=99), Tracked(done_at=9)
    group = f"drop{next(_serial)}"
    runs = [Episode(TASK, lost, group, 0, make), Episode(TASK, sibling, group, 1)]
    trajs = run_batch(Fixed(), runs, PARAMS, max_turns=5, service=svc)
    assert trajs[0].verdicts[-1].error_class == "infra:exhausted"
    assert trajs[1].verdicts[-1].error_class == "infra:group_dropped"
    assert len(made) == 2 and [e.closes for e in (lost, sibling, *made)] == [1, 1, 1, 1]  # replaced ones too


@pytest.mark.parametrize("with_service", [False, True])
def test_an_error_of_an_environment_closes_every_environment_of_the_batch(with_service, svc):
    buggy, other = Tracked(fail_at=2, error=KeyError("state")), Tracked(done_at=9)
    with pytest.raises(StepError, match="KeyError"):
        _run([buggy, other], service=svc if with_service else None)
    assert (buggy.closes, other.closes) == (1, 1)


def test_an_exception_of_the_sampler_closes_every_environment():
    envs = [Tracked(done_at=1), Tracked(done_at=9), Tracked(done_at=9)]
    with pytest.raises(RuntimeError, match="went away"):
        _run(envs, sampler=Fixed(fail_at=2))
    assert [e.closes for e in envs] == [1, 1, 1]


def test_a_reset_that_raises_closes_the_environments_before_and_after_it():
    class BadReset(Tracked):
        def reset(self, task):
            raise ValueError("no such task file")

    envs = [Tracked(), BadReset(), Tracked()]
    with pytest.raises(ValueError, match="no such task file"):
        _run(envs)
    assert [e.closes for e in envs] == [1, 1, 1]


def test_a_close_that_raises_is_a_warning_and_the_batch_is_kept():
    class BadClose(Tracked):
        def close(self):
            super().close()
            raise OSError("umount: target is busy")

    env = BadClose(done_at=2)
    with pytest.warns(UserWarning, match=r"task 'life' \(sample 0\): environment BadClose.close\(\) raised OSError"):
        [traj] = _run([env])
    assert traj.verdicts[-1].passed and env.closes == 1


def test_a_replaced_environment_is_closed_when_the_restart_replaces_it(svc):
    class Replayable(Tracked):  # observations that replay identically
        def step(self, action):
            result = super().step(action)
            return StepResult(Observation(() if result.done else (5,)), result.verdict, result.done)

    fresh: list[Replayable] = []

    def make(task):
        fresh.append(Replayable(done_at=3))
        return fresh[-1]

    first = Replayable(done_at=3, fail_at=2)
    [traj] = _run([first], service=svc, make=make)
    assert traj.verdicts[-1].passed and len(fresh) == 1
    assert first.closes == 1 and fresh[0].closes == 1 and not first.used_after_close


def test_a_restorable_environment_restarts_from_its_snapshot_without_a_replay(svc):
    """Observations never repeat (a replay would differ and drop the group); the restart restores
    the snapshot on the same environment, steps the failed action again, and the episode passes."""
    before = svc.stats()
    env = Restoring(done_at=4, fail_at=3)
    made = []
    [traj] = _run([env], service=svc, make=lambda task: made.append(1))
    after = svc.stats()
    assert traj.verdicts[-1].passed and len(traj.turns) == 4 and traj.cut_by is None
    assert env.restores == [2] and made == []  # back to the state after step 2, on the same environment
    assert env.snapshots == 4  # after reset, steps 1, 2 and 3 once it ran (not its failed try, nor the last step)
    assert after["restarts"] - before["restarts"] == 1 and after["groups_dropped"] == before["groups_dropped"]
    assert env.closes == 1


def test_without_a_snapshot_the_same_environment_drops_its_group(svc):
    """The same failure on an environment that is not Restorable: the replay differs, the group goes."""
    env = Tracked(done_at=4, fail_at=3)
    [traj] = _run([env], service=svc, make=lambda task: Tracked(done_at=4))
    assert traj.verdicts[-1].error_class == "infra:exhausted" and "differs" in traj.verdicts[-1].evidence["detail"]


def test_a_restore_that_fails_falls_back_to_a_fresh_environment_and_a_replay(svc):
    env = Restoring(done_at=3, fail_at=1, restore_error=OSError("the workspace is gone"))
    fresh: list[Restoring] = []

    def make(task):
        fresh.append(Restoring(done_at=3))
        return fresh[-1]

    [traj] = _run([env], service=svc, make=make)
    assert traj.verdicts[-1].passed and len(fresh) == 1 and env.restores == []
    assert env.closes == 1 and fresh[0].closes == 1
    no_factory = Restoring(done_at=3, fail_at=1, restore_error=OSError("the workspace is gone"))
    [lost] = _run([no_factory], service=svc)
    assert lost.verdicts[-1].error_class == "infra:exhausted" and "could not be restored" in \
        lost.verdicts[-1].evidence["detail"]


def test_restarts_from_snapshots_stay_capped_by_max_tries(svc):
    env = Restoring(done_at=4, fail_at=2, fail_times=99)
    [traj] = _run([env], service=svc)
    assert traj.verdicts[-1].error_class == "infra:exhausted" and "3 tries" in traj.verdicts[-1].evidence["detail"]
    assert env.restores == [1, 1] and env.closes == 1


def test_a_restore_that_raises_a_bug_is_an_error_of_the_environment(svc):
    env = Restoring(done_at=4, fail_at=2, restore_error=KeyError("layer"))
    with pytest.raises(StepError, match="restore raised KeyError"):
        _run([env], service=svc)
    assert env.closes == 1


# --- a real Workspace: nondeterministic command output, an infra error injected mid-episode ----------

class ShellEpisode:
    """Each action runs one command in a ``Workspace`` (the action's text, after appending a line to
    ``log.txt``); the observation is the command's output plus a fresh random token (``/proc``'s
    uuid: it never repeats). Done after ``steps`` commands, passing when ``log.txt`` holds exactly
    one line per step. ``inject_at``: the step whose command runs (and writes) and then raises an
    infra exception, once: what a sandbox job killed after its write looks like."""

    def __init__(self, pool, steps: int, inject_at: int | None = None) -> None:
        from posttrain.sandbox.workspace import Workspace

        self.ws = Workspace(pool, {"log.txt": ""}, storage_mb=8)
        self.steps, self.inject_at, self.n, self.injected, self.closed = steps, inject_at, 0, False, False

    def reset(self, task):
        return Observation((1,))

    def step(self, action):
        self.n += 1
        line = f"step {self.n}"
        run = self.ws.exec(["sh", "-c", f"echo {shlex.quote(line)} >> log.txt; {action.text}; "
                                        "cat /proc/sys/kernel/random/uuid"])
        if self.n == self.inject_at and not self.injected:
            self.injected = True
            raise ConnectionResetError("the sandbox job's pipe broke")
        if self.n < self.steps:
            return StepResult(Observation((len(run.stdout) % 50 + 3,), run.stdout.decode()), None, False)
        log = self.ws.read_file("log.txt").decode().splitlines()
        ok = log == [f"step {k + 1}" for k in range(self.steps)]
        return StepResult(Observation(()), Verdict("pass", 1.0) if ok else Verdict("fail", 0.0, feedback=str(log)), True)

    def snapshot(self) -> object:
        return (self.ws.snapshot(), self.n)

    def restore(self, snapshot: object) -> None:
        handle, n = snapshot
        self.ws.rollback(to=handle)
        self.n = n

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.ws.close()


class Commands:
    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (7,), (0.0,), "date +%N", "eos") for p in prompt_ids]


def _leftovers(pool) -> tuple[list[str], list[Path]]:
    """Mounts under the pool's directory and workspace cgroups of the pool that are still there."""
    root = str(pool.root)
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if line.split()[4].startswith(root + "/ws-")]
    cgroups = [d for parent in {p for p in pool.layout.parents.values()}
               for d in parent.glob(f"{pool.cg_prefix}-w*")]
    return mounts, cgroups


def test_a_workspace_episode_restarts_from_its_snapshot_and_leaves_nothing():
    from posttrain.sandbox import open_pool
    from posttrain.sched import LocalBackend, Service

    with open_pool(size=2) as pool:
        with Service(LocalBackend({}, pool), SchedPolicy(max_tries=3, backoff_s=0.0)) as service:
            flaky, steady = ShellEpisode(pool, 4, inject_at=3), ShellEpisode(pool, 4)
            assert _leftovers(pool)[0] and _leftovers(pool)[1]  # each workspace: its tmpfs and cgroups
            runs = [Episode(TASK, flaky, "ws", 0), Episode(TASK, steady, "ws", 1)]  # no make_env: no replay
            trajs = run_batch(Commands(), runs, PARAMS, max_turns=6, service=service)
            stats = service.stats()
        assert flaky.injected and [t.verdicts[-1].outcome for t in trajs] == ["pass", "pass"]
        assert [len(t.turns) for t in trajs] == [4, 4]  # the failed step, once more, from the state before it
        assert stats["restarts"] == 1 and stats["groups_dropped"] == 0
        assert flaky.closed and steady.closed
        assert _leftovers(pool) == ([], []), "a workspace's tmpfs or cgroup outlived its episode"
