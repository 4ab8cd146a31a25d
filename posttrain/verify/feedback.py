"""Raw execution output -> the short, deterministic text the model reads before its next attempt.

Three steps, each usable alone:

- ``normalize(text)`` removes what differs between two runs of the same failure: timestamps,
  temporary paths, memory addresses, PIDs, durations; and trims trailing whitespace.
- ``classify_output(text)`` / ``classify_exception(error)`` name the failure class: ``syntax``,
  ``import``, ``assertion``, ``exception:<Type>``, ``timeout``, ``memory``, ``format``, ...
- ``render(error_class, ...)`` builds the message: a headline, the failing test and line, the
  normalized detail, a one-line retry hint; capped at ``MAX_CHARS``.
- ``brief(feedback)`` is that message on one line without the hint (a repair episode's observation).

The same failure always gives the same text (no clocks, no randomness, no host paths), so that
a repair round sees stable context and logs can be grouped by message.

Not here: deciding pass/fail (verifiers do that from structured evidence, never from this text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MAX_CHARS = 600
"""Upper bound on feedback length, in characters."""

_SUBS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"\b0x[0-9a-fA-F]{4,}\b"), "0x<addr>"),
    (re.compile(r"(?:/private)?/(?:tmp|var/tmp|var/folders|dev/shm|run/user)/[^\s'\":,)]*"), "<tmp>"),
    (re.compile(r"/(?:work|workspace|home/[^/\s]+|root)/[^\s'\":,)]*/([^/\s'\":,)]+)"), r"<dir>/\1"),
    (re.compile(r"(?i)\b(pid|process|proc)([ =:#]+)\d+"), r"\1\2<pid>"),
    (re.compile(r"/proc/\d+"), "/proc/<pid>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|seconds?|secs?|s)\b"), "<duration>"),
)

_HINTS: Mapping[str, str] = {
    "syntax": "Fix the syntax error; return one complete, valid Python module.",
    "import": "Use only the Python standard library; check module names.",
    "assertion": "Your function returned a wrong value for this test; re-read the specification.",
    "timeout": "Your program took too long; look for infinite loops or use a faster algorithm.",
    "memory": "Your program used too much memory; avoid building huge data structures.",
    "died": "Your program terminated the process; do not call exit() or kill processes.",
    "no_report": "The test runner did not finish; do not exit, kill processes or exhaust resources.",
    "not_called": "The tests never called your function; define it with the requested name.",
    "not_run": "No tests ran.",
    "format": "Follow the required answer format exactly.",
    "wrong_answer": "The answer is wrong; re-check your work.",
}
_HEADLINES: Mapping[str, str] = {
    "syntax": "SyntaxError in your code",
    "import": "Import failed",
    "assertion": "Test failed",
    "timeout": "Timed out",
    "memory": "Out of memory",
    "died": "The program exited or crashed while being tested",
    "no_report": "The test run ended without a report",
    "not_called": "Function never called",
    "not_run": "No tests ran",
}


def normalize(text: str | bytes) -> str:
    """Strip run-specific noise so that the same failure gives the same text.

    >>> normalize("at 0x7f3a2c1b9e80 in /tmp/tmpab12/x.py pid 4242 after 1.52s")
    'at 0x<addr> in <tmp> pid <pid> after <duration>'
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    for pattern, repl in _SUBS:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def classify_exception(error: Mapping[str, Any] | None) -> str:
    """A failure class from a runner's exception record ``{"type", "message", ...}``.

    >>> classify_exception({"type": "ZeroDivisionError"})
    'exception:ZeroDivisionError'
    """
    etype = str((error if isinstance(error, Mapping) else {}).get("type") or "")
    if etype in ("SyntaxError", "IndentationError", "TabError"):
        return "syntax"
    if etype in ("ImportError", "ModuleNotFoundError"):
        return "import"
    if etype == "AssertionError":
        return "assertion"
    if etype == "MemoryError":
        return "memory"
    if etype in ("TimeoutError",):
        return "timeout"
    return f"exception:{etype}" if etype else "error"


_TRACE_LAST_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)|AssertionError)\b(?::\s*(.*))?$",
                            re.MULTILINE)


def classify_output(text: str | bytes, *, timed_out: bool = False, oom_killed: bool = False) -> str:
    """A failure class from raw stderr/stdout of a program (the last exception line wins).

    >>> classify_output("Traceback (most recent call last):\\n  ...\\nKeyError: 'a'\\n")
    'exception:KeyError'
    """
    if timed_out:
        return "timeout"
    if oom_killed:
        return "memory"
    text = normalize(text)
    found = _TRACE_LAST_RE.findall(text)
    if not found:
        return "error"
    return classify_exception({"type": found[-1][0].rsplit(".", 1)[-1]})


def render(error_class: str, *, detail: str = "", test: str | None = None, line: int | None = None,
           code: str | None = None, headline: str | None = None) -> str:
    """The feedback message: headline, where, detail, hint; normalized and capped.

    >>> render("assertion", test="check", line=3, code="assert candidate(2) == 4")
    'Test failed in check, line 3: assert candidate(2) == 4\\nHint: Your function returned a wrong value for this test; re-read the specification.'
    """
    head = headline or _HEADLINES.get(error_class) or (
        f"{error_class.split(':', 1)[1]} raised" if error_class.startswith("exception:") else "Failed")
    where = ""
    if test:
        where = f" in {test}"
    if line is not None:
        where += f", line {line}"
    if code:
        where += f": {code.strip()}"
    parts = [head + where]
    if detail:
        parts.append(normalize(detail))
    hint = _HINTS.get(error_class) or ("Handle this case or fix the error it names."
                                       if error_class.startswith("exception:") else "")
    if hint:
        parts.append(f"Hint: {hint}")
    return _cap("\n".join(parts))


def brief(feedback: str) -> str:
    """The feedback on one line, without its retry hint: what a small model reads between attempts.

    The hint is a fixed sentence per failure class (``_HINTS``): it tells a reader nothing the
    headline does not, and it would sit between the failing test's expected value and the next
    attempt; a failing assert is shown without its place in ``check`` (the assert line is the
    place). Lines are joined with a space (no blank lines inside an observation).

    >>> brief(render("assertion", test="check", line=2, code="assert candidate(0) == 7"))
    'Test failed: assert candidate(0) == 7'
    """
    lines = [_IN_CHECK.sub(":", line.strip(), count=1) for line in feedback.splitlines()]
    kept = [line for line in lines if line and not line.startswith("Hint: ")]
    return " ".join(kept or [line for line in lines if line])


_IN_CHECK = re.compile(r" in check, line \d+:")  # the failing assert is shown; its place in check() adds nothing


def _cap(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[: MAX_CHARS - 16].rstrip() + "\n...[truncated]"


def for_code_failure(error_class: str, error: Mapping[str, Any] | None, program: str = "") -> str:
    """Feedback for a failed code verification, from the runner's structured error record."""
    error = error if isinstance(error, Mapping) else {}
    where = error.get("where") if isinstance(error.get("where"), Mapping) else {}
    etype, message = error.get("type"), error.get("message") or ""
    detail = f"{etype}: {message}" if etype and error_class != "assertion" else str(message)
    test = None
    if where.get("file") == "test.py":
        test = "check"
    elif where.get("file") == "candidate.py":
        test = "your code"
    return render(error_class, detail=detail, test=test, line=where.get("line"), code=where.get("code"))
