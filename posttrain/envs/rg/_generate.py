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
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Mapping
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


def generate(name: str, spec: Mapping[str, Any], *, n: int, seed: int, salt: str = "") -> list[dict[str, Any]]:
    """``n`` entries of generator ``name`` configured by ``spec``; ``ValueError`` in one line.
    ``salt`` draws another stream from the same seed (canaries)."""
    if name in HASH_ORDERED and sys.flags.hash_randomization:
        return _fixed_salt(name, spec, n=n, seed=seed, salt=salt)
    return generate_here(name, spec, n=n, seed=seed, salt=salt)


def generate_here(name: str, spec: Mapping[str, Any], *, n: int, seed: int, salt: str = "") -> list[dict[str, Any]]:
    """``generate`` in this process whatever its hash salt (tests/envs/test_rg.py checks ``HASH_ORDERED``
    against it)."""
    from reasoning_gym.factory import DATASETS

    draws = HARDENED.get(name, _NO_RULE).draws
    config = build_config(name, spec, seed=rg_seed(name, spec, seed, salt), size=draws * max(n, 1) + 16)
    dataset = DATASETS[name][0](config=config)
    out: list[dict[str, Any]] = []
    i = -1
    while len(out) < n:
        i += 1
        if i >= config.size:
            raise ValueError(f"rg/{name}: {describe_spec(spec)}: only {len(out)} of {i} generated tasks have a "
                             f"reference that stands; asked for {n}")
        try:
            raw = dataset[i]
        except Exception as e:  # noqa: BLE001 - a generator's own failure, said in one line
            raise ValueError(f"rg/{name}: {describe_spec(spec)}: generating task {i} (seed {seed}) failed: "
                             f"{type(e).__name__}: {str(e).strip()[:160]}") from None
        source = raw["metadata"].get("source_dataset", name) if name == "composite" else name
        rule = HARDENED.get(source, _NO_RULE)  # a composite's entry: the rule of the generator it came from
        if rule.keep is not None and not rule.keep(raw):
            continue
        meta = json.loads(json.dumps(raw["metadata"], default=str))
        answer = None if raw["answer"] is None else str(raw["answer"])
        out.append({"question": str(raw["question"]) + rule.ask, "answer": answer, "metadata": meta,
                    "reference": answer if answer is not None else _verified_answer(source, meta)})
    return out


_NO_RULE = Rule()


def _fixed_salt(name: str, spec: Mapping[str, Any], *, n: int, seed: int, salt: str) -> list[dict[str, Any]]:
    """``generate`` in a child interpreter with ``PYTHONHASHSEED=0`` (``HASH_ORDERED``); its
    ``ValueError`` is raised here, in its one line. ~2 s of start-up a call (importing the library)."""
    from posttrain.verify._deadline import child_env

    request = json.dumps({"name": name, "spec": dict(spec), "n": n, "seed": seed, "salt": salt})
    done = subprocess.run([sys.executable, "-s", "-m", __name__], input=request, capture_output=True, text=True,
                          env=child_env({"PYTHONHASHSEED": "0"}), check=False)
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
        entries = generate(request["name"], request["spec"], n=request["n"], seed=request["seed"],
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
