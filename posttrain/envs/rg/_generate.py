"""Generating reasoning-gym entries in this process: tasks, their references, and canaries.

An entry here is the generator's ``{question, answer, metadata}`` with the metadata as JSON (what a
task stores and the check worker scores against: tuples become lists, integer keys strings) and a
``reference`` answer (``_domain.py`` says where each comes from). Generation is deterministic in
(generator, config, seed, index). reasoning-gym seeds item i with ``seed + i``, so its seeds 1 and
2 make the same tasks shifted by one (a pool's decontamination found 50 of 50 eval tasks of seed 2
among 200 training tasks of seed 1); posttrain's seed is therefore hashed with the generator and its
configuration into reasoning-gym's (``rg_seed``), 31 bits apart from any other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from posttrain.envs.rg._config import build_config, describe_spec
from posttrain.envs.rg._hardened import HARDENED, Rule


def rg_seed(name: str, spec: Mapping[str, Any], seed: int, salt: str = "") -> int:
    """reasoning-gym's seed for posttrain's ``seed`` of generator ``name`` configured by ``spec``.

    >>> rg_seed("basic_arithmetic", {}, 1) - rg_seed("basic_arithmetic", {}, 0) not in range(-10**6, 10**6)
    True
    """
    text = json.dumps([name, dict(spec), seed, salt], sort_keys=True)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") >> 1


def generate(name: str, spec: Mapping[str, Any], *, n: int, seed: int, salt: str = "") -> list[dict[str, Any]]:
    """``n`` entries of generator ``name`` configured by ``spec``; ``ValueError`` in one line.
    ``salt`` draws another stream from the same seed (canaries)."""
    from reasoning_gym.factory import DATASETS

    keep = HARDENED.get(name, Rule()).keep
    config = build_config(name, spec, seed=rg_seed(name, spec, seed, salt), size=4 * max(n, 1) + 16)
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
        if keep is not None and not keep(raw):
            continue
        meta = json.loads(json.dumps(raw["metadata"], default=str))
        answer = None if raw["answer"] is None else str(raw["answer"])
        out.append({"question": str(raw["question"]), "answer": answer, "metadata": meta,
                    "reference": answer if answer is not None else _verified_answer(name, meta)})
    return out


def _verified_answer(name: str, meta: Mapping[str, Any]) -> str:
    """An answer for an entry that stores none: the generator's example, or our solver's."""
    from posttrain.envs.rg._solvers import boxnet_plan, rush_hour_solution

    if name == "graph_color":
        return json.dumps({str(k): v for k, v in _literal(meta["possible_answer"]).items()})
    if name == "propositional_logic":
        return str(meta["example_answer"])
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
