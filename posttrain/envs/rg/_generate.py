"""Generating reasoning-gym entries: tasks, their references, and canaries.

An entry here is the generator's ``{question, answer, metadata}`` with the metadata as JSON (what a
task stores and the check worker scores against: tuples become lists, integer keys strings) and a
``reference`` answer (``_domain.py`` says where each comes from). Generation is deterministic in
(generator, config, seed, index). reasoning-gym seeds item i with ``seed + i``, so its seeds 1 and
2 make the same tasks shifted by one (a pool's decontamination found 50 of 50 eval tasks of seed 2
among 200 training tasks of seed 1); posttrain's seed is therefore hashed with the generator and its
configuration into reasoning-gym's (``rg_seed``), 31 bits apart from any other.

Deterministic also across processes: five generators draw in the iteration order of a set of strings,
and Python salts str hashes per process (``HASH_ORDERED``); their entries are made in a child
interpreter whose salt is fixed. Every other generator runs in this process.

Standing: an entry is kept only where its reference passes the task's own check, and not made where
the generator fails to make it (``_kept``), so no generated task carries a reference that fails; a
configuration that leaves fewer than asked for is a ``ValueError`` in one line saying why.

Balanced: an entry is passed over where an answer given without solving it (one constant, a number
of the question, its last word or a grid of it copied) would then pass more than ``MAX_SHARE`` of the
tasks so far (``balanced``; tests/envs/test_rg_priors.py holds the rg pool to it at every level).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from posttrain.envs.rg._config import build_config, describe_spec
from posttrain.envs.rg._hardened import HARDENED, Rule, _inferred_clause


def rg_seed(name: str, spec: Mapping[str, Any], seed: int, salt: str = "") -> int:
    """reasoning-gym's seed for posttrain's ``seed`` of generator ``name`` configured by ``spec``.

    >>> rg_seed("basic_arithmetic", {}, 1) - rg_seed("basic_arithmetic", {}, 0) not in range(-10**6, 10**6)
    True
    """
    text = json.dumps([name, dict(spec), seed, salt], sort_keys=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") >> 1


HASH_ORDERED = frozenset({"isomorphic_strings", "knight_swap", "polynomial_multiplication", "ransom_note",
                          "word_ladder"})
"""Generators whose draws follow a set's iteration order, which follows str hashes, salted per process:
isomorphic_strings and ransom_note draw letters with ``rng.choice(list(letters))`` of a set,
word_ladder and knight_swap keep the first path their search finds over sets of neighbours, and
polynomial_multiplication draws from sympy's hash-ordered terms. Their prompts or references differed
from one process to the next at the same seed (CI drew a salt under which a knight_swap test failed).
Each is generated with ``PYTHONHASHSEED=0`` (``_fixed_salt``: a child interpreter unless this one
already runs so). tests/envs/test_rg.py generates every generator under two salts and finds no other."""


RUNS_CODE = frozenset({"codeio"})
"""Generators that run their dataset's programs to make an entry (``exec`` in the generating process):
codeio's print to stdout and write files where they run (a predator-prey entry leaves
``simulation_data.txt`` in the working directory, the user's project while a recipe trains). Each is
generated in a child interpreter in a directory of its own, removed after (``_fixed_salt``)."""


def generate(name: str, spec: Mapping[str, Any], *, n: int, seed: int, salt: str = "") -> list[dict[str, Any]]:
    """``n`` entries of generator ``name`` configured by ``spec``; ``ValueError`` in one line.
    ``salt`` draws another stream from the same seed (canaries)."""
    if (name in HASH_ORDERED and sys.flags.hash_randomization) or name in RUNS_CODE:
        return _fixed_salt(name, spec, n=n, seed=seed, salt=salt)
    return generate_here(name, spec, n=n, seed=seed, salt=salt)


def generate_here(name: str, spec: Mapping[str, Any], *, n: int, seed: int, salt: str = "") -> list[dict[str, Any]]:
    """``generate`` in this process whatever its hash salt (tests/envs/test_rg.py checks ``HASH_ORDERED``
    against it)."""
    from reasoning_gym.factory import DATASETS

    draws = HARDENED.get(name, _NO_RULE).draws
    config = build_config(name, spec, seed=rg_seed(name, spec, seed, salt), size=draws * max(n, 1) + 16)
    try:
        dataset = DATASETS[name][0](config=config)
    except Exception as e:  # noqa: BLE001 - a configuration the generator cannot start from (spell_backward's
        # data_file naming no file of the package), said in one line like build_config's refusals
        raise ValueError(f"rg/{name}: {describe_spec(spec)}: the generator refuses its configuration: "
                         f"{type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    dropped: Counter[str] = Counter()
    out = balanced(_kept(name, spec, dataset, config.size, dropped=dropped), n)
    if len(out) < n:
        why = "; ".join(f"{count} x {reason}" for reason, count in dropped.most_common(2))
        raise ValueError(f"rg/{name}: {describe_spec(spec)}: only {len(out)} of {config.size} generated tasks stand "
                         f"(seed {seed}; dropped: {why or 'none'}); asked for {n}")
    return out


MAX_UNMADE = 16
"""Entries the generator may fail to make before the first one it makes: beyond it the configuration
makes none (``_kept`` stops there rather than try every one)."""


def _kept(name: str, spec: Mapping[str, Any], dataset: Any, size: int, *,
          dropped: Counter[str]) -> Iterator[dict[str, Any]]:
    """The dataset's entries in order, as entries (module docstring) as their rule's ``shape`` shows
    them, less those that do not stand, each counted in ``dropped`` by its reason: one the generator
    fails to make (countdown's search for an expression gives up on some seeds), one a ``keep`` rule
    drops, and one whose reference fails the task's own check (``_check.reference_problem``: jugs'
    solver finds no pouring for some puzzles that have one and says "No solution", tower_of_hanoi's
    top-level moves run past the longest answer checked, rubiks_cube has no example answer for cubes
    above 3x3). Dropping an entry leaves the others as they were: reasoning-gym makes entry i from
    its own seed."""
    from posttrain.envs.rg._check import reference_problem

    made = 0
    for i in range(size):
        try:
            raw = dataset[i]
        except Exception as e:  # noqa: BLE001 - a generator's own failure: the entry is not made
            dropped[f"the generator failed: {type(e).__name__}: {str(e).strip()[:120]}"] += 1
            if made == 0 and i + 1 >= MAX_UNMADE:
                return
            continue
        made += 1
        source = raw["metadata"].get("source_dataset", name) if name == "composite" else name
        rule = HARDENED.get(source, _NO_RULE)  # a composite's entry: the rule of the generator it came from
        if rule.shape is not None:
            raw = rule.shape(raw)
        if rule.keep is not None and not rule.keep(raw):
            dropped["the generator's rule keeps no such task"] += 1
            continue
        meta = json.loads(json.dumps(raw["metadata"], default=str))
        answer = None if raw["answer"] is None else str(raw["answer"])
        entry = {"question": str(raw["question"]) + rule.ask, "answer": answer, "metadata": meta,
                 "reference": answer if answer is not None else _verified_answer(source, meta)}
        problem = reference_problem(name, spec, entry)
        if problem is not None:
            dropped[f"the reference fails its check ({problem[:120]})"] += 1
            continue
        yield entry


MAX_SHARE = 0.25
"""The most of a generator's tasks that one answer given without solving may pass (``balanced``),
unless the generator has fewer than four answers. A constant passes as many tasks as its answer's
share, and RL pays a policy that learns it: "1" was 56% of gcd's answers at level 3, 38-46% of
letter_counting's, "0.125" 40% of coin_flip's, "son" 29-31% of family_relationships'. A quarter closes
each of those, is the floor anyway where a generator has four answers (aiw at level 0), and passes
over the fewest entries, so a level's tasks stay closest to the generator's own (a fifth is also
reached by every generator of the rg pool but aiw, at more draws)."""
PROBE = 32
"""Entries read before ``balanced`` takes the answers seen among them for all the generator gives."""


def answer_key(answer: str | None) -> str | None:
    """What counts as the same answer for ``balanced``: case and spacing aside, a number by its value.

    >>> answer_key(" Son "), answer_key("1.0") == answer_key("1"), answer_key(None)
    ('son', True, None)
    """
    if answer is None:
        return None
    text = " ".join(answer.split()).casefold()
    try:
        value = float(text)
    except ValueError:
        return text
    return repr(value) if math.isfinite(value) else text


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_SHOWN = re.compile(r"(?<![\d.])(?<!\d,)-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!,?\d)"
                    r"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+(?!\w|\.\d))?")
COPIES: dict[str, Callable[[list[str]], str]] = {
    "first": lambda numbers: numbers[0],
    "last": lambda numbers: numbers[-1],
    "least": lambda numbers: min(numbers, key=float),
    "greatest": lambda numbers: max(numbers, key=float),
}
"""Numbers of the question a policy may copy for an answer without solving anything: the last term
of number_sequence passed 40% of its level-1 tasks (a sequence that has settled), the number to factor
18% of prime_factorization's (a prime)."""
_GRID_ROW = re.compile(r"\s*-?\d+(?:\.\d+)?(?:[ \t]+-?\d+(?:\.\d+)?)*\s*")


def _grids(text: str) -> list[list[list[float]]]:
    """The grids of numbers in ``text``: each run of lines that hold only numbers, one row a line.

    >>> _grids("Rotate by 360 degrees:\\n1 2\\n3 4\\n")
    [[[1.0, 2.0], [3.0, 4.0]]]
    """
    grids: list[list[list[float]]] = []
    rows: list[list[float]] = []
    for line in [*text.split("\n"), ""]:
        if line.strip() and _GRID_ROW.fullmatch(line):
            rows.append([float(x) for x in line.split()])
        elif rows:
            grids.append(rows)
            rows = []
    return grids


def _shown(question: str) -> list[str]:
    """The question's numbers as it writes them: thousands commas and an exponent read as part of one
    number (``_NUMBER`` reads ``916,237,422.283`` as three). Such a number matches an answer to 12
    significant digits: the question may round off the last of 16 (``8.614674398940001e+08`` is not
    the float 861467439.894, nor ``406283136.184000`` 406283136.18399996).

    >>> _shown("pick the largest: 4.062e+08 916,237,422.283 7.5")
    ['4.062e+08', '916237422.283', '7.5']
    """
    return [number.replace(",", "") for number in _SHOWN.findall(question)]


def _finite(answer: str) -> float | None:
    """The answer's value where it is one finite number, else None."""
    try:
        value = float(answer.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _grid_copies(question: str, answer: str) -> list[str]:
    """``copy:first grid`` / ``copy:last grid`` where the answer is a grid of two numbers or more, the
    question's first or last grid as it is (by value): rotate_matrix rotates some matrices by a multiple
    of 360 degrees and pool_matrix pools some by 1x1 (its default configuration), so the input copied
    back passed 30-40% of their tasks."""
    lines = answer.strip().split("\n")
    mine = _grids(answer.strip())
    if len(mine) != 1 or len(mine[0]) != len(lines) or sum(map(len, mine[0])) < 2:
        return []
    grids = _grids(question)
    return [f"copy:{which} grid" for which, grid in (("first", grids[:1]), ("last", grids[-1:])) if grid == [mine[0]]]


def guesses(entry: Mapping[str, Any]) -> list[str]:
    """The unsolved answers that pass ``entry`` (for ``balanced``): its stored answer, as a constant,
    ``copy:<how>`` for each of ``COPIES`` that gives it (first and last also of the numbers as the question
    writes them, ``_shown``: number_format's last candidate, written ``861,467,434.737`` or ``8.6e+08``,
    passed 8-12 of 30 default tasks and 6-11 of 30 at level 2, uncounted; its greatest or least as written
    is the task solved, not a copy), and ``copy:last word`` where the question's last
    word is it (the input of a rewriting task, where no rule applied: string_insertion's last word passed
    95% of its default tasks, string_manipulation's 28%), and ``copy:first grid`` / ``copy:last grid``
    where a grid of numbers in the question is it (``_grid_copies``); none for an entry with no stored
    answer.

    >>> guesses({"question": "2, 4, 8, 8, ?", "answer": "8"})
    ['8.0', 'copy:last', 'copy:greatest']
    >>> guesses({"question": "Insert after each ABC: ABDE", "answer": "ABDE"})
    ['abde', 'copy:last word']
    >>> guesses({"question": "pick the largest: 8.6e+08 861,467,436.136", "answer": "861467436.136"})
    ['861467436.136', 'copy:last']
    """
    key = answer_key(entry["answer"])
    if key is None:
        return []
    numbers, shown = _NUMBER.findall(entry["question"]), _shown(entry["question"])
    copies = [how for how, pick in COPIES.items() if numbers and answer_key(pick(numbers)) == key]
    value = _finite(entry["answer"])
    copies += [how for how in ("first", "last") if how not in copies and shown and value is not None
               and math.isclose(float(COPIES[how](shown)), value, rel_tol=1e-12)]
    words = entry["question"].split()
    return [key, *(f"copy:{how}" for how in copies),
            *(["copy:last word"] if words and answer_key(words[-1]) == key else []),
            *_grid_copies(entry["question"], entry["answer"])]


def balanced(entries: Iterable[dict[str, Any]], n: int, *, share: float = MAX_SHARE,
             probe: int = PROBE) -> list[dict[str, Any]]:
    """The first ``n`` of ``entries`` in which no unsolved answer (``guesses``: a constant, or a
    number or the last word copied from the question) passes more than ``share`` of any prefix (rounded
    up: of m entries, ``ceil(share * m)``), an entry over it passed over.

    The share rises to 1/k where the generator gives only k < 1/share answers (k counted among the
    entries read, once ``probe`` have been: a yes/no generator is held to an even split). Where the
    question shows what tells its likely answer (``Rule.tells``), each answer is also held to that share
    among the entries that show the same. Entries are
    read one at a time, only as many as it takes (a few of number_sequence's top-level entries take
    minutes). Deterministic, and a prefix of a longer draw from the same entries. Where even that
    cannot be met before the entries run out, the passed-over entries fill the rest, in order: the
    generator's own skew, never a failure.

    >>> def answers(text: str, n: int) -> str:
    ...     return "".join(e["answer"] for e in balanced([{"question": "", "answer": a} for a in text], n))
    >>> answers("1121311114567189", 8)  # a second 1 only once eight entries have room for it
    '12345671'
    >>> answers("yyyn" + "y" * 40 + "n", 4)  # two answers in 32 read: an even split
    'ynyn'
    """
    stream = iter(entries)
    counts: Counter[str] = Counter()
    seen: set[str] = set()  # the answers of every entry read, kept or passed over
    out: list[dict[str, Any]] = []
    passed: list[dict[str, Any]] = []
    while len(out) < n:
        entry = next(stream, None)
        if entry is None:
            return out + passed[:n - len(out)]
        keys = guesses(entry)
        seen.update(keys[:1])
        held = share if len(out) + len(passed) < probe else max(share, 1 / max(len(seen), 1))
        told = _told(entry, keys)  # [a group, its answer in the group, ...]: held within each group too
        if any(counts[k] >= math.ceil(held * (len(out) + 1)) for k in keys) or any(
                counts[answer] >= math.ceil(held * (counts[group] + 1)) for group, answer in zip(told[::2], told[1::2], strict=True)):
            passed.append(entry)
            continue
        counts.update(keys + told)
        out.append(entry)
    return out


def _told(entry: Mapping[str, Any], keys: list[str]) -> list[str]:
    """``["told:<what the question shows>", "told:<it>=<answer>", ...]`` for an entry of a generator
    whose rule says what tells its answer (``Rule.tells``: circuit_logic's final gate; self_reference's
    numbers, one group each), else none."""
    rule = HARDENED.get(entry.get("metadata", {}).get("source_dataset"), _NO_RULE)
    if rule.tells is None or not keys:
        return []
    shown = rule.tells(entry)
    groups = [f"told:{what}" for what in ((shown,) if isinstance(shown, str) else shown)]
    return [item for group in groups for item in (group, f"{group}={keys[0]}")]


_NO_RULE = Rule()


def _fixed_salt(name: str, spec: Mapping[str, Any], *, n: int, seed: int, salt: str) -> list[dict[str, Any]]:
    """``generate`` in a child interpreter with ``PYTHONHASHSEED=0`` (``HASH_ORDERED``), in a temporary
    directory (``RUNS_CODE``); its ``ValueError`` is raised here, in its one line. ~2 s of start-up a
    call (importing the library)."""
    from posttrain.verify._deadline import child_env

    request = json.dumps({"name": name, "spec": dict(spec), "n": n, "seed": seed, "salt": salt})
    with tempfile.TemporaryDirectory(prefix="posttrain-rg-") as where:
        done = subprocess.run([sys.executable, "-s", "-m", __name__], input=request, capture_output=True,
                              text=True, env=child_env({"PYTHONHASHSEED": "0"}), cwd=where, check=False)
    if done.returncode == 2:
        raise ValueError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"rg/{name}: the generating interpreter exited {done.returncode}: {last[:200]}")
    entries: list[dict[str, Any]] = json.loads(done.stdout)
    return entries


def _main() -> None:
    """The child of ``_fixed_salt``: one request on stdin, its entries as JSON on stdout (what the
    library prints goes to stderr), a ``ValueError`` as its one line on stderr and exit 2."""
    from posttrain.verify._deadline import protocol_stdout

    out = protocol_stdout()
    request = json.loads(sys.stdin.read())
    try:
        entries = generate_here(request["name"], request["spec"], n=request["n"], seed=request["seed"],
                                salt=request["salt"])
    except ValueError as e:
        print(str(e), file=sys.stderr)
        sys.exit(2)
    out.write(json.dumps(entries))
    out.flush()


def _verified_answer(name: str, meta: Mapping[str, Any]) -> str:
    """An answer for an entry that stores none: the generator's example, or our solver's."""
    from posttrain.envs.rg._solvers import boxnet_plan, rush_hour_solution

    if name == "graph_color":
        return json.dumps({str(k): v for k, v in _literal(meta["possible_answer"]).items()})
    if name == "propositional_logic":
        reference = _inferred_clause({"metadata": meta})
        if reference is None:
            raise ValueError("rg/propositional_logic: premises from which no clause follows only together")
        return reference
    if name == "rubiks_cube":
        return str(meta["example_correct_answer"]).strip()
    if name == "boxnet":
        return boxnet_plan(_literal(meta["initial_state"]))
    if name == "rush_hour":
        return rush_hour_solution(str(meta["board_config"]))
    raise ValueError(f"rg/{name}: the generator stores no answer and posttrain has no reference for it")


def _literal(value: Any) -> Any:
    """A metadata value that JSON turned into its repr string comes back as the value."""
    import ast

    return ast.literal_eval(value) if isinstance(value, str) else value


def canary_entries(name: str, n: int, *, seed: int, varied: float) -> list[dict[str, Any]]:
    """Up to ``n`` entries whose question is one task's and whose answer and metadata another's,
    kept when the first task's reference fails against them (``_domain.py``, canaries)."""
    from posttrain.envs.rg._check import score

    pool = generate(name, {}, n=max(32, 2 * n), seed=seed, salt="canary")
    if len({e["reference"] for e in pool}) < varied * len(pool):  # _names.NO_CANARIES, for another seed
        return []
    out: list[dict[str, Any]] = []
    for i, a in enumerate(pool):
        for b in pool[i + 1:] + pool[:i]:
            if b["reference"] == a["reference"] or b["answer"] is None and b["metadata"] == a["metadata"]:
                continue
            canary = {"question": a["question"], "answer": b["answer"], "metadata": b["metadata"]}
            try:
                value, refused = score(name, {}, a["reference"], canary)
            except Exception:  # noqa: BLE001 - the honest answer makes the scorer raise: it fails too
                value, refused = 0.0, "raised"
            if value < 1.0 or refused is not None:
                out.append({**canary, "reference": None})
                break
        if len(out) == n:
            break
    return out


if __name__ == "__main__":
    _main()
