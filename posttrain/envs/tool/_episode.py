"""``ToolEpisodeEnv``: a tool task as a multi-turn tool-calling episode (the ``rollout.Env`` protocol).

    env = ToolEpisodeEnv(ChatTemplate(policy.tokenizer), max_steps=3)   # one per episode
    traj = run_episode(sampler, Episode(task, env, group_id), params, max_turns=3, max_tokens=512)

The conversation is rendered by the model's chat template: the task's prompt as the user message
and its ``tools`` as the template's tools (``ChatTemplate.render``). Each action is parsed in the
template's tool-call family (``ChatTemplate.parse_tool_calls``):

- calls: each is checked in the tool domain's worker pool, under its CPU budget (``call_problems``:
  a listed tool, arguments that satisfy its schema); a valid call runs and answers
  ``{"status": "ok", "tool": NAME}`` (the tool domain's tools have no backend: what is checked is
  which calls were made; BFCL's tasks run real backends, ``posttrain.envs.bfcl``), an invalid one
  answers ``{"error": WHY}``, so the model can correct it. The results come back as ``role: tool``
  messages, appended as ids (``ChatTemplate.observation_ids``), never re-tokenized;
- calls that cannot be decoded (malformed JSON, the other family's format): a user message names
  the problem, and the episode goes on;
- no call: the final answer. The episode ends with its verdict.

The episode also ends, judged the same way, after ``max_steps`` actions (the step limit; with
``max_steps=1`` an episode is the single-turn task: one answer, its calls judged). The runner's
token budget cuts an episode with no verdict (``Trajectory.cut_by``). The runner's own cap on
actions follows from the tasks (``action_limit``: the most any task's episode takes, its domain's
``episode_actions``), so that each episode ends by its environment's limits: a tool task's step
limit; a BFCL task's user turns, each with its own cap on steps (``posttrain.envs.bfcl.BfclEnv``).

Verdict: the valid calls the episode made, in order, must match the task's ``expected_calls``
one-to-one (``match_calls``: in order if ``ordered``, values compared type-strictly). Invalid calls
never ran, so they do not count against the match; they count in the tool-call validity rate.
Evidence: ``calls`` (step, name, arguments, result, valid), ``tool_calls`` (``{"total", "valid"}``:
a response whose calls cannot be decoded counts as one invalid call), ``invalid_actions``,
``ended`` (``answer`` or ``step_limit``). A worker pool that cannot run (starved, no worker) ends
the episode with an infra-error verdict (reward NaN, never 0).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from posttrain.envs._base import fail, passed
from posttrain.envs.tool._domain import CPU_BUDGET_S, NAME, ToolCall, match_calls
from posttrain.policy import ChatTemplate, Generation, tool_result_message
from posttrain.rollout import Env, Observation
from posttrain.types import Task, Verdict
from posttrain.verify._deadline import CheckPool, shared_pool
from posttrain.verify.strict_json import to_exact, to_plain

RESULT_CHARS = 1000
"""Evidence keeps each result up to this many characters."""


class ToolEpisodeEnv:
    """A tool-calling episode over a tool task (module docstring).

    >>> # env = ToolEpisodeEnv(ChatTemplate(policy.tokenizer), max_steps=3); obs = env.reset(task)
    """

    def __init__(self, chat: ChatTemplate, *, max_steps: int = 4, pool: CheckPool | None = None) -> None:
        if max_steps < 1:
            raise ValueError(f"ToolEpisodeEnv: max_steps must be >= 1, got {max_steps}")
        self.chat, self.max_steps, self.pool = chat, max_steps, pool
        self.task: Task | None = None

    def reset(self, task: Task) -> Observation:
        self.task = task
        self.tools: list[dict[str, Any]] = list(task.fields["tools"])
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": task.prompt}]
        self.steps = 0
        self.made: list[ToolCall] = []  # valid calls, in order: what the verdict judges
        self.records: list[dict[str, Any]] = []
        self.total = self.valid = self.invalid_actions = 0
        return Observation(tuple(self.chat.render(self.messages, tools=self.tools)), task.prompt)

    def step(self, action: Generation) -> tuple[Observation, Verdict | None, bool]:
        if self.task is None:
            raise RuntimeError("ToolEpisodeEnv.step before reset")
        self.steps += 1
        parse = self.chat.parse_tool_calls(action.text)
        self.messages.append(self.chat.assistant_message(parse))
        if parse.ok and not parse.calls:
            return Observation(()), self._verdict("answer"), True
        if not parse.ok:
            self.invalid_actions += 1
            self.total += 1
            new = [{"role": "user", "content": f"Your tool call could not be read: {parse.error}"}]
        else:
            problems = self._problems(action.text, len(parse.calls))
            if isinstance(problems, Verdict):
                return Observation(()), problems, True
            new = [self._run(call, why, i) for i, (call, why) in enumerate(zip(parse.calls, problems, strict=True))]
        if self.steps >= self.max_steps:
            return Observation(()), self._verdict("step_limit"), True
        ids = self.chat.observation_ids(self.messages, action.completion_ids, new, tools=self.tools)
        self.messages += new
        return Observation(tuple(ids), "\n".join(m["content"] for m in new)), None, False

    def _problems(self, response: str, n: int) -> list[str | None] | Verdict:
        """Each call's problem, from the worker pool; an infra error is the episode's verdict."""
        pool = self.pool or shared_pool("posttrain.envs.tool._domain", cpu_budget_s=CPU_BUDGET_S)
        outcome = pool.run({"kind": "calls", "tools": self.tools, "response": response})
        if outcome.is_infra:
            return Verdict.infra(f"{NAME} checker: {outcome.detail}", error_class=f"infra:{outcome.status}")
        if outcome.status != "ok":  # the arguments made the check raise, overrun or crash: invalid calls
            return [f"the arguments could not be checked ({outcome.status})"] * n
        problems = outcome.result["problems"]
        if len(problems) != n:
            raise RuntimeError(f"tool checker: {len(problems)} results for {n} calls")
        return problems

    def _run(self, call: ToolCall, problem: str | None, index: int) -> dict[str, Any]:
        """Run one call (a valid one joins the calls the verdict judges); its tool message."""
        self.total += 1
        result: Mapping[str, Any] = {"error": problem} if problem else {"status": "ok", "tool": call.name}
        if problem is None:
            self.valid += 1
            self.made.append(call)
        text = json.dumps(result)
        self.records.append({"step": self.steps, "name": call.name, "arguments": to_plain(dict(call.arguments)),
                             "result": text[:RESULT_CHARS], "valid": problem is None})
        return tool_result_message(text, tool_call_id=f"call_{index}", name=call.name)

    def _verdict(self, ended: str) -> Verdict:
        assert self.task is not None
        f = self.task.fields
        evidence = {"calls": self.records, "tool_calls": {"total": self.total, "valid": self.valid},
                    "invalid_actions": self.invalid_actions, "ended": ended}
        why = match_calls(self.made, to_exact(list(f["expected_calls"])), f["ordered"])
        if why:
            return fail(f"Wrong tool calls: {why}.", "wrong_answer", {**evidence, "mismatch": why})
        return passed("Correct.", evidence)


def tool_episode_envs(chat: ChatTemplate, *, max_steps: int, pool: Any | None = None
                      ) -> Callable[[Task], Env]:
    """A factory of tool-calling episodes (``EpisodeSpec.make_env``): each task's domain builds its
    own (``env.episode_env(chat, pool=..., max_steps=...)``: ``ToolEpisodeEnv`` for tool tasks,
    ``BfclEnv`` for bfcl ones, whose backends run in ``pool``)."""
    from posttrain.envs import get_env

    def make(task: Task) -> Env:
        return get_env(task.domain).episode_env(chat, pool=pool, max_steps=max_steps)

    return make


@runtime_checkable
class LimitsActions(Protocol):
    """A domain whose tool-calling episodes take more actions than the step limit: how many an episode
    of a task takes at most (bfcl: user turns x (its per-turn step cap + 1)). Without it a domain's
    episodes take at most ``max_steps`` actions (the tool domain's step limit)."""

    def episode_actions(self, task: Task, max_steps: int) -> int: ...


def action_limit(tasks: Sequence[Task], max_steps: int) -> int:
    """The runner's cap on the actions of tool-calling episodes of ``tasks`` with step limit
    ``max_steps`` (``run_batch(max_turns=)``): the most any task's domain says its episode takes
    (``LimitsActions``), so that no episode is cut by the runner before its environment's own limits
    judge it. BFCL's ``max_steps`` caps each user turn: a task of 3 user turns takes up to 3 x (cap + 1).
    Also what the recipe's position check counts."""
    from posttrain.envs import get_env

    limits = [domain.episode_actions(t, max_steps) if isinstance(domain := get_env(t.domain), LimitsActions)
              else max_steps for t in tasks]
    return max(limits, default=max_steps)


FINAL_ANSWER = "Done."
"""The demonstrations' answer with no call (it ends an episode, or a BFCL user turn)."""


def demonstration_episode(chat: ChatTemplate, task: Task, *, pool: Any | None = None) -> list[tuple[tuple[int, ...],
                                                                                                     tuple[int, ...]]]:
    """A demonstration of ``task`` as a tool-calling episode, ``(observation ids, action ids)`` per turn
    (``train.sft.demonstration_episode`` takes them): its domain's ``demonstration_steps`` written in
    the template's family, each followed by EOS, stepped through the task's own episode environment,
    so the observations (tool results, next user turns) are exactly those RL and evaluation see. An
    episode that does not end with a pass is a ``UserError`` naming the task."""
    from posttrain.envs import get_env
    from posttrain.errors import UserError

    domain = get_env(task.domain)
    steps = domain.demonstration_steps(task)
    env = domain.episode_env(chat, pool=pool, max_steps=len(steps))
    obs_ids, turns = env.reset(task).ids, []
    for i, calls in enumerate(steps):
        text = chat.write_tool_calls(calls) if calls else FINAL_ANSWER
        ids = (*chat.encode(text), chat.eos_token_id)
        turns.append((obs_ids, ids))
        obs, verdict, done = env.step(Generation(obs_ids, ids, (0.0,) * len(ids), text, "eos"))
        if done:
            if i + 1 < len(steps) or verdict is None or not verdict.passed:
                why = "no verdict" if verdict is None else f"{verdict.outcome}: {verdict.feedback[:200]}"
                raise UserError(f"sft.demonstrations: task {task.id!r}: its tool-calling demonstration does not "
                                f"pass ({why})")
            return turns
        obs_ids = obs.ids
    raise UserError(f"sft.demonstrations: task {task.id!r}: its tool-calling demonstration did not end")


def has_tool_episodes(domain: str) -> bool:
    """Whether ``domain`` runs tool-calling episodes (its ``Env`` has ``episode_env``)."""
    from posttrain.envs import get_env

    return callable(getattr(get_env(domain), "episode_env", None))
