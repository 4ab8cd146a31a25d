"""Generators whose reasoning-gym scorer must not see an answer as it is, and the fix for each.

Found by playing every scorer as a policy would (the exploit fixtures of ``_fixtures.py``, the
sweep in tests/envs/test_rg.py). Three kinds of fault, measured on 0.1.25:

- **Code execution.** Nine scorers evaluate the answer: ``eval(answer)`` (binary_matrix,
  n_queens, spiral_matrix, string_insertion, when the answer is not the oracle string) or sympy's
  ``parse_expr`` (countdown, puzzle24, polynomial_multiplication, simple_integration,
  intermediate_integration), which is ``eval`` too: ``<answer>__import__('os').system(...)
  </answer>`` ran in the check worker. The first four only ever give partial credit on that path,
  so their scorer is replaced by its exact-match rule; the five sympy ones see an answer only when
  it is an arithmetic expression of numbers, one-letter variables and named functions
  (``_EXPRESSION``), which cannot name anything else.
- **A full score for a non-answer.** game_of_life_halting scores ``bool(answer) == bool(oracle)``:
  any non-empty text passes (both "True" and "False" are true). coin_flip gives 1.0 to an answer
  whose digits start like the oracle's (``1e308`` for an oracle of 1). complex_arithmetic scores
  ``min(1, exp(-distance))``, and ``min(1, nan)`` is 1: ``nan`` passed. propositional_logic passed
  any statement that follows and is not a bare variable: the premises joined by ∧ passed every task
  (a premise restated, most): its question now asks for a clause that follows from the premises only
  together (``_conclusion``), and tasks from contradictory premises, from which any answer follows,
  or that give no such clause are not generated. sokoban
  skips every character that is not a move, so the solution in prose passed. puzzle24 never checks that
  the given numbers were used: any expression of four in-range numbers that makes 24 passed every
  task. number_sorting rejects a number farther than 1 from the expected one by ``>``, which NaN
  never is: a list of NaN as long as the question's passed (and rounded numbers, which spare the
  ordering of two within 1 of each other): now each number must be the question's. boxnet skips
  every action that breaks the rules, so a plan-free sweep of every box through every square
  matched them all: now each action must be legal (``_solvers.py``). intermediate_integration's
  own references sometimes leave an ``Integral(...)`` unevaluated, which passes any task: refused,
  and such tasks are not generated.
- **Looser than the prompt asks.** pool_matrix asks for 2 decimals and allowed 1%: 4.3 passed for
  4.33; decimal_arithmetic asks for 12 significant digits and allowed a unit of the operands' last
  decimal; number_format passed any number within 0.01 of the pick (a rounding, or a wrong candidate
  as close; its top level shows every candidate as one value, so it is not generated); coin_flip's
  absolute 1e-4 passed 0 for any rare event; puzzle24 truncates the value to an
  integer (7*7/(6-4) = 24.5 made 24) and, with countdown, read 3.5 as the given 3 and 5 (a decimal
  point is no operation); codeio and game_of_life compare JSON with Python's ``==``, where ``true`` is
  ``1`` (graph_color took ``true`` for colour 1 the same way). Each now scores what its prompt asks.
- **The right answer among others.** The scorer reads only the first item: gsm_symbolic (the first
  number, and never a leading minus: its own negative answers failed), fraction_simplification (the first fraction), time_intervals (the first field);
  word_sorting counts only the first len(oracle) words, letter_jumble the oracle's words in
  place, figlet_font 0.1 a letter in place capped at 1; advanced_geometry's orthocenter reads the
  first two items; polynomial_equations drops
  items that are not numbers, rush_hour skips illegal moves and any text between moves (every
  option's move list at once ended solved: now each move must be legal, ``_solvers.py``); spell_backward's partial credit sums to
  slightly above 1 in floats; the sympy ones read Python's ``A or B`` as A, and the integration
  ones take another task's answer in another letter added on (a constant to d/dx). Each now asks
  that the answer is one value of the expected form.

- **A right answer refused.** string_manipulation's rules delete some strings down to nothing, and the
  default scorer gives an empty answer 0, its own reference too: its scorer is replaced by the exact
  match, and its empty answer allowed (``EMPTY_ANSWERS``).

- **The answer told by where and how it is written.** number_format lists its base first and each
  other candidate as base + delta, written with the float noise of the sum: the second candidate
  passed 35-42% of its default tasks, the most decimals 36% at level 2, against 22-31% blind. Its
  candidates are shown shuffled and written from their 3 decimals (``shape``), at least 4 a task.

- **The answer told by the board.** game_of_life_halting's only dying patterns are diagonal lines and
  each of its oscillators has two cells side by side: "False if two live cells touch side by side" passed
  every task. Its boards are posttrain's (``_life.py``), answered by simulation, and each answer is held
  to half of the boards with and without such a pair (``tells``).

- **Too few entries to balance.** circuit_logic's outputs are 0 in 62% of its entries: at 4 draws a task
  the entries ran out before ``_generate.balanced`` had its even split, the passed-over 0s filled the
  rest, and "0" passed 19 of 32 default tasks; it draws 8 (``draws``).

``before`` runs before the scorer (a reason to refuse the answer unseen), ``replace`` instead of it,
``check`` after a full score (a reason to refuse it anyway), ``shape`` and ``keep`` at generation (how
an entry is shown; an entry posttrain has no reference for; one whose reference fails its check is
dropped anyway, ``_generate._kept``).
Honest answers keep their meaning: every reference of every generator scores 1 (tests/envs/test_rg.py,
tests/envs/test_rg_references.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

Entry = Mapping[str, Any]
Refusal = Callable[[Any, str, Entry], "str | None"]


@dataclass(frozen=True)
class Rule:
    """How one generator's scorer is held (module docstring); each hook gets (dataset, answer, entry)."""

    before: Refusal | None = None
    replace: Callable[[Any, str, Entry], float] | None = None
    check: Refusal | None = None
    keep: Callable[[Entry], bool] | None = None
    draws: int = 4
    """Entries the generator is configured to make per task asked for (and 16 more), of which ``keep``
    may drop some and ``_generate.balanced`` pass over more: the dataset's size, which some generators'
    entries depend on."""
    ask: str = ""
    """What the generator's question is missing, added to it (propositional_logic: which conclusions count)."""
    shape: Callable[[Entry], dict[str, Any]] | None = None
    """The generator's entry as posttrain shows it, made from the generator's (number_format: its
    candidates in an order and a writing that do not give the answer away); deterministic in the entry."""
    tells: Callable[[Entry], str | tuple[str, ...]] | None = None
    """What the question shows that tells its likely answer without solving it (circuit_logic: the gate
    that makes the output): ``_generate.balanced`` holds each answer to its share among the entries that
    show the same, as it holds a constant among all; several things shown, each on its own."""
    open_answers: bool = False
    """Any valid answer scores 1 and another task's is often valid here too (propositional_logic: a
    weaker conclusion from the same variables; graph_color: a coloring of a sparse graph; n_queens:
    a board with no queen placed; jugs: the same pouring reaches the same amount), so "another
    task's answer" is no exploit fixture for them."""


_FUNCTIONS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "sinh", "cosh", "tanh",
                        "asinh", "acosh", "atanh", "exp", "log", "sqrt", "pi", "E", "I"})
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z]+)|(\*\*|[-+*/()]))")


def _expression(answer: str, *, names: bool, symbols: frozenset[str] | None = None) -> str | None:
    """None when ``answer`` is only numbers, operators, parentheses and (with ``names``) one-letter
    variables (those of ``symbols`` when given) and the functions above; else why not. Nothing in it
    can reach ``eval``'s builtins. Without ``names`` the numbers are integers: the given numbers
    as they are."""
    at = 0
    text = answer.rstrip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None:
            return f"not an arithmetic expression (at {text[at:at + 12]!r})"
        if not names and "." in (m.group(1) or ""):
            return f"{m.group(1)!r} is not one of the given numbers (a decimal point joins two of them)"
        name = m.group(2)
        if name is not None and name not in _FUNCTIONS and (
                not names or len(name) > 1 or (symbols is not None and name not in symbols)):
            allowed = "a one-letter variable" if symbols is None else f"one of {', '.join(sorted(symbols))}"
            return f"{name!r} is not a number, {allowed} or a known function"
        if m.group(3) == "**" and not names:
            return "'**' is not one of the allowed operators"
        at = m.end()
    return None


def _arithmetic(dataset: Any, answer: str, entry: Entry) -> str | None:
    return _expression(answer, names=False)


def _makes(target: Callable[[Entry], int]) -> Refusal:
    """The expression's exact value (sympy's rationals) is the target. puzzle24's scorer takes
    ``int()`` of the value, so 7*7/(6-4) = 24.5 made 24; countdown's ``np.isclose`` allows 1e-5 of the
    target. Runs after ``_arithmetic``: the answer is numbers and + - * / ( ) only."""

    def refuse(dataset: Any, answer: str, entry: Entry) -> str | None:
        from sympy import Integer, parse_expr

        return None if parse_expr(answer) == Integer(target(entry)) else "its exact value is not the target"

    return refuse


def _all(*refusals: Refusal) -> Refusal:
    """The first of ``refusals`` that refuses the answer."""

    def refuse(dataset: Any, answer: str, entry: Entry) -> str | None:
        return next((why for r in refusals if (why := r(dataset, answer, entry)) is not None), None)

    return refuse


def _symbolic(dataset: Any, answer: str, entry: Entry) -> str | None:
    return _expression(answer, names=True)


def _antiderivative(dataset: Any, answer: str, entry: Entry) -> str | None:
    """An expression in the integration variable and C only: another letter is a constant the
    derivative drops, so any other task's answer in another variable added on still passed."""
    if "Integral" in answer:
        return "an unevaluated Integral is not an answer"
    return _expression(answer, names=True, symbols=frozenset({str(entry["metadata"]["variable"]), "C"}))


def _models(entry: Entry) -> tuple[list[str], list[int], int]:
    """The entry's variables, each premise's models as a bit mask over the 2^n assignments (bit i:
    ``itertools.product((False, True), repeat=n)``'s i-th), and the mask of all assignments."""
    from itertools import product

    from reasoning_gym.logic.propositional_logic import Expression

    names = sorted(set(entry["metadata"]["variables"]))
    rows = [dict(zip(names, values, strict=True)) for values in product((False, True), repeat=len(names))]
    premises = []
    for text in entry["metadata"]["premises"]:
        expr = Expression.from_string(text)
        premises.append(sum(1 << i for i, row in enumerate(rows) if expr.evaluate(row)))
    return names, premises, (1 << len(rows)) - 1


def _clause_models(literals: Sequence[tuple[int, bool]], n: int) -> int:
    """The models of the disjunction of ``literals`` ((variable index, negated)) over n variables."""
    mask = 0
    for i in range(1 << n):
        if any(bool(i >> (n - 1 - k) & 1) != negated for k, negated in literals):
            mask |= 1 << i
    return mask


def _inferred(clause: int, premises: Sequence[int], full: int) -> bool:
    """Whether a clause (its models) follows from the premises together and from none alone, and is
    no tautology; from contradictory premises nothing does (every statement would)."""
    joint = full
    for p in premises:
        joint &= p
    return joint != 0 and clause != full and joint & ~clause == 0 and all(p & ~clause for p in premises)


def _inferred_clause(entry: Entry) -> str | None:
    """The shortest clause ``_inferred`` from the entry's premises (fewest literals, then variable
    and sign order), as ``(P ∨ ¬Q)``; None when the premises give none. Every clause over the
    variables is tried at once (``_clauses``): 59,049 of them for the top level's 10 variables.
    Kept per premises: generation asks it twice of each entry it keeps (``keep``, then the reference)."""
    meta = entry["metadata"]
    return _shortest_clause(tuple(meta["premises"]), tuple(meta["variables"]))


@functools.lru_cache(maxsize=256)
def _shortest_clause(premises_text: tuple[str, ...], variables: tuple[str, ...]) -> str | None:
    import numpy as np

    names, premises, full = _models({"metadata": {"premises": premises_text, "variables": variables}})
    n = len(names)
    joint = full
    for p in premises:
        joint &= p
    if joint == 0:
        return None
    literals, falsified = _clauses(n)  # (C, 2^n / 8) bits: the assignments each clause is false on

    def rows(mask: int) -> Any:
        return np.packbits(np.array([bool(mask >> i & 1) for i in range(1 << n)]))

    ok = ~(falsified & rows(joint)).any(1)  # follows from the premises together
    for p in premises:
        ok &= (falsified & rows(p)).any(1)  # and not from this one alone
    hits = np.flatnonzero(ok)
    if not len(hits):
        return None
    text = " ∨ ".join(("¬" if neg else "") + names[k] for k, neg in literals[hits[0]])
    return f"({text})" if len(literals[hits[0]]) > 1 else text


@functools.cache
def _clauses(n: int) -> tuple[list[tuple[tuple[int, bool], ...]], Any]:
    """Every non-empty clause over n variables, each variable at most once (so no tautology), by
    size then variable and sign order, and the assignments each is false on, as (clauses, 2^n)
    bits packed 8 to a byte (7.6 MB for 10 variables)."""
    from itertools import combinations, product

    import numpy as np

    literals = [tuple(zip(picked, signs, strict=True)) for size in range(1, n + 1)
                for picked in combinations(range(n), size) for signs in product((False, True), repeat=size)]
    code = np.zeros((len(literals), n), dtype=np.int8)  # 0: absent, 1: the variable, 2: its negation
    for c, clause in enumerate(literals):
        for k, negated in clause:
            code[c, k] = 2 if negated else 1
    falsified = np.ones((len(literals), 1 << n), dtype=bool)
    for k in range(n):
        value = (np.arange(1 << n) >> (n - 1 - k) & 1).astype(bool)
        falsified &= (code[:, k, None] == 0) | ((code[:, k, None] == 1) & ~value) | ((code[:, k, None] == 2) & value)
    return literals, np.packbits(falsified, axis=1)


_CLAUSE = re.compile(r"¬?[A-Z](?:∨¬?[A-Z])*")


def _conclusion(dataset: Any, answer: str, entry: Entry) -> float:
    """propositional_logic's score: 1 for one clause (literals joined by ∨) over the task's variables
    that follows from the premises together and from no premise alone (``_inferred``).

    The generator's own scorer took any statement that follows and is not a bare variable: the
    premises joined by ∧ passed every task, as did a premise restated, or weakened by ``∨ P``, and
    a third of its own example answers are a premise again. What the task now asks (``PL_ASK``) is a
    clause that needs two premises or more, which none of those is; tasks whose premises give none
    are not generated."""
    text = re.sub(r"\s+", "", answer)
    while (inner := re.sub(r"\((¬?[A-Z])\)", r"\1", text)) != text:  # (P), (¬P): a literal
        text = inner
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    if _CLAUSE.fullmatch(text) is None:
        return 0.0
    names, premises, full = _models(entry)
    literals = [(names.index(lit[-1]), lit.startswith("¬")) for lit in text.split("∨") if lit[-1] in names]
    if len(literals) != len(text.split("∨")):
        return 0.0  # a variable the task does not have
    return 1.0 if _inferred(_clause_models(literals, len(names)), premises, full) else 0.0


PL_ASK = ("\n\nAnswer with one clause: variables or their negations joined by ∨, such as (¬P ∨ Q). It must "
          "follow from the premises taken together and from no single premise alone: a premise restated or "
          "weakened is not a conclusion.")


def _has_conclusion(entry: Entry) -> bool:
    """Premises from which some clause follows only together (``_inferred_clause``); contradictory ones
    (the generator makes some, R with (Q -> Q) -> not R) give none, as every clause follows from them."""
    return _inferred_clause(entry) is not None


def _exact(dataset: Any, answer: str, entry: Entry) -> float:
    """The scorer's own full-score rule: the answer is the oracle string (their other path evals)."""
    oracle = str(entry["answer"])
    return 1.0 if answer == oracle or answer.strip() == oracle.strip() else 0.0


def _n_queens(dataset: Any, answer: str, entry: Entry) -> float:
    return 1.0 if answer in entry["metadata"]["valid_answers"] else 0.0


def _halting(dataset: Any, answer: str, entry: Entry) -> float:
    return 1.0 if answer.strip().lower() == str(entry["answer"]).strip().lower() else 0.0


def _whole_board(entry: Entry) -> bool:
    """Whether the question shows its board whole: the generator prints it with numpy, which writes a
    board of more than 1,000 cells (50 x 50 and up: game_of_life_halting's levels 2-3, or a recipe's
    grid_size) as its corners around "...", no live cell shown: a coin flip for every answer."""
    return "..." not in entry["question"]


_COUNTED = re.compile(r"Statement (\d): '(?:At least|At most|Exactly) (\d) of")


def _statement_numbers(entry: Entry) -> tuple[str, ...]:
    """self_reference's ``tells``: whether a statement counts 7 (of the 7), and each of statements 1-4's
    number, each a group of its own. The answer is the number of consistent truth assignments, so every
    number tells some: "1 where a 7 is counted, else 4" passed 34-38 of 100 default tasks (seeds 1-3), the
    best map from statement 1's, 3's or 4's number alone (fit on one seed) 37% of another's, against the
    25% each answer is held to. Held in each group: 22% and 22-25%."""
    numbers = _COUNTED.findall(str(entry["question"]))
    return (f"a 7 counted: {any(n == '7' for _, n in numbers)}", *(f"statement {s}: {n}" for s, n in numbers))


def _life_board(entry: Entry) -> dict[str, Any]:
    from posttrain.envs.rg._life import drawn

    return drawn(entry)


def _life_tells(entry: Entry) -> str:
    from posttrain.envs.rg._life import board_tells

    return board_tells(entry)


def _coin_flip(dataset: Any, answer: str, entry: Entry) -> float:
    """The scorer's tolerance (1e-4), relative, without its prefix-match partial credit. Absolute, it
    passed 0 for a probability under 1e-4 (no heads in 14 flips, 6.1e-05): any rare event's answer."""
    try:
        got, want = Fraction(answer.replace(",", "").strip()), Fraction(str(entry["answer"]).replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return 0.0
    return 1.0 if abs(got - want) <= Fraction(1, 10_000) * abs(want) else 0.0


def _gsm_number(dataset: Any, answer: str, entry: Entry) -> float:
    """One number, equal to the stored answer. The scorer reads the first ``\\b-?\\d+`` of the text,
    which never matches a leading minus: its own negative answers ("-2": an age the template
    computed) scored 0.01, and "2" was read for them; and the first of several numbers passed."""
    text = answer.strip()
    if not re.fullmatch(r"-?\d+(\.\d+)?", text):
        return 0.0
    return 1.0 if float(text) == float(entry["answer"]) else 0.0


def _finite_complex(dataset: Any, answer: str, entry: Entry) -> str | None:
    value = dataset.parse_string_to_complex(answer)
    return None if math.isfinite(value.real) and math.isfinite(value.imag) else "not a finite number"


def _puzzle24(dataset: Any, answer: str, entry: Entry) -> str | None:
    used = sorted(int(n) for n in re.findall(r"\d+", answer))
    return None if used == sorted(entry["metadata"]["numbers"]) else "does not use exactly the given numbers"


def _fullmatch(pattern: str, what: str) -> Refusal:
    compiled = re.compile(pattern)

    def refuse(dataset: Any, answer: str, entry: Entry) -> str | None:
        return None if compiled.fullmatch(answer.strip()) else f"not {what}"

    return refuse


def _time_interval(dataset: Any, answer: str, entry: Entry) -> str | None:
    if entry["metadata"]["task_type"] == "date":
        return _fullmatch(r"-?\d+(\s+days?)?", "one number of days")(dataset, answer, entry)
    return _fullmatch(r"(\d+\s+days?,\s*)?\d+:\d{2}(:\d{2}(\.\d+)?)?", "one duration")(dataset, answer, entry)


def _word_list(dataset: Any, answer: str, entry: Entry) -> str | None:
    words = [w.strip() for w in re.split(r",\s*", answer)]
    return None if words == list(entry["metadata"]["sorted_words"]) else "not the sorted list"


def _numbers(dataset: Any, answer: str, entry: Entry) -> str | None:
    """Every comma-separated item a number: the scorer drops items that are not, so the roots of
    every task joined by new lines kept just the ones that matched."""
    for item in answer.split(","):
        try:
            float(item.strip())
        except ValueError:
            return f"{item.strip()[:20]!r} is not a number"
    return None


def _sorted_numbers(dataset: Any, answer: str, entry: Entry) -> float:
    """The expected list, each number equal to the question's (quoted or not, in any notation float
    reads). The scorer's tolerance of 1, tested by ``>``, passed NaN and rounded numbers."""
    want = json.loads(str(entry["answer"]).replace("'", '"'))
    try:
        got = json.loads(answer.replace("'", '"'))  # the scorer's own reading of the list
        return 1.0 if isinstance(got, list) and [float(x) for x in got] == [float(x) for x in want] else 0.0
    except (ValueError, TypeError, OverflowError):  # OverflowError: an integer of 400 digits
        return 0.0


def _boxnet(dataset: Any, answer: str, entry: Entry) -> str | None:
    from posttrain.envs.rg._solvers import boxnet_illegal

    return boxnet_illegal(entry["metadata"]["initial_state"], answer)


def _rush_hour(dataset: Any, answer: str, entry: Entry) -> float:
    from posttrain.envs.rg._solvers import rush_hour_solves

    return 1.0 if rush_hour_solves(str(entry["metadata"]["board_config"]), answer) else 0.0


def _geometry(dataset: Any, answer: str, entry: Entry) -> str | None:
    if entry["metadata"]["task_type"] != "orthocenter":
        return None
    pair = r"\(?\s*-?\d+(\.\d+)?\s*,\s*-?\d+(\.\d+)?\s*\)?"
    return _fullmatch(pair, "one point (x, y)")(dataset, answer, entry)


def _same_words(dataset: Any, answer: str, entry: Entry) -> str | None:
    """letter_jumble's partial credit counts the oracle's words found in place: more words after
    them still made 1.0."""
    return None if answer.strip().lower() == str(entry["answer"]).strip().lower() else "not the unscrambled text"


def _figlet(dataset: Any, answer: str, entry: Entry) -> str | None:
    """figlet_font gives 0.1 a letter in place, capped at 1: the word among others passed."""
    same = answer.replace(" ", "").strip().lower() == str(entry["answer"]).strip().lower()
    return None if same else "not the word"


def _same_text(dataset: Any, answer: str, entry: Entry) -> str | None:
    return None if answer.lower() == str(entry["answer"]).lower() else "not the word spelled backward"


def _arc(dataset: Any, answer: str, entry: Entry) -> float:
    """The scorer compares the parsed board (tuples) with the metadata's, which JSON made lists."""
    from reasoning_gym.arc.board_format import parse_board

    try:
        board = parse_board(answer, dataset.board_format_opts)
    except Exception:  # noqa: BLE001 - the scorer's own rule: an answer that does not parse scores 0
        return 0.0
    return 1.0 if [list(row) for row in board] == [list(row) for row in entry["metadata"]["output"]] else 0.0


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: ``true`` is not ``1`` and ``false`` not ``0`` (Python's ``==`` says they
    are), ``1.0`` is ``1`` (JSON has one number type), every item and key the same."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None or isinstance(a, str):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float):
        return isinstance(b, int | float) and a == b
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same_json, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return False


def _json_answer(dataset: Any, answer: str, entry: Entry) -> str | None:
    """The stored JSON value, as JSON: codeio's and game_of_life's scorers compare with Python's
    ``==`` (``{"x": true}`` passed for ``{"x": 1}``, a board of ``true`` for one of 1s), and
    game_of_life reads only the stored board's cells (more rows and columns passed)."""
    if answer.strip() == str(entry["answer"]).strip():
        return None
    try:
        same = _same_json(json.loads(answer), json.loads(str(entry["answer"])))
    except ValueError:
        return "not the stored JSON value"
    return None if same else "not the stored JSON value (its shape, a value or a JSON type differs)"


def _colours(dataset: Any, answer: str, entry: Entry) -> str | None:
    """Every colour one of the puzzle's (integers): the check's ``in`` took ``true`` for colour 1."""
    coloring = json.loads(answer)  # the scorer parsed it to give its full score
    if not isinstance(coloring, dict) or any(isinstance(c, bool) for c in coloring.values()):
        return "a colour is true or false, not one of the possible colours"
    return None


def _pool_matrix(dataset: Any, answer: str, entry: Entry) -> float:
    """Row for row, each element equal to the stored one at 2 decimals ("correct to 2 decimal places",
    the prompt says). The scorer's ``np.allclose(rtol=1e-2)`` passed 4.3 for 4.33 (rounded coarser
    than asked), and ``np.loadtxt`` read a column of n numbers as a row of n."""
    rows = [line.split() for line in answer.strip().splitlines()]
    want = [line.split() for line in str(entry["answer"]).strip().splitlines()]
    if [len(r) for r in rows] != [len(r) for r in want]:
        return 0.0
    try:
        pairs = [(float(a), float(b)) for r, w in zip(rows, want, strict=True) for a, b in zip(r, w, strict=True)]
    except ValueError:
        return 0.0
    return 1.0 if all(math.isfinite(a) and round(a, 2) == b for a, b in pairs) else 0.0


def _decimal_value(dataset: Any, answer: str, entry: Entry) -> float:
    """The stored value to the prompt's ``precision`` significant digits (within ten units of the last:
    the generator rounds at each step, a solver once). The scorer allowed one unit of the operands' last
    decimal place: -11.58 passed for -11.5798450806 (asked to 12 significant digits)."""
    from decimal import Decimal, InvalidOperation, localcontext

    try:
        got, want = Decimal(answer.strip()), Decimal(str(entry["answer"]))
    except InvalidOperation:
        return 0.0
    if not got.is_finite():
        return 0.0
    with localcontext() as ctx:
        ctx.prec = 100
        tol = Decimal(10) ** (want.adjusted() - int(dataset.config.precision) + 2)
        return 1.0 if abs(got - want) <= tol else 0.0


def _candidate(dataset: Any, answer: str, entry: Entry) -> float:
    """One of the question's candidates, which the generator draws to 3 decimals: the answer equals
    the solution to within half of 0.001. The scorer's 1e-2 passed a rounding to 2 decimals, and a
    wrong candidate within 0.01 of the right one."""
    try:
        got = float(answer.strip().replace(",", ""))
    except ValueError:
        return 0.0
    return 1.0 if abs(got - float(entry["metadata"]["solution"])) < 5e-4 else 0.0


def _written(value: float, shown: str) -> str:
    """``value`` at the generator's 3 decimals, in the notation of ``shown`` (its own writing of it):
    ``.15e`` scientific, ``,`` thousands, else ``f``. Written from the decimal digits, so no float noise
    shows: the generator writes ``base + delta`` as it sums (``12,345.679000000001``, ``8.614674398940001e+08``),
    which a candidate it drew as the base (3 decimals exactly) never is."""
    digits = Decimal(f"{value:.3f}")
    if "e" in shown:
        mantissa, exponent = format(digits, ".15e").split("e")
        return f"{mantissa}e{int(exponent):+03d}"
    return format(digits, ",.3f") if "," in shown else format(digits, ".6f")


def _shuffled_candidates(entry: Entry) -> dict[str, Any]:
    """number_format's entry with its candidates in an order drawn from the entry, each written
    by ``_written``. The generator lists its base first and each other candidate as base + delta
    (uniform in +-max_delta): the first is the greatest or least only with 2^-(N-1), so the others
    share the rest, and the second candidate passed 45 and 38 of 100 default tasks (seeds 1, 2;
    chance is 31%: 2-5 candidates); at level 2 (delta within 0.001: three values among hundreds of
    candidates, the answer one of the two outer ones), a number showing float noise is never the base,
    and the one with the most decimals passed 29 of 60. Scoring reads only ``metadata.solution``."""
    meta = entry["metadata"]
    pairs = list(zip(meta["candidates"], meta["formatted_candidates"], strict=True))
    digest = hashlib.sha256(json.dumps([meta["candidates"], meta["size"]]).encode()).digest()
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(pairs)
    shown = [_written(value, text) for value, text in pairs]
    head, listed, tail = str(entry["question"]).rpartition(" ".join(meta["formatted_candidates"]))
    if not listed:
        raise ValueError("rg/number_format: the question does not list its candidates as its metadata does")
    return {**entry, "question": head + " ".join(shown) + tail,
            "metadata": {**meta, "candidates": [v for v, _ in pairs], "formatted_candidates": shown}}


MIN_CANDIDATES = 4
"""The fewest candidates a number_format task shows. Its default configuration draws 2 to 5: a
candidate picked blind passes a task of two half the time, and 31% of those tasks on average, above
``_generate.MAX_SHARE``; holding the first and last to the share then left the answer in the middle
(the second candidate: 35-38 of 100). From 4 it is 22.5% (its levels draw 5 or more already)."""


def _distinct_candidates(entry: Entry) -> bool:
    """number_format's top level draws its candidates within 1e-6 of each other and shows them to 3
    decimals: every candidate is one value, the answer, so the question's last number copied passed
    every task. An entry whose candidates show one value has nothing to pick, and one that shows
    fewer than ``MIN_CANDIDATES`` too little: not generated."""
    candidates = entry["metadata"]["candidates"]
    return len(candidates) >= MIN_CANDIDATES and len({round(float(c), 3) for c in candidates}) > 1


HARDENED: dict[str, Rule] = {
    "binary_matrix": Rule(replace=_exact),
    "spiral_matrix": Rule(replace=_exact),
    "string_insertion": Rule(replace=_exact, draws=24),  # 95% of its default entries are the input unchanged
    "string_manipulation": Rule(replace=_exact),
    # 62% of its outputs are 0 (at 4 draws the passed-over 0s filled the rest), and its final gate tells the
    # output: OR 1 in 71 of 74 default entries, AND 0 in 35 of 36, NOR 0 in 41 of 47 (read off the OUT line)
    "circuit_logic": Rule(draws=16, tells=lambda e: e["metadata"]["final_gate"]),
    # a premise that starts with "All" told "Yes" (41 of 65 default entries), none "No" (26 of 35)
    "syllogism": Rule(draws=8, tells=lambda e: str(bool(re.search(r"^\d+\. All ", e["question"], re.M)))),
    # "1 where a statement counts 7 of 7, else 4" passed 34, 38, 35 of 100 default tasks (seeds 1-3)
    "self_reference": Rule(draws=32, tells=_statement_numbers),
    "countdown": Rule(before=_arithmetic, check=_makes(lambda e: e["metadata"]["target"])),
    "puzzle24": Rule(before=_arithmetic, check=_all(_puzzle24, _makes(lambda e: 24))),
    "polynomial_multiplication": Rule(before=_symbolic),
    "simple_integration": Rule(before=_antiderivative),
    "intermediate_integration": Rule(before=_antiderivative),
    "propositional_logic": Rule(replace=_conclusion, keep=_has_conclusion, draws=10, ask=PL_ASK,
                                open_answers=True),
    "polynomial_equations": Rule(check=_numbers),
    "sokoban": Rule(check=_fullmatch(r"[LRUD]+", "a sequence of moves L, R, U, D")),
    # its own boards told the answer (an oscillator's cells touch side by side, a dying diagonal line's never):
    # posttrain draws and simulates each board (_life.py), and holds each answer to half of either kind
    "game_of_life_halting": Rule(replace=_halting, keep=_whole_board, shape=_life_board, tells=_life_tells,
                                 draws=8),
    "coin_flip": Rule(replace=_coin_flip),
    "complex_arithmetic": Rule(check=_finite_complex),
    "gsm_symbolic": Rule(replace=_gsm_number),
    "fraction_simplification": Rule(check=_fullmatch(r"\$?\s*(-?\d+\s*/\s*\d+|\\d?frac\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\})\s*\$?",
                                                     "one fraction")),
    "time_intervals": Rule(check=_time_interval),
    "word_sorting": Rule(check=_word_list),
    "spell_backward": Rule(check=_same_text),
    "rush_hour": Rule(replace=_rush_hour),
    "number_sorting": Rule(replace=_sorted_numbers),
    "boxnet": Rule(before=_boxnet),
    "advanced_geometry": Rule(check=_geometry),
    "letter_jumble": Rule(check=_same_words),
    "figlet_font": Rule(check=_figlet),
    "graph_color": Rule(check=_colours, open_answers=True),
    "jugs": Rule(open_answers=True),
    "n_queens": Rule(replace=_n_queens, open_answers=True),
    "arc_agi": Rule(replace=_arc),
    "pool_matrix": Rule(replace=_pool_matrix),
    "decimal_arithmetic": Rule(replace=_decimal_value),
    "number_format": Rule(replace=_candidate, keep=_distinct_candidates, shape=_shuffled_candidates),
    "codeio": Rule(check=_json_answer),
    "game_of_life": Rule(check=_json_answer),
    "rearc": Rule(replace=_arc),
}
"""generator -> its rule (module docstring)."""

EMPTY_ANSWERS = frozenset({"ab", "string_manipulation"})
"""Generators where an empty answer can be the right one (ab rewrites some programs to nothing,
string_manipulation's rules delete some strings down to nothing: its own reference failed)."""
