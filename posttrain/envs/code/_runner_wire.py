"""The code runner's wire: type-tagged JSON values, framing over pipes, the records both sides send.

Part of the runner that runs inside the sandbox (``_runner.py`` says how the parts become one
script): standard library only, and its top level imports only built-in and C modules (the
template forks servers from a process that should stay small). Everything a server sends is
untrusted: parsed defensively, rebuilt out of plain built-in types with a depth limit, capped.
"""

import _json
import marshal
import os
import select
import time

MAX_MESSAGE_BYTES = 16 << 20
MAX_DEPTH = 200
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


def decode(v, depth=0, budget=None):
    """Rebuild a value from ``encode``'s form, out of plain built-in types only; ``budget``: the hash
    collisions its sets and dicts may still hold (``_few_collisions``), one count for the whole value."""
    budget = [MAX_COLLISIONS] if budget is None else budget
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
        items = [decode(e, depth + 1, budget) for e in v[1]]
        return _SEQ[tag](_few_collisions(items, budget) if tag in ("set", "frozenset") else items)
    if tag == "dict" and len(v) == 2 and type(v[1]) is list:
        pairs = []
        for pair in v[1]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("malformed dict entry")
            pairs.append((decode(pair[0], depth + 1, budget), decode(pair[1], depth + 1, budget)))
        _few_collisions([k for k, _ in pairs], budget)
        return dict(pairs)
    raise ValueError(f"malformed value tagged {tag[:40]!r}")


MAX_COLLISIONS = 1024


def _few_collisions(items, budget):
    """``items`` (a set's elements, a dict's keys), or ValueError when the value being decoded holds
    more than ``MAX_COLLISIONS`` items that share a hash with another of their set, over all its sets
    (``budget``, decremented): building a set costs time quadratic in those (distinct values of one
    hash, such as the multiples of 2**61 - 1, probe every slot before them), and the runner builds it
    outside any deadline of the candidate's: a reply of 120,000 held the runner until the job's
    timeout, a batch's whole budget, and 200 sets of 1,000 each (each under a limit per set) 1.7 CPU-s
    of 6 MiB. The hashes of hashes never collide (a hash value is its own hash), so counting them is
    linear; an unhashable item raises TypeError here as ``set()`` would."""
    if len(items) > 1:
        budget[0] -= len(items) - len({hash(x) for x in items})
        if budget[0] < 0:
            raise ValueError("too many values with colliding hashes")
    return items


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


# ------------------------------------------------------------------ records


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
