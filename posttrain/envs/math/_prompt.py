"""What a math question asks, read from its prompt: its instruction ("Expand", "Factor",
"Simplify") and its own expressions (its ``$...$``), so that a box that only copies the
question fails (docs/tasks.md, "Answer forms").

- ``instructed_form``: "Expand ..." asks for the ``expanded`` form, "Factor ..." ("Factorise",
  "Factorize") for ``factored`` (``_poly.py``), and so do "in expanded form", "in factored form",
  when the gold is a polynomial in a variable: "Expand $\\ln(ab)$" or "What is the greatest
  common factor of 12 and 18?" ask for neither. The word counts only where it gives the
  instruction: at the start of the prompt, of a sentence or of an item (``(a)``), or after "please",
  "and", "then", "completely" or "fully" (``_INSTRUCTION_RE``), so "the factor $x-1$" gives none; a
  prompt that asks for both forms gets neither.
- ``is_echo``: a box that holds what an instruction to expand or factor is given on (the first
  ``$...$``, ``\\(...\\)`` or ``\\[...\\]`` after the word, or one side of a relation in it), as
  the form reader reads it (so spacing, ``\\left``, ``x^{2}`` for ``x^2`` do not matter), while the
  gold is written otherwise, is the question and not an answer ("Expand $\\ln(ab)$" answered
  ``\\ln(ab)``). "What is $2+2$?" has no such instruction: there the answer forms do the work; so
  do the polynomial forms, where a task has one (the verifier asks ``is_echo`` only of the
  others, so "Factor $x^2+4$", whose answer is its question, keeps ``4+x^2``).
- ``simplify_question``: "Simplify" asks for no form; the checker measures an answer with a
  variable against the gold instead (``_simplify.py``): no longer than it, plus one, so that
  ``3x+2x`` or ``2x + 3x + 0`` for "Simplify $2x+3x$" (gold ``5x``) fail, and the question itself
  fails wherever it is longer than the gold at all. A number is simplified when it is in its form
  (``closed``: ``\\sqrt{8}`` is not; ``number``: ``\\frac{6}{8}`` is not), so "Simplify
  $\\frac34$" (gold ``0.75``) keeps ``\\frac34``: the question, already as simple as the gold, was
  refused as an echo before. Where the form reader does not read the question (``|x|+|x|``),
  only the echo is refused, as ``is_echo`` does for the other instructions. "Simplify" counts
  after a comma too ("Given $x > 0$, simplify ..."), and "simplified", "simplest", "lowest terms"
  and "combine like terms" anywhere but after a negation (a measure only): while only "Simplify"
  at the start of a sentence counted, "Write $2x+3x$ in simplest form", "(a) Simplify $2x+3x$"
  and "Given $x > 0$, simplify ..." took the question.
- ``question_values``: each value with a variable in the prompt's math, whatever the wording:
  where one has the gold's value, the question asks for the gold's form of it as "Simplify"
  does ("Evaluate $\\frac{x^2-1}{x-1}$", "What is $2x + 3x$?"), and the verifier measures the
  answer so (``_env.copied_question``): the question, copied or rearranged, took the reward.
- ``copies_unread_value``: a right box that copies a value of the prompt's math that the form
  reader names as work but does not read (``|x| + |x|``, ``\\binom{n}{2}``), which neither the
  measure nor ``is_echo`` (only under an instruction) sees.
- ``work_left``: a right box that holds more of an operator of work (``\\binom``, ``|``, ``\\max``,
  ``!``, ...) than the gold, where the prompt's math poses such work: the question's work padded
  (``\\binom{n}{2}+0``), rearranged (``\\gcd(4n, 2n)``) or respelled, which no copy check sees.

The prompt's math is each ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]`` and display environment
(``\\begin{equation}``, ``align*``, ...: ``_MATH_RE``).
"""

from __future__ import annotations

import functools
import re

from posttrain.envs.math._check import normalise, split_relations
from posttrain.envs.math._form import has_variable, is_name
from posttrain.envs.math._poly import is_polynomial
from posttrain.envs.math._read import Unreadable, Work, read

_INSTRUCTION_RE = re.compile(
    r"(?:^\s*|[.!?:;]\s+|\n\s*|\(\w{1,4}\)\s+|\b(?:please|and|then|completely|fully)\s+)"
    r"(?:\*\*|__)?(expand|factori[sz]e|factor|simplify)\b|,\s+(simplify)\b", re.IGNORECASE)
"""An instruction word where it gives the instruction; "simplify" also after a comma ("Given
$x > 0$, simplify ...": "factor" there may be the noun)."""
_SIMPLIFY_PHRASE_RE = re.compile(
    r"(?<!not )(?<!n't )(?<!never )\b(?:simplified|simplest|lowest\s+terms|combine\s+like\s+terms)\b", re.IGNORECASE)
""""in simplest form", "the simplified form of", "to lowest terms", "combine like terms": an
instruction to simplify too (a measure only: what it is given on may stand before it, so the
question's own expression is refused where it is longer than the gold by more than the slack)."""
_FORM_PHRASE_RE = re.compile(r"\b(?:in|into|as|the)\s+(?:its\s+)?(expanded|factored|factori[sz]ed)\s+form\b",
                             re.IGNORECASE)
"""``in factored form``, ``the expanded form``: an instruction too (a form only: what it is given
on may stand before it, so it has no echo check)."""
_INSTRUCTED = {"expand": "expanded", "factor": "factored", "factorise": "factored", "factorize": "factored",
               "expanded": "expanded", "factored": "factored", "factorised": "factored", "factorized": "factored"}
_DISPLAY_ENVS = (r"(?:equation|x{0,2}alignat|align|gather|multline|flalign|displaymath|math|eqnarray|split"
                 r"|dmath|dgroup|darray)\*?")
_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]"
                      rf"|\\begin\{{{_DISPLAY_ENVS}\}}(?:\{{\d+\}})?(.+?)\\end\{{{_DISPLAY_ENVS}\}}"
                      r"|\\ensuremath\s*\{((?:[^{}]|\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\})*)\}", re.DOTALL)
"""A prompt's math: ``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``, the display environments
(``\\begin{equation}...``: before they were read, "Evaluate \\begin{equation}\\frac{x^2-1}{x-1}
\\end{equation}" took its own expression for the gold ``x+1``; ``eqnarray``, ``alignat{n}``, ``split``
and breqn's ``dmath`` took it too, test_math_attacks9) and ``\\ensuremath{...}`` (braces three deep)."""


@functools.lru_cache(maxsize=4096)  # a pure function of the prompt, asked at every check
def instructions(prompt: str) -> frozenset[str]:
    """The instruction words of a prompt, lower case.

    >>> sorted(instructions("Expand $(x+1)^2$. Then simplify it.")), instructions("What is 2+2?")
    (['expand', 'simplify'], frozenset())
    >>> instructions("Write $x^2-1$ in factored form.")
    frozenset({'factored'})
    """
    words = [_word(m) for m in (*_INSTRUCTION_RE.finditer(prompt), *_FORM_PHRASE_RE.finditer(prompt))]
    return frozenset(w.lower() for w in words) | ({"simplify"} if _SIMPLIFY_PHRASE_RE.search(prompt) else set())


def _word(match: re.Match[str]) -> str:
    return next(g for g in match.groups() if g is not None)


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


@functools.lru_cache(maxsize=4096)  # a pure function of the prompt, asked at every check
def simplify_question(prompt: str) -> frozenset[str] | None:
    """The reader's keys of what the prompt's instruction to simplify is given on (each value of
    it the form reader reads), or None where the prompt gives no such instruction: the checker
    measures an answer against the gold there (``_simplify.py``), and refuses one of these where
    it is longer than the gold.

    >>> simplify_question("What is $2+2$?"), len(simplify_question("Simplify: $y = 2x + 3x$."))
    (None, 2)
    """
    if "simplify" not in instructions(prompt):
        return None
    return frozenset(key for word, _, values in _questions(prompt) if word == "simplify"
                     for key, readable in values if readable)


@functools.lru_cache(maxsize=4096)  # a pure function of the prompt, asked at every check
def question_values(prompt: str) -> tuple[str, ...]:
    """Each value with a variable in the prompt's math (each span ``_MATH_RE`` finds, or each side
    of a relation in it) that the form reader reads: what a box may
    copy from a question that asks to compute, evaluate or find an expression without the word
    "simplify" ("Evaluate $\\frac{x^2-1}{x-1}$", gold ``x+1``). The verifier measures an answer as
    under "Simplify" where one of these has the gold's value (``_env.copied_question``).

    >>> question_values(r"Evaluate $\\frac{x^2-1}{x-1}$ for $x > 1$.")
    ('\\\\frac{x^2-1}{x-1}', 'x')
    """
    out: list[str] = []
    for match in _MATH_RE.finditer(prompt):
        parts, _ = split_relations(normalise(next(g for g in match.groups() if g is not None)))
        for part in parts:
            try:
                readable = bool(part) and has_variable(read(part))
            except (Unreadable, Work, ValueError, ZeroDivisionError, RecursionError):
                readable = False
            if readable and part not in out:
                out.append(part)
    return tuple(out)


def copies_unread_value(prompt: str, answer: str, gold: str) -> bool:
    """Whether ``answer``, or a side of it, is a value of the prompt's math that the form reader does
    not read (``|x| + |x|``, ``\\binom{n}{2}``, ``\\max(x, x)``, ``\\gcd(2n, 4n)``, a determinant: work
    it names, or a spelling it does not know), copied as the question wrote it (up to spacing, as
    ``_key`` compares), where the gold is written otherwise. Asked of an answer the checker found
    equal to the gold: the prompt then gave the gold's value as work still to do, whatever its
    wording. ``question_values`` (measured by ``_env.copied_question``) and ``is_echo`` (only under an
    instruction) miss such a value: without an instruction, "What is $\\binom{n}{2}$?" (gold
    ``\\frac{n(n-1)}{2}``) took ``\\binom{n}{2}`` and "What is $|x| + |x|$?" (gold ``2|x|``) its own
    expression. Only the copy is caught here: a value the reader does not read has no size to
    measure (``|x| \\cdot 2`` passes); the copy padded or rearranged (``\\binom{n}{2} \\cdot 1``,
    ``\\max(x, x, x)``) is ``work_left``'s.

    >>> copies_unread_value("What is $|x| + |x|$?", "|x|+|x|", "2|x|"), copies_unread_value(
    ...     "What is $|x| + |x|$?", "2|x|", "2|x|")
    (True, False)
    """
    unread = _unread_keys(prompt)
    if not unread:
        return False
    text = normalise(answer)
    parts, relations = split_relations(text)
    gold_parts, _ = split_relations(normalise(gold))
    golds = {_plain(_key(_synonyms(g))[0]) for g in (gold, *gold_parts) if g}
    for part in parts if relations else [text]:  # a relation is never read whole: its sides are the values
        readable = _key(part)[1]
        key = _plain(_key(_synonyms(part))[0])
        if part and not readable and key in unread and key not in golds:
            return True
    return False


_WORK_OP_RE = re.compile(r"\\(?:[dt]?binom|choose|max|min|gcd|lcm|det|l?floor|l?ceil|[bp]?mod|Gamma|zeta)(?![A-Za-z])"
                         r"|\\gamma(?=\s*(?:\(|\\left\b))|\\begin\s*\{\s*vmatrix\s*\}|\\\||\||!")
"""The operators of work the form reader names but does not read: ``\\binom``, ``\\max``, ``\\gcd``, a
determinant, ``\\lfloor``, ``|`` (each bar), ``!``, ... (``_read._EVALUATE``), one name per sign."""
_WORK_OP_NAMES = {"\\dbinom": "\\binom", "\\tbinom": "\\binom", "\\choose": "\\binom", "\\begin{vmatrix}": "\\det",
                  "\\mod": "\\bmod", "\\pmod": "\\bmod", "\\floor": "\\lfloor", "\\ceil": "\\lceil", "\\gamma": "\\Gamma"}
"""One name per sign: the checker reads ``\\floor(x)``/``\\operatorname{floor}(x)`` as ``\\lfloor x \\rfloor``,
``\\ceil`` as ``\\lceil``, and ``\\gamma(n)`` as the gamma function (test_math_attacks9: the question's
``\\lfloor x \\rfloor + \\lfloor x \\rfloor`` boxed as ``\\operatorname{floor}(x)+\\operatorname{floor}(x)`` passed)."""


def work_left(prompt: str, answer: str, gold: str) -> str | None:
    """The operator of work a right ``answer`` still holds where the prompt's math poses work the
    gold has done, or None: the prompt's math holds more of some operator (``_WORK_OP_RE``:
    ``\\binom``, ``|``, ``\\max``, ``!``, ...) than the gold, and the answer more of some operator
    than the gold. The question's work with no-op padding around it (``\\binom{n}{2}+0``,
    ``1 \\cdot \\binom{n}{2}``, ``\\binom{n}{2}^1``, ``-(-\\binom{n}{2})``, ``|x|+|x|+0`` for ``2|x|``,
    ``\\max(x, x, x)`` for ``x``), rearranged (``\\gcd(4n, 2n)``) or respelled (``\\binom n2``) is
    not a copy ``copies_unread_value`` sees, and the reader cannot measure it: each passed. Asked
    of an answer the checker found equal to the gold, so the work is still to do; an answer with no
    more of any operator than the gold (``|x| \\cdot 2`` or ``2|x| + 0`` for ``2|x|``) is measured as
    before, and so is any answer where the prompt poses no such work (``\\binom{n+1}{2}`` for
    "Find $\\sum_{k=1}^n k$").

    >>> work_left(r"What is $\\binom{n}{2}$?", r"1\\cdot\\binom{n}{2}", r"\\frac{n(n-1)}{2}")
    '\\\\binom'
    >>> work_left("What is $|x|+|x|$?", "|x|+|x|+0", "2|x|"), work_left("What is $|x|+|x|$?", r"|x| \\cdot 2", "2|x|")
    ('|', None)
    """
    gold_ops = _work_ops(gold)
    posed = _posed_work(prompt)
    if not any(n > gold_ops.get(op, 0) for op, n in posed.items()):
        return None
    return next((op for op, n in _work_ops(answer).items() if n > gold_ops.get(op, 0)), None)


def _work_ops(text: str) -> dict[str, int]:
    """How many of each operator of work ``text`` holds (``_WORK_OP_RE``; ``\\lvert`` is ``|``)."""
    counts: dict[str, int] = {}
    for match in _WORK_OP_RE.finditer(_synonyms(normalise(text))):
        op = _WORK_OP_NAMES.get(re.sub(r"\s+", "", match.group()), re.sub(r"\s+", "", match.group()))
        counts[op] = counts.get(op, 0) + 1
    return counts


@functools.lru_cache(maxsize=4096)
def _posed_work(prompt: str) -> dict[str, int]:
    """``_work_ops`` over the prompt's math (each ``_MATH_RE`` span), summed."""
    counts: dict[str, int] = {}
    for match in _MATH_RE.finditer(prompt):
        for op, n in _work_ops(next(g for g in match.groups() if g is not None)).items():
            counts[op] = counts.get(op, 0) + n
    return counts


def _plain(key: str) -> str:
    """A key as the copy check compares it: unwrapped (``_unwrapped``), then without braces, so a
    group that changes nothing (``{|x|}+{|x|}``) is the copy it spells. Both sides are compared so
    (the prompt's values, the gold, the answer), and with ``_synonyms`` first: the question's
    ``|x| + |x|`` answered ``\\lvert x\\rvert+\\lvert x\\rvert`` or ``{|x|}+{|x|}`` passed as not the copy."""
    return _unwrapped(key).replace("{", "").replace("}", "")


def _unwrapped(key: str) -> str:
    """A key without the brackets around all of it (``(\\binom{n}{2})`` is ``\\binom{n}{2}``)."""
    while len(key) > 2 and (key[0], key[-1]) in (("(", ")"), ("{", "}"), ("[", "]")):
        depth, inner = 0, key[1:-1]
        for ch in inner:
            depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(ch, 0)
            if depth < 0:
                return key
        if depth:
            return key
        key = inner
    return key


_SYNONYMS_RE = re.compile(r"\\(?:lvert|rvert|vert)(?![A-Za-z])|\\[dt]binom(?![A-Za-z])")
_NAMED_OP_RE = re.compile(r"\\(?:operatorname\*?|mathrm|rm)\s*\{\s*(gcd|lcm|max|min|det|Gamma|zeta|mod|floor|ceil)\s*\}")
"""An operator of work written by name (``\\operatorname{gcd}``, ``\\mathrm{lcm}``): the sign's own spelling."""


def _synonyms(key: str) -> str:
    """A text with the spellings of one sign made one (``\\lvert x \\rvert`` is ``|x|``, ``\\dbinom``
    is ``\\binom``, ``\\operatorname{gcd}`` is ``\\gcd``): the gold's spelling of the copied value is
    the answer, not a copy, and a copy by another spelling is one (``\\operatorname{gcd}(2n, 4n)`` for
    ``\\gcd(2n, 4n)`` passed, the check counting only ``\\gcd``)."""
    key = _NAMED_OP_RE.sub(lambda m: "\\" + m.group(1) + " ", key)
    return _SYNONYMS_RE.sub(lambda m: "\\binom" if m.group().endswith("binom") else "|", key)


@functools.lru_cache(maxsize=4096)
def _unread_keys(prompt: str) -> frozenset[str]:
    """The ``_key`` of each math span of the prompt (of each side, where it is a relation) that the
    form reader does not read."""
    keys: set[str] = set()
    for match in _MATH_RE.finditer(prompt):
        text = normalise(next(g for g in match.groups() if g is not None))
        parts, relations = split_relations(text)
        for part in parts if relations else [text]:
            if part and not _key(part)[1]:
                keys.add(_plain(_key(_synonyms(part))[0]))
    return frozenset(keys)


def is_echo(prompt: str, answer: str, gold: str) -> bool:
    """Whether ``answer`` is what the prompt's instruction to expand or factor is given on (or
    to simplify, where the form reader does not read each value of that: what it reads, the
    checker measures: ``simplify_question``), and the gold is written otherwise.

    >>> is_echo(r"Expand $\\ln(ab)$.", r"\\ln(ab)", r"\\ln a + \\ln b")
    True
    >>> is_echo("Simplify $|x|+|x|$.", "|x|+|x|", "2|x|"), is_echo("Simplify $2x + 3x$.", "2x+3x", "5x")
    (True, False)
    """
    if not instructions(prompt):
        return False
    key, _ = _key(answer)
    return key != _key(gold)[0] and key in _question_keys(prompt)


@functools.lru_cache(maxsize=4096)
def _question_keys(prompt: str) -> frozenset[str]:
    keys: set[str] = set()
    for word, whole, values in _questions(prompt):
        if word != "simplify" or not all(readable for _, readable in values):
            keys |= {whole, *(key for key, _ in values)}
    return frozenset(keys)


@functools.lru_cache(maxsize=4096)
def _questions(prompt: str) -> tuple[tuple[str, str, tuple[tuple[str, bool], ...]], ...]:
    """What each instruction is given on (the first math after the word): the word, the key of
    that math, and the key of each of its values (the sides of a relation in it, else the whole),
    with whether the form reader read it."""
    spans = [(m.start(), next(g for g in m.groups() if g is not None)) for m in _MATH_RE.finditer(prompt)]
    out = []
    for word in _INSTRUCTION_RE.finditer(prompt):
        text = next((text for start, text in spans if start >= word.end()), None)
        if text is not None:
            parts, relations = split_relations(normalise(text))
            whole = _key(text)
            values = tuple(_key(p) for p in parts if p) if relations else (whole,)
            out.append((_word(word).lower(), whole[0], values))
    return tuple(out)


def _key(text: str) -> tuple[str, bool]:
    """One spelling of a value, as the form reader reads it (else its text without spaces), and
    whether the reader read it."""
    text = normalise(text)
    try:
        return read(text).key(), True
    except (Unreadable, Work, ValueError, ZeroDivisionError, RecursionError):
        return re.sub(r"\s+", "", text), False
