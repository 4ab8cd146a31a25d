"""Feedback: normalisation, classification, rendering, length cap, determinism."""

from __future__ import annotations

import pytest

from posttrain.verify.feedback import (
    MAX_CHARS,
    classify_exception,
    classify_output,
    for_code_failure,
    normalize,
    render,
)

TRACE_A = """2026-11-29 20:01:02,123 run started pid=4242
Traceback (most recent call last):
  File "/tmp/tmpa1b2c3/main.py", line 7, in <module>
    f(<object at 0x7f3a2c1b9e80>)
  File "/work/job/abc123/sol.py", line 3, in f
    return 1 / 0
ZeroDivisionError: division by zero
finished in 0.53s
"""
TRACE_B = TRACE_A.replace("20:01:02,123", "21:11:12,999").replace("4242", "977").replace(
    "tmpa1b2c3", "tmpzz9").replace("0x7f3a2c1b9e80", "0x55d0aa01ff10").replace("abc123", "x7").replace("0.53s", "12.1s")


def test_normalize_strips_run_specific_noise() -> None:
    a, b = normalize(TRACE_A), normalize(TRACE_B)
    assert a == b
    for noise in ("4242", "0x7f3a", "tmpa1b2c3", "20:01:02", "0.53s"):
        assert noise not in a
    assert "ZeroDivisionError: division by zero" in a and "line 7" in a


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        (TRACE_A, "exception:ZeroDivisionError"),
        ('  File "x.py", line 1\n    def f(\n         ^\nSyntaxError: unexpected EOF while parsing', "syntax"),
        ("IndentationError: unexpected indent", "syntax"),
        ("ModuleNotFoundError: No module named 'numpyy'", "import"),
        ("Traceback...\nAssertionError", "assertion"),
        ("Traceback...\nMemoryError", "memory"),
        ("collections.abc.SomethingError: x", "exception:SomethingError"),
        ("all good", "error"),
    ],
)
def test_classify_output(text: str, cls: str) -> None:
    assert classify_output(text) == cls


def test_timeouts_and_oom_win() -> None:
    assert classify_output(TRACE_A, timed_out=True) == "timeout"
    assert classify_output("", oom_killed=True) == "memory"
    assert classify_exception({"type": "TabError"}) == "syntax" and classify_exception(None) == "error"


def test_render_names_test_line_and_hint_and_caps_length() -> None:
    text = render("assertion", test="check", line=12, code="assert candidate(3) == 9")
    assert text.startswith("Test failed in check, line 12: assert candidate(3) == 9")
    assert "Hint:" in text
    long = render("exception:ValueError", detail="x" * 5000)
    assert len(long) <= MAX_CHARS and long.endswith("[truncated]")


def test_code_failure_feedback_is_deterministic() -> None:
    err = {"type": "KeyError", "message": "'a' at 0xdeadbeef00", "where": {"file": "candidate.py", "line": 4,
                                                                         "code": "return d['a']"}}
    a, b = for_code_failure("exception:KeyError", err), for_code_failure("exception:KeyError", dict(err))
    assert a == b and "your code, line 4" in a and "0xdeadbeef00" not in a

