"""The frozen dataclasses that cross stage boundaries.

Everything a stage hands to the next one is defined here, so that every package can import it
without importing each other (DESIGN.md: ``types`` <- everything else). Tensors never travel in
these types; a trainer builds its own tensor batch (see ``posttrain.train``).

- ``Task``: data (initial state, goal, validator fields), built by a domain's parser.
- ``Verdict``: what a verifier says of one response: pass / fail / infra_error, never a silent 0.
- ``Rollout``: one sampled completion, token-exact, with its sampling logprobs and its verdict.
- ``Trajectory``: one episode, token-exact: turns of (observation ids from the environment, action
  ids sampled, their logprobs), a verdict per attempt, the final reward (docs/contracts.md).
- ``Generation``: one completion exactly as a ``Sampler`` sampled it (``posttrain.policy``).
- ``ToolCallRecord``: one tool call an episode's environment ran, its result and its time.
- ``Observation`` and ``StepResult``: what an episode's environment (``posttrain.envs.Env``) inserts
  into the context and what one step of it gives back, between the runner and the service.
- ``Verifier`` and ``BatchVerifier``: the one verifier signature, and a domain's batching hook.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

Outcome = Literal["pass", "fail", "infra_error"]
FinishReason = Literal["stop", "length"]
StopReason = Literal["eos", "stop", "length"]
"""Why sampling of one completion stopped: its EOS token, a stop string, or ``max_new_tokens``."""
CutBy = Literal["max_turns", "max_tokens", "feedback_overflow"]
"""The runner's limit that ended an episode before its environment said done (``Trajectory.cut_by``)."""

T = TypeVar("T")


CANARY = "canary"
"""The tag of a canary task: no honest response passes it (``posttrain.tasks._canary``: a pass is a hack
alarm). Its episodes end at the first attempt, whatever attempts are left: a repair's feedback describes
where the answer departs from the gold, which on a canary is the planted contradiction (a files canary's
"missing key 'canary'"), so an honest policy following it could pass: a false alarm."""


@dataclass(frozen=True)
class TaskLimits:
    """Per-task limits. The sandbox enforces time and memory; the rollout enforces attempts."""

    timeout_s: float = 10.0
    """Wall-clock limit for one verification run, in seconds."""
    memory_mb: int = 512
    """Memory limit (cgroup, with swap) for one verification run."""
    max_attempts: int = 1
    """How many attempts (first try + repair rounds) an episode may take."""


@dataclass(frozen=True)
class Task:
    """A task is data: a goal the model sees, the domain fields its verifier needs, and limits.

    ``fields`` holds the domain's own fields (``answer`` for math; ``entry_point`` and ``test``
    for code; ...), validated by the domain's parser when the task is loaded (docs/tasks.md).
    Read them through the domain module's typed accessor, not by key here and there.

    >>> t = Task(id="m1", domain="math", prompt="1+1=", fields={"answer": "2"})
    >>> t.fields["answer"]
    '2'
    """

    id: str
    domain: str
    prompt: str
    fields: Mapping[str, Any]
    reference: str | None = None
    """A reference response (the raw text a perfect model would write); it must score 1."""
    difficulty: float | None = None
    tags: tuple[str, ...] = ()
    limits: TaskLimits = field(default_factory=TaskLimits)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Escape hatch for provenance; required information never goes here."""

    def metadata_as(self, cls: type[T]) -> T:
        """Read ``metadata`` as a typed object (inspect ``Sample.metadata_as``)."""
        return cls(**self.metadata)


@dataclass(frozen=True)
class Verdict:
    """What a verifier says of one response.

    ``reward`` is in [0, 1] for ``pass``/``fail`` and NaN for ``infra_error``: an infrastructure
    failure is never scored 0 and never 1 (DESIGN.md, "three outcomes, never two"). ``components``
    holds the named reward components before weighting (outcome, format, ...), each logged apart.

    >>> Verdict(outcome="pass", reward=1.0).passed
    True
    >>> Verdict.infra("sandbox did not start").is_infra_error
    True
    """

    outcome: Outcome
    reward: float
    feedback: str = ""
    """Normalized text the model reads before its next attempt (verify/feedback.py)."""
    error_class: str | None = None
    """A short class name: syntax, import, assertion, exception:<Type>, timeout, memory, format, ..."""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    """What was checked, with values (extracted answer, tests run and their outcomes, nonce ok, ...)."""
    components: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.outcome not in ("pass", "fail", "infra_error"):
            raise ValueError(f"Verdict.outcome must be pass|fail|infra_error, got {self.outcome!r}")
        if self.outcome == "infra_error":
            if not math.isnan(self.reward):
                raise ValueError("an infra_error verdict carries reward NaN, never a number")
        elif not (0.0 <= self.reward <= 1.0):
            raise ValueError(f"Verdict.reward must be in [0, 1], got {self.reward!r}")

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def is_infra_error(self) -> bool:
        return self.outcome == "infra_error"

    @property
    def ends_repair(self) -> bool:
        """A fail whose feedback would give the answer away (``evidence["final"]``: a wrong yes/no,
        where "wrong" names the other): no repair attempt follows it, whatever attempts are left."""
        return self.outcome == "fail" and self.evidence.get("final") is True

    @staticmethod
    def infra(detail: str, *, error_class: str = "infra", evidence: Mapping[str, Any] | None = None) -> Verdict:
        """An infrastructure failure: retried by the caller, and if it persists, dropped.

        ``detail`` is the message, ``evidence["detail"]``: it wins over a ``detail`` in ``evidence``
        (which the message quotes where it matters), so that "task X: gold ... is not parseable"
        reaches the report instead of only the parse error under it.

        >>> Verdict.infra("task t: gold is not parseable (E)", evidence={"detail": "E"}).evidence["detail"]
        'task t: gold is not parseable (E)'
        """
        return Verdict(
            outcome="infra_error",
            reward=float("nan"),
            feedback="",
            error_class=error_class,
            evidence={**(evidence or {}), "detail": detail},
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict: NaN reward becomes ``None``."""
        return {
            "outcome": self.outcome,
            "reward": None if math.isnan(self.reward) else self.reward,
            "feedback": self.feedback,
            "error_class": self.error_class,
            "evidence": dict(self.evidence),
            "components": dict(self.components),
        }


@dataclass(frozen=True)
class Rollout:
    """One sampled completion, exactly as sampled: token ids and their sampling logprobs."""

    task_id: str
    sample_idx: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    """log pi_behaviour(token) of each completion token, at the sampling temperature."""
    text: str
    finish_reason: FinishReason
    verdict: Verdict | None = None
    attempt: int = 0
    """Repair round: 0 for the first attempt."""


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call an episode's environment ran (or refused), for records and the report's viewer.

    >>> ToolCallRecord("bash", {"command": "ls"}, "a.py", True, 0.05).ok
    True
    """

    name: str
    arguments: Mapping[str, Any]
    result: str
    """What the model was shown (normalized, cut)."""
    ok: bool
    """A valid call (a known tool, arguments it accepts) that ran; False for a refused one."""
    seconds: float
    """Wall time the call took in the environment (a ``submit``: its verification included)."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments), "result": self.result, "ok": self.ok,
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class Turn:
    """One turn of an episode: what the environment inserted, then what the model sampled after it."""

    observation_ids: tuple[int, ...]
    """Token ids the environment inserted before the action (turn 0: the prompt). Never trained on."""
    action_ids: tuple[int, ...]
    """Token ids sampled by the model, exactly as sampled (never decoded and re-encoded)."""
    logprobs: tuple[float, ...]
    """log pi_behaviour of each action id, under the distribution sampled."""
    stop_reason: StopReason
    verdict: Verdict | None = None
    """The verdict on this action when it was an attempt at the task; None for other steps (a tool call)."""
    text: str = ""
    """The action decoded, as the environment read it (for records; never re-tokenized)."""
    calls: tuple[ToolCallRecord, ...] = ()
    """The tool calls the environment ran for this action, with their results and times (``StepResult.calls``)."""

    def __post_init__(self) -> None:
        if len(self.logprobs) != len(self.action_ids):
            raise ValueError(f"Turn: {len(self.action_ids)} action ids but {len(self.logprobs)} logprobs")


@dataclass(frozen=True)
class Trajectory:
    """One episode from sampler to trainer to evaluation record, token-exact.

    The token sequence is ``obs_0 + act_0 + obs_1 + act_1 + ...`` (``ids``); only action tokens are
    trained on (``loss_mask``), with the logprobs they were sampled with (``logprobs``, 0.0 on
    observation tokens). Groups are carried (``group_id``), never guessed back from token prefixes.

    >>> t = Trajectory(task_id="m1", group_id="step0/m1", sample_idx=0, reward=1.0,
    ...                turns=(Turn((1, 5), (7, 2), (-0.5, -0.1), "eos", Verdict("pass", 1.0)),))
    >>> t.ids, t.loss_mask, t.logprobs
    ((1, 5, 7, 2), (0, 0, 1, 1), (0.0, 0.0, -0.5, -0.1))
    """

    task_id: str
    group_id: str
    """Episodes of one GRPO group share it; unique across steps (e.g. ``"<step>/<task id>"``)."""
    sample_idx: int
    """Index of the episode within its group."""
    turns: tuple[Turn, ...]
    reward: float
    """The episode's final reward; NaN when its last attempt was an infra error."""
    truncated: bool = False
    """Cut by the length, step or token budget before the environment said done."""
    policy_version: int = 0
    """The policy that sampled it (the trainer's step count when it was sampled)."""
    cut_by: CutBy | None = None
    """The runner's limit that ended the episode before the environment said done (the step limit
    or the token budget); None when the environment ended it. A last action cut at its own
    ``max_new_tokens`` alone sets ``truncated`` but not this. ``"feedback_overflow"``: a failed
    attempt's feedback took the context or budget left, so the next attempt could not be made; the
    episode is scored on that attempt's verdict (the other cuts score the least a failure can)."""
    temperature: float | None = None
    """The temperature its actions were sampled at (the runner's ``SamplingParams``), which the
    trainer scores them at when it varies by task (``rl.adaptive_temperature``); None where nothing
    was sampled by the runner (a demonstration)."""

    def __post_init__(self) -> None:
        if not self.turns:
            raise ValueError(f"Trajectory {self.group_id}#{self.sample_idx}: an episode has at least one turn")

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return self.turns[0].observation_ids

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(i for t in self.turns for i in (*t.observation_ids, *t.action_ids))

    @property
    def loss_mask(self) -> tuple[int, ...]:
        """1 on every token the model sampled, 0 on every token the environment inserted."""
        return tuple(m for t in self.turns for m in (0,) * len(t.observation_ids) + (1,) * len(t.action_ids))

    @property
    def logprobs(self) -> tuple[float, ...]:
        return tuple(x for t in self.turns for x in ((0.0,) * len(t.observation_ids) + t.logprobs))

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """One verdict per attempt, in order."""
        return tuple(t.verdict for t in self.turns if t.verdict is not None)

    @property
    def attempts(self) -> int:
        return len(self.verdicts)


@dataclass(frozen=True)
class Generation:
    """One sampled completion of one prompt, exactly as sampled (a ``posttrain.policy.Sampler``'s output)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    """Sampled tokens; the EOS token is the last one when ``stop_reason == "eos"``."""
    logprobs: tuple[float, ...]
    """log pi(token) under the distribution sampled (temperature, top-k, top-p), one per completion id."""
    text: str
    """The completion ids decoded without special tokens."""
    stop_reason: StopReason

    @property
    def finish_reason(self) -> FinishReason:
        """``"stop"`` (EOS or a stop string) or ``"length"``: the two-way reason records keep."""
        return "length" if self.stop_reason == "length" else "stop"


@dataclass(frozen=True)
class Observation:
    """Token ids an episode's environment inserts into the context, and their text (for records only).

    >>> Observation((5, 6), "ok").ids
    (5, 6)
    """

    ids: tuple[int, ...]
    text: str = ""


@dataclass(frozen=True)
class StepResult:
    """What one step of an episode's environment gives back (``posttrain.envs.Env.step``).

    ``observation``: the ids to append after the action (empty when the episode is done);
    ``verdict``: the verdict on the action when it was an attempt at the task (a repair episode's
    every answer, a tool episode's final answer), None for other steps (a tool call); ``done``
    ends the episode.

    >>> StepResult(Observation(()), Verdict("pass", 1.0), True).done
    True
    """

    observation: Observation
    verdict: Verdict | None
    done: bool
    calls: tuple[ToolCallRecord, ...] = ()
    """The tool calls this step ran, with their results and times (the runner keeps them in ``Turn.calls``)."""


Verifier = Callable[[Task, str], Verdict]
"""One signature for every verifier: ``verifier(task, response) -> Verdict``; it never raises."""


@dataclass(frozen=True)
class BatchVerifier:
    """A domain's batching hook: verify up to ``max_batch`` pairs in one call (one sandbox job).

    ``verify_batch(pairs)`` returns one verdict per pair, in order, and never raises (its own
    failure is an ``infra_error`` verdict per pair). The execution service (``posttrain.sched``)
    uses it when a domain has ``make_batch_verifier(pool)`` (``posttrain.envs.HasBatchVerifier``).
    """

    max_batch: int
    verify_batch: Callable[[Sequence[tuple[Task, str]]], list[Verdict]]
