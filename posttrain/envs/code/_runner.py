"""The verifier-side test runner for code tasks; its *code* is sent into the sandbox.

It is a standalone script (standard library only), run by ``pool.run_python(runner_source(n),
stdin=payload)``. The threat model, avenue by avenue with the tests that try each, is in
docs/code-verifier-threat-model.md. Three kinds of process:

- the *runner* (this job's process, a fork of the sandbox's fork server): it reads the payload
  (tests, expected values, the report nonce), runs each task's ``check`` and writes the report.
  It makes itself non-dumpable, ignores every signal it can ignore, and imports only from
  read-only places (its working directory and ``sys.path`` are read-only mounts), before any
  model code exists;
- the *host*: a fresh interpreter (``posix_spawn`` of ``python -I -S``), started before the
  payload is read. ``exec`` replaced its whole memory, so it never held the payload, not even in
  a freed buffer, whatever the fork server it descends from holds. It only imports standard
  modules that the job's candidates import (``PRELOAD``), from read-only places, and forks servers;
- a *server* per candidate and pass: a fork of the host, so it never held a test, an expected
  value or the nonce either. It runs the model's code and answers calls: arguments and return
  values cross a pipe as type-tagged JSON, rebuilt on the runner's side out of plain built-in
  types (CODE-04, CODE-05, CODE-09). Every exception of the candidate arrives in the test as
  ``CandidateError``, which no construct treats as control flow.

Per item: the runner loads the test (its top level runs before any model code of the item),
forks a server, and runs ``check(proxy)`` (pass 1). If that passes, it kills every process but
its own, wipes the writable places, checks that no SysV IPC object and no change to its own or
the host's limits survived, forks a second, fresh server and replays every distinct call of pass
1 in a shuffled order: each answer must equal the first pass's (pass 2). A candidate that answers
by call count instead of by its arguments fails.

The report: one JSON line per item, carrying the per-run nonce, on fd 3 (the sandbox's report
channel). Exit codes and stdout decide nothing (CODE-01, CODE-14, CODE-20). Once a candidate's
code has run, anything that goes wrong is reported as that candidate's failure (or, if even that
cannot be written, there is no report: a fail for the verifier); a runner error (an infra error)
is reported only when no model code of the item has run.

Batches: ``entry(n)`` verifies n candidates in one sandbox job. Before each item after the
first, the runner kills every process but its own and the host's and wipes what earlier
candidates left; if that fails, or the host cannot fork a server, the remaining items get no
report line and are re-run alone.
"""

import _ctypes
import _json
import _signal as signal
import builtins
import marshal
import os
import resource
import select
import sys
import time

# The module runs in the runner (a fork of the fork server, where json, ast, traceback, ... are
# imported already) and in the host (a fresh interpreter, which should start fast): its top level
# imports only built-in and C modules; runner-only functions import the rest where they need it.

MAX_MESSAGE_BYTES = 16 << 20
MAX_DEPTH = 200
WRITABLE = ("/work", "/tmp", "/dev/shm")
READ_ONLY_DIRS = ("/usr", "/")
PRELOAD = frozenset({
    "typing", "math", "random", "copy", "string", "hashlib", "collections", "itertools", "functools", "heapq",
    "bisect", "re", "fractions", "decimal", "statistics", "datetime", "operator", "textwrap", "dataclasses", "json",
})
"""Standard modules the host imports, once per job, when a candidate of the job imports them: both
servers of a candidate (its forks) then find them imported."""
SERVER_START_S = 10.0  # a forked server says hello within this (generous: a loaded 2-core host)
_SOURCES = {}  # file name -> lines, for the code of "candidate.py" / "test.py" in error records


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
        return ["int", format(x, "x")]  # hex: linear to parse, no digit limit
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
        return int(v[1], 16)
    if tag == "float" and len(v) == 2 and type(v[1]) is str:
        return float.fromhex(v[1])
    if tag == "str" and len(v) == 2 and type(v[1]) is str:
        return v[1]
    if tag == "bytes" and len(v) == 2 and type(v[1]) is str:
        return bytes.fromhex(v[1])
    if tag == "complex" and len(v) == 3 and type(v[1]) is str and type(v[2]) is str:
        return complex(float.fromhex(v[1]), float.fromhex(v[2]))
    if tag in _SEQ and len(v) == 2 and type(v[1]) is list:
        return _SEQ[tag](decode(e, depth + 1) for e in v[1])
    if tag == "dict" and len(v) == 2 and type(v[1]) is list:
        out = {}
        for pair in v[1]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("malformed dict entry")
            out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
        return out
    raise ValueError(f"malformed value tagged {tag[:40]!r}")


def canonical(v, depth=0):
    """``encode``'s form with set and dict entries sorted: equal values, equal text."""
    import json

    tag = v[0]
    if tag in ("list", "tuple"):
        return [tag, [canonical(e, depth + 1) for e in v[1]]]
    if tag in ("set", "frozenset"):
        return [tag, sorted((canonical(e, depth + 1) for e in v[1]), key=json.dumps)]
    if tag == "dict":
        return [tag, sorted(([canonical(k, depth + 1), canonical(x, depth + 1)] for k, x in v[1]), key=json.dumps)]
    return v


def describe(exc):
    """Exception -> a small dict: type, message, innermost line in candidate.py or test.py."""
    try:
        if isinstance(exc, CandidateError):
            etype, message = exc.kind, exc.detail
        else:
            etype = type(exc).__name__
            try:
                message = str(exc)[:500]
            except Exception:  # noqa: BLE001 - a hostile __str__
                message = "<unprintable>"
        line, tb, seen = None, exc.__traceback__, 0
        while tb is not None and seen < 10000:
            name = tb.tb_frame.f_code.co_filename
            if name in _SOURCES:
                lines, n = _SOURCES[name], tb.tb_lineno
                code = lines[n - 1].strip() if n and 0 < n <= len(lines) else ""
                line = {"file": name, "line": n, "code": code[:200]}
            tb, seen = tb.tb_next, seen + 1
        return {"type": str(etype)[:100], "message": str(message)[:500], "where": line}
    except Exception:  # noqa: BLE001 - a hostile exception object
        return {"type": "Exception", "message": "<undescribable>", "where": None}


def _compile(source, filename):
    """compile() with the source kept for error records."""
    _SOURCES[filename] = source.splitlines()
    return compile(source, filename, "exec")


# ------------------------------------------------------------------ framing over pipes
#
# runner -> server: marshal (the runner is trusted), an 8-byte length first;
# server -> runner: one JSON text per line, parsed defensively (the server is not trusted).


def _no_default(obj):
    raise TypeError(f"{type(obj).__name__} is not part of the protocol")


try:  # the C encoder, without importing json (and re) into the host
    _ENCODER = _json.make_encoder(None, _no_default, _json.encode_basestring_ascii, None, ":", ",",
                                  False, False, False)

    def dumps(obj):
        return "".join(_ENCODER(obj, 0))

    dumps({"probe": [True, None, 1, "x"]})
except Exception:  # noqa: BLE001 - another CPython: the json module

    def dumps(obj):
        import json

        return json.dumps(obj, separators=(",", ":"), allow_nan=False)


class ProtocolError(Exception):
    """The other side sent something that is not a message of the protocol."""


def _small_int(text):
    if len(text) > 30:
        raise ValueError("number too long")
    return int(text)


def _no_constant(name):
    raise ValueError(f"{name} is not allowed")


def parse(line):
    """One message from its bytes; any failure (deep nesting, bad UTF-8, ...) is ProtocolError."""
    import json

    try:
        return json.loads(line, parse_int=_small_int, parse_constant=_no_constant)
    except Exception as e:  # noqa: BLE001 - RecursionError and MemoryError included
        raise ProtocolError(f"malformed message ({type(e).__name__})") from None


class Channel:
    def __init__(self, rfd, wfd):
        self.rfd, self.wfd, self.buf, self.last_size = rfd, wfd, bytearray(), 0

    def _write(self, data):
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view) :]

    def send(self, obj):
        """A JSON line (what servers send)."""
        self._write(dumps(obj).encode() + b"\n")

    def send_raw(self, data):
        """A marshalled message, length first (what the runner sends)."""
        self._write(len(data).to_bytes(8, "big") + data)

    def send_obj(self, obj):
        self.send_raw(marshal.dumps(obj, 2))

    def recv_obj(self):
        """A message from the runner (a server's side; trusted)."""
        size = int.from_bytes(self._read_exact(8), "big")
        return marshal.loads(self._read_exact(size))

    def _read_exact(self, n):
        while len(self.buf) < n:
            chunk = os.read(self.rfd, max(n - len(self.buf), 1 << 16))
            if not chunk:
                raise EOFError
            self.buf += chunk
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def recv(self, deadline=None):
        """One message; EOFError on a closed pipe, TimeoutError past ``deadline``, ProtocolError."""
        start = 0
        while True:
            i = self.buf.find(b"\n", start)
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 1]
                self.last_size = i + 1
                return parse(line)
            if len(self.buf) > MAX_MESSAGE_BYTES:
                raise ProtocolError("message too large")
            start = len(self.buf)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk

    def close(self):
        for fd in (self.rfd, self.wfd):
            try:
                os.close(fd)
            except OSError:
                pass


# ------------------------------------------------------------------ process hardening


def libc(name, *args):
    """Call a C library function with int/None arguments (``_ctypes``: ``ctypes`` costs an import)."""
    return _ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None, 2), name), args)


def make_undumpable():
    """PR_SET_DUMPABLE 0: same-uid processes cannot open our /proc/<pid>/mem, fds, maps."""
    libc("prctl", 4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    return libc("prctl", 3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


def ignore_signals():
    """Ignore every signal that can be ignored (SIGKILL and SIGSTOP cannot; SIGCHLD stays)."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            pass


def _read_only(path):
    """The real path of ``path`` if it is (or would be created) on a read-only mount, else None."""
    real = os.path.realpath(path)
    probe = real
    while True:
        try:
            return real if os.statvfs(probe).f_flag & os.ST_RDONLY else None
        except FileNotFoundError:
            parent = os.path.dirname(probe)
            if parent == probe:
                return None
            probe = parent
        except OSError:
            return None


def confine_imports():
    """Working directory and every import path on read-only mounts: nothing a candidate writes
    can be imported (or read by linecache) here. Raises if no read-only directory exists."""
    home = next((d for d in READ_ONLY_DIRS if _read_only(d)), None)
    if home is None:
        raise RuntimeError(f"none of {READ_ONLY_DIRS} is a read-only mount")
    os.chdir(home)
    sys.path[:] = [p for p in (_read_only(e) for e in sys.path if isinstance(e, str) and e) if p]
    sys.path_importer_cache.clear()


# ------------------------------------------------------------------ the host and its servers

_HOST_BOOT = (
    "import marshal, os, sys\n"
    "b = bytearray()\n"
    "while True:\n"
    "    c = os.read(0, 1 << 20)\n"
    "    if not c:\n"
    "        break\n"
    "    b += c\n"
    "g = {'__name__': 'candidate_host'}\n"
    "exec(marshal.loads(bytes(b)), g)\n"
    "del b\n"
    "g['host_main']([int(a) for a in sys.argv[1:]])\n"
)


def host_main(fds):
    """The host: ``fds`` = [control, then (read, write) per server]. Forks server k on request k."""
    os.dup2(os.open(os.devnull, os.O_RDWR), 0)
    if not make_undumpable():
        os._exit(3)
    sys.set_int_max_str_digits(0)  # as in the runner: candidates may print big integers
    confine_imports()
    ignore_signals()
    import gc

    control, pairs = fds[0], list(zip(fds[1::2], fds[2::2], strict=True))
    requests, k = _lines(control), 0
    for request in requests:
        if request.startswith(b"i "):  # import (from read-only places) what the next candidate will
            for name in request[2:].decode().split(","):
                if name in PRELOAD:
                    try:
                        __import__(name)
                    except ImportError:
                        pass
            gc.freeze()  # fewer copy-on-write faults in the forks
            continue
        if request != b"s" or k == len(pairs):
            break
        rfd, wfd = pairs[k]
        k += 1
        pid = os.fork()
        if pid == 0:
            try:
                server_main(rfd, wfd)
            finally:
                os._exit(0)
        os.close(rfd)
        os.close(wfd)
        _reap()
    os._exit(0)


def _lines(fd):
    """The lines the runner writes to the host's control pipe, until it closes it."""
    buf = b""
    while True:
        while b"\n" not in buf:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                return
            buf += chunk
        line, _, buf = buf.partition(b"\n")
        yield line


def server_main(rfd, wfd):
    """A server (fork of the host): receives one candidate, then answers calls until killed."""
    os.setsid()
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError, RuntimeError):
                pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    low = 3
    for fd in sorted((rfd, wfd)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)
    os.chdir("/tmp")
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX message queue outlives it
    chan = Channel(rfd, wfd)
    chan.send({"pid": os.getpid()})
    hello = chan.recv_obj()
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
        request = chan.recv_obj()
        if "batch" in request:  # pass 2: many calls, one reply
            chan.send({"batch": [_answer(fn, marshal.loads(r)) for r in request["batch"]]})
        else:
            chan.send(_answer(fn, request))


def _answer(fn, request):
    try:
        result = fn(*decode(request["args"]), **decode(request["kwargs"]))
        return {"ok": encode(result)}
    except BaseException as e:  # noqa: BLE001 - the candidate's exception goes to the test
        return {"exc": describe(e)}


class ServerLost(Exception):
    """The host did not produce a working server; ``broken``: because the host is stopped or
    gone (something killed or stopped it), rather than slow."""

    def __init__(self, message, broken=False):
        super().__init__(message)
        self.broken = broken


class Host:
    """The fresh interpreter that forks servers; spawned before the payload is read."""

    def __init__(self, n_servers, code):
        control_r, self.control = os.pipe()
        blob = os.memfd_create("runner-code", os.MFD_CLOEXEC)
        view = memoryview(code)
        while view:
            view = view[os.write(blob, view) :]
        os.lseek(blob, 0, os.SEEK_SET)
        theirs, self.channels = [control_r], []
        for _ in range(n_servers):
            to_r, to_w = os.pipe()
            from_r, from_w = os.pipe()
            theirs += [to_r, from_w]
            self.channels.append(Channel(from_r, to_w))
        for fd in theirs:
            os.set_inheritable(fd, True)
        null = os.devnull
        actions = [(os.POSIX_SPAWN_DUP2, blob, 0), (os.POSIX_SPAWN_OPEN, 1, null, os.O_WRONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 2, null, os.O_WRONLY, 0), (os.POSIX_SPAWN_CLOSE, 3)]
        argv = [sys.executable, "-I", "-S", "-B", "-c", _HOST_BOOT, *map(str, theirs)]
        try:
            self.pid = os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=actions)
        finally:
            for fd in [*theirs, blob]:
                os.close(fd)
        self.next, self.imported = 0, set()

    def prepare(self, program):
        """Have the host import the standard modules ``program`` imports (from ``PRELOAD``)."""
        import re

        names = set(re.findall(r"^[ \t]*(?:from|import)[ \t]+([A-Za-z_]\w*)", program, re.MULTILINE))
        names = sorted((names & PRELOAD) - self.imported)
        if names:
            self.imported.update(names)
            try:
                os.write(self.control, f"i {','.join(names)}\n".encode())
            except OSError:
                pass  # server() finds out

    def server(self, item):
        """``(pid, Channel)`` of a fresh server that has been sent ``item``'s candidate;
        ServerLost if the host cannot make one."""
        if self.next >= len(self.channels):
            raise ServerLost("no server channel left")
        if _state(self.pid) not in ("S", "R", "D"):
            raise ServerLost("the host is stopped or gone", broken=True)
        chan = self.channels[self.next]
        self.next += 1
        deadline = time.monotonic() + SERVER_START_S
        try:
            os.write(self.control, b"s\n")
            while True:  # watching the host: one that gets stopped meanwhile never answers
                try:
                    hello = chan.recv(min(deadline, time.monotonic() + 0.05))
                    break
                except TimeoutError:
                    if _state(self.pid) not in ("S", "R", "D"):
                        chan.close()
                        raise ServerLost("the host is stopped or gone", broken=True) from None
                    if time.monotonic() >= deadline:
                        raise
        except (OSError, EOFError, TimeoutError, ProtocolError) as e:
            chan.close()
            broken = _state(self.pid) not in ("S", "R", "D")
            if not broken and not isinstance(e, TimeoutError):
                # The channel closed: the host is dying (its fds close before its state turns Z),
                # or it is alive and something else broke. Give a dying host a moment to show it.
                settle = time.monotonic() + 1.0
                while not broken and time.monotonic() < settle:
                    time.sleep(0.01)
                    broken = _state(self.pid) not in ("S", "R", "D")
            raise ServerLost("the host did not start a server in time", broken) from None
        if type(hello) is not dict or type(hello.get("pid")) is not int:
            chan.close()
            raise ServerLost("a server sent a malformed greeting")
        try:
            chan.send_obj({"source": item["candidate"], "entry_point": item["entry_point"]})
        except OSError:
            chan.close()
            raise ServerLost("a server did not take its candidate") from None
        return hello["pid"], chan


# ------------------------------------------------------------------ runner (parent) process


def clean_error(info):
    """An exception record that came from a server, reduced to known-safe fields.

    Everything a server sends is untrusted: a malformed record must never make the runner fail
    (a runner error is an infra error, which is not scored: a way to dodge a 0).
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
    """The candidate's process died, timed out or broke the protocol; a BaseException so that
    `except Exception` in a test cannot swallow it."""


class CandidateError(Exception):
    """Every exception the candidate raised, whatever its class: the test sees this one neutral
    class, which no construct treats as control flow (a real StopIteration would end a map())."""

    def __init__(self, kind, detail):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind, self.detail = kind, detail


def reply_key(reply):
    """What pass 2 compares: the canonical value, or the exception's class; None if malformed."""
    import json

    if type(reply) is dict and "ok" in reply:
        try:
            # Compare the value the test would see, re-encoded: a duplicated dict key or another
            # spelling of one value must neither hide a different answer nor make equal ones differ.
            return "ok:" + json.dumps(canonical(encode(decode(reply["ok"]))), separators=(",", ":"))
        except Exception:  # noqa: BLE001 - malformed values of every kind
            return None
    if type(reply) is dict and "exc" in reply:
        return "exc:" + clean_error(reply["exc"])["type"]
    return None


class Proxy:
    """What the test calls: forwards each call to the server and records (request, answer)."""

    def __init__(self, deadline, entry_point):
        self.chan, self.pid, self.deadline = None, None, deadline
        self.calls, self.gone, self.log = 0, None, []
        self.__name__ = entry_point

    def attach(self, pid, chan):
        self.pid, self.chan = pid, chan

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

    def exchange(self, request):
        """Send one request (marshalled), return the reply (a dict with "ok" or "exc")."""
        self._send(request)
        return self._valid(self.receive())

    def exchange_batch(self, requests):
        """Send many requests in one message; their replies, in order."""
        self._send(marshal.dumps({"batch": requests}, 2))
        reply = self.receive()
        if type(reply) is not dict or type(reply.get("batch")) is not list or len(reply["batch"]) != len(requests):
            self.kill("protocol")
            raise CandidateGone(self.gone)
        return [self._valid(r) for r in reply["batch"]]

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

    _SOURCES["test.py"] = source.splitlines()
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


_GONE = {
    "protocol": "the program wrote something that is not a reply to the verifier's channel",
    "died": "the program's process ended while being tested",
    "timeout": "the program did not answer in time",
}


def _gone(why):
    entry = {"id": "check", "outcome": why}
    if why in _GONE:
        entry["error"] = {"type": why.capitalize(), "message": _GONE[why], "where": None}
    return entry


def replay_order(keys, rng, avoid=None):
    """A shuffled order of the distinct calls whose first-pass answers, in that order, differ from
    ``avoid`` whenever the answers are not all equal. ``avoid`` is what a candidate that answers by
    position would send to this many calls: the first answers of pass 1 in call order, repeats
    included (default: ``keys``, the distinct calls' answers in test order). Such a candidate
    cannot give the same answers twice, deterministically."""
    avoid = list(keys if avoid is None else avoid)
    order = list(range(len(keys)))
    rng.shuffle(order)
    if len(set(keys)) > 1:
        for _ in range(64):
            if [keys[i] for i in order] != avoid:
                return order
            rng.shuffle(order)
        # Two orders with different answer sequences exist (the answers are not all equal): the
        # identity and a rotation differ everywhere the sequence is not constant; one of them is
        # not ``avoid``.
        rotation = [*range(1, len(keys)), 0]
        order = rotation if [keys[i] for i in rotation] != avoid else list(range(len(keys)))
    return order


def _stateful(message):
    return {"id": "check", "outcome": "stateful", "error": {"type": "Stateful", "message": message, "where": None}}


def first_answers(log):
    """``{request: (answer, reply size)}`` of pass 1; None if equal requests got different answers."""
    first = {}
    for request, key, size in log:
        if first.setdefault(request, (key, size))[0] != key:
            return None
    return first


REPLAY_CHUNK_BYTES = MAX_MESSAGE_BYTES // 4


def replay(first, proxy, log=()):
    """Pass 2: the distinct calls of pass 1, in a shuffled order, to a fresh server (in batches:
    one message, one reply); None if every answer equals the first pass's, else the report's
    check entry."""
    import random

    requests = list(first)
    by_position = [key for _, key, _ in log][: len(requests)]  # what answering by call count sends
    order = replay_order([first[r][0] for r in requests], random.Random(os.urandom(16)), by_position or None)
    start = 0
    while start < len(order):
        end, size = start, 0
        while end < len(order) and (end == start or size + first[requests[order[end]]][1] < REPLAY_CHUNK_BYTES):
            size += first[requests[order[end]]][1]
            end += 1
        chunk = [requests[i] for i in order[start:end]]
        try:
            replies = proxy.exchange_batch(chunk)
        except CandidateGone:
            return _gone(proxy.gone)
        for request, reply in zip(chunk, replies, strict=True):
            if reply_key(reply) != first[request][0]:
                return _stateful("a fresh process answered the same calls, in another order, differently: "
                                 "answers must depend on the arguments only")
        start = end
    return None


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _state(pid):
    """The state letter of ``pid`` from /proc ("" if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return ""


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


def tree():
    """Every path under the writable places (not following symlinks)."""
    out, todo = set(), list(WRITABLE)
    while todo:
        d = todo.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            out.add(e.path)
            if e.is_dir(follow_symlinks=False):
                todo.append(e.path)
    return out


def wipe(keep):
    """Remove every path under the writable places that is not in ``keep``; False on failure."""
    todo = list(WRITABLE)
    while todo:
        d = todo.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            return False
        for e in entries:
            if e.path not in keep:
                if not _remove(e.path):
                    return False
            elif e.is_dir(follow_symlinks=False):
                todo.append(e.path)
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


_IPC = (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl"))


def _ipc_ids():
    out = []
    for kind, fn in _IPC:
        with open(f"/proc/sysvipc/{kind}") as f:
            out += [(fn, int(line.split()[1])) for line in f.read().splitlines()[1:] if line.strip()]
    return out


def clear_ipc():
    """Remove every SysV IPC object (they outlive their creator); True once none is left."""
    try:
        ids = _ipc_ids()
        if ids:
            for fn, ident in ids:
                if fn == "semctl":
                    libc(fn, ident, 0, 0)  # IPC_RMID
                else:
                    libc(fn, ident, 0, None)
        for _ in range(1000):  # a removed segment lives until its last (dying) user detaches
            if not _ipc_ids():
                return True
            time.sleep(0.001)
    except Exception:  # noqa: BLE001 - OSError, ValueError, a missing symbol, ...
        pass
    return False


_RLIMITS = tuple(getattr(resource, n) for n in sorted(dir(resource)) if n.startswith("RLIMIT_"))


def attributes(pid):
    """What another same-uid process can change about ``pid``: limits, nice, CPUs, policy."""
    try:
        limits = [resource.prlimit(pid, r) for r in _RLIMITS]
        return (limits, os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)),
                os.sched_getscheduler(pid))
    except (OSError, ValueError):
        return None


def meta(path):
    """What a candidate could change about a path that outlives it, to carry state to the next
    run: mode, ``user.*`` extended attributes and, for a regular file, its size and content. (Times
    are restored, not compared: a directory's times change with every file made in it.)"""
    import stat

    st = os.lstat(path)
    xattrs = {}
    if not stat.S_ISLNK(st.st_mode):
        for name in os.listxattr(path, follow_symlinks=False):
            if name.startswith("user."):
                xattrs[name] = os.getxattr(path, name, follow_symlinks=False)
    content = None
    if stat.S_ISREG(st.st_mode):
        import hashlib

        with open(path, "rb") as f:
            content = (st.st_size, hashlib.sha256(f.read()).digest())
    return (st.st_mode, tuple(sorted(xattrs.items())), content), (st.st_atime_ns, st.st_mtime_ns)


def restore_meta(saved):
    """Put back the mode and ``user.*`` xattrs of every kept directory and the times of every kept
    path; True when each kept path is then as it was at the job's start."""
    import stat

    try:
        for path, (state, times) in saved.items():
            mode, xattrs, _ = state
            if stat.S_ISDIR(mode) and meta(path)[0] != state:
                os.chmod(path, stat.S_IMODE(mode))
                want = dict(xattrs)
                for name in os.listxattr(path, follow_symlinks=False):
                    if name.startswith("user.") and name not in want:
                        os.removexattr(path, name, follow_symlinks=False)
                for name, value in want.items():
                    os.setxattr(path, name, value, follow_symlinks=False)
            if meta(path)[0] != state:
                return False  # a kept file's content, mode or xattrs changed: state for the next run
            if not stat.S_ISLNK(mode):
                os.utime(path, ns=times, follow_symlinks=False)
    except (OSError, ValueError):
        return False
    return True


class Job:
    """What the runner restores between candidates and checks before trusting a fresh server."""

    def __init__(self, keep, files):
        self.keep, self.files, self.attrs, self.meta = keep, files, None, None

    def snapshot(self):
        self.attrs = {pid: attributes(pid) for pid in self.keep if pid != 1}
        self.meta = {}
        for path in (*WRITABLE, *sorted(self.files)):
            try:
                self.meta[path] = meta(path)
            except OSError:
                pass

    def clean(self):
        """Only the runner's processes left, the writable places as they were (entries, and the
        mode, xattrs and times of what was there at the start), no IPC object, no changed limits:
        True. Else False (the caller decides whose failure that is)."""
        ok = sweep(self.keep) and wipe(self.files) and clear_ipc() and restore_meta(self.meta or {})
        return ok and all(attributes(pid) == attrs for pid, attrs in (self.attrs or {}).items())


def _sabotage(message):
    return {"id": "check", "outcome": "sabotage", "error": {"type": "Sabotage", "message": message, "where": None}}


def run_item(item, host, job):
    """Verify one candidate: the item's report."""
    host.prepare(item["candidate"])
    proxy = Proxy(time.monotonic() + float(item["deadline_s"]), item["entry_point"])
    check, results = load_check(item, proxy)  # the test's top level runs before any model code
    try:
        proxy.attach(*host.server(item))
    except ServerLost as e:
        return {"status": "runner_error", "detail": f"candidate process lost before start: {e}", "lost": True}
    # From here on the candidate's code runs: whatever goes wrong is its failure.
    report = {"status": "completed", "import": {"ok": False}, "tests": [], "calls": 0}
    try:
        _run_candidate(item, host, job, proxy, check, results, report)
    except ServerLost as e:  # the host was too slow to start the second server (infra)
        report = {"status": "runner_error", "detail": f"second server: {e}", "lost": True}
    except BaseException as e:  # noqa: BLE001
        report["tests"] = [_sabotage(f"the runner was disrupted: {type(e).__name__}")]
    proxy.kill("finished")
    return report


def _handshake(proxy):
    try:
        hello = proxy.receive()
    except CandidateGone:
        return {"gone": proxy.gone}
    if type(hello) is not dict or not ("ready" in hello or "import_error" in hello):
        proxy.kill("protocol")
        return {"gone": proxy.gone}
    return hello


def _run_candidate(item, host, job, proxy, check, results, report):
    hello = _handshake(proxy)
    if hello.get("ready") is not True:
        error = clean_error(hello["import_error"]) if "import_error" in hello else _gone(hello.get("gone")).get("error")
        report["import"] = {"ok": False, "error": error, "gone": hello.get("gone")}
        return
    report["import"] = {"ok": True}
    report["tests"] = tests = run_check(check, results, proxy)
    report["calls"] = proxy.calls
    if tests[0]["outcome"] != "passed" or not proxy.log:
        return
    first = first_answers(proxy.log)
    if first is None:
        tests[0] = _stateful("two calls with equal arguments got different answers")
        return
    report["replayed"] = 0
    if len({key for key, _ in first.values()}) < 2:
        return  # one answer to every call: answering by position gives the same answers
    # Pass 2: a fresh server, in a clean job, answers the same calls in another order.
    proxy.kill("finished")
    if not job.clean():
        tests[0] = _sabotage("the candidate left processes, files, IPC objects or changed limits behind")
        return
    second = Proxy(time.monotonic() + float(item["deadline_s"]), item["entry_point"])
    try:
        second.attach(*host.server(item))
    except ServerLost as e:
        if not e.broken:  # slow, not broken: a starved machine, not this candidate's doing
            raise
        tests[0] = _sabotage("the candidate killed or stopped the process that starts candidates")
        return
    try:
        hello = _handshake(second)
        if hello.get("ready") is not True:
            tests[0] = _stateful("the program failed to load a second time")
            return
        verdict = replay(first, second, proxy.log)
    finally:
        second.kill("finished")
    report["replayed"] = len(first)
    if verdict is not None:
        tests[0] = verdict


def _emit(report):
    import json

    data = json.dumps(report).encode() + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(3, view) :]


def _error(e):
    import traceback

    return {"status": "runner_error", "detail": "".join(traceback.format_exception_only(type(e), e))[-500:]}


def runner_main(n_items, code):
    """Verify ``n_items`` candidates; one report line per item on fd 3 (module docstring)."""
    problem = None
    try:
        dumpable_off = make_undumpable()
    except Exception:  # noqa: BLE001
        dumpable_off = False
    if not dumpable_off:
        problem = RuntimeError("cannot make the runner non-dumpable")
    ignore_signals()
    files = tree()
    host = None
    try:
        confine_imports()
        import gc

        gc.freeze()  # objects that exist now are never traversed by gc: fewer copy-on-write faults
        # The host is spawned before the payload (tests, nonce) is read: no process that runs
        # model code descends from one that held it, and exec() replaced the host's memory.
        host = Host(2 * n_items, code)
    except Exception as e:  # noqa: BLE001 - reported per item as a runner error (infra)
        problem = problem or e
    import json

    try:
        payload = json.loads(sys.stdin.buffer.read())
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
    job = Job(_pids() | {host.pid}, files)
    job.snapshot()  # the runner's and the host's limits and the like, before any model code
    for index, item in enumerate(items):
        if index and not job.clean():
            break  # cannot clean up after the previous candidate: the rest stay unverified
        try:
            report = run_item(item, host, job)
        except BaseException as e:  # noqa: BLE001 - before any model code ran: our failure
            report = _error(e)
        report.update({"nonce": nonce, "index": index, "dumpable_off": dumpable_off})
        _emit(report)
        if report.get("lost"):
            break  # an earlier candidate broke the host: the rest are re-run alone
    _kill(host.pid)


def entry(n_items, code):
    """What the sandbox runs after the runner's code: ``code`` is that code, marshalled (the
    host execs it too)."""
    sys.set_int_max_str_digits(0)
    runner_main(n_items, code)
    sys.stdout.flush()
    os._exit(0)
