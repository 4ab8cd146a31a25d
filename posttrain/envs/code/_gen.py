"""Procedural HumanEval-style code tasks: a signature + docstring, a reference body, a check().

The two cases shown in the docstring are the visible ``test``; four more are the ``hidden_test``
(their failures are counted in feedback, never shown), so echoing the examples does not pass.
The hidden cases are chosen so that no table of the shown examples with a constant for every other
call passes them (``_hidden_cases``): their inputs are not the shown ones, their expected values are
not all one value, and one of them is none of the defaults ``0``, ``''``, ``[]``, ``None``, ``False``,
no shown output and not its own argument (so returning the argument fails too; where the template
has no such output, ``_hidden_cases`` says what stands in). Not covered: other guesses of the rule
from the examples alone (a candidate is judged only by these four cases).

Each template has a constant drawn per task (so two tasks of one template differ), a reference
implementation used both as the task's reference response and to compute the expected values
of the generated test cases, and an input sampler. Tests compare with ``==`` on built-in types.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posttrain.types import Task


@dataclass(frozen=True)
class _Template:
    name: str
    signature: str
    doc: str  # formatted with {k}
    body: str  # formatted with {k}; indented 4 spaces
    sample: Callable[[random.Random], tuple[Any, ...]]
    k_range: tuple[int, int]


def _ints(rng: random.Random, n: int = 8, lo: int = -20, hi: int = 40) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(0, n))]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdeilmnorstu") for _ in range(rng.randint(1, 7)))


_TEMPLATES = (
    _Template("sum_multiples", "def {f}(nums: list) -> int:",
              "Return the sum of the elements of nums that are divisible by {k}.",
              "    return sum(x for x in nums if x % {k} == 0)\n",
              lambda r: (_ints(r),), (2, 7)),
    _Template("shift_all", "def {f}(nums: list) -> list:",
              "Return a new list with {k} added to every element of nums.",
              "    return [x + {k} for x in nums]\n",
              lambda r: (_ints(r),), (1, 9)),
    _Template("count_above", "def {f}(nums: list) -> int:",
              "Return how many elements of nums are strictly greater than {k}.",
              "    return sum(1 for x in nums if x > {k})\n",
              lambda r: (_ints(r),), (-5, 20)),
    _Template("repeat_words", "def {f}(text: str) -> str:",
              "Return text with every space-separated word repeated {k} times, words joined by single spaces.",
              "    return ' '.join(w * {k} for w in text.split())\n",
              lambda r: (" ".join(_word(r) for _ in range(r.randint(0, 4))),), (2, 4)),
    _Template("running_max_plus", "def {f}(nums: list) -> list:",
              "Return the running maximum of nums, each value plus {k}: out[i] = max(nums[:i+1]) + {k}.",
              "    out, best = [], None\n    for x in nums:\n        best = x if best is None else max(best, x)\n"
              "        out.append(best + {k})\n    return out\n",
              lambda r: (_ints(r),), (0, 5)),
    _Template("rotate_left", "def {f}(items: list) -> list:",
              "Return items rotated left by {k} positions (wrapping around); an empty list stays empty.",
              "    if not items:\n        return []\n    s = {k} % len(items)\n    return items[s:] + items[:s]\n",
              lambda r: (_ints(r),), (1, 6)),
    _Template("chunk_sums", "def {f}(nums: list) -> list:",
              "Split nums into consecutive chunks of {k} elements (the last may be shorter) and return "
              "the list of chunk sums.",
              "    return [sum(nums[i:i + {k}]) for i in range(0, len(nums), {k})]\n",
              lambda r: (_ints(r, 10),), (2, 4)),
    _Template("digit_sum_mod", "def {f}(n: int) -> int:",
              "Return the sum of the decimal digits of abs(n), modulo {k}.",
              "    return sum(int(c) for c in str(abs(n))) % {k}\n",
              lambda r: (r.randint(-99999, 99999),), (3, 9)),
)


def _reference_fn(template: _Template, k: int, fname: str) -> Callable[..., Any]:
    ns: dict[str, Any] = {}
    exec(template.signature.format(f=fname) + "\n" + template.body.format(k=k), ns)  # trusted template code
    return ns[fname]


_DEFAULTS = (0, "", [], None, False)
"""What a candidate that does not know the answer returns: a hidden case expecting one of them tells little."""
_SPARE_DRAWS = 64


def _tells(value: Any, shown: list[Any], args: tuple[Any, ...] = ()) -> bool:
    """Whether ``value`` is none of the defaults, no shown output and none of ``args`` (the call's
    arguments), by ``==``: the test's comparison."""
    return not any(value == other for other in (*_DEFAULTS, *shown, *args))


def _is_decisive(fn: Callable[..., Any], examples: list[tuple[Any, ...]], hidden: list[tuple[Any, ...]]) -> bool:
    """Whether ``hidden`` fails every table of ``examples`` with one constant for other calls: its
    inputs are new and distinct, its expected values not all equal, and one of them ``_tells``."""
    keys = [repr(args) for args in hidden]
    outs = [fn(*args) for args in hidden]
    shown = [fn(*args) for args in examples]
    new = len(set(keys)) == len(keys) and not set(keys) & {repr(args) for args in examples}
    return new and any(out != outs[0] for out in outs) and any(
        _tells(out, shown, args) for args, out in zip(hidden, outs, strict=True))


def _hidden_cases(template: _Template, fn: Callable[..., Any], examples: list[tuple[Any, ...]],
                  drawn: list[tuple[Any, ...]], rng: random.Random) -> list[tuple[Any, ...]]:
    """The hidden cases: ``drawn`` when they are decisive (``_is_decisive``), otherwise as many of them
    as are new, behind a case that tells and one whose expected value differs from it, taken from
    ``_SPARE_DRAWS`` more samples of ``rng``. Where no output can tell (``digit_sum_mod`` modulo 3
    with the examples at 1 and 2), the first case is one that is not a default; the two cases still
    differ, so no constant answers them both."""
    if _is_decisive(fn, examples, drawn):
        return drawn
    seen = {repr(args) for args in examples}
    pool: list[tuple[Any, ...]] = []
    for args in [*drawn, *(template.sample(rng) for _ in range(_SPARE_DRAWS))]:
        if repr(args) not in seen:
            seen.add(repr(args))
            pool.append(args)
    shown = [fn(*args) for args in examples]
    firsts = [a for a in pool if _tells(fn(*a), shown, a)] or [a for a in pool if _tells(fn(*a), [])]
    seconds = [a for a in pool if firsts and fn(*a) != fn(*firsts[0])]
    hidden = [] if not seconds else [firsts[0], seconds[0], *[
        a for a in pool if a not in (firsts[0], seconds[0])][: len(drawn) - 2]]
    if len(hidden) != len(drawn):  # a template bug: its sampler barely varies
        raise RuntimeError(f"code/{template.name}: no {len(drawn)} decisive hidden cases in {len(pool)} inputs")
    return hidden


def generate(rng: random.Random, tid: str) -> Task:
    """One task: a random template, a random constant, 6 random test cases (2 visible, 4 hidden; the
    hidden ones redrawn, from a generator of the task's own, when they are not ``_is_decisive``, so
    the tasks that follow are the same either way)."""
    template = rng.choice(_TEMPLATES)
    k = rng.randint(*template.k_range)
    fname = f"{template.name}_{k}".replace("-", "m")
    fn = _reference_fn(template, k, fname)
    doc = template.doc.format(k=k)
    cases = [template.sample(rng) for _ in range(6)]
    examples = cases[:2]
    hidden = _hidden_cases(template, fn, examples, cases[2:], random.Random(f"{tid}/hidden"))
    example_lines = "".join(
        f"    >>> {fname}({', '.join(map(repr, args))})\n    {fn(*args)!r}\n" for args in examples
    )
    prompt = f"{template.signature.format(f=fname)}\n    \"\"\"{doc}\n\n{example_lines}    \"\"\"\n"
    def check(args_list: list[tuple[Any, ...]]) -> str:
        return "def check(candidate):\n" + "".join(
            f"    assert candidate({', '.join(map(repr, args))}) == {fn(*args)!r}\n" for args in args_list)

    return Task(
        id=tid,
        domain="code",
        prompt=prompt,
        # The docstring's examples are the visible tests; the other four are hidden (a count only).
        fields={"entry_point": fname, "test": check(examples), "hidden_test": check(hidden)},
        reference=template.body.format(k=k),
        tags=("code", template.name),
        metadata={"generator": f"code/{template.name}"},
    )
