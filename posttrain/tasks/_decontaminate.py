"""Decontamination of a recipe's pool: no training task may overlap an evaluation task.

``find_contamination(train, eval)`` pairs each evaluation task with a training task it overlaps,
by the n-gram check of ``posttrain tasks decontaminate`` (``normalize`` and ``ngrams`` here, which
``posttrain.evaluate.decontaminate`` uses: normalized words, 13-grams, Brown et al. 2020 appendix C) with three departures that pools of
generated tasks need, each measured:

- **a prompt is first compared verbatim** (case and runs of whitespace aside), and a short one
  (under 13 words) only so: normalizing drops the symbols, so the quickstart's ``67-x=0. x=`` and
  ``-67+x=0. x=`` (two problems) and reasoning-gym's ``Calculate 2 - 1.`` and ``Calculate 2 + 1.``
  read as one (19 false overlaps between the quickstart's train and eval splits);
- **boilerplate is not evidence**: a 13-gram found in more than ``BOILERPLATE`` of the tasks of
  either split or of both together (and at least 3) is a generator's template (boxnet's 200-word
  instructions are in every task; a BFCL task's rendering carries its classes' tool documentation,
  838 of 959 grams of tiny-bfcl's four tasks, in all four), not a leaked problem;
- **one shared gram is not a duplicate**: a generated task is its template with a few values, so
  a 13-gram of template words and one value is shared by distinct problems (a single gram flagged
  20-50 of 50 held-out tasks of countdown, arc_agi, boxnet and zebra_puzzles against 200 training
  tasks of another seed, none the same problem). An evaluation task overlaps a training task when
  at least ``CONTAINMENT`` of its other grams are in that one task (a near-duplicate: at most
  0.38 between distinct problems of those generators; 1.0 for the duplicates the example
  recipes' generated code and tool tasks have).

Both readings (the verbatim prompt and the words) see text as ``fold`` gives it: a copy written with
zero-width characters, soft hyphens, accents, fullwidth letters or Cyrillic and Greek look-alikes of
Latin letters is the text it copies (each such copy of 200 generated math or code tasks was clean),
and so is a copy whose numbers are re-spelt (``fold_numbers``: ``4x + -7 = 17`` written
``4.0x + -7.0 = 17.0``, with leading zeros or signs ``+``, or in Arabic-Indic digits; ``1000`` written
``1,000``; 0 of 200 generated math tasks so copied were caught before it, 200 now). Numbers that differ
stay apart (``0.5`` and ``5``, ``3.10`` and ``3.1``, a version ``1.2.3``), but ``12345`` reads as the
list ``12 345``; ``1e3`` and ``1000``, and ``0.5`` and ``0.50``, are still two spellings.

Solutions (``reference``) count with the prompt's grams (a short answer alone is not compared).
``check_pools(train, eval, mode)`` refuses an overlap (``ConfigError`` with the count and the first
example) or, with ``mode="drop"``, returns the training tasks without the contaminated ones and
how many it dropped.

Not here: paraphrase or embedding matching (they pass through, as in ``tasks decontaminate``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from posttrain.envs import is_registered, model_prompt
from posttrain.errors import ConfigError, UserError
from posttrain.types import Task

N = 13
BOILERPLATE = 0.02
"""A gram in more than this fraction of a split's tasks (and at least 3) is template text."""
CONTAINMENT = 0.8
"""The fraction of an evaluation task's non-template grams found in one training task that makes it
a near-duplicate of that task."""
_SPACE = re.compile(r"\s+")
_NON_ALNUM = re.compile(r"[^0-9a-z]+")


_LOOKALIKES = str.maketrans(
    "АВЕКМНОРСТХУаеіјосрхуѕԁԛԝһӏ" "ΑΒΕΖΗΙΚΜΝΟΡΤΥΧαικνορτυχ",
    "ABEKMHOPCTXYaeijocpxysdqwhl" "ABEZHIKMNOPTYXaikvoptux",
)
"""Cyrillic and Greek letters drawn as Latin ones (a prompt re-spelt with them reads the same to a person)."""


_MARKS = str.maketrans({**dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63", "-"), "\u066b": ".", "\u066c": ","})
"""Hyphens, dashes and the minus sign as ``-`` (a short prompt is compared with its symbols), and the
Arabic decimal and thousands separators as ``.`` and ``,``."""

_NUMBER = re.compile(r"(?<![\w.)\]])(?<!\d[,_])\+?(\d{1,3}(?:([,_ ])\d{3})(?:\2\d{3})*|\d+)(?:\.(\d+))?(?!\d|\.\d)")
"""A number standing alone (not inside a word such as ``x2`` or a dotted run such as ``1.2.3``, and
not the second of ``1,02``): an optional sign ``+`` (not after an operand: ``2+3`` keeps it), the
integer part with or without groups of thousands (``1,000``, ``1_000``, ``1 000``), a fraction."""


def _number(m: re.Match[str]) -> str:
    digits = re.sub(r"[,_ ]", "", m.group(1)).lstrip("0") or "0"
    head = len(digits) % 3 or 3
    whole = " ".join([digits[:head], *(digits[i : i + 3] for i in range(head, len(digits), 3))])
    frac = m.group(3)
    return whole if not frac or not frac.strip("0") else f"{whole}.{frac}"


def fold_numbers(text: str) -> str:
    """Each number of ``text`` in one spelling: no leading zeros, sign ``+`` or fraction of zeros, and
    thousands grouped by spaces (``+1,000.00``, ``001000``, ``1_000`` and ``1000`` read ``1 000``: the
    words that ``normalize`` makes of ``1,000``, so a list ``12,345`` and ``12 345`` stays one). Other
    fractions stay as written (``0.5`` and ``5``, ``3.10`` and ``3.1`` stay apart), and so do numbers
    inside words, dotted runs (versions ``1.2.3``, dates ``01.05.2024``) and lists written ``1,2``;
    ``1e3`` stays ``1e3``.

    >>> fold_numbers("4.0x + -7.00 = +017; 1,000 or 1000 or 1_000; 12345.50; 0.5 5 3.10 v1.2.3 2+3 x2")
    '4x + -7 = 17; 1 000 or 1 000 or 1 000; 12 345.50; 0.5 5 3.10 v1.2.3 2+3 x2'
    """
    return _NUMBER.sub(_number, text)


def fold(text: str) -> str:
    """``text`` as decontamination reads it: compatibility forms as their letters (fullwidth, ligatures),
    digits of any script as ASCII digits, format characters (zero-width spaces and joiners, soft
    hyphens) and combining marks (accents) dropped, Cyrillic and Greek look-alikes of Latin letters as
    those letters, dashes and the minus sign as ``-``, lowercased, and numbers in one spelling
    (``fold_numbers``: ``4.0`` is ``4``, ``1000`` is ``1,000``). A copy of a prompt spelt so is the
    prompt; two problems stay two (nothing else changes).

    >>> fold("Wh\u200bat is tw\u043e p\u00adlus \uff54hree?")
    'what is two plus three?'
    >>> fold("Solve \u0664x \u2212 7.0 = 1,000")
    'solve 4x - 7 = 1 000'
    """
    if text.isascii():  # nothing to fold but numbers (most prompts): no per-character pass
        return fold_numbers(text.lower())
    kept = "".join(_ascii_digit(c) for c in unicodedata.normalize("NFKD", text)
                   if unicodedata.category(c) not in ("Mn", "Me", "Cf"))
    return fold_numbers(unicodedata.normalize("NFKC", kept).translate(_LOOKALIKES).translate(_MARKS).lower())


def _ascii_digit(c: str) -> str:
    return str(unicodedata.decimal(c)) if not c.isascii() and c.isdecimal() else c


def normalize(text: str) -> list[str]:
    """Folded (``fold``) words with punctuation and whitespace runs removed.

    >>> normalize("Compute  2+3, then PRINT it!")
    ['compute', '2', '3', 'then', 'print', 'it']
    >>> normalize("C\u043emp\u200bute  2+3")
    ['compute', '2', '3']
    """
    return _NON_ALNUM.sub(" ", fold(text)).split()


def ngrams(text: str, n: int = 13, *, whole_if_short: bool = True) -> set[str]:
    """The word n-grams of a text; a text shorter than n words is one gram (or none).

    >>> sorted(ngrams("a b c d", 3))
    ['a b c', 'b c d']
    >>> ngrams("a, b", 3), ngrams("a, b", 3, whole_if_short=False)
    ({'a b'}, set())
    """
    if n < 1:
        raise UserError(f"--n must be >= 1, got {n}")
    words = normalize(text)
    if not words:
        return set()
    if len(words) < n:
        return {" ".join(words)} if whole_if_short else set()
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass(frozen=True)
class Contamination:
    """An evaluation task and the training task it overlaps, and how (``same prompt`` or the gram)."""

    eval_id: str
    train_id: str
    why: str


def find_contamination(train: Sequence[Task], eval: Sequence[Task], *, n: int = N) -> list[Contamination]:
    """Each evaluation task that overlaps a training task (module docstring), in eval order.

    >>> t = Task(id="t", domain="math", prompt="Solve 67-x=0.", fields={})
    >>> e = Task(id="e", domain="math", prompt="solve  67-x=0.", fields={})
    >>> find_contamination([t], [e])[0].why
    'same prompt'
    >>> find_contamination([t], [Task(id="e2", domain="math", prompt="Solve -67+x=0.", fields={})])
    []
    """
    train_index, eval_index = _Index(train, n), _Index(eval, n)
    both = {g: train_index.count.get(g, 0) + eval_index.count.get(g, 0) for g in train_index.count.keys() | eval_index.count.keys()}
    limit = max(3, math.ceil(BOILERPLATE * (len(train) + len(eval))))  # a few tasks: the splits together
    template = train_index.boilerplate() | eval_index.boilerplate() | {g for g, c in both.items() if c > limit}
    holders: dict[str, list[int]] = {}
    for i, grams in enumerate(train_index.grams):
        for g in grams - template:
            holders.setdefault(g, []).append(i)
    out = []
    for task, prompt, grams in zip(eval, eval_index.prompts, eval_index.grams, strict=True):
        j = train_index.first_prompt.get(prompt)
        if j is not None:
            out.append(Contamination(task.id, train[j].id, "same prompt"))
            continue
        own = grams - template
        shared: dict[int, int] = {}
        for g in own:
            for i in holders.get(g, ()):
                shared[i] = shared.get(i, 0) + 1
        if shared:
            i, k = max(shared.items(), key=lambda item: (item[1], -item[0]))
            if k >= CONTAINMENT * len(own):
                out.append(Contamination(task.id, train[i].id, f"{k} of its {len(own)} {n}-grams"))
    return out


class _Index:
    """The verbatim prompts and the grams of a list of tasks, with each gram's task count."""

    def __init__(self, tasks: Sequence[Task], n: int) -> None:
        self.prompts = [_verbatim(_shown(t)) for t in tasks]
        self.grams = [_grams(t, n) for t in tasks]
        self.first_prompt: dict[str, int] = {}
        self.count: dict[str, int] = {}
        for i, (prompt, grams) in enumerate(zip(self.prompts, self.grams, strict=True)):
            self.first_prompt.setdefault(prompt, i)
            for g in grams:
                self.count[g] = self.count.get(g, 0) + 1
        self.limit = max(3, math.ceil(BOILERPLATE * len(tasks)))

    def boilerplate(self) -> set[str]:
        return {g for g, c in self.count.items() if c > self.limit}


def _verbatim(text: str) -> str:
    return _SPACE.sub(" ", fold(text)).strip().casefold()


def _shown(task: Task) -> str:
    """What the model is shown: the domain's rendering of the task (its prompt field alone may be
    the same for every task, the question in other fields: a plugin's "Reverse the word.")."""
    return model_prompt(task) if is_registered(task.domain) else task.prompt


def _grams(task: Task, n: int) -> set[str]:
    out = ngrams(_shown(task), n, whole_if_short=False)
    if task.reference:
        out |= ngrams(task.reference, n, whole_if_short=False)
    return out


def check_pools(train: Sequence[Task], eval: Sequence[Task], *, mode: Literal["refuse", "drop"] = "refuse",
                origin: Mapping[str, str] | None = None, key: str = "tasks") -> tuple[list[Task], int]:
    """``(train, dropped)``: the training tasks (without the contaminated ones under ``drop``) and
    how many were dropped; under ``refuse`` an overlap is a ``ConfigError`` naming the count and the
    first pair (``origin``: task id -> where it came from, for the message)."""
    found = find_contamination(train, eval)
    if not found:
        return list(train), 0
    if mode == "drop":
        bad = {c.eval_id for c in find_contamination(eval, train)}  # every training task that overlaps
        return [t for t in train if t.id not in bad], len(bad)
    where = origin or {}
    first = found[0]
    raise ConfigError(
        f"{key}: {len(found)} of {len(eval)} evaluation tasks overlap a training task (e.g. eval "
        f"{first.eval_id!r}{_at(where, first.eval_id)} and train {first.train_id!r}{_at(where, first.train_id)}: "
        f"{first.why}); train on other tasks, or set {key}.contamination: drop to leave the overlapping "
        f"training tasks out")


def _at(where: Mapping[str, str], tid: str) -> str:
    return f" ({where[tid]})" if tid in where else ""
