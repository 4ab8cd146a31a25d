"""What a math question asks, read from its prompt: its instruction ("Expand", "Factor",
"Simplify") and its own expressions (its ``$...$``), so that a box that only copies the
question fails (docs/tasks.md, "Answer forms").

- ``instructed_form``: "Expand ..." asks for the ``expanded`` form, "Factor ..." ("Factorise",
  "Factorize") for ``factored`` (``_poly.py``), and so do "in expanded form", "in factored form",
  when the gold is a polynomial in a variable: "Expand $\\ln(ab)$" or "What is the greatest
  common factor of 12 and 18?" ask for neither. The word counts only where it gives the
  instruction: at the start of the prompt or of a sentence, or after "please", "and", "then",
  "completely" or "fully" (``_INSTRUCTION_RE``), so "the factor $x-1$" gives none; a prompt that
  asks for both forms gets neither.
- ``is_echo``: a box that holds what an instruction to expand, factor or simplify is given on
  (the first ``$...$``, ``\\(...\\)`` or ``\\[...\\]`` after the word, or one side of a relation in
  it), as the form reader reads it (so spacing, ``\\left``, ``x^{2}`` for ``x^2`` do not matter),
  while the gold is written otherwise, is the question and not an answer ("Simplify $2x + 3x$"
  answered ``2x+3x``). "What is $2+2$?" has no such instruction: there the answer forms do the
  work; so do the polynomial forms, where a task has one (the verifier asks ``is_echo`` only
  of the others, so "Factor $x^2+4$", whose answer is its question, keeps ``4+x^2``).

Not caught: an echo written differently (``3x+2x`` for "Simplify $2x+3x$": "Simplify" asks for
no form here, only this echo check). Failed wrongly: an answer that is its question written as
the question writes it, where the gold is written otherwise ("Simplify $\\frac{3}{4}$", gold
``0.75``): such a task has nothing to do.
"""

from __future__ import annotations

import functools
import re

from posttrain.envs.math._check import normalise, split_relations
from posttrain.envs.math._form import is_name
from posttrain.envs.math._poly import is_polynomial
from posttrain.envs.math._read import Unreadable, Work, read

_INSTRUCTION_RE = re.compile(
    r"(?:^\s*|[.!?:;]\s+|\n\s*|\b(?:please|and|then|completely|fully)\s+)"
    r"(?:\*\*|__)?(expand|factori[sz]e|factor|simplify)\b", re.IGNORECASE)
_FORM_PHRASE_RE = re.compile(r"\b(?:in|into|as|the)\s+(?:its\s+)?(expanded|factored|factori[sz]ed)\s+form\b",
                             re.IGNORECASE)
"""``in factored form``, ``the expanded form``: an instruction too (a form only: what it is given
on may stand before it, so it has no echo check)."""
_INSTRUCTED = {"expand": "expanded", "factor": "factored", "factorise": "factored", "factorize": "factored",
               "expanded": "expanded", "factored": "factored", "factorised": "factored", "factorized": "factored"}
_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)


@functools.lru_cache(maxsize=4096)  # a pure function of the prompt, asked at every check
def instructions(prompt: str) -> frozenset[str]:
    """The instruction words of a prompt, lower case.

    >>> sorted(instructions("Expand $(x+1)^2$. Then simplify it.")), instructions("What is 2+2?")
    (['expand', 'simplify'], frozenset())
    >>> instructions("Write $x^2-1$ in factored form.")
    frozenset({'factored'})
    """
    words = [m.group(1) for m in (*_INSTRUCTION_RE.finditer(prompt), *_FORM_PHRASE_RE.finditer(prompt))]
    return frozenset(w.lower() for w in words)


@functools.lru_cache(maxsize=4096)  # a pure function of the task, asked at every check
def instructed_form(prompt: str, gold: str) -> str | None:
    """The form a prompt's instruction asks for, when its gold is a polynomial; else None.

    >>> instructed_form("Expand $(x+1)^2$.", "x^2+2x+1"), instructed_form("Factor $x^2-1$.", "(x-1)(x+1)")
    ('expanded', 'factored')
    >>> instructed_form("What is the greatest common factor of 12 and 18?", "6")
    """
    forms = {_INSTRUCTED[w] for w in instructions(prompt) if w in _INSTRUCTED}
    if len(forms) != 1:
        return None
    sides = [s for s in split_relations(normalise(gold))[0] if s and not is_name(s)]
    return forms.pop() if sides and all(is_polynomial(s) for s in sides) else None


def is_echo(prompt: str, answer: str, gold: str) -> bool:
    """Whether ``answer`` is what the prompt's instruction to expand, factor or simplify is given
    on, and the gold is written otherwise.

    >>> is_echo("Simplify $2x + 3x$.", "2x+3x", "5x"), is_echo("Simplify $2x + 3x$.", "5x", "5x")
    (True, False)
    """
    if not instructions(prompt):
        return False
    key = _key(answer)
    return key != _key(gold) and key in _question_keys(prompt)


@functools.lru_cache(maxsize=4096)
def _question_keys(prompt: str) -> frozenset[str]:
    """The keys of what each instruction is given on: the first math after the word."""
    spans = [(m.start(), next(g for g in m.groups() if g is not None)) for m in _MATH_RE.finditer(prompt)]
    keys: set[str] = set()
    for word in _INSTRUCTION_RE.finditer(prompt):
        text = next((text for start, text in spans if start >= word.end()), None)
        if text is not None:
            parts, relations = split_relations(normalise(text))
            keys |= {_key(text), *(_key(p) for p in parts if relations and p)}
    return frozenset(keys)


def _key(text: str) -> str:
    """One spelling of a value, as the form reader reads it (else its text without spaces)."""
    text = normalise(text)
    try:
        return read(text).key()
    except (Unreadable, Work, ValueError, ZeroDivisionError, RecursionError):
        return re.sub(r"\s+", "", text)
