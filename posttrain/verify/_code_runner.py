"""The verifier-side test runner for code tasks; its *source* is sent into the sandbox.

It is a standalone script (standard library only), run by ``pool.run_python(RUNNER_SOURCE,
stdin=payload)``. It keeps the model's code and the tests in two processes:

1. It makes itself non-dumpable (so a same-uid process cannot open ``/proc/<pid>/fd/3`` or
   ``/proc/<pid>/mem``), then forks the *candidate* process **before** reading the payload, so
   the tests, the nonce and the report fd never exist in the candidate's memory.
2. The candidate process starts a new session, points stdin/stdout/stderr at /dev/null, closes
   every other fd (fd 3 included), receives only the candidate source over a pipe, ``exec``s it
   and then serves calls: arguments and return values cross the pipe as type-tagged JSON.
3. The runner (parent) reads the payload from stdin, ``exec``s the task's prompt (trusted: tests
   use its helpers) and the test in its own namespace, and calls ``check(proxy)``. The proxy
   rebuilds each return value from the tagged JSON out of plain built-in types, so an
   always-equal object, an ``int`` subclass or a patched builtin cannot reach the comparison
   (CODE-04, CODE-05, CODE-09).
4. It writes one JSON report line per item, carrying the per-run nonce, to fd 3 (the sandbox's
   report channel). Exit codes and stdout decide nothing (CODE-01, CODE-14, CODE-20).

Batches: ``entry(n)`` verifies n candidates in one sandbox job (the job's fixed cost is then paid
once). All n candidate processes are forked up front, before the payload is read; before each
item the runner kills every process an earlier candidate left (anything not alive when the
runner started, other than the unused candidate processes) and removes files it left in the
writable places. A candidate process that died or stalled before receiving its candidate was
sabotaged by an earlier one: its item is reported as a runner error, and the verifier re-runs it
alone. If the cleanup fails, the remaining items get no report line and are re-run alone.

A candidate that exits, raises, hangs or kills the runner produces a report that says so, or no
report at all; the verifier scores both as a failure. Not covered here: isolation from the host,
which is the sandbox's job.
"""

import builtins
import gc
import json
import os
import select
import signal
import sys
import time
import traceback

MAX_MESSAGE_BYTES = 64 << 20
MAX_DEPTH = 200


# ------------------------------------------------------------------ tagged JSON (both sides)


def encode(x, depth=0):
    """A canonical, type-tagged JSON form of ``x``; exact built-in types only (no subclasses)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    t = type(x)
    if x is None:
        return ["none"]
    if t is bool:
        return ["bool", x]
    if t is int:
        return ["int", str(x)]
    if t is float:
        return ["float", x.hex()]
    if t is str:
        return ["str", x]
    if t is bytes:
        return ["bytes", x.hex()]
    if t is complex:
        return ["complex", x.real.hex(), x.imag.hex()]
    if t in (list, tuple, set, frozenset):
        return [t.__name__, [encode(e, depth + 1) for e in x]]
    if t is dict:
        return ["dict", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]]
    raise TypeError(f"a value of type {t.__name__} cannot cross to the test (use built-in types)")


_SEQ = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


def decode(v, depth=0):
    """Rebuild a value from ``encode``'s form, out of plain built-in types only."""
    if depth > MAX_DEPTH or type(v) is not list or not v or type(v[0]) is not str:
        raise ValueError("malformed value")
    tag = v[0]
    if tag == "none" and len(v) == 1:
        return None
    if tag == "bool" and len(v) == 2 and type(v[1]) is bool:
        return v[1]
    if tag == "int" and len(v) == 2 and type(v[1]) is str:
        return int(v[1])
    if tag == "float" and len(v) == 2 and type(v[1]) is str:
        return float.fromhex(v[1])
    if tag == "str" and len(v) == 2 and type(v[1]) is str:
        return v[1]
    if tag == "bytes" and len(v) == 2 and type(v[1]) is str:
        return bytes.fromhex(v[1])
    if tag == "complex" and len(v) == 3:
        return complex(float.fromhex(v[1]), float.fromhex(v[2]))
    if tag in _SEQ and len(v) == 2 and type(v[1]) is list:
        return _SEQ[tag](decode(e, depth + 1) for e in v[1])
    if tag == "dict" and len(v) == 2 and type(v[1]) is list:
        return {decode(k, depth + 1): decode(x, depth + 1) for k, x in v[1]}
    raise ValueError(f"malformed value tagged {tag!r}")


def describe(exc):
    """Exception -> a small dict: type, message, innermost line in the named file."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in ("candidate.py", "test.py"):
            line = {"file": frame.filename, "line": frame.lineno, "code": (frame.line or "")[:200]}
    try:
        message = str(exc)[:500]
    except Exception:  # noqa: BLE001 - a hostile __str__
        message = "<unprintable>"
    return {"type": type(exc).__name__, "message": message, "where": line}


def _compile(source, filename):
    """compile() with the source registered in linecache, so tracebacks can quote lines."""
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


# ------------------------------------------------------------------ framing over pipes


class Channel:
    def __init__(self, rfd, wfd):
        self.rfd, self.wfd, self.buf = rfd, wfd, b""

    def send(self, obj):
        data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def recv(self, deadline=None):
        """One message; raises EOFError on a closed pipe, TimeoutError past ``deadline``."""
        while b"\n" not in self.buf:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise EOFError
            self.buf += chunk
            if len(self.buf) > MAX_MESSAGE_BYTES:
                raise ValueError("message too large")
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)


# ------------------------------------------------------------------ candidate process


def candidate_main(rfd, wfd):
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    low = 3
    for fd in sorted((rfd, wfd)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    chan = Channel(rfd, wfd)
    hello = chan.recv()
    chan.send({"got": True})
    ns = {"__name__": "candidate", "__builtins__": builtins}
    try:
        exec(_compile(hello["source"], "candidate.py"), ns)
        fn = ns.get(hello["entry_point"])
        if not callable(fn):
            raise NameError(f"the program does not define a function {hello['entry_point']!r}")
    except BaseException as e:  # noqa: BLE001 - SystemExit at import included: reported, not obeyed
        chan.send({"import_error": describe(e)})
        os._exit(0)
    chan.send({"ready": True})
    while True:
        request = chan.recv()
        try:
            args = decode(request["args"])
            kwargs = decode(request["kwargs"])
            result = fn(*args, **kwargs)
            reply = {"ok": encode(result)}
        except BaseException as e:  # noqa: BLE001 - the candidate's exception goes to the test
            reply = {"exc": describe(e)}
        chan.send(reply)


# ------------------------------------------------------------------ runner (parent) process


def clean_error(info):
    """An exception record that came from the candidate process, reduced to known-safe fields.

    Everything the candidate process sends is untrusted: a malformed record must never make the
    runner fail (a runner error is an infra error, which is not scored: a way to dodge a 0).
    """
    if type(info) is not dict:
        return {"type": "ProtocolError", "message": "malformed error record", "where": None}
    where = info.get("where")
    if type(where) is dict and type(where.get("line")) is int and type(where.get("code")) is str:
        where = {"file": "candidate.py", "line": where["line"], "code": where["code"][:200]}
    else:
        where = None
    etype = info.get("type")
    message = info.get("message")
    return {
        "type": etype[:100] if type(etype) is str and etype.isidentifier() else "ProtocolError",
        "message": message[:500] if type(message) is str else "",
        "where": where,
    }


class CandidateGone(BaseException):
    """The candidate process died or timed out; a BaseException so `except Exception` in a test
    cannot swallow it."""


class CandidateError(Exception):
    """The candidate raised an exception that is not a built-in exception type."""


def _rebuild_exception(info):
    info = clean_error(info)
    cls = getattr(builtins, info["type"], None)
    msg = f"{info.get('type')}: {info.get('message')}" if cls is None else info.get("message", "")
    if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
        try:
            return cls(msg)
        except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError needs 5 args
            pass
    return CandidateError(msg)


class Proxy:
    def __init__(self, chan, pid, deadline, entry_point):
        self.chan, self.pid, self.deadline = chan, pid, deadline
        self.calls, self.gone = 0, None
        self.__name__ = entry_point

    def kill(self, why):
        if self.gone is None:
            self.gone = why
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def receive(self):
        try:
            return self.chan.recv(self.deadline)
        except TimeoutError:
            self.kill("timeout")
        except (EOFError, OSError, ValueError):
            self.kill("died")
        raise CandidateGone(self.gone)

    def __call__(self, *args, **kwargs):
        if self.gone is not None:
            raise CandidateGone(self.gone)
        self.calls += 1
        try:
            self.chan.send({"args": encode(list(args)), "kwargs": encode(dict(kwargs))})
        except OSError:
            self.kill("died")
            raise CandidateGone(self.gone) from None
        reply = self.receive()
        if type(reply) is not dict or not ("ok" in reply or "exc" in reply):
            self.kill("died")  # the candidate process broke the protocol
            raise CandidateGone(self.gone)
        if "ok" in reply:
            try:
                return decode(reply["ok"])
            except (ValueError, TypeError, KeyError, OverflowError) as e:
                raise CandidateError(f"malformed return value: {e}") from None
        raise _rebuild_exception(reply.get("exc") or {})


def load_check(payload, proxy):
    """exec the task's prompt and test in the runner's namespace; their check() function."""
    ns = {"__name__": "__verifier__"}
    prompt = payload["prompt"]
    for candidate_prompt in (prompt, prompt + "\n    pass\n"):  # a prompt may end at "def f():"
        try:
            code = _compile(candidate_prompt, "prompt.py")
        except SyntaxError:
            continue
        exec(code, ns)
        break
    ns[payload["entry_point"]] = proxy  # tests may name the function directly (HumanEval/33)
    results = []
    ns[_RECORD] = lambda line, exc: results.append(_assert_entry(line, exc))
    exec(_compile_test(payload["test"]), ns)
    check = ns.get("check")
    if not callable(check):
        raise LookupError("the task's test does not define check(candidate)")
    return check, results


_RECORD = "__posttrain_record__"


def _assert_entry(line, exc):
    if exc is None:
        return {"id": f"check:{line}", "outcome": "passed"}
    outcome = "failed" if isinstance(exc, AssertionError) else "error"
    return {"id": f"check:{line}", "outcome": outcome, "error": describe(exc)}


def _compile_test(source):
    """The test, with each top-level ``assert`` of ``check`` recording its own outcome.

    ``try: <assert> except Exception as e: record(line, e) else: record(line, None)``: the
    check goes on after a failed assertion, so the report lists every assertion (a process
    signal), while the overall verdict is unchanged: it passes only if every one passes and
    nothing else raised. ``CandidateGone`` is a BaseException and still ends the check.
    """
    import ast
    import linecache

    linecache.cache["test.py"] = (len(source), None, source.splitlines(True), "test.py")
    tree = ast.parse(source, "test.py")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            node.body = [_wrap_assert(st) if isinstance(st, ast.Assert) else st for st in node.body]
    return compile(ast.fix_missing_locations(tree), "test.py", "exec")


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
        entry = {"id": "check", "outcome": proxy.gone}
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
        entry = {"id": "check", "outcome": proxy.gone}
    return [entry, *results]


def _fork_candidate():
    """A fresh candidate process, forked before the payload is read: ``(pid, Channel)``."""
    c_read, p_write = os.pipe()
    p_read, c_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(p_write)
            os.close(p_read)
            candidate_main(c_read, c_write)
        finally:
            os._exit(0)
    os.close(c_read)
    os.close(c_write)
    return pid, Channel(p_read, p_write)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pids():
    """Live processes of the job's pid namespace (zombies awaiting their reaper excluded)."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    state = f.read().rpartition(b")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                out.add(int(name))
    return out


def sweep(keep):
    """SIGKILL every process of this job that is not in ``keep``; False if that cannot be done.

    A process that has been sent SIGKILL runs no more user code, so it is not waited for (its
    teardown can take milliseconds on a busy machine); new processes (forked before the kill
    landed) are found and killed on the next pass. Our own dead children are reaped.
    """
    killed = set()
    for _ in range(2000):
        others = _pids() - keep - killed
        if not others:
            _reap()
            return True
        for pid in others:
            _kill(pid)
        killed |= others
    return False


def _reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


WRITABLE = (".", "/tmp", "/dev/shm")


def _listing():
    out = {}
    for d in WRITABLE:
        try:
            out[d] = set(os.listdir(d))
        except OSError:
            out[d] = set()
    return out


def wipe(keep):
    """Remove what earlier candidates left in the job's writable places; False on failure."""
    for d, names in _listing().items():
        for name in names - keep[d]:
            if not _remove(os.path.join(d, name)):
                return False
    return True


def _remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            for entry in os.scandir(path):
                if not _remove(entry.path):
                    return False
            os.rmdir(path)
        else:
            os.unlink(path)
    except (OSError, RecursionError):
        return False
    return True


def run_item(item, pid, chan):
    """Verify one candidate in its (already forked) process: the item's report."""
    report = {"status": "completed"}
    deadline = time.monotonic() + float(item["deadline_s"])
    proxy = Proxy(chan, pid, deadline, item["entry_point"])
    try:
        chan.send({"source": item["candidate"], "entry_point": item["entry_point"]})
        got = chan.recv(time.monotonic() + 2.0)
    except (OSError, EOFError, TimeoutError, ValueError):
        got = {}
    if type(got) is not dict or got.get("got") is not True:
        # The process died or stalled before it ran this candidate: an earlier candidate of the
        # batch interfered with it. Not this candidate's doing, so not its failure.
        proxy.kill("lost")
        return {"status": "runner_error", "detail": "candidate process lost before start"}
    check, results = load_check(item, proxy)  # while the candidate process imports the candidate
    try:
        hello = proxy.receive()
    except CandidateGone:
        hello = {"gone": proxy.gone}
    if type(hello) is not dict or not ("ready" in hello or "import_error" in hello or "gone" in hello):
        proxy.kill("died")  # the candidate process broke the protocol
        hello = {"gone": proxy.gone}
    if hello.get("ready") is True:
        report["import"] = {"ok": True}
        report["tests"] = run_check(check, results, proxy)
    else:
        error = clean_error(hello["import_error"]) if "import_error" in hello else None
        report["import"] = {"ok": False, "error": error, "gone": proxy.gone if "gone" in hello else None}
        report["tests"] = []
    report["calls"] = proxy.calls
    proxy.kill("finished")
    return report


def _emit(report):
    data = json.dumps(report).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(3, view) :]


def _error(e):
    return {"status": "runner_error", "detail": "".join(traceback.format_exception_only(type(e), e))[-500:]}


def runner_main(n_items):
    """Verify ``n_items`` candidates, one fresh process each; one report line per item on fd 3."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
        dumpable_off = libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except Exception:  # noqa: BLE001 - reported as dumpable_off=False
        dumpable_off = False
    before, files = _pids(), _listing()
    gc.freeze()  # objects that exist now are never traversed by gc: fewer copy-on-write faults
    # Every candidate process is forked now, before the payload (tests, nonce) is read, so no
    # candidate ever has the tests of any item in its memory.
    children = [_fork_candidate() for _ in range(n_items)]
    try:
        payload = json.loads(sys.stdin.buffer.read())
        nonce, items = payload["nonce"], payload["items"]
        if len(items) != n_items:
            raise ValueError(f"payload has {len(items)} items, the runner was started for {n_items}")
    except BaseException as e:  # noqa: BLE001 - the runner's own failure is reported as such
        for pid, _ in children:
            _kill(pid)
        _emit(_error(e))
        return
    me = {os.getpid()}
    for index, (item, (pid, chan)) in enumerate(zip(items, children, strict=True)):
        if index and not (sweep(before | me | {p for p, _ in children[index:]}) and wipe(files)):
            break  # cannot clean up after the previous candidate: the rest stay unverified
        try:
            report = run_item(item, pid, chan)
        except BaseException as e:  # noqa: BLE001
            _kill(pid)
            report = _error(e)
        report.update({"nonce": nonce, "index": index, "dumpable_off": dumpable_off})
        _emit(report)
    for pid, _ in children:
        _kill(pid)


def entry(n_items=1):
    """What the sandbox runs: the runner's code object, then ``entry(n_items)``."""
    sys.set_int_max_str_digits(0)
    runner_main(n_items)
    sys.stdout.flush()
    os._exit(0)
