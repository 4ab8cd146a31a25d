"""Reward functions that break the contract on purpose, for the exploit fixtures and tests: a
response that makes one raise, return NaN, leave its range or burn its CPU budget must score a
``fail`` (never an ``infra_error``: a completion must not be able to get itself dropped from the
update), and the user must be told in one line.
"""

from __future__ import annotations

import re
from typing import Any


def parse_int(prompt: str, completion: str, answer: str, **data: Any) -> float:
    """``int(completion)``: raises ValueError on anything but an integer."""
    return 1.0 if int(completion) == int(answer) else 0.0


def ratio(prompt: str, completion: str, answer: str, **data: Any) -> float:
    """Characters of ``answer`` per character of the completion: NaN-free only for non-empty text,
    above 1 for a short completion."""
    return float(len(answer)) / len(completion) if completion else float("nan")


def backtracking(prompt: str, completion: str, pattern: str, **data: Any) -> float:
    """``re.fullmatch(pattern, completion)``: exponential on ``(a+)+$`` and ``aaaa...!``."""
    return 1.0 if re.fullmatch(pattern, completion) else 0.0


def text(prompt: str, completion: str, **data: Any) -> Any:
    """Returns a string, not a number."""
    return "good"
