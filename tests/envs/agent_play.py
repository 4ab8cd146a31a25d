"""Playing scripted calls through a domain's workspace episode, as ``ScriptedAgent`` does: each call written
in the chat template's format, encoded, decoded back from its ids (what a model's action is), and stepped.

Shared by tests/envs/test_{files,doc,cad}_agent.py; the runner-level path (``posttrain eval --episodes
agent --agent NAME``) is tests/e2e/test_doc_files_cad_run.py's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.envs import get_domain
from posttrain.envs.workspace import SUBMIT, AgentLimits, WorkspaceEnv
from posttrain.policy import ChatTemplate, build_char_tokenizer
from posttrain.types import Generation, Task, ToolCallRecord, Verdict, Verifier

CHAT = ChatTemplate(build_char_tokenizer())


@dataclass
class Played:
    """What an episode gave: its verdicts (one per attempt), every call's record, whether it ended."""

    verdicts: list[Verdict]
    calls: list[ToolCallRecord]
    done: bool

    @property
    def first(self) -> Verdict:
        return self.verdicts[0]


def call(name: str, **arguments: object) -> dict:
    """A tool call as a scripted agent writes it."""
    return {"name": name, "arguments": arguments}


def action(text: str) -> Generation:
    ids = (*CHAT.encode(text), CHAT.eos_token_id)
    decoded = CHAT.tokenizer.decode(list(ids), skip_special_tokens=True)
    return Generation((), ids, (0.0,) * len(ids), decoded, "eos")


def play(pool: Any, task: Task, calls: Sequence[Mapping[str, Any]], verify: Verifier, *,
         max_steps: int = 40, resubmit: int = 0) -> Played:
    """Step ``calls`` (then ``resubmit`` more submits) through the task's workspace episode."""
    domain = get_domain(task.domain)
    env = WorkspaceEnv(domain.workspace_spec(task), chat=CHAT, pool=pool, verify=verify,
                       limits=AgentLimits(max_steps=max_steps))
    env.reset(task)
    out = Played([], [], False)
    try:
        for call in [*calls, *[SUBMIT] * resubmit]:
            result = env.step(action(CHAT.write_tool_calls([call])))
            out.calls += result.calls
            if result.verdict is not None:
                out.verdicts.append(result.verdict)
            if result.done:
                out.done = True
                break
    finally:
        env.close()
    return out


def play_runner(pool: Any, tasks: Sequence[Task], agent: str, verify: Verifier, *, max_steps: int = 30) -> list[Any]:
    """Each task's episode played by the scripted ``agent`` through ``run_batch`` (the runner a model's
    episodes go through; the agent tells tasks with one prompt apart by its probes): the trajectories."""
    from posttrain.envs import EpisodeContext
    from posttrain.envs.workspace import ScriptedAgent
    from posttrain.policy import SamplingParams
    from posttrain.rollout import Episode, run_batch

    ctx = EpisodeContext(CHAT, pool, max_steps, verify)
    envs = [get_domain(t.domain).episode_env(t, ctx) for t in tasks]
    try:
        return run_batch(ScriptedAgent(CHAT, tasks, agent), [Episode(t, e, f"g/{t.id}") for t, e in
                                                            zip(tasks, envs, strict=True)],
                         SamplingParams(max_new_tokens=8192), max_turns=max_steps)
    finally:
        for env in envs:
            env.close()
