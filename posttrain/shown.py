"""Text a model or a task file wrote, as it shows: each character that would not show as itself
written as its escape, for a web page (``evaluate._svg.as_text``) and a terminal
(``cli._progress.plain``) alike.

``clipped``: a value's ``repr`` cut to a length, for a one-line message that quotes what it was given.

Such characters: C0/C1 controls (NUL, ESC, BEL), bidi embeddings, overrides, isolates and marks
(U+202E turns the rest of a line around), zero-width ones and fillers, variation selectors, BOM,
interlinear annotation marks, lone surrogates; tabs and line breaks too, unless kept. Covered: what
the text shows; not covered: what it says.
"""

from __future__ import annotations

import re

_HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u115f\u1160\u180e\u200b-\u200f"
                     "\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\ud800-\udfff]")
_BREAKS = re.compile("[\t\n\r]")


def _escape(match: re.Match[str]) -> str:
    c = ord(match.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str, *, breaks: bool = False) -> str:
    """``text`` with each character that would not show as itself written as its escape (``\\u202e``),
    so two ids differing only there read apart and none turns its line around; tabs and line breaks
    too unless ``breaks``.

    >>> print(visible("t\\u200b-1\\u202e\\r"), visible("a\\nb", breaks=True) == "a\\nb")
    t\\u200b-1\\u202e\\x0d True
    """
    text = _HIDDEN.sub(_escape, text)
    return text if breaks else _BREAKS.sub(_escape, text)


def clipped(value: object, limit: int = 80, *, quoted: bool = True) -> str:
    """``repr(value)`` (``str`` where not ``quoted``) cut to ``limit`` characters (its end ``...`` where
    cut), for a message that quotes a value it was given (a recipe's param, a list item) on one line.

    >>> clipped("abc"), clipped("x" * 100, 10), clipped("abc", quoted=False)
    ("'abc'", "'xxxxxx...", 'abc')
    """
    text = repr(value) if quoted else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
