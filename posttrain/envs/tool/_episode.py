"""``ToolEpisodeEnv``: a tool task as a multi-turn tool-calling episode (the ``posttrain.envs.Env`` protocol).

    env = ToolEpisodeEnv(ChatTemplate(policy.tokenizer), max_steps=3)   # one per episode
    traj = run_episode(sampler, Episode(task, env, group_id), params, max_turns=3, max_tokens=512)

The conversation is kept by ``posttrain.envs.ChatTurns``.

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
actions follows from the tasks (``posttrain.rollout.episodes.episode_turns``), so that each episode
ends by its environment's limits.

Verdict: the valid calls the episode made, in order, must match the task's ``expected_calls``
one-to-one (``match_calls``: in order if ``ordered``, values compared type-strictly). Invalid calls
never ran, so they do not count against the match; they count in the tool-call validity rate. An
abstention task (``expected_calls: []``) passes only when no call was attempted at all (invalid
ones count against it, and so does a final answer that writes a call in another family's format) and the episode ended with a final answer that says something
(``_calls.abstention``).
Evidence: ``calls`` (step, name, arguments, result, valid), ``tool_calls`` (``{"total", "valid"}``:
a response whose calls cannot be decoded counts as one invalid call), ``invalid_actions``,
``ended`` (``answer`` or ``step_limit``). A worker pool that cannot run (starved, no worker) ends
the episode with an infra-error verdict (reward NaN, never 0).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from posttrain.envs._base import fail, passed
from posttrain.envs._turns import ChatTurns
from posttrain.envs.tool import _calls
from posttrain.envs.tool._calls import CPU_BUDGET_S, NAME, match_calls
from posttrain.policy import ChatTemplate, ToolCall, tool_result_message
from posttrain.strict_json import to_exact, to_plain
from posttrain.types import Generation, Observation, StepResult, Task, Verdict
from posttrain.verify._deadline import CheckPool, shared_pool

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
        self.turns = ChatTurns(self.chat, [{"role": "user", "content": task.prompt}], tools=self.tools)
        self.steps = 0
        self.made: list[ToolCall] = []  # valid calls, in order: what the verdict judges
        self.records: list[dict[str, Any]] = []
        self.total = self.valid = self.invalid_actions = 0
        return Observation(tuple(self.turns.prompt_ids()), task.prompt)

    def step(self, action: Generation) -> StepResult:
        if self.task is None:
            raise RuntimeError("ToolEpisodeEnv.step before reset")
        self.steps += 1
        parse = self.chat.parse_tool_calls(action.text)
        self.turns.act(action, self.chat.assistant_message(parse))
        if parse.ok and not parse.calls:
            return StepResult(Observation(()), self._verdict("answer", action.text), True)
        if not parse.ok:
            self.invalid_actions += 1
            self.total += 1
            new = [{"role": "user", "content": f"Your tool call could not be read: {parse.error}"}]
        else:
            problems = self._problems(action.text, len(parse.calls))
            if isinstance(problems, Verdict):
                return StepResult(Observation(()), problems, True)
            new = [self._run(call, why, i) for i, (call, why) in enumerate(zip(parse.calls, problems, strict=True))]
        if self.steps >= self.max_steps:
            return StepResult(Observation(()), self._verdict("step_limit"), True)
        ids = self.turns.observe(new)
        return StepResult(Observation(tuple(ids), "\n".join(m["content"] for m in new)), None, False)

    def close(self) -> None:
        """Nothing to release: the check workers are shared (``Env.close``)."""

    def _problems(self, response: str, n: int) -> list[str | None] | Verdict:
        """Each call's problem, from the worker pool; an infra error is the episode's verdict."""
        pool = self.pool or shared_pool(_calls.__name__, cpu_budget_s=CPU_BUDGET_S)
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

    def _verdict(self, ended: str, answer: str | None = None) -> Verdict:
        assert self.task is not None
        f = self.task.fields
        evidence = {"calls": self.records, "tool_calls": {"total": self.total, "valid": self.valid},
                    "invalid_actions": self.invalid_actions, "ended": ended}
        if not f["expected_calls"]:  # abstention: every call attempted counts against it (_calls.abstention)
            return _calls.abstention(self.total, answer, evidence, self.tools)
        why = match_calls(self.made, to_exact(_calls.with_defaults(self.tools, f["expected_calls"])), f["ordered"])
        if why:
            return fail(f"Wrong tool calls: {why}.", "wrong_answer", {**evidence, "mismatch": why})
        return passed("Correct.", evidence)
