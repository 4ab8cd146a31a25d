"""A policy attacking the workspace agent's episode through its tool calls, on the real sandbox: whatever
a call's arguments hold costs the agent that call (an error result it reads), never an exception out of
the step. An exception of any other kind is the runner's ``StepError`` (the whole batch lost: every other
episode's too); an ``OSError`` is infra to the runner (restarted until its tries run out, then the group
dropped: the attacker escapes its verdict and takes its group's gradient with it).

Each attack is a JSON escape a model can write (``\\ud800`` decodes to a lone surrogate UTF-8 cannot
encode, ``\\u0000`` to a NUL) or a path the host's filesystem refuses (a name over 255 bytes)."""

from __future__ import annotations

import json
import random

import pytest
from agent_play import CHAT, action, call

from posttrain.envs import get_domain
from posttrain.envs.doc._env import build_task
from posttrain.envs.workspace import AgentLimits, WorkspaceEnv, check_arguments, write_file_tool
from posttrain.types import StepResult

ENV = get_domain("doc")

ATTACKS = {
    "write_file: a lone surrogate in the content": call("write_file", path="a.txt", content="\ud800"),
    "write_file: a lone surrogate in the path": call("write_file", path="a\ud800", content="x"),
    "read_file: a lone surrogate in the path": call("read_file", path="a\ud800"),
    "edit: a lone surrogate in the new text": call("edit", path="document.md", old="<!-- page 1 -->", new="\udfff"),
    "list_dir: a lone surrogate in the path": call("list_dir", path="\ud800"),
    "bash: a lone surrogate in the command": call("bash", command="echo \ud800"),
    "bash: a NUL in the command": call("bash", command="echo \x00 hi"),
    "write_file: a name longer than the filesystem's": call("write_file", path="a" * 300, content="x"),
    "read_file: a name longer than the filesystem's": call("read_file", path="a" * 300),
    "write_file: a path longer than the filesystem's": call("write_file", path="a/" * 3000 + "x", content="x"),
    "edit: a name longer than the filesystem's": call("edit", path="b" * 300, old="x", new="y"),
}


@pytest.fixture(scope="module")
def verify():
    return ENV.make_verifier(None)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_call_the_tools_cannot_run_is_the_agents_error_result(pool, verify, name) -> None:
    """The attack, then a submit: the attack's step returns (its call an error result the episode goes
    on after), and the episode ends with the submit's own verdict, a fail, never infra."""
    task = build_task(random.Random(5), 1, "doc-agent-attack", "figure", pdf=False)
    env = WorkspaceEnv(ENV.workspace_spec(task), chat=CHAT, pool=pool, verify=verify, limits=AgentLimits(max_steps=3))
    env.reset(task)
    try:
        result = env.step(action(CHAT.write_tool_calls([ATTACKS[name]])))
        assert isinstance(result, StepResult) and not result.done and result.verdict is None
        if "surrogate" in name:  # refused as the call is read (strict_json): no call ran, none recorded
            assert not result.calls and "could not be read" in result.observation.text
        else:
            [record] = result.calls
            assert record.result.startswith("Error"), record.result
            json.dumps(record.to_json(), ensure_ascii=False).encode()  # the run's records are UTF-8 (records.py)
        last = env.step(action(CHAT.write_tool_calls([call("submit")])))
    finally:
        env.close()
    assert last.verdict is not None and last.verdict.outcome == "fail" and last.verdict.error_class == "format"


def test_the_argument_check_refuses_what_is_not_text() -> None:
    assert check_arguments(write_file_tool(), {"path": "a", "content": "ok \u00e9"}) is None
    assert "not text" in check_arguments(write_file_tool(), {"path": "a", "content": "\ud800"})


class _Attacker:
    """A ``Sampler`` whose k-th action (the same for every episode) is ``actions[k]``."""

    def __init__(self, actions: list[str]) -> None:
        self.actions, self.k = actions, 0

    def generate(self, prompt_ids, params):
        text = self.actions[self.k]
        self.k += 1
        return [action(text) for _ in prompt_ids]


def test_a_run_of_attacks_through_the_runner_is_scored_not_lost(pool, verify) -> None:
    """The attacks played by the runner (``run_batch``, as RL plays a model's actions) in two episodes
    of one group: both come back, scored by their own submit (a fail), none raised, none infra."""
    from posttrain.envs import EpisodeContext
    from posttrain.policy import SamplingParams
    from posttrain.rollout import Episode, run_batch

    task = build_task(random.Random(6), 1, "doc-agent-attack-run", "figure", pdf=False)
    ctx = EpisodeContext(CHAT, pool, len(ATTACKS) + 1, verify)
    runs = [Episode(task, ENV.episode_env(task, ctx), "g/attack", i) for i in range(2)]
    actions = [CHAT.write_tool_calls([a]) for a in ATTACKS.values()] + [CHAT.write_tool_calls([call("submit")])]
    trajs = run_batch(_Attacker(actions), runs, SamplingParams(max_new_tokens=100_000), max_turns=len(actions))
    for traj in trajs:
        assert [v.outcome for v in traj.verdicts] == ["fail"] and traj.cut_by is None


def test_a_name_too_long_never_drops_its_group(pool, verify) -> None:
    """With the service (RL's runner): the attack beside another episode of its group. Raised as an
    ``OSError``, the attacker's step was infra: restored and stepped again until its tries ran out,
    then its whole group dropped -- the attacker escaped its fail and took its neighbour's verdict
    with it. Both are scored now, each by its own submit."""
    from posttrain.cli import open_service
    from posttrain.envs import EpisodeContext
    from posttrain.policy import SamplingParams
    from posttrain.rollout import Episode, run_batch
    from posttrain.sched import SchedPolicy

    task = build_task(random.Random(7), 1, "doc-agent-attack-group", "figure", pdf=False)
    ctx = EpisodeContext(CHAT, pool, 3, verify)

    class _TwoPlayers:
        def __init__(self) -> None:
            self.k = 0

        def generate(self, prompt_ids, params):
            attack = ATTACKS["write_file: a name longer than the filesystem's"] if self.k == 0 else call("submit")
            self.k += 1
            return [action(CHAT.write_tool_calls([attack if i == 0 else call("submit")]))
                    for i in range(len(prompt_ids))]

    with open_service(["doc"], size=2, policy=SchedPolicy(max_tries=2, backoff_s=0.0)) as svc:
        runs = [Episode(task, ENV.episode_env(task, ctx), "g/attack", i) for i in range(2)]
        attacker, other = run_batch(_TwoPlayers(), runs, SamplingParams(max_new_tokens=100_000), max_turns=3,
                                     service=svc)
        assert svc.stats()["groups_dropped"] == 0
    for traj in (attacker, other):
        assert traj.verdicts and {v.outcome for v in traj.verdicts} == {"fail"} and traj.cut_by is None


def test_a_workspace_shut_by_its_own_chmod_stays_shut_and_fails_as_its_own(pool, verify) -> None:
    """``chmod 000 .`` in a step that also wrote holds through the snapshot the runner takes after it (each
    new layer takes the last one's mode of /work; before, the new layer came with 0755 and undid it):
    the next bash call cannot enter /work (exit status 2, the call's own result) and the submit is the
    agent's fail, never infra."""
    task = build_task(random.Random(5), 1, "doc-agent-chmod", "figure", pdf=False)
    env = WorkspaceEnv(ENV.workspace_spec(task), chat=CHAT, pool=pool, verify=verify, limits=AgentLimits(max_steps=4))
    env.reset(task)
    try:
        for command, result in (("touch made && chmod 000 .", "(no output)"), ("ls", "[exit status 2]")):
            step = env.step(action(CHAT.write_tool_calls([call("bash", command=command)])))
            assert not step.done and step.calls[0].result.strip() == result, step.calls
            env.snapshot()  # as the runner does after every step that did not end the episode
        last = env.step(action(CHAT.write_tool_calls([call("submit")])))
    finally:
        env.close()
    assert last.verdict is not None and last.verdict.outcome == "fail" and not last.verdict.is_infra_error
