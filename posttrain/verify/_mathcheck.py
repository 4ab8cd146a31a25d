"""Symbolic answer equivalence (math-verify) in worker processes, with a hard timeout.

Why a separate process: the model's answer is parsed by latex2sympy and compared by sympy, which
can take unbounded time (``10^{10^{10^{10}}}``) or memory, and math-verify's own timeouts use
``signal.alarm``, which works only in a main thread. The verifier runs in trainer threads, so
each comparison is sent to a small pool of long-lived worker processes (each under an address
space limit) and waited for with a deadline; a worker that misses it is killed and replaced.

Model text is only ever parsed with math-verify's ``LatexExtractionConfig`` (an ANTLR grammar
that builds sympy objects directly). The ``ExprExtractionConfig`` path calls sympy's
``parse_expr`` (an ``eval``) and is used for the *gold* answer only, which is task data.
(reward-hacking.md MATH-06.)

Run as a script, this file is the worker: JSON lines in on stdin, JSON lines out.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import threading
from dataclasses import dataclass

_WORKER_MEMORY_BYTES = 2 << 30


@dataclass(frozen=True)
class Equivalence:
    """The result of comparing one predicted answer with the gold answer."""

    equal: bool
    status: str
    """``ok`` | ``unparseable`` | ``answer_error`` | ``timeout`` | ``gold_unparseable`` | ``worker_error``.

    ``answer_error`` (math-verify raised on the answer) and ``timeout`` are the answer's doing;
    ``gold_unparseable`` and ``worker_error`` (the worker could not start) are not."""
    parsed: str | None = None
    detail: str | None = None


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-s", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )

    def wait_ready(self, timeout: float) -> bool:
        """Wait for the worker's start-up line (importing math-verify takes ~1 s, more under load)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return bool(ready) and json.loads(self.proc.stdout.readline() or b"{}").get("ready") is True

    def ask(self, request: dict[str, str], timeout: float) -> dict[str, object] | None:
        """Send one request; the reply, or None on timeout or a dead worker."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            return None
        return json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


class MathChecker:
    """A thread-safe pool of math-verify workers.

    ``timeout_s`` bounds one comparison; ``startup_timeout_s`` a worker's start (importing
    math-verify), which is not the answer's doing. Workers start lazily and are reused.
    """

    def __init__(self, size: int = 2, timeout_s: float = 10.0, startup_timeout_s: float = 120.0) -> None:
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)
        self._lock = threading.Lock()
        self._closed = False

    def equivalent(self, gold: str, pred: str) -> Equivalence:
        worker = self._idle.get()
        try:
            if worker is None or worker.proc.poll() is not None:
                worker = _Worker()
                if not worker.wait_ready(self.startup_timeout_s):
                    worker.kill()
                    worker = None
                    return Equivalence(False, "worker_error", detail="math-verify worker did not start")
            reply = worker.ask({"gold": gold, "pred": pred}, self.timeout_s)
            if reply is None:
                worker.kill()
                worker = None
                return Equivalence(False, "timeout", detail=f"no answer within {self.timeout_s:g}s")
            return Equivalence(
                equal=bool(reply.get("equal")),
                status=str(reply.get("status")),
                parsed=reply.get("parsed"),  # type: ignore[arg-type]
                detail=reply.get("detail"),  # type: ignore[arg-type]
            )
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        while not self._idle.empty():
            worker = self._idle.get_nowait()
            if worker is not None:
                worker.kill()


_shared: MathChecker | None = None
_shared_lock = threading.Lock()


def shared_checker() -> MathChecker:
    """The process-wide checker (workers are killed with the process: their stdin closes)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MathChecker()
        return _shared


# ---------------------------------------------------------------- worker side (runs as a script)


def _compare(gold: str, pred: str) -> dict[str, object]:
    from math_verify import LatexExtractionConfig, parse, verify

    try:
        gold_text = gold if gold.strip().startswith("$") else f"${gold}$"
        gold_parsed = parse(gold_text, extraction_config=[LatexExtractionConfig()], parsing_timeout=5)
        if not gold_parsed:  # plain-text gold (task data, trusted): math-verify's default extractors
            gold_parsed = parse(gold, parsing_timeout=5)
    except Exception as e:  # noqa: BLE001 - the task's fault: infra
        return {"equal": False, "status": "gold_unparseable", "detail": f"{type(e).__name__}: {e}"[:300]}
    if not gold_parsed:
        return {"equal": False, "status": "gold_unparseable", "parsed": None}
    try:
        pred_parsed = parse(f"${pred}$", extraction_config=[LatexExtractionConfig()], parsing_timeout=5)
        if not pred_parsed:
            return {"equal": False, "status": "unparseable", "parsed": None}
        equal = verify(gold_parsed, pred_parsed, timeout_seconds=5)
        return {"equal": bool(equal), "status": "ok", "parsed": str(pred_parsed[0])[:200]}
    except Exception as e:  # noqa: BLE001 - the answer's fault: a failure, never an infra error
        return {"equal": False, "status": "answer_error", "detail": f"{type(e).__name__}: {e}"[:300]}


def _worker_main() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_WORKER_MEMORY_BYTES, _WORKER_MEMORY_BYTES))
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything the libraries print goes to stderr, not into the protocol
    import math_verify  # noqa: F401  (import once, up front)

    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()

    for line in sys.stdin:
        try:
            request = json.loads(line)
            reply = _compare(str(request["gold"]), str(request["pred"]))
        except Exception as e:  # noqa: BLE001 - reported to the client, which decides
            reply = {"equal": False, "status": "worker_error", "detail": f"{type(e).__name__}: {e}"[:300]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    _worker_main()
