"""The function domain: a task's reward is your Python function of the prompt, the completion and the
task's data (TRL's ``reward_funcs``), run under the verifier contract.

Task fields (docs/tasks.md, "function"): ``prompt``; ``data`` (an object: the keyword arguments the
function gets besides ``prompt`` and ``completion``, a dataset's other columns); ``reward`` (one
``package.module:function``, or a list of them or of ``{function, weight, range}``), which a
record may leave to its recipe's top-level ``reward:`` (``default_reward``). A ``data`` that a
function cannot be called with (a keyword it requires is missing; a key it does not take, when it has
no ``**data``) is the record's ``TaskError`` at load, naming the key: otherwise every completion, the
reference included, would fail as ``raised:TypeError``.

Verification, per function of the task, each in a ``posttrain.verify._deadline`` worker that
imported it once (5 s of CPU a call, 2 GiB of address space; its own pool per function, as many
workers as the host has CPUs, started as checks come: checks that wait on their wall limit queued
on two workers past a Ray backend's wait, 9 stalls at once on one node, which dropped the group as
infra where each is the completion's fail):

- it returns a number in its declared ``range`` (default [0, 1]), a bool, or a ``Verdict``: that
  value, scaled to [0, 1] by the range;
- it raises, runs past its CPU budget (its subprocesses' CPU counts), waits past its wall limit (30 s:
  asleep on a subprocess that runs the completion, say), dies, returns NaN, infinity, a value outside
  its range, not a number, or a ``fail`` verdict with reward 1 (which would pass the task): a ``fail`` (reward 0, error class ``reward_function:<why>``), with one line that
  names the function and the task, in the feedback and once per function and reason (an exception's
  class is a reason of its own) on stderr
  (your function is broken, or a completion breaks it: either way the completion is not scored
  as if it had passed, and it cannot get itself dropped from the update as an infra error); what a
  function echoes of the completion (an exception's message, a verdict's feedback) is kept with any
  lone surrogate (``\ud800``) escaped (``strict_json.as_text``), so the run's UTF-8 records hold it;
- only the worker not starting, or starved of CPU by a loaded machine, is an ``infra_error``.

The task's reward is the weighted mean of its functions' scaled values; it passes when that is 1
(every function at the top of its range). ``components``: ``outcome`` is the reward itself, so
RL learns from a graded function as TRL does; evaluation's pass@k counts full marks.

Not here: what makes a reward function good (the ``examples`` module is a start), a sandbox for
the function itself (it is your code, run as you would run it: never ``eval`` a completion).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from posttrain.envs._base import RecordReader, Verifier, fail, guard, parse_common
from posttrain.envs._defaults import record_default, record_defaults
from posttrain.envs.function._spec import RewardTerm, as_terms, keywords, terms_json
from posttrain.errors import ConfigError
from posttrain.strict_json import as_text
from posttrain.types import Task, Verdict
from posttrain.verify._deadline import CheckPool, Outcome

NAME = "function"
DOMAIN_KEYS = frozenset({"data", "reward"})
CPU_BUDGET_S = 5.0
PASS_AT = 1.0 - 1e-9
"""The reward at which a task passes; a function's fail verdict at or above it is refused (it would pass)."""
_WORKER = "posttrain.envs.function._worker"
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = frozenset({"prompt", "completion", "prompts", "completions"})

@contextlib.contextmanager
def default_reward(terms: Sequence[RewardTerm]) -> Iterator[None]:
    """While active, function tasks whose record names no ``reward`` take ``terms`` (a recipe's
    top-level ``reward:``); the parsed tasks carry them, so a saved task file names them itself."""
    with record_defaults({NAME: {"reward": terms_json(terms)}} if terms else {}):
        yield


_pools: dict[str, CheckPool] = {}
_pools_lock = threading.Lock()


def pool_for(function: str) -> CheckPool:
    """The process-wide pool of check workers that imported ``function``."""
    from posttrain.envs.function._worker import ENV_VAR

    with _pools_lock:
        if function not in _pools:
            _pools[function] = CheckPool(_WORKER, size=max(2, os.cpu_count() or 2), cpu_budget_s=CPU_BUDGET_S,
                                         env={ENV_VAR: function})
        return _pools[function]


_told: set[tuple[str, str]] = set()
_told_lock = threading.Lock()


def _tell(function: str, why: str, line: str) -> None:
    """One stderr line per function and reason: the user's reward function is broken (or broken by
    a completion), which a fail alone would hide inside the reward curve."""
    with _told_lock:
        first = (function, why) not in _told
        _told.add((function, why))
    if first:
        print(f"posttrain: warning: {line} (scored as a fail; said once per function and reason)", file=sys.stderr)


def _value(term: RewardTerm, task: Task, out: Outcome) -> tuple[float | None, Verdict | None]:
    """``(scaled value, None)``, or ``(None, the verdict to return)`` for a refused value."""
    f, lo, hi = term.function, term.range[0], term.range[1]
    detail = as_text(out.detail)  # an exception's message may hold the completion's lone surrogate
    if out.is_infra:
        return None, Verdict.infra(f"reward function {f}: {detail}", error_class=f"infra:{out.status}")
    why, line = None, ""
    if out.status == "raised":
        why, line = f"raised:{detail.split(':', 1)[0]}", f"reward function {f} raised {detail} on task {task.id}"
        if detail.startswith("TypeError: string indices must be integers"):
            line += " (the completion is text, not chat messages: TRL's conversational c[0]['content'] does not apply)"
    elif out.status == "cpu_exceeded":
        why, line = "timeout", (f"reward function {f} used its {CPU_BUDGET_S:g} s CPU budget (its subprocesses' "
                                f"included) on task {task.id}")
    elif out.status == "stalled":
        why, line = "timeout", f"reward function {f} waited past its wall limit on task {task.id} ({detail})"
    elif out.status == "crashed":
        why, line = "crash", f"reward function {f} killed its worker twice on task {task.id}"
    elif "bad_type" in out.result:
        why, line = "type", f"reward function {f} returned {out.result['bad_type']}, not a number, on task {task.id}"
    elif "nonfinite" in out.result:
        why, line = "nan", f"reward function {f} returned {out.result['nonfinite']} on task {task.id}"
    elif "verdict" in out.result:
        v = out.result["verdict"]
        if v["outcome"] == "infra_error":
            why, line = "infra", (f"reward function {f} returned an infra_error verdict on task {task.id} (only "
                                  "posttrain reports infrastructure failures)")
        elif v["outcome"] == "fail" and float(v["reward"]) >= PASS_AT:
            why, line = "verdict", (f"reward function {f} returned a fail verdict with reward {v['reward']!r} on task {task.id} "
                                    f"(a reward of {PASS_AT!r} or more is a pass: the task would pass on a fail)")
        else:
            return float(v["reward"]), None
    else:
        x = float(out.result["value"])
        if not lo <= x <= hi:
            why, line = "range", f"reward function {f} returned {x!r} on task {task.id}, outside its range [{lo:g}, {hi:g}]"
        else:
            return (x - lo) / (hi - lo), None
    _tell(f, why, line)  # per exception class: a completion's ValueError must not hide the function's KeyError
    return None, fail(line + ".", f"reward_function:{why}", {"function": f, "detail": detail})


@functools.lru_cache(maxsize=1024)
def _cached_terms(spec: str) -> tuple[RewardTerm, ...]:
    return as_terms(json.loads(spec))


def task_terms(task: Task) -> tuple[RewardTerm, ...]:
    """The reward terms of a function task (its ``reward`` field is their JSON form)."""
    return _cached_terms(json.dumps(task.fields["reward"], sort_keys=True))


def verify_function(task: Task, response: str) -> Verdict:
    """The verdict of ``response`` on a function task (module docstring); never raises for anything
    the response or the function does."""
    terms = task_terms(task)
    request = {"prompt": task.prompt, "completion": response, "data": dict(task.fields["data"])}
    scores, evidence, feedback = [], {}, []
    for term in terms:
        out = pool_for(term.function).run(request)
        value, refused = _value(term, task, out)
        if refused is not None:
            return refused
        assert value is not None
        scores.append((term.weight, value))
        evidence[term.function] = round(value, 6)
        if "verdict" in out.result and out.result["verdict"]["feedback"]:
            feedback.append(as_text(out.result["verdict"]["feedback"]))  # it may echo a lone surrogate
    reward = sum(w * v for w, v in scores) / sum(w for w, _ in scores)
    reward = min(1.0, max(0.0, reward))
    passed = reward >= PASS_AT
    text = "\n".join(feedback) or f"Reward {reward:.3f}" + ("" if len(terms) == 1 else f" ({len(terms)} functions)")
    return Verdict(outcome="pass" if passed else "fail", reward=1.0 if passed else reward, feedback=text,
                   error_class=None if passed else "wrong_answer", evidence={"rewards": evidence},
                   components={"outcome": 1.0 if passed else reward})


def make_function_verifier() -> Verifier:
    return guard(NAME, verify_function)


def _data(reader: RecordReader) -> dict[str, Any]:
    data = reader.record.get("data", {})
    if not isinstance(data, Mapping):
        raise reader.fail("data", "an object of keyword arguments for the reward function", data)
    for key in data:
        if not isinstance(key, str) or not _IDENT_RE.fullmatch(key) or key in _RESERVED:
            raise reader.fail("data", f"keys that are Python identifiers other than {sorted(_RESERVED)}", key)
    return dict(data)


def _terms(reader: RecordReader) -> tuple[RewardTerm, ...]:
    spec = reader.record["reward"] if "reward" in reader.record else record_default(NAME, "reward")
    if spec is None:
        raise reader.fail("reward", "a reward function 'package.module:function' (or a list with weights), in "
                                    "the record or the recipe's top-level reward", show_got=False)
    try:
        return as_terms(spec)
    except ConfigError as e:
        raise reader.fail("reward", f"reward functions ({e})", show_got=False) from None


class FunctionDomain:
    """The function domain (see the module docstring)."""

    name = NAME
    needs_sandbox = False
    verdict_is_a_draw = True
    """Not a function of (task, response): a user's reward function may sample (a judge model) or run the
    completion. The service replays a pass only after three in a row (``sched.Service``)."""

    def capabilities(self) -> tuple[str, ...]:
        """The capability labels of ``posttrain tasks list`` (the user's reward function decides)."""
        return ("custom-reward",)

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        data, terms = _data(reader), _terms(reader)
        for term in terms:  # a call that cannot bind raises TypeError on every completion: the record's error
            problem = keywords(term.function).problem(list(data))
            if problem:
                raise reader.fail("data", f"keyword arguments {term.function} can be called with ({problem})",
                                  sorted(data))
        return parse_common(reader, {"data": data, "reward": terms_json(terms)})

    def render_prompt(self, task: Task) -> str:
        return task.prompt

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return make_function_verifier()

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """Responses that must score a ``fail``: hedges and sprays against ``examples``, and
        responses that break a function (``_broken``: raise, NaN, out of range, a backtracking
        pattern past the CPU budget, not a number)."""
        ex, broken = "posttrain.envs.function.examples", "posttrain.envs.function._broken"
        rows = [
            ("two answers", f"{ex}:exact_match", {"answer": "7"}, "7 or 8"),
            ("every number", f"{ex}:exact_match", {"answer": "7"}, " ".join(str(i) for i in range(20))),
            ("two boxes", f"{ex}:boxed_match", {"answer": "7"}, "\\boxed{7} \\boxed{8}"),
            ("two answers in one box", f"{ex}:boxed_match", {"answer": "7"}, "\\boxed{7, 8}"),
            ("tags without the format", f"{ex}:format_reward", {}, "<answer>7</answer>"),
            ("a completion that makes the function raise", f"{broken}:parse_int", {"answer": "7"}, "seven"),
            ("a completion that makes the function return NaN", f"{broken}:ratio", {"answer": "7"}, ""),
            ("a completion that pushes the function out of its range", f"{broken}:ratio", {"answer": "777"}, "7"),
            ("a completion that makes the function backtrack past its budget", f"{broken}:backtracking",
             {"pattern": "(a+)+$"}, "a" * 40 + "!"),
            ("a function that returns text", f"{broken}:text", {}, "anything"),
            ("a second box the pattern does not read", f"{ex}:boxed_match", {"answer": "7"},
             "\\boxed{7} or \\boxed{\\text{8}}"),
            ("a second answer tag the pattern does not read", f"{ex}:tagged_answer", {"answer": "7"},
             "<answer>7</answer> or <answer><b>8</b></answer>"),
            ("a second answer in \\fbox beside the \\boxed one", f"{ex}:boxed_match", {"answer": "7"},
             "\\boxed{7} or \\fbox{8}"),
            ("a second answer tag in upper case", f"{ex}:tagged_answer", {"answer": "7"},
             "<answer>7</answer> or <ANSWER>8</ANSWER>"),
            ("a second answer in a framed environment beside the \\boxed one", f"{ex}:boxed_match", {"answer": "7"},
             "\\boxed{7} or \\begin{framed}8\\end{framed}"),
        ]
        return [(name, self.parse_task({"id": f"function-exploit-{i}", "prompt": "What is 3 + 4?", "reward": fn,
                                        "data": data}, "function exploit fixtures"), response)
                for i, (name, fn, data, response) in enumerate(rows)]

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        """Arithmetic questions scored by ``examples.exact_match`` or ``examples.boxed_match``."""
        rng = random.Random(f"function/{seed}")
        ex = "posttrain.envs.function.examples"
        out = []
        for i in range(n):
            a, b = rng.randint(2, 99), rng.randint(2, 99)
            boxed = rng.random() < 0.5
            prompt = f"What is {a} + {b}? " + ("Put the number in \\boxed{}." if boxed else "Reply with the number only.")
            fn = f"{ex}:{'boxed_match' if boxed else 'exact_match'}"
            out.append(self.parse_task({"id": f"function-gen-{seed}-{i}", "prompt": prompt, "reward": fn,
                                        "data": {"answer": str(a + b)},
                                        "reference": f"\\boxed{{{a + b}}}" if boxed else str(a + b)}, "generator"))
        return out


def noop_problems(tasks: Sequence[Task], *, sample: int = 16) -> list[str]:
    """Warnings for a run's function tasks, per reward function, from up to ``sample`` tasks each:
    the empty completion gets full marks (the function cannot tell a no-op from a solution), no
    task has a reference (nothing shows that a right answer scores 1), or a reference does not get
    full marks (``_reference_problem``: a function that breaks on it is named a configuration error)."""
    by_fn: dict[str, list[Task]] = {}
    for t in tasks:
        if t.domain == NAME:
            for term in task_terms(t):
                by_fn.setdefault(term.function, []).append(t)
    out = []
    for fn, group in by_fn.items():
        picked = group[:sample]
        noop = [verify_function(t, "") for t in picked]
        passing = sum(v.passed for v in noop)
        if passing:
            out.append(f"reward function {fn} gives the empty completion full marks on {passing} of {len(picked)} "
                       "task(s): it cannot tell a no-op from a solution")
        if not any(t.reference for t in group):
            out.append(f"reward function {fn}: no task it scores has a reference, so nothing shows that a right "
                       "answer scores 1")
        else:
            out += _reference_problem(fn, [t for t in picked if t.reference])
    return out


def _reference_problem(fn: str, tasks: Sequence[Task]) -> list[str]:
    """The first of ``tasks`` whose reference does not get full marks, as one warning: when the
    function breaks on it (raises, returns NaN, a type, ...), the user's configuration is at fault,
    and every completion of its tasks is scored the same fail."""
    for t in tasks:
        v = verify_function(t, str(t.reference))
        if v.passed:
            continue
        if (v.error_class or "").startswith("reward_function:"):
            return [f"reward function {fn} breaks on the reference of task {t.id}, a configuration error (the "
                    f"function or the task's data), not a completion's: {v.feedback}"]
        return [f"reward function {fn}: the reference of task {t.id} scores {v.reward:.3f}, not full marks"]
    return []


ENV = FunctionDomain()
