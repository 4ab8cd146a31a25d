"""Scripted demonstration episodes go through the episode runner and the execution service: an infra
error restarts the episode in a fresh environment, and one that stays infra is left out (None),
never turned into a demonstration."""

from __future__ import annotations

from posttrain.rollout.episodes import Episodes, play_scripts
from posttrain.sched import LocalBackend, SchedPolicy, Service
from posttrain.types import Observation, StepResult, Task, Verdict


class _Env:
    """A test double beside the real envs: task 'flaky' fails its first environment with infra."""

    built: dict[str, int] = {}

    def __init__(self, task: Task) -> None:
        self.n = _Env.built[task.id] = _Env.built.get(task.id, 0) + 1

    def reset(self, task: Task) -> Observation:
        self.task = task
        return Observation((1, 2))

    def step(self, action):
        infra = self.task.id == "broken" or (self.task.id == "flaky" and self.n == 1)
        verdict = Verdict.infra("the box fell over") if infra else Verdict("pass", 1.0)
        return StepResult(Observation((9,)), verdict, True)

    def close(self):
        pass


def test_play_scripts_restarts_on_infra_and_leaves_out_what_stays_infra():
    tasks = [Task(id=i, domain="x", prompt="p", fields={}) for i in ("ok", "flaky", "broken")]
    scripts = {t.id: [((5, 6), "a")] for t in tasks}
    with Service(LocalBackend({}), SchedPolicy(max_tries=3, backoff_s=0.0)) as svc:
        got = play_scripts(lambda task, steps: Episodes("agent", lambda t, g, i: _Env(t), _Env, steps), tasks,
                           scripts, svc)
    ok, flaky, broken = got
    assert ok is not None and ok.turns[0].action_ids == (5, 6) and ok.verdicts[-1].passed
    assert flaky is not None and flaky.verdicts[-1].passed and _Env.built["flaky"] >= 2  # restarted, fresh env
    assert broken is None and _Env.built["broken"] >= 3  # out of tries: left out, never a demonstration
