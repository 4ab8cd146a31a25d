"""``BfclEnv``: one BFCL multi-turn task as a stateful tool-agent episode (the ``posttrain.envs.Env`` protocol)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from posttrain.envs._turns import ChatTurns
from posttrain.envs.bfcl._backend import BackendInfra, CallsFailed, Judgement, judge_turn, run_job
from posttrain.envs.bfcl._data import Call, bfcl_root
from posttrain.policy import ChatTemplate, tool_result_message, tool_specs
from posttrain.types import Generation, Observation, StepResult, Task, Verdict

MAX_STEPS_PER_TURN = 20
"""BFCL's ``MAXIMUM_STEP_LIMIT``: a turn with more steps that call tools is force-quit (the task fails)."""
EVIDENCE_RESULT_CHARS = 1000
MAX_UNFINISHED_JOBS = 2
"""Backend jobs of one episode that may not finish (timeout, memory, a state too large) before the
episode ends, failed. Each holds a sandbox slot for up to ``JOB_TIMEOUT_S`` (20 s: a logarithm to a
billion digits): without a cap, a policy repeating such a call held a slot for every step of every
turn, up to 7 turns x 20 steps x 20 s = 47 minutes for one episode that could not pass. The first is
an error result the model may recover from (BFCL's behaviour); the second ends the episode."""


def plain_arguments(value: Any) -> Any:
    """Decoded JSON arguments as Python values the way ``json.loads`` gives them: an exact decimal
    (``parse_tool_calls`` keeps non-integers exact) becomes a float, so ``1.0`` stays a float."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, list):
        return [plain_arguments(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain_arguments(v) for k, v in value.items()}
    return value


def call_is_valid(specs: Mapping[str, Mapping[str, Any]], name: str, arguments: Mapping[str, Any]) -> bool:
    """Whether a call names a listed tool with its required parameters and no unknown one (the
    tool-call validity rate; BFCL's backends, not this check, decide what a call does).

    >>> specs = {"cd": {"type": "object", "properties": {"folder": {}}, "required": ["folder"]}}
    >>> call_is_valid(specs, "cd", {"folder": "a"}), call_is_valid(specs, "cd", {}), call_is_valid(specs, "ls", {})
    (True, False, False)
    """
    params = specs.get(name)
    if params is None:
        return False
    known = set(params.get("properties") or {})
    return set(params.get("required") or []) <= set(arguments) and (
        params.get("additionalProperties") is True or set(arguments) <= known)


class BfclEnv:
    """A BFCL multi-turn episode: each user turn, the model's tool calls run on the task's backends
    in the sandbox, state carried from step to step and turn to turn (package docstring).

    ``reset`` renders the first user turn with the task's tools through ``chat``; each ``step``
    parses the action's calls in the template's family. Calls: they run (one sandbox job) and their
    results come back as tool messages. No call (a final answer), or calls that cannot be decoded
    (BFCL's "failed to decode: proceed to next turn"): the turn ends, is judged against the ground
    truth's turn, and the next user message follows; after the last turn the episode is done with
    its verdict. A turn with more than ``max_steps_per_turn`` calling steps ends the episode, failed,
    and so does the ``MAX_UNFINISHED_JOBS``-th backend job that does not finish (its calls' or its
    state's doing: a timeout, the memory limit),
    so an episode takes at most user turns x (``max_steps_per_turn`` + 1) actions (``episode_actions``
    of the domain: the runner's cap follows from it).

    Every call and result is in ``records`` and in the final verdict's evidence (``calls``: turn,
    step, name, arguments, result cut at ``EVIDENCE_RESULT_CHARS``; ``turns``: each turn's outcome;
    ``invalid_actions``: responses whose calls could not be decoded; ``tool_calls``: calls made and
    valid ones, ``call_is_valid``, for the tool-call validity rate). A sandbox failure (not the
    calls') ends the episode with an infra-error verdict (reward NaN, never 0).

    >>> # env = BfclEnv(pool, ChatTemplate(policy.tokenizer)); obs = env.reset(task)
    """

    def __init__(self, pool: Any, chat: ChatTemplate, *, root: str | Path | None = None,
                 max_steps_per_turn: int = MAX_STEPS_PER_TURN) -> None:
        if max_steps_per_turn < 1:
            raise ValueError(f"max_steps_per_turn must be >= 1, got {max_steps_per_turn}")
        self.pool, self.chat, self.root = pool, chat, bfcl_root(root)
        self.max_steps_per_turn = max_steps_per_turn
        self.task: Task | None = None

    def reset(self, task: Task) -> Observation:
        self.task = task
        self.tools: list[dict[str, Any]] = list(task.fields["tools"])
        self.turns = ChatTurns(self.chat, task.fields["turns"][0], tools=self.tools)
        self.turn, self.steps, self.called = 0, 0, False
        self.model_state: bytes | None = None  # opaque pickles, made and read only in the sandbox
        self.truth_state: bytes | None = None
        self.results: list[str] = []  # every result of the episode, for BFCL's response check
        self.records: list[dict[str, Any]] = []
        self.invalid_actions = 0
        self.unfinished = 0  # backend jobs that did not finish (MAX_UNFINISHED_JOBS)
        self.calls_made = self.calls_valid = 0  # the tool-call validity rate (call_is_valid)
        self.specs = tool_specs(self.tools)
        self.judgement = Judgement()
        return Observation(tuple(self.turns.prompt_ids()), task.fields["turns"][0][-1]["content"])

    def step(self, action: Generation) -> StepResult:
        task = self.task
        if task is None:
            raise RuntimeError("BfclEnv.step before reset")
        parse = self.chat.parse_tool_calls(action.text)
        self.turns.act(action, self.chat.assistant_message(parse) if parse.ok else None)
        try:
            if parse.ok and parse.calls:
                return self._run_calls(action, [Call(c.name, plain_arguments(dict(c.arguments))) for c in parse.calls])
            self.invalid_actions += not parse.ok
            self.calls_made += not parse.ok  # a response whose calls cannot be decoded: one invalid call
            return self._end_turn(action)
        except BackendInfra as e:
            return StepResult(Observation(()), Verdict.infra(str(e)), True)

    def _run_calls(self, action: Generation, calls: list[Call]) -> StepResult:
        self.steps += 1
        if self.steps > self.max_steps_per_turn:
            self.judgement.add(self.turn, ("step_limit", f"turn {self.turn + 1}: more than {self.max_steps_per_turn} "
                                                         "steps with tool calls (BFCL force-quits the task)"))
            return StepResult(Observation(()), self._verdict(), True)
        assert self.task is not None
        ended = False
        try:
            job = run_job(self.pool, self.root, self.task, [{"kind": "calls", "calls": [c.to_json() for c in calls]}],
                          model_state=self.model_state, dump=True)
            results = job.ops[0]["results"]
            self.model_state = job.model_state
        except CallsFailed as e:  # the state stays as it was before these calls
            results = [f"Error during execution: {e}"] * len(calls)
            ended = self._unfinished_ends_episode(e)
        self.called = True
        self.results += results
        self.calls_made += len(calls)
        self.calls_valid += sum(call_is_valid(self.specs, c.name, c.arguments) for c in calls)
        for c, r in zip(calls, results, strict=True):
            self.records.append({"turn": self.turn, "step": self.steps, "name": c.name,
                                 "arguments": dict(c.arguments), "result": r[:EVIDENCE_RESULT_CHARS]})
        if ended:
            return StepResult(Observation(()), self._verdict(), True)
        new = [tool_result_message(r, tool_call_id=f"call_{i}", name=c.name)
               for i, (c, r) in enumerate(zip(calls, results, strict=True))]
        return StepResult(self._observe(action, new), None, False)

    def _end_turn(self, action: Generation) -> StepResult:
        assert self.task is not None
        truth = self.task.fields["ground_truth"][self.turn]
        try:
            job = run_job(self.pool, self.root, self.task, [{"kind": "check", "calls": truth}],
                          model_state=self.model_state, truth_state=self.truth_state, dump=True)
            self.truth_state = job.truth_state
            failure = judge_turn(self.turn, truth, self.called, self.results, job.ops[0])
        except CallsFailed as e:
            if self._unfinished_ends_episode(e):
                return StepResult(Observation(()), self._verdict(), True)
            failure = ("backend", f"turn {self.turn + 1}: {e}")
        self.judgement.add(self.turn, failure)
        self.turn, self.steps, self.called = self.turn + 1, 0, False
        turns = self.task.fields["turns"]
        if self.turn == len(turns):
            return StepResult(Observation(()), self._verdict(), True)
        new = [dict(m) for m in turns[self.turn]]
        return StepResult(self._observe(action, new), None, False)

    def _unfinished_ends_episode(self, e: CallsFailed) -> bool:
        """Count a job that did not finish; at ``MAX_UNFINISHED_JOBS`` the turn fails and the episode ends."""
        self.unfinished += 1
        if self.unfinished < MAX_UNFINISHED_JOBS:
            return False
        self.judgement.add(self.turn, ("backend", f"turn {self.turn + 1}: {self.unfinished} backend jobs of this "
                                                  f"episode did not finish (the last: {e})"))
        return True

    def _observe(self, action: Generation, new: Sequence[dict[str, Any]]) -> Observation:
        ids = self.turns.observe(new)
        return Observation(tuple(ids), "\n".join(str(m["content"]) for m in new))

    def close(self) -> None:
        """Nothing to release: each backend job runs in a fresh sandbox of the run's pool, its state
        carried as bytes here (``Env.close``)."""

    def _verdict(self) -> Verdict:
        return self.judgement.verdict({"calls": self.records, "invalid_actions": self.invalid_actions,
                                       "tool_calls": {"total": self.calls_made, "valid": self.calls_valid}})
