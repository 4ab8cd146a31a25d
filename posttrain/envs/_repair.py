"""The repair kit: an attempt, its verdict, and after a failure the normalized feedback, until a pass.

    observation = env.reset(task)                       # the rendered prompt, as ids
    observation, verdict, done = env.step(attempt)      # fail: the feedback

An episode is at most ``task.limits.max_attempts`` attempts (``max_attempts`` overrides it); it
ends at the first pass, at an infra error (attrition: never a retry with feedback, reward NaN), or
after the last attempt. After a failed attempt the next observation is one line, encoded with
``encode_observation`` (no BOS) and appended to the sampled ids by the runner:

    FEEDBACK_HEAD + brief(verdict.feedback) + "\\n"
    e.g. "\\n# Feedback: Test failed: assert candidate(0) == 0+57\\n"

``verify/feedback.py``'s ``brief``: the verifier's normalized feedback (the failing assert with its
expected value, or the error) on one line, without its generic retry hint, so the expected value is
the last thing before the next attempt. With the hint, the test's place and a hidden-test note in
between (about 130 characters), the embedded default's SFT never learned to copy the expected value
(loss flat at what random digits cost after 600-800 steps). The prompt is not repeated: the model
answers as at its first attempt, a continuation of it.

Through the chat template (``chat``: the run's prompts are chat-rendered, ``Policy.chat``): the env
keeps the conversation (the user prompt, each attempt as an assistant message, each feedback as a
user message ``FEEDBACK_HEAD[1:] + brief(...) + "\n"``), the prompt is ``chat.render([user])`` and
each observation is ``chat.observation_ids(conversation, attempt ids, [feedback message])``: the
template's end of turn, the user turn, the generation prompt, as ids (Qwen:
``<|im_end|>\n<|im_start|>user\n# Feedback: ...\n<|im_end|>\n<|im_start|>assistant\n``, the
sampled ``<|im_end|>`` not repeated). The embedded default's template writes a later user message as
``"\n" + content`` after the assistant's ``<eos>``, with no generation prompt, so after an attempt that
ended with EOS the ids are exactly the plain-text ones above. After an attempt cut by length (or a
stop string) they differ: the template's end of turn (``<eos>``) comes first, appended and masked as
part of the observation, where the plain-text feedback follows the cut attempt directly.

Visible and hidden tests are the domain's (one mechanism, declared fields: a code task's ``test``
and ``hidden_test``): the domain's verifier runs both and shows a visible failure as is (its
expected value last), and, once the visible tests pass, only a count of the hidden ones
(``posttrain.envs.code.join_hidden``), so a response that echoes or special-cases the shown test
does not pay (docs/reward-hacking in ../shared/reference). This kit verifies each attempt once.

Feedback-only tasks (``is_feedback_only``: the tag ``feedback-only``): tasks whose answer the
prompt does not give and only a failed attempt's feedback shows (the code domain's ``repair``
family); SFT demonstrates them as repair episodes (``sft.demonstrations: repair``).

The kit: ``RepairEnv``, ``VerdictCache`` (a verdict per (task id, response), computed once) and
``verify_with_retries`` (the retry rule of a verification outside the service). A domain's own
episodes may use it (``HasEpisodes``); ``posttrain.rollout.episodes`` builds repair episodes with it.

Not here: tool calls, sandbox workspaces carried across attempts (the code domain is stateless: each
attempt is a complete function).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from posttrain.envs._registry import model_prompt
from posttrain.envs._turns import ChatTurns
from posttrain.policy import ChatTemplate
from posttrain.types import CANARY, Generation, Observation, StepResult, Task, Verdict, Verifier
from posttrain.verify.feedback import brief

FEEDBACK_HEAD = "\n# Feedback: "


FEEDBACK_ONLY = "feedback-only"
"""The tag of a feedback-only task (module docstring)."""


def is_feedback_only(task: Task) -> bool:
    """Whether only a failed attempt's feedback shows ``task``'s answer (its tag ``feedback-only``):
    the one predicate (the scripted demonstrator, SFT's repair demonstrations, the code domain's
    ``repair`` family).

    >>> is_feedback_only(Task(id="t", domain="code", prompt="def f(x):\n", tags=("python", "feedback-only")))
    True
    """
    return FEEDBACK_ONLY in task.tags


class VerdictCache:
    """Thread-safe memo of verdicts keyed by (task id, response). Infra errors are never cached.

    ``compute`` runs a verification once for concurrent identical keys: the others wait for it.
    """

    def __init__(self) -> None:
        self._data: dict[tuple[str, str], Verdict] = {}
        self._running: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: tuple[str, str]) -> Verdict | None:
        with self._lock:
            v = self._data.get(key)
            self.hits += v is not None
            return v

    def put(self, key: tuple[str, str], verdict: Verdict) -> None:
        if not verdict.is_infra_error:
            with self._lock:
                self._data[key] = verdict

    def compute(self, key: tuple[str, str], verify: Callable[[], Verdict]) -> Verdict:
        while True:
            with self._lock:
                if (v := self._data.get(key)) is not None:
                    self.hits += 1
                    return v
                running = self._running.get(key)
                if running is None:
                    self._running[key] = threading.Event()
                    break
            running.wait()  # then look again: an infra error was not cached, so this one verifies
        try:
            verdict = verify()
            self.put(key, verdict)
            return verdict
        finally:
            with self._lock:
                self._running.pop(key).set()


def verify_with_retries(verify: Verifier, task: Task, response: str, *, infra_retries: int) -> Verdict:
    """``verify`` once, and again while the verdict is an infra error, ``infra_retries`` times at most.
    A persisting infra error stays one (reward NaN): never scored 0 or 1."""
    verdict = verify(task, response)
    for _ in range(infra_retries):
        if not verdict.is_infra_error:
            break
        verdict = verify(task, response)
    return verdict


class RepairEnv:
    """A repair episode over a domain verifier: attempts until one passes or attempts run out, or a
    fail whose feedback would give the answer away (``Verdict.ends_repair``: a wrong yes/no) ends it.

    ``chat``: prompts and feedback through the chat template (module docstring); ``encode_prompt``
    and ``encode_observation`` are then unused.

    >>> # env = RepairEnv(verifier, policy.encode_prompt, encode_observation, chat=policy.chat)
    """

    def __init__(
        self,
        verify: Verifier,
        encode_prompt: Callable[[str], list[int]],
        encode_observation: Callable[[str], list[int]],
        *,
        chat: ChatTemplate | None = None,
        render: Callable[[Task], str] | None = None,
        max_attempts: int | None = None,
        infra_retries: int = 2,
        cache: VerdictCache | None = None,
    ) -> None:
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"RepairEnv: max_attempts must be >= 1, got {max_attempts}")
        self.verify, self.encode_prompt, self.encode_observation = verify, encode_prompt, encode_observation
        self.chat, self.render, self.max_attempts = chat, render, max_attempts
        self.infra_retries, self.cache = infra_retries, cache
        self.task: Task | None = None
        self.attempts = 0
        self.turns: ChatTurns | None = None  # the conversation so far (chat only)

    def _prompt(self, task: Task) -> str:
        return self.render(task) if self.render is not None else model_prompt(task)

    def reset(self, task: Task) -> Observation:
        self.task, self.attempts = task, 0
        text = self._prompt(task)
        if self.chat is None:
            return Observation(tuple(self.encode_prompt(text)), text)
        self.turns = ChatTurns(self.chat, [{"role": "user", "content": text}])
        return Observation(tuple(self.turns.prompt_ids()), text)

    def step(self, action: Generation) -> StepResult:
        task = self.task
        if task is None:
            raise RuntimeError("RepairEnv.step before reset")
        self.attempts += 1
        verdict = self.judge(task, action.text)
        limit = self.max_attempts if self.max_attempts is not None else task.limits.max_attempts
        if (verdict.passed or verdict.is_infra_error or verdict.ends_repair or self.attempts >= limit
                or CANARY in task.tags):  # (a canary is never repaired: posttrain.types.CANARY)
            return StepResult(Observation(()), verdict, True)
        text = FEEDBACK_HEAD + brief(verdict.feedback) + "\n"
        if self.chat is None or self.turns is None:
            return StepResult(Observation(tuple(self.encode_observation(text)), text), verdict, False)
        self.turns.act(action)
        ids = self.turns.observe([{"role": "user", "content": text.removeprefix("\n")}])  # the template separates turns
        return StepResult(Observation(tuple(ids), self.chat.tokenizer.decode(ids)), verdict, False)

    @property
    def attempts_left(self) -> int:
        """The attempts this episode may still make (``rollout.CountsAttempts``: the runner's ``feedback_overflow``)."""
        if self.task is None:
            return 0
        limit = self.max_attempts if self.max_attempts is not None else self.task.limits.max_attempts
        return max(limit - self.attempts, 0)

    def close(self) -> None:
        """Nothing to release: the verifier it calls is the run's (``Env.close``)."""

    def judge(self, task: Task, response: str) -> Verdict:
        """The verdict of one attempt (the domain's verifier: visible and hidden tests its own)."""
        def run() -> Verdict:
            return verify_with_retries(self.verify, task, response, infra_retries=self.infra_retries)

        return run() if self.cache is None else self.cache.compute((task.id, response), run)
