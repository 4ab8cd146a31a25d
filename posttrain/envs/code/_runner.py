"""The verifier-side test runner for code tasks; its *code* is sent into the sandbox.

The runner is a standalone script (standard library only) made of five files, joined into one by
``runner_text()`` (their imports of each other, marked ``# runner: one namespace``, are dropped)
and run by ``pool.run_python(runner_source(n), stdin=runner_stdin(payload), cells=1)``
(``_env.py``: the job's stdin carries the runner's marshalled code, then the payload):
``_runner_wire.py`` (values, framing, records), ``_runner_procs.py`` (hardening, template,
servers), ``_runner_clean.py`` (the cell, files, IPC, limits between candidates),
``_runner_replay.py`` (pass 2), and this file (the proxy the test calls, the checks, the report,
the main loop). The threat model, avenue by avenue with the tests that try each, is in
docs/code-verifier-threat-model.md. Three kinds of process:

- the *runner* (this job's process, a fork of the sandbox's fork server): it reads the payload
  (tests, expected values, the report nonce), runs each task's ``check`` and writes the report.
  It makes itself non-dumpable, imports only from read-only places (its working directory and
  ``sys.path`` are read-only mounts) and ignores every signal it can ignore, before any model code
  exists;
- the *template*: a fork of the runner made before the runner read its payload, so it never held
  it (and the fork server it descends from never holds any job's data: the sandbox's guarantee,
  checked by its conformance suite). It keeps only the pipes it needs and the cell's
  ``cgroup.procs``, and forks a server when a replay or a fresh start needs one, on request;
- a *server* per candidate (and replay): one per item forked by the runner itself (before it
  ignores signals: a Python program's dispositions), the rest by the template, all before the
  runner read its payload, so none ever held a test, an expected value or the nonce either. It
  waits outside the cell; the runner checks that nothing stopped it or changed its limits while it
  waited, then sends it a candidate; it moves itself into the sandbox's cell (a cgroup), then runs
  the model's code and answers calls: arguments and return values cross a pipe as type-tagged JSON,
  rebuilt on the runner's side out of plain built-in types (CODE-04, CODE-05, CODE-09). Every
  exception of the candidate arrives in the test as ``CandidateError``, which no construct treats
  as control flow.

Per item: the runner loads the test (compiled on the host, ``compile_item``; its top level runs
before any model code of the item) with the calls it will make first (``predict_calls``: top-level
``assert candidate(<literals>) == <literal>``). Then one of two ways:

- *warm-up* (when every call of the test is predicted with the literal its answer must equal, and
  those differ: most HumanEval tests): the server answers the distinct calls, each as many times
  as makes 20 or more arrangements (``warm_repeats``: once each from four different answers on), in
  a secret arrangement drawn uniformly (``warm_up``); copies of one call must get equal answers;
  then the test runs (pass 1) and reads each call's answer from the warm-up's (``Proxy.answered``):
  the server never sees the test's order, and the arrangement is never the one that answering by
  position would fit. One server per candidate. A warm-up that dies, breaks the protocol or runs past
  ``WARM_FRACTION`` of the deadline is followed by a second one, from a fresh server, in an order
  drawn anew, with the whole deadline; only if that fails too does a third get the test's calls in
  its order, for the report (its verdict is a fail whatever its answers: ``_warm_up_twice``). So no
  process sees the test's order while a pass is still possible: before, after one failed warm-up the
  test ran in its order and a replay followed, and a process that left the order in the job's inode
  counter for the replay passed.
- *replay* (otherwise: calls the test makes that cannot be predicted):
  the test's first calls go with the candidate and are answered in order, the test runs (pass 1);
  if it passes, the runner kills everything in the cell (by cgroup: a helper whose main thread
  exited while another thread runs dies too), wipes the writable places, checks that no SysV IPC
  object and no change to its own or the template's limits survived, and a second, fresh server
  answers every distinct call of pass 1 in a shuffled order (pass 2): each answer must equal the
  first pass's.

Either way a candidate that answers by call count instead of by its arguments fails.

The report: one JSON line per item, carrying the per-run nonce, on fd 3 (the sandbox's report
channel). Exit codes and stdout decide nothing (CODE-01, CODE-14, CODE-20). Once a candidate's
code has run, anything that goes wrong is reported as that candidate's failure (or, if even that
cannot be written, there is no report: a fail for the verifier); a runner error (an infra error)
is reported only when no model code of the item has run.

Batches: ``entry(n)`` verifies n candidates in one sandbox job. Before each item after the
first, the runner kills everything in the cell, checks it empty and wipes what earlier
candidates left; if that fails, the template cannot fork a server, or the next server was
tampered with while it waited, the remaining items get no report line and are re-run alone; so do
an item and the rest when, after it, the template or a server still waiting for a later item is
stopped or killed (``Template.intact``: the next pid is a waiting server in a batch, the template
alone, so a candidate's own verdict must not hang on which one it hit). Each item of a batch has its share of the job (``budget_s``): past it a kernel alarm ends the runner
(``alarm``; the test's own work on a reply, such as ``str()`` of a huge integer in an assertion's
message, is no candidate's deadline), and that item and the rest are re-run alone.
"""

import marshal
import os
import sys
import time

from posttrain.envs.code._runner_clean import Cell, Job, tree
from posttrain.envs.code._runner_procs import (
    ServerLost,
    Template,
    _kill,
    alarm,
    confine_imports,
    ignore_signals,
    make_undumpable,
)
from posttrain.envs.code._runner_replay import (
    _stateful,
    first_answers,
    replay,
    replay_chunks,
    replay_order,
    reply_key,
)
from posttrain.envs.code._runner_wire import (
    _SOURCES,
    MAX_DEPTH,
    MAX_MESSAGE_BYTES,
    CandidateError,
    CandidateGone,
    Channel,
    ProtocolError,
    _compile,
    _gone,
    canonical,
    clean_error,
    decode,
    describe,
    encode,
    parse,
)

__all__ = [  # what tests and the host side use (the rest is the sandbox script's)
    "PARTS", "MAX_MESSAGE_BYTES", "CandidateError", "Channel", "ProtocolError", "canonical", "compile_item",
    "decode", "encode", "entry", "parse", "replay_order", "reply_key", "runner_text",
]  # fmt: skip

PARTS = ("_runner_wire.py", "_runner_procs.py", "_runner_clean.py", "_runner_replay.py", "_runner.py")
"""The runner's files, in the order they are joined (each may use what the ones before define)."""


def runner_text() -> str:
    """The runner's source as one script: its files joined, their imports of each other dropped
    (in the sandbox they share one namespace; here they are modules importing each other)."""
    import ast
    from pathlib import Path  # (here, not at the top: the sandbox script need not import it)

    here, out = Path(__file__).parent, []
    for name in PARTS:
        text = (here / name).read_text()
        drop = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("posttrain.envs.code._runner"):
                drop.update(range(node.lineno, node.end_lineno + 1))
        out += [line for n, line in enumerate(text.splitlines(), 1) if n not in drop]
    return "\n".join(out) + "\n"


class Proxy:
    """What the test calls: forwards each call to the server and records (request, answer).

    ``ahead``: requests already sent whose replies are read as the test makes those very calls, in
    that order (``predict_calls``); a call that differs drains them first, then goes to the server
    alone, so the candidate sees exactly the calls the test makes, in its order."""

    def __init__(self, deadline, entry_point):
        self.chan, self.pid, self.deadline = None, None, deadline
        self.calls, self.live, self.gone, self.log, self.ahead = 0, 0, None, [], []
        self.answered = {}  # request -> reply, from the warm-up: the test's calls read them here
        self.__name__ = entry_point

    def attach(self, pid, chan, ahead=()):
        self.pid, self.chan, self.ahead = pid, chan, list(reversed(ahead))

    def restart(self, deadline):
        """Forget the server (killed by now): a fresh start, on the next ``attach``."""
        self.chan, self.pid, self.deadline = None, None, deadline
        self.calls, self.live, self.gone, self.log, self.ahead = 0, 0, None, [], []
        self.answered = {}

    def kill(self, why):
        if self.gone is None:
            self.gone = why
        if self.pid is not None:
            _kill(self.pid)

    def receive(self):
        try:
            return self.chan.recv(self.deadline)
        except TimeoutError:
            self.kill("timeout")
        except ProtocolError:
            self.kill("protocol")
        except Exception:  # noqa: BLE001 - EOFError, OSError, MemoryError: the process is gone
            self.kill("died")
        raise CandidateGone(self.gone)

    def _send(self, data):
        if self.gone is not None:
            raise CandidateGone(self.gone)
        try:
            self.chan.send_raw(data)
        except OSError:
            self.kill("died")
            raise CandidateGone(self.gone) from None

    def _valid(self, reply):
        if type(reply) is not dict or not ("ok" in reply or "exc" in reply):
            self.kill("protocol")
            raise CandidateGone(self.gone)
        return reply

    def _drain(self):
        while self.ahead:
            self.ahead.pop()
            self._valid(self.receive())

    def exchange(self, request):
        """The reply (a dict with "ok" or "exc") to one request (marshalled)."""
        if request in self.answered:  # answered in the warm-up, before the test made any call
            return self.answered[request]
        if self.ahead and self.ahead[-1] == request:
            self.ahead.pop()
            return self._valid(self.receive())
        self.live += 1
        self._drain()
        self._send(request)
        return self._valid(self.receive())

    def exchange_calls(self, requests):
        """The replies, in order, to many requests sent in one message."""
        self._drain()
        self._send(marshal.dumps({"calls": list(requests)}, 2))
        return [self._valid(self.receive()) for _ in requests]

    def __call__(self, *args, **kwargs):
        self.calls += 1
        request = marshal.dumps({"args": encode(list(args)), "kwargs": encode(dict(kwargs))}, 2)
        reply = self.exchange(request)
        self.log.append((request, reply_key(reply), self.chan.last_size))
        if "ok" in reply:
            try:
                return decode(reply["ok"])
            except Exception as e:  # noqa: BLE001 - ValueError, TypeError, RecursionError, ...
                raise CandidateError("ProtocolError", f"malformed return value: {type(e).__name__}") from None
        info = clean_error(reply.get("exc"))
        raise CandidateError(info["type"], info["message"])


def load_check(payload, proxy, precompiled=False):
    """exec the task's prompt and test in the runner's namespace; their check() function, the
    per-assertion results it fills, and the calls it will make first (``predict_calls``).
    ``precompiled``: the item carries the host's ``compile_item`` of them (code objects marshalled
    by an interpreter with this one's bytecode), so nothing is parsed or compiled here."""
    ns = {"__name__": "__verifier__"}
    if precompiled:
        if payload["prompt_code"] is not None:
            exec(marshal.loads(payload["prompt_code"]), ns)
        _SOURCES["test.py"] = payload["test"].splitlines()
        code, predicted = marshal.loads(payload["test_code"]), list(payload["predicted"])
    else:
        code = _prompt_code(payload["prompt"])
        if code is not None:
            exec(code, ns)
        code, predicted = _compile_test(payload["test"], payload["entry_point"])
    ns[payload["entry_point"]] = proxy  # tests may name the function directly (HumanEval/33)
    results = []
    ns[_RECORD] = lambda line, exc: results.append(_assert_entry(line, exc))
    exec(code, ns)
    check = ns.get("check")
    if not callable(check):
        raise LookupError("the task's test does not define check(candidate)")
    return check, results, predicted


def _prompt_code(prompt):
    """The prompt compiled (it may end at ``def f():``, so a ``pass`` body is tried too), or None."""
    for candidate_prompt in (prompt, prompt + "\n    pass\n"):
        try:
            return _compile(candidate_prompt, "prompt.py")
        except SyntaxError:
            continue
    return None


def compile_item(prompt, test, entry_point):
    """What ``load_check`` needs of a task, made once on the host (``posttrain/envs/code/_env.py``
    caches it per task): the prompt's and the test's code objects, marshalled (``None`` for a
    prompt that does not compile), and the calls the test will make first. Raises what
    ``load_check`` would (a test that does not parse): the runner then compiles it itself."""
    code = _prompt_code(prompt)
    test_code, predicted = _compile_test(test, entry_point)
    return (None if code is None else marshal.dumps(code)), marshal.dumps(test_code), predicted


_RECORD = "__posttrain_record__"


def _assert_entry(line, exc):
    if exc is None:
        return {"id": f"check:{line}", "outcome": "passed"}
    outcome = "failed" if isinstance(exc, AssertionError) else "error"
    return {"id": f"check:{line}", "outcome": outcome, "error": describe(exc)}


def _compile_test(source, entry_point):
    """The test, with each top-level ``assert`` of ``check`` recording its own outcome, and the
    calls it will make first (``predict_calls``).

    ``try: <assert> except Exception as e: record(line, e) else: record(line, None)``: the
    check goes on after a failed assertion, so the report lists every assertion (a process
    signal), while the overall verdict is unchanged: it passes only if every one passes and
    nothing else raised. ``CandidateGone`` is a BaseException and still ends the check.
    """
    import ast

    _SOURCES["test.py"] = source.splitlines()
    tree = ast.parse(source, "test.py")
    calls = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            calls = predict_calls(node, entry_point)
            node.body = [_wrap_assert(st) if isinstance(st, ast.Assert) else st for st in node.body]
    return compile(ast.fix_missing_locations(tree), "test.py", "exec"), calls


def predict_calls(check, entry_point):
    """The calls that ``check`` (its ``ast.FunctionDef``) will make first, as far as they can be known
    before it runs: ``[(request, expected)]``, one per top-level ``assert`` that calls the candidate
    once, with literal arguments, until a statement that calls it otherwise. ``expected``: the
    ``eq_key`` of the literal the answer is compared to with ``==`` (``assert candidate(3) == [1,
    2]``), else None. The requests are sent with the candidate, answered in order, and read as the
    test makes the very same calls (``Proxy.exchange``): one exchange instead of one per call. A
    prediction that turns out wrong costs only the replies it drains; the candidate answers the
    predicted calls before the test looks at any answer, which only a test that watched the
    candidate's side effects between calls could tell (none does: they cross by value)."""
    import ast

    names = {entry_point} | ({check.args.args[0].arg} if check.args.args else set())

    def calls_in(node):
        return [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                and n.func.id in names]  # fmt: skip

    out = []
    for st in check.body:
        test = st.test if isinstance(st, ast.Assert) else None
        call, expected = None, None
        if isinstance(test, ast.Compare) and len(test.comparators) == 1 and isinstance(test.ops[0], ast.Eq):
            sides = (test.left, test.comparators[0])
            for mine, other in (sides, sides[::-1]):  # candidate(...) == literal, or literal == candidate(...)
                if isinstance(mine, ast.Call) and isinstance(mine.func, ast.Name) and mine.func.id in names:
                    try:
                        expected = eq_key(ast.literal_eval(other))
                    except (ValueError, TypeError, SyntaxError, OverflowError, MemoryError, RecursionError):
                        expected = None
                    if expected is not None or not calls_in(other):
                        call = mine
                    break
        found = [call] if call is not None else calls_in(st)
        if not found:
            continue
        if not isinstance(st, ast.Assert) or len(found) != 1:
            break
        try:
            if any(isinstance(a, ast.Starred) for a in found[0].args) or any(k.arg is None for k in found[0].keywords):
                break
            args = [ast.literal_eval(a) for a in found[0].args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in found[0].keywords}
            out.append((marshal.dumps({"args": encode(args), "kwargs": encode(kwargs)}, 2), expected))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            break
    return out


def eq_key(v, depth=0):
    """A key equal for values that ``==`` finds equal (1, 1.0, True; [1] and [1.0]; {1} and
    frozenset({1})), of literals; values with different keys are never equal (the reverse need not
    hold: 10**20 + 1 and 1e20 share one). TypeError for anything but a literal's types."""
    t = type(v)
    if depth > MAX_DEPTH:
        raise TypeError("too deep")
    if v is None:
        return ("none",)
    if t in (bool, int, float, complex):
        c = complex(v)  # (OverflowError for an int too big for a float: no key)
        return ("num", c.real, c.imag)
    if t in (str, bytes):
        return (t.__name__, v)
    if t in (list, tuple):
        return (t.__name__, tuple(eq_key(x, depth + 1) for x in v))
    if t in (set, frozenset):
        return ("set", frozenset(eq_key(x, depth + 1) for x in v))
    if t is dict:
        return ("dict", frozenset((eq_key(k, depth + 1), eq_key(x, depth + 1)) for k, x in v.items()))
    raise TypeError(t.__name__)


WARM_FRACTION = 0.5
"""Of an item's deadline, what the warm-up may take (at least ``WARM_MIN_S``) before the item is
verified the slower way instead (a second warm-up, from a fresh process, with the whole deadline).
The warm-up is the candidate's only computation of the test's calls, so it gets half the deadline:
at 10% a test of HumanEval's heaviest (HumanEval/75, ~70 ms of CPU) took the slower way on a loaded
host, computing its calls three times. A candidate that loops costs that half once more (at most
``WARM_FRACTION + 1 + 1`` deadlines an item: the second warm-up and then either a replay of the calls
it could not predict or the test in its order for the report; ``_env.py`` sizes the job for it)."""
WARM_MIN_S = 0.25


WARM_SEQUENCES = 20
"""The warm-up asks each distinct call ``warm_repeats`` times, so that its calls can be arranged in at
least this many ways that differ in their expected answers: a candidate that answers by call count
(with the expected answers in test order, known from feedback; not the inputs) must guess the
arrangement, drawn uniformly. With two distinct calls asked once each the only order other than
the test's was its reverse, which such a candidate answered: 64 of 64 passed."""
WARM_MAX_REPEATS = 4
WARM_COPY_BYTES = MAX_MESSAGE_BYTES // 16
"""Copies of the calls are made only while the warm-up's requests stay under this many bytes (they go
with the candidate in one message): a test whose literal arguments are megabytes gets its calls once
each, as before the copies."""


def warm_repeats(answers):
    """How many times the warm-up asks each distinct call (``answers``: their expected ``eq_key``s):
    the least ``r`` (at most ``WARM_MAX_REPEATS``) for which the ``r`` copies of each can be arranged
    in ``WARM_SEQUENCES`` sequences of expected answers or more. Two distinct calls with different
    answers: 3; three: 2; four or more: 1 (once each, as before: only small tests pay calls); more
    where answers repeat (five calls, four answers ``False``: 2)."""
    import math

    counts = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    r = 1
    while r < WARM_MAX_REPEATS:
        sequences = math.factorial(r * len(answers))
        for c in counts.values():
            sequences //= math.factorial(r * c)
        if sequences >= WARM_SEQUENCES:
            break
        r += 1
    return r


def warm_up(predicted):
    """The calls a server answers first, in a secret arrangement, before the test runs (``predicted``:
    ``predict_calls``), and the expected answers (``eq_key``) that answering them by position gives;
    ``([], None)`` when that proves nothing (module docstring).

    Only when every call is known with the literal its answer must equal, and those differ. Each
    distinct call is asked ``warm_repeats`` times, in an arrangement drawn uniformly from
    ``os.urandom``, redrawn while its expected answers equal what a candidate answering by position
    gives (the expected answers in test order, repeats included, repeated cyclically to the warm-up's
    length: ``by_position``). Answers to the copies of one call must agree (``_warm_answers``); the
    test then reads each call's answer from the warm-up (``Proxy.answered``): the server never sees
    the test's order. A candidate that answers by call count gives its copies different answers or
    the wrong ones, and one that answers each distinct call alike but does not compute it must guess
    which expected answer is whose: uniform arrangements leave it no better odds than a program that
    guesses from its arguments alone (1 in 2 for two distinct answers, 1 in 6 for three), which no
    order of calls can prevent."""
    import random

    if not predicted or any(key is None for _, key in predicted):
        return [], None
    keys = {}
    for request, key in predicted:
        keys.setdefault(request, key)
    distinct = list(keys)
    if len({keys[r] for r in distinct}) < 2:
        return [], None  # every answer equal: answering by position gives them
    copies = warm_repeats([keys[r] for r in distinct])
    size = sum(len(r) for r in distinct)  # (the calls go with the candidate, in one message)
    warm = distinct * max(1, min(copies, WARM_COPY_BYTES // max(1, size)))
    in_order = [key for _, key in predicted]
    by_position = [in_order[i % len(in_order)] for i in range(len(warm))]
    rng = random.Random(os.urandom(16))
    rng.shuffle(warm)
    while [keys[r] for r in warm] == by_position:  # (at least two sequences exist: answers differ)
        rng.shuffle(warm)
    return warm, by_position


def _wrap_assert(stmt):
    import ast

    def record(arg):
        call = ast.Call(ast.Name(_RECORD, ast.Load()), [ast.Constant(stmt.lineno), arg], [])
        return ast.copy_location(ast.Expr(call), stmt)

    handler = ast.ExceptHandler(ast.Name("Exception", ast.Load()), "_posttrain_exc",
                                [record(ast.Name("_posttrain_exc", ast.Load()))])
    return ast.copy_location(ast.Try([stmt], [ast.copy_location(handler, stmt)], [record(ast.Constant(None))], []),
                             stmt)


def run_check(check, results, proxy):
    """check(proxy) -> the test's report entries: the check, then each top-level assertion."""
    entry = {"id": "check", "outcome": "passed"}
    try:
        check(proxy)
    except CandidateGone:
        entry = _gone(proxy.gone)
    except AssertionError as e:
        entry = {"id": "check", "outcome": "failed", "error": describe(e)}
    except Exception as e:  # noqa: BLE001 - any other exception fails the test
        entry = {"id": "check", "outcome": "error", "error": describe(e)}
    failures = [r for r in results if r["outcome"] != "passed"]
    for r in failures[3:]:  # keep the report small: details of the first three failures only
        r.pop("error", None)
    first = failures[0] if failures else None
    if first is not None:  # the first failed assertion explains the failure best
        entry = {"id": "check", "outcome": first["outcome"], "error": first["error"]}
    elif proxy.gone is not None:
        entry = _gone(proxy.gone)
    return [entry, *results]


def _sabotage(message):
    return {"id": "check", "outcome": "sabotage", "error": {"type": "Sabotage", "message": message, "where": None}}


def _lap(report, phase, t0):
    """Add the seconds since ``t0`` to ``report["t"][phase]`` (the cost of each phase, for
    bench/verify.py; the verdict never reads it); returns now."""
    now = time.perf_counter()
    t = report.setdefault("t", {})
    t[phase] = round(t.get(phase, 0.0) + now - t0, 6)
    return now


def run_item(item, template, job, precompiled=False):
    """Verify one candidate: the item's report."""
    t0, laps = time.perf_counter(), {}
    proxy = Proxy(time.monotonic() + float(item["deadline_s"]), item["entry_point"])
    # (the test's top level runs before any model code)
    check, results, predicted = load_check(item, proxy, precompiled and "test_code" in item)
    (warm, by_position), calls = warm_up(predicted), [request for request, _ in predicted]
    t0 = _lap(laps, "load", t0)
    try:
        ahead = warm or calls  # the warm-up alone (the test reads its answers), or the test's first calls
        proxy.attach(*template.server(item, ahead), ahead=ahead)
    except ServerLost as e:
        return {"status": "runner_error", "detail": f"candidate process lost before start: {e}", "lost": True}
    _lap(laps, "fork", t0)
    # From here on the candidate's code runs: whatever goes wrong is its failure.
    report = {"status": "completed", "import": {"ok": False}, "tests": [], "calls": 0, **laps}
    servers = [proxy.pid]
    try:
        _run_candidate(item, template, job, proxy, check, results, report, (warm, by_position, predicted), calls,
                       servers)
    except ServerLost as e:  # the template was too slow to start a server (infra)
        report = {"status": "runner_error", "detail": f"later server: {e}", "lost": True}
    except BaseException as e:  # noqa: BLE001
        report["tests"] = [_sabotage(f"the runner was disrupted: {type(e).__name__}")]
    proxy.kill("finished")
    report["servers"] = servers
    return report


def _warm_answers(item, proxy, warm, by_position, fraction=WARM_FRACTION):
    """Put the server's replies to the warm-up calls in ``proxy.answered``: True; False if it did
    not answer them all within ``fraction`` of the item's deadline (it died, timed out, broke the
    protocol); "unequal" if two copies of one call got different answers (``reply_key``);
    "by_position" if its answers are exactly what answering by call count gives."""
    full = proxy.deadline
    proxy.deadline = min(full, time.monotonic() + max(WARM_MIN_S, fraction * float(item["deadline_s"])))
    try:
        replies = [proxy.exchange(request) for request in warm]
    except CandidateGone:
        return False
    finally:
        proxy.deadline = full
    proxy.answered, unequal = {}, False
    for request, reply in zip(warm, replies, strict=True):
        unequal |= reply_key(proxy.answered.setdefault(request, reply)) != reply_key(reply)
    if unequal:
        return "unequal"
    try:
        if [eq_key(decode(r["ok"])) if "ok" in r else None for r in replies] == by_position:
            return "by_position"
    except Exception:  # noqa: BLE001 - a value eq_key cannot key (TypeError, depth): not by position
        pass
    return True


def _handshake(proxy):
    try:
        hello = proxy.receive()
    except CandidateGone:
        return {"gone": proxy.gone}
    if type(hello) is not dict or not ("ready" in hello or "import_error" in hello):
        proxy.kill("protocol")
        return {"gone": proxy.gone}
    return hello


def _run_candidate(item, template, job, proxy, check, results, report, warming, calls, servers):
    """The item's candidate: (a warm-up,) the test, and the check that the answers depend on the
    arguments only: the warm-up's order, or a replay in a fresh process (module docstring)."""
    warm = warming[0]
    t0 = time.perf_counter()
    hello = _handshake(proxy)
    if hello.get("ready") is not True:
        error = clean_error(hello["import_error"]) if "import_error" in hello else _gone(hello.get("gone")).get("error")
        report["import"] = {"ok": False, "error": error, "gone": hello.get("gone")}
        return
    report["import"] = {"ok": True}
    t0 = _lap(report, "import", t0)
    warmed, why = _warm_up_twice(item, template, job, proxy, warming, calls, servers, report) if warm else (None, None)
    if warmed is False:
        return
    t0 = _lap(report, "warm", t0)
    report["tests"] = tests = run_check(check, results, proxy)
    report["calls"] = proxy.calls
    t0 = _lap(report, "pass1", t0)
    if warmed == "in_order" and tests[0]["outcome"] == "passed":
        tests[0] = _gone(why)  # the second warm-up's failure: the test in its order decides no pass
        return
    if warmed == "unequal":
        tests[0] = _stateful("two calls with equal arguments got different answers")
        return
    if warmed == "by_position":  # (its answers cannot all be right: the order was drawn so)
        tests[0] = _stateful("the calls, made in another order than the test's, got the answers the test "
                             "expects in its own order: answers must depend on the arguments only")
        return
    if tests[0]["outcome"] != "passed" or not proxy.log:
        return
    first = first_answers(proxy.log)
    if first is None:
        tests[0] = _stateful("two calls with equal arguments got different answers")
        return
    report["replayed"] = 0
    if warmed and proxy.live == 0:  # every call of the test was answered in the warm-up
        report["replayed"] = len(warm)
        return
    if len({key for key, _ in first.values()}) < 2:
        return  # one answer to every call: answering by position gives the same answers
    # Pass 2: a fresh server, in a clean job, answers the same calls in another order.
    proxy.kill("finished")
    if not job.clean((proxy.pid,)):
        tests[0] = _sabotage("the candidate left processes, files, IPC objects or changed limits behind")
        return
    t0 = _lap(report, "clean", t0)
    second = Proxy(time.monotonic() + float(item["deadline_s"]), item["entry_point"])
    chunks = replay_chunks(first, proxy.log)
    if not _fresh_server(item, template, second, chunks[0], servers, report):
        return
    try:
        hello = _handshake(second)
        if hello.get("ready") is not True:
            tests[0] = _stateful("the program failed to load a second time")
            return
        t0 = _lap(report, "fork", t0)
        verdict = replay(first, second, chunks)
    finally:
        second.kill("finished")
    _lap(report, "pass2", t0)
    report["replayed"] = len(first)
    if verdict is not None:
        tests[0] = verdict


def _warm_up_twice(item, template, job, proxy, warming, calls, servers, report):
    """The warm-up (``_warm_answers``: True or "by_position"); if it fails (the candidate died, broke
    the protocol or ran past ``WARM_FRACTION``), a second one, from a fresh process, in an order drawn
    anew, with the whole deadline. If that fails too, "in_order": a fresh process is sent the test's
    calls in its order, for the report's sake only: where it passes, the verdict is the second
    warm-up's failure (``timeout``, ``died``, ``protocol``: ``why``). False when a fresh start failed
    (the report's verdict is set). Returns ``(warmed, why)``.

    The test's order is sent to no process before both warm-ups failed, so a first process that saw
    the calls has nothing of it to leave for a later one through what outlives it (the inode counters
    of the job's file systems, the pid counter). With the test in its order after one failed warm-up
    and a replay after it, a candidate that died in the warm-up, answered the test by call count and
    left the order as an inode number passed 16 of 16."""
    warm, by_position, predicted = warming
    warmed = _warm_answers(item, proxy, warm, by_position)
    if warmed:
        return warmed, None
    warm, by_position = warm_up(predicted)
    if not _fresh_start(item, template, job, proxy, warm, servers, report):
        return False, None
    warmed, why = _warm_answers(item, proxy, warm, by_position, fraction=1.0), proxy.gone
    if warmed:
        return warmed, None
    return ("in_order" if _fresh_start(item, template, job, proxy, calls, servers, report) else False), why


def _fresh_start(item, template, job, proxy, calls, servers, report):
    """Kill the item's processes, clean the job and attach ``proxy`` to a fresh server, with the
    item's whole deadline, sent ``calls``; False, with the report's verdict set, when any step fails
    (the candidate left something behind, sank what starts servers, or failed to load again)."""
    proxy.kill("finished")
    if not job.clean((proxy.pid,)):
        report["tests"] = [_sabotage("the candidate left processes, files, IPC objects or changed limits behind")]
        return False
    proxy.restart(time.monotonic() + float(item["deadline_s"]))
    if not _fresh_server(item, template, proxy, calls, servers, report):
        return False
    if _handshake(proxy).get("ready") is not True:
        report["tests"] = [_stateful("the program failed to load a second time")]
        return False
    return True


def _fresh_server(item, template, proxy, calls, servers, report):
    """Attach ``proxy`` to a fresh server (sent ``calls``); False, with the report's verdict set,
    when the candidate killed or stopped what starts servers (ServerLost raised if it was slow)."""
    try:
        proxy.attach(*template.server(item, calls), ahead=calls)
    except ServerLost as e:
        # Slow, not broken: a starved machine, not this candidate's doing; in a batch an earlier
        # candidate may have sunk what starts servers: the item is re-run alone, where only its own
        # code ran before.
        if not e.broken or e.waited:
            raise
        _starter_sabotaged(report)
        return False
    servers.append(proxy.pid)
    return True


def _run_or_error(item, template, job, precompiled):
    """``run_item``'s report, or a runner error if it raised (before any model code ran: our failure)."""
    try:
        return run_item(item, template, job, precompiled)
    except BaseException as e:  # noqa: BLE001
        return _error(e)


def _template_kept(template, report, alone):
    """False if the template, or a server waiting for a later item, was killed or stopped since the
    last item (whose check found them whole): by this item's candidate (the template is its parent
    on a server the template forked; no later server may be asked for, so nothing else would see it;
    the next pid is the next item's server in a batch, the template alone) or by a signal an earlier
    one sent that acted late. Alone, only this candidate's code ran: its verdict becomes
    ``sabotage`` (True)."""
    if template.intact():
        return True
    if not alone:
        return False
    if report.get("status") == "completed":
        _starter_sabotaged(report)
    return True


def _starter_sabotaged(report):
    """The item's verdict: it killed or stopped what starts candidates (``sabotage``, first of its tests)."""
    entry = _sabotage("the candidate killed or stopped the process that starts candidates")
    report["tests"] = [entry, *report.get("tests", [])[1:]]


def _emit(report):
    import json

    data = json.dumps(report).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(3, view) :]


def _error(e):
    import traceback

    return {"status": "runner_error", "detail": "".join(traceback.format_exception_only(type(e), e))[-500:]}


def read_payload(fd=0):
    """The rest of fd ``fd`` (the job's stdin, a memfd: after the runner's own code, the payload),
    read unbuffered: nothing of it is read before the runner asks for it (a buffered reader would
    read ahead, into memory that the template and the servers are forked from)."""
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def runner_main(n_items, code):
    """Verify ``n_items`` candidates; one report line per item on fd 3 (module docstring)."""
    t0, job_t = time.perf_counter(), {}
    problem = None
    try:
        dumpable_off = make_undumpable()
    except Exception:  # noqa: BLE001
        dumpable_off = False
    if not dumpable_off:
        problem = RuntimeError("cannot make the runner non-dumpable")
    files = tree()
    template = cell = None
    try:
        cell = Cell.given()
        confine_imports()
        import gc

        gc.freeze()  # objects that exist now are never traversed by gc: fewer copy-on-write faults
        # SCHED_BATCH for the runner, the template and the servers: the same CPU share, but a process
        # woken by another of them does not preempt it, so each exchange costs one context switch (the
        # writer runs on until it waits), not two. Context switches are dear on a VM.
        try:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except OSError:
            pass
        # The template and the direct servers are forked before the payload (tests, nonce) is read:
        # no process that runs model code descends from one that held it. And before the runner
        # ignores signals, so a direct server needs no reset (no model code exists yet).
        t0 = _lap(job_t, "setup", t0)
        template = Template(3 * n_items, cell, direct=n_items)  # a warm-up, a fresh start, a replay
        t0 = _lap(job_t, "template", t0)
    except Exception as e:  # noqa: BLE001 - reported per item as a runner error (infra)
        problem = problem or e
    ignore_signals()
    from importlib._bootstrap_external import MAGIC_NUMBER

    try:
        payload = marshal.loads(read_payload())
        nonce, items = payload["nonce"], payload["items"]
        if len(items) != n_items:
            raise ValueError(f"payload has {len(items)} items, the runner was started for {n_items}")
    except BaseException as e:  # noqa: BLE001 - the runner's own failure: no nonce, no report
        _emit(_error(e))
        return
    if problem is not None:
        for index in range(n_items):
            _emit({**_error(problem), "nonce": nonce, "index": index})
        return
    precompiled = payload.get("magic") == MAGIC_NUMBER
    job = Job({os.getpid(), template.pid}, files, cell)
    job.snapshot()  # the runner's and the template's limits and the like, before any model code
    t0 = _lap(job_t, "payload", t0)
    last = ()
    for index, item in enumerate(items):
        if index and not job.clean(last):
            break  # cannot clean up after the previous candidate: the rest stay unverified
        t0 = _lap(job_t, "clean", t0) if index else t0
        # An item's share of the job (``budget_s``, in a batch): its run, its report and the cleanup
        # after it. Past it the kernel ends the runner, wherever it is (the test's own work on a
        # reply is no candidate's deadline): this item and the rest get no line and are re-run
        # alone, so no candidate holds its sandbox job for its neighbours' shares.
        alarm(item.get("budget_s"))
        report = _run_or_error(item, template, job, precompiled)
        last = tuple(report.pop("servers", ()))
        if not _template_kept(template, report, alone=n_items == 1):
            break  # this item and the rest get no line: they are re-run alone
        t0 = time.perf_counter()
        report.update({"nonce": nonce, "index": index, "dumpable_off": dumpable_off})
        if index == 0:
            report["job_t"] = job_t["t"]
        _emit(report)
        if report.get("lost"):
            break  # an earlier candidate broke the template: the rest are re-run alone
    alarm(None)
    for pid in (template.pid, *template.pids[template.next :]):  # the template and unused direct servers
        _kill(pid)


def entry(n_items, code=None):
    """What the sandbox runs after the runner's code (``code``, that code marshalled, is not used:
    the template is a fork, not a fresh interpreter)."""
    sys.set_int_max_str_digits(0)
    runner_main(n_items, code)
    sys.stdout.flush()
    os._exit(0)
