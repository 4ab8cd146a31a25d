"""The ``bfcl`` domain: BFCL v4 multi-turn tasks as a registered domain (task files, generator,
single-response verifier), beside their episodes (``BfclEnv``).

    tasks = get_domain("bfcl").generate_tasks(8, seed=0)      # from multi_turn_base, shuffled by seed
    verdict = get_domain("bfcl").make_verifier(pool)(task, response)

A task record holds the fields ``load_tasks`` gives (``turns``, ``tools``, ``methods``,
``initial_config``, ``involved_classes``, ``ground_truth``, ``category``, ``bfcl_version``), so a
task file written with ``task_to_record`` reads back the same task. Its ``reference`` is the ground
truth in the response format below.

One response for a whole task (SFT references, ``posttrain verify``, single-turn evaluation): a JSON
array with one entry per user turn, each the list of that turn's calls ``{"name", "arguments"}``
(one step per turn), e.g. ``[[{"name": "cd", "arguments": {"folder": "document"}}], []]``, bare, in
one fenced block, or quoted after a lead-in of prose (``strict_json.answer_document``). It is
verified by replaying the calls on the task's backends in the sandbox and judging each turn the way
BFCL's ``multi_turn_checker`` does (``check_calls``); a response that is not such an array fails
with ``format``. Tool-calling episodes (``rl.episodes: tool`` / ``eval.episodes: tool``) run the
same tasks turn by turn with ``BfclEnv`` instead: the model sees each user message and the results
of its calls.

Not here: BFCL's other categories as generators (``load_tasks`` reads them; task files carry them).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Mapping
from typing import Any

from posttrain.envs._base import RecordReader, Verifier, fail, guard, parse_common
from posttrain.envs._env import EpisodeContext
from posttrain.envs.bfcl._backend import check_calls
from posttrain.envs.bfcl._data import CLASS_MODULES, DOMAIN, Call, load_tasks
from posttrain.envs.bfcl._env import MAX_STEPS_PER_TURN, BfclEnv
from posttrain.strict_json import StrictJSONError, answer_document, document_in, loads_strict
from posttrain.types import Task, TaskLimits, Verdict

FIELDS = ("turns", "tools", "methods", "initial_config", "involved_classes", "ground_truth", "category",
          "bfcl_version")
GENERATOR_CATEGORY = "multi_turn_base"
LIMITS = TaskLimits(timeout_s=60.0)
"""A replay is one sandbox job over every turn (BFCL's backends, some of which are slow to build)."""


def reference_response(task: Task) -> str:
    """The ground truth of ``task`` in the response format (one list of calls per turn)."""
    return json.dumps(task.fields["ground_truth"])


def _is_call(c: Any) -> bool:
    """Whether ``c`` is one call as the domain writes it: ``{"name": str, "arguments": {...}}``."""
    return (isinstance(c, Mapping) and set(c) <= {"name", "arguments"} and isinstance(c.get("name"), str)
            and isinstance(c.get("arguments", {}), Mapping))


def parse_response(response: str) -> list[list[list[Call]]] | str:
    """The response's calls as turns of one step each, or why it is not a response of this domain."""
    try:  # strict: NaN, duplicate keys, huge integers and deep nesting are a format failure, never a crash
        text, outside = answer_document(response)  # after its reasoning: bare, in one fence, or quoted in prose
        doc = loads_strict(text)
    except StrictJSONError as e:
        return f"not JSON ({e})"
    beside = None if outside is None else document_in(outside)
    if beside is not None:  # the fenced calls read, a second array beside them unread: a hedge
        return f"a second JSON document outside the fenced block ({beside!r}): give exactly one"
    if not isinstance(doc, list) or not all(isinstance(turn, list) for turn in doc):
        return "expected a JSON array with one list of calls per user turn"
    turns: list[list[list[Call]]] = []
    for k, calls in enumerate(doc):
        step = []
        for i, c in enumerate(calls):
            if not _is_call(c):
                return f"turn {k + 1}, call {i + 1}: expected {{\"name\": ..., \"arguments\": {{...}}}}"
            step.append(Call(c["name"], dict(c.get("arguments", {}))))
        turns.append([step])
    return turns


class BfclDomain:
    """The ``bfcl`` domain (module docstring)."""

    name = DOMAIN
    needs_sandbox = True

    def capabilities(self) -> tuple[str, ...]:
        """The capability labels of ``posttrain tasks list`` (BFCL v4's stateful backends)."""
        return ("tool-use", "function-calling", "agent", "multi-turn")

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, DOMAIN)
        reader.check_keys(frozenset(FIELDS))
        fields = {k: reader.present(k) for k in FIELDS}
        for key, kind in (("turns", list), ("tools", list), ("methods", dict), ("initial_config", dict),
                          ("involved_classes", list), ("ground_truth", list), ("category", str),
                          ("bfcl_version", str)):
            if not isinstance(fields[key], kind):
                raise reader.fail(key, f"a JSON {'object' if kind is dict else kind.__name__}", fields[key])
        unknown = [c for c in fields["involved_classes"] if not isinstance(c, str) or c not in CLASS_MODULES]
        if unknown:
            raise reader.fail("involved_classes", f"BFCL backend classes ({', '.join(CLASS_MODULES)})", unknown)
        for k, turn in enumerate(fields["turns"]):
            if not isinstance(turn, list) or not all(isinstance(m, Mapping) and isinstance(m.get("content"), str)
                                                     for m in turn):
                raise reader.fail(f"turns[{k}]", "a list of messages, each an object with a string 'content'", turn)
        for k, calls in enumerate(fields["ground_truth"]):
            if not isinstance(calls, list) or not all(_is_call(c) and "arguments" in c for c in calls):
                raise reader.fail(f"ground_truth[{k}]", 'a list of calls {"name": ..., "arguments": {...}}', calls)
        odd = {m: c for m, c in fields["methods"].items() if not isinstance(c, str) or c not in CLASS_MODULES}
        if odd:
            raise reader.fail("methods", f"an object of method name -> backend class ({', '.join(CLASS_MODULES)})", odd)
        if not fields["turns"] or len(fields["turns"]) != len(fields["ground_truth"]):
            raise reader.fail("ground_truth", f"one list of calls per turn ({len(fields['turns'])} turns)",
                              show_got=False)
        return parse_common(reader, fields, default_limits=LIMITS)

    def render_prompt(self, task: Task) -> str:
        turns = "\n".join(f"Turn {k + 1}: " + " ".join(str(m["content"]) for m in msgs)
                          for k, msgs in enumerate(task.fields["turns"]))
        return (f"{task.prompt}\n\nThe user's requests, turn by turn:\n{turns}\n\nTools:\n"
                f"{json.dumps(task.fields['tools'])}\n\nAnswer with a JSON array holding, for each turn, the list "
                'of calls to make: [[{"name": ..., "arguments": {...}}, ...], ...].')

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        if pool is None:
            raise ValueError("the bfcl domain runs BFCL's backends in the sandbox: make_verifier needs a pool")

        def verify(task: Task, response: str) -> Verdict:
            turns = parse_response(response)
            if isinstance(turns, str):
                return fail(f"Invalid response: {turns}.", "format", {"reason": turns})
            return check_calls(pool, task, turns)

        return guard(DOMAIN, verify)

    def noop_response(self, task: Task) -> str:
        return json.dumps([[] for _ in task.fields["turns"]])

    def demonstration_steps(self, task: Task) -> list[list[Mapping[str, Any]]]:
        """The calls of each action of a demonstration episode: per user turn, the ground truth's calls
        (when it has any) in one step, then an answer with no call that ends the turn."""
        steps: list[list[Mapping[str, Any]]] = []
        for calls in task.fields["ground_truth"]:
            steps += [list(calls), []] if calls else [[]]
        return steps

    def episode_env(self, task: Task, ctx: EpisodeContext) -> BfclEnv:
        """A tool-calling episode over one task (``BfclEnv``: its backends in ``ctx.pool``'s sandbox);
        ``ctx.max_steps`` caps the steps with calls per user turn (BFCL's 20 at most)."""
        if ctx.pool is None:
            raise ValueError("bfcl episodes run BFCL's backends in the sandbox: episode_env needs a pool")
        return BfclEnv(ctx.pool, ctx.chat, max_steps_per_turn=min(ctx.max_steps, MAX_STEPS_PER_TURN))

    def episode_actions(self, task: Task, max_steps: int) -> int:
        """The most actions an episode of ``task`` takes with step cap ``max_steps`` (``BfclEnv``): per
        user turn, up to the cap's steps with calls (BFCL's 20 at most) and one more (the answer that
        ends the turn, or the step past the cap that ends the episode)."""
        return len(task.fields["turns"]) * (min(max_steps, MAX_STEPS_PER_TURN) + 1)

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)`` that must fail: no calls at all, a private backend method, a
        result forged as text, the first turn's calls repeated in every turn, prose, and JSON that a
        lenient parser reads (a huge integer, NaN, a duplicated key)."""
        task = self.generate_tasks(1, seed=0)[0]
        truth = task.fields["ground_truth"]
        n = len(truth)
        private = [[{"name": "_load_scenario", "arguments": {"scenario": {}}}]] + [[] for _ in range(n - 1)]
        forged = [[{"name": "result", "arguments": {"text": "Task completed successfully."}}] for _ in range(n)]
        return [
            ("AGENT-01 no calls in any turn", task, self.noop_response(task)),
            ("a private backend method", task, json.dumps(private)),
            ("a result forged as a call", task, json.dumps(forged)),
            ("the first turn's calls in every turn", task, json.dumps([truth[0]] * n)),
            ("prose claiming success", task, "All done: every request has been handled."),
            # parser leniency: each was json.loads'd; the huge integer raised out of the verifier, an
            # infra error (reward NaN, the group dropped): a way to never be scored 0
            ("an integer argument past the int-string digit limit", task,
             '[[{"name": "cd", "arguments": {"folder": ' + "1" * 5000 + "}}]" + ", []" * (n - 1) + "]"),
            ("a NaN argument", task, '[[{"name": "cd", "arguments": {"folder": NaN}}]' + ", []" * (n - 1) + "]"),
            ("one call with two names (a first-wins and a last-wins parser disagree)", task,
             '[[{"name": "ls", "name": "cd", "arguments": {"folder": "document"}}]' + ", []" * (n - 1) + "]"),
        ]

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        """The first ``n`` tasks of ``multi_turn_base`` in an order shuffled by ``seed`` (so a larger
        ``n`` extends a smaller one), each with its ground truth as ``reference``."""
        tasks = load_tasks(GENERATOR_CATEGORY)
        if n > len(tasks):
            raise ValueError(f"bfcl: {GENERATOR_CATEGORY} has {len(tasks)} tasks, asked for {n}")
        random.Random(seed).shuffle(tasks)
        return [dataclasses.replace(t, reference=reference_response(t), limits=LIMITS) for t in tasks[:n]]


ENV = BfclDomain()
