"""RepairEnv: an attempt, its verdict, and after a failure the normalized feedback, until a pass.

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

Visible and hidden tests: a code task whose ``metadata`` has ``visible_tests`` and ``hidden_tests``
(``check(candidate)`` sources; ``posttrain.tasks.generators.repair_tasks``) is verified twice, by
the same domain verifier: on its visible tests, then (only if they pass) on its hidden ones. The
feedback of a visible failure is the verifier's (the failing assert: its expected value); of the
hidden tests, which run only once the visible ones pass, only their count is shown. An attempt passes only when both pass, so a response that
echoes or special-cases the shown test does not pay (docs/reward-hacking in ../shared/reference).
Any other task is verified once, by its domain's verifier, and that verifier's feedback is shown
(``brief``): for a code task with a ``hidden_test`` field the count of failing hidden tests comes
first and the failing visible assert last; for a code task without one, the failing assert's line
(the task's tests count as visible).

Not here: tool calls, sandbox workspaces carried across attempts (the code domain is stateless: each
attempt is a complete function).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from posttrain.policy import ChatTemplate, Generation, Policy
from posttrain.rollout._env import Observation, VerdictCache, Verifier, render_prompt, verify_with_retries
from posttrain.types import Task, Verdict
from posttrain.verify.feedback import brief

FEEDBACK_HEAD = "\n# Feedback: "


def split_tests(task: Task) -> tuple[Task, Task, int] | None:
    """``(visible task, hidden task, number of hidden tests)`` when the task splits its tests, else None.

    The two tasks are ``task`` with ``fields.test`` replaced by the visible / hidden ``check``."""
    meta = task.metadata
    visible, hidden = meta.get("visible_tests"), meta.get("hidden_tests")
    if not (isinstance(visible, str) and isinstance(hidden, str)) or "test" not in task.fields:
        return None
    n_hidden = meta.get("n_hidden")
    count = n_hidden if isinstance(n_hidden, int) else hidden.count("assert ")

    def with_test(test: str, part: str) -> Task:
        return dataclasses.replace(task, id=f"{task.id}#{part}", fields={**task.fields, "test": test})

    return with_test(visible, "visible"), with_test(hidden, "hidden"), count


class RepairEnv:
    """A repair episode over a domain verifier: attempts until one passes or attempts run out.

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
        self.messages: list[dict[str, str]] = []  # the conversation so far (chat only)

    def _prompt(self, task: Task) -> str:
        return self.render(task) if self.render is not None else render_prompt(task)

    def reset(self, task: Task) -> Observation:
        self.task, self.attempts = task, 0
        text = self._prompt(task)
        if self.chat is None:
            return Observation(tuple(self.encode_prompt(text)), text)
        self.messages = [{"role": "user", "content": text}]
        return Observation(tuple(self.chat.render(self.messages)), text)

    def step(self, action: Generation) -> tuple[Observation, Verdict | None, bool]:
        task = self.task
        if task is None:
            raise RuntimeError("RepairEnv.step before reset")
        self.attempts += 1
        verdict = self.judge(task, action.text)
        limit = self.max_attempts if self.max_attempts is not None else task.limits.max_attempts
        if verdict.passed or verdict.is_infra_error or self.attempts >= limit:
            return Observation(()), verdict, True
        text = FEEDBACK_HEAD + brief(verdict.feedback) + "\n"
        if self.chat is None:
            return Observation(tuple(self.encode_observation(text)), text), verdict, False
        self.messages.append({"role": "assistant", "content": action.text})
        feedback = {"role": "user", "content": text.removeprefix("\n")}  # the template separates turns
        ids = self.chat.observation_ids(self.messages, action.completion_ids, [feedback])
        self.messages.append(feedback)
        return Observation(tuple(ids), self.chat.tokenizer.decode(ids)), verdict, False

    def judge(self, task: Task, response: str) -> Verdict:
        """The verdict of one attempt: visible tests, then hidden ones (only a count shown), or everything."""
        split = split_tests(task)
        if split is None:
            return self._verify(task, response)
        visible, hidden, n_hidden = split
        seen = self._verify(visible, response)
        if not seen.passed:  # the hidden tests did not run: nothing to say about them yet
            return seen
        unseen = self._verify(hidden, response)
        if unseen.passed or unseen.is_infra_error:
            return unseen
        return dataclasses.replace(unseen, feedback=f"Visible tests passed; hidden tests failed ({n_hidden} hidden "
                                                    f"tests, details not shown).")

    def _verify(self, task: Task, response: str) -> Verdict:
        def run() -> Verdict:
            return verify_with_retries(self.verify, task, response, infra_retries=self.infra_retries)

        return run() if self.cache is None else self.cache.compute((task.id, response), run)


def repair_envs(policy: Policy, verifiers: Mapping[str, Verifier], cache: VerdictCache | None = None, *,
                chat: ChatTemplate | None, max_attempts: int | None = None, infra_retries: int = 2
                ) -> Callable[[Task], RepairEnv]:
    """A factory of ``RepairEnv``s over the domains' verifiers: prompts encoded as
    ``policy.encode_prompt`` does, observations with no special tokens (appended as ids), both
    through the chat template ``chat`` when given: pass the one the policy's prompts are rendered
    with (``policy.chat``), so that every repair episode of a run sees the context its prompts
    promise (it is required: no caller can forget it);
    ``max_attempts`` overrides the tasks' own limit. ``infra_retries``: 0 when the episodes run
    through the execution service (``run_batch(service=...)`` restarts them on an infra error)."""
    def encode_observation(text: str) -> list[int]:
        return list(policy.tokenizer(text, add_special_tokens=False)["input_ids"])

    def make(task: Task) -> RepairEnv:
        return RepairEnv(verifiers[task.domain], policy.encode_prompt, encode_observation, chat=chat,
                         cache=cache, max_attempts=max_attempts, infra_retries=infra_retries)

    return make
