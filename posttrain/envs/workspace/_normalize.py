"""What a tool's output looks like to the model: the same command gives the same text.

``normalize_output(text, limit=)`` strips what differs between two runs of the same command, and
what a terminal would have drawn rather than printed, then cuts long output in the middle:

- ANSI escape sequences (colours, cursor moves, OSC titles) and other control characters but
  newline and tab; a carriage return keeps what the line ended up showing (progress bars);
- timestamps (ISO 8601, ``date``'s form, clock times) -> ``<time>``; test-run durations
  (pytest's ``in 0.12s``) -> ``in <duration>``;
- random paths (``/tmp/...``, ``/dev/shm/...``, ``tmpab12cd`` names) -> ``<tmp>``; process ids
  (``pid 4242``, ``/proc/4242``) -> ``<pid>``; memory addresses (``0x7f3a2c1b9e80``) -> ``0x<addr>``;
- output longer than ``limit`` characters keeps its head and tail, and says what it cut:
  ``[... 1234 characters cut ...]``.

Why not ``posttrain.verify.feedback.normalize``: that one also rewrites ``/work/...`` paths and every
duration, which is right for a verifier's feedback but would change the agent's own file paths and
the contents of files it prints. This one only touches what a run makes up.

    >>> normalize_output("\\x1b[32mok\\x1b[0m at 2026-01-02 03:04:05 in /tmp/tmpab12cd/x pid 42")
    'ok at <time> in <tmp> pid <pid>'
"""

from __future__ import annotations

import re

DEFAULT_LIMIT = 4000
"""Characters of one tool result the model sees (head and tail kept)."""

_ANSI = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SUBS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
                r"\d{2}:\d{2}:\d{2}(?: [A-Z]{2,5})? \d{4}\b"), "<time>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"\bin \d+(?:\.\d+)?s\b"), "in <duration>"),
    (re.compile(r"(?<![\w.])/(?:tmp|var/tmp|dev/shm)(?:/[^\s'\":,)\]]*)?"), "<tmp>"),
    (re.compile(r"\btmp[a-z0-9_]{6,}\b"), "<tmp>"),
    (re.compile(r"/proc/\d+"), "/proc/<pid>"),
    (re.compile(r"(?i)\b(pid|process)([ =:#]+)\d+"), r"\1\2<pid>"),
    (re.compile(r"\b0x[0-9a-fA-F]{8,}\b"), "0x<addr>"),
)


def _carriage(line: str) -> str:
    """What a terminal shows of a line rewritten with carriage returns: its last non-empty piece."""
    if "\r" not in line:
        return line
    pieces = [p for p in line.split("\r") if p]
    return pieces[-1] if pieces else ""


def cut_middle(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters, else its head and tail with the cut said.

    >>> cut_middle("a" * 10 + "b" * 10, 12)
    'aaaaaa\\n[... 8 characters cut ...]\\nbbbbbb'
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[len(text) - tail:]}"


def normalize_output(text: str | bytes, *, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` as the model sees it (module docstring)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = _ANSI.sub("", text)
    text = "\n".join(_carriage(line) for line in text.replace("\r\n", "\n").split("\n"))
    text = _CONTROL.sub("", text)
    for pattern, repl in _SUBS:
        text = pattern.sub(repl, text)
    text = "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))
    return cut_middle(text, limit)
