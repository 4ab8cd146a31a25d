"""A second adversarial read of the rg domains the multi-domain recipe mixes (configs/multi-domain.yaml),
played as a reward-hacking policy against the check as the worker runs it (``_check.handle_check``,
in process here): the right answer with a wrong one behind separators the exploit fixtures do not
use (``|``, ``/``, ``;``, a tab, "and", a JSON list, braces, the wrong one first), and junk that
number parsers take (``NaN``, ``sNaN``, ``Infinity``, ``1e999999``, ``null``, a 60,000-character
number). None passes, at the default configuration and at the top level.

Not a check's property but the generators': a constant answer passes as often as the generator
draws it (gcd "1" was 33% of default tasks, 56% at level 3; letter_counting "1" 38%; count_bits and
aiw ~20-27%; family_relationships "son" 31% at level 0). Generation now passes over an entry whose
answer would be more than a quarter of the tasks (``_generate.balanced``; tests/envs/test_rg_priors.py).
"""

from __future__ import annotations

import json

import pytest

from posttrain.envs.rg._check import CLOSE, OPEN, handle_check
from posttrain.envs.rg._domain import rg_domain

POOL = ["basic_arithmetic", "chain_sum", "number_sequence", "spell_backward", "simple_equations",
        "complex_arithmetic", "lcm", "count_primes", "count_bits", "decimal_chain_sum", "products", "aiw",
        "calendar_arithmetic", "gcd", "fraction_simplification", "letter_counting", "prime_factorization",
        "decimal_arithmetic", "family_relationships"]
JUNK = ["NaN", "-NaN", "sNaN", "Infinity", "-Infinity", "1e999999", "null", "None", "[]", "{}", '""', "*", ".*",
        "nan+nanj", "x" * 60_000, "9" * 60_000]


def _pairs(ref: str, wrong: str) -> list[str]:
    """The right and a wrong answer in one box (not the wrong glued before the right: products' "0"
    before it is the right number with a leading zero)."""
    return [json.dumps([ref, wrong]), f"{ref}|{wrong}", f"{ref}/{wrong}", f"{ref}; {wrong}", f"{ref}\t{wrong}",
            f"{ref} and {wrong}", f"{wrong} and {ref}", f"{wrong}, {ref}", f"{wrong}; {ref}", f"{wrong}\n{ref}",
            f"{ref}\n{wrong}", f"{wrong} = {ref}", f"{ref} (or {wrong})", f"'{ref}' '{wrong}'",
            f"{ref}{wrong}", "{" + f"{ref}, {wrong}" + "}"]


def _outcome(task, answer: str) -> str:
    request = {"generator": task.domain.removeprefix("rg/"), "spec": task.fields["config"], "question": task.prompt,
               "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"],
               "response": f"{OPEN}{answer}{CLOSE}"}
    try:
        return handle_check(request)["outcome"]
    except Exception:  # noqa: BLE001 - the worker's ``raised``: a fail (exception:<Type>)
        return "fail"


@pytest.mark.parametrize("generator", POOL)
def test_the_right_answer_among_others_and_junk_fail(generator: str) -> None:
    domain = rg_domain(generator)
    tasks = domain.generate_tasks(6, seed=5) + domain.generate_level(4, level=domain.level_range()[1], seed=5)
    passed = []
    for i, task in enumerate(tasks):
        ref = str(task.fields["answer"])
        assert _outcome(task, ref) == "pass", (task.id, ref)
        wrong = next(str(o.fields["answer"]) for o in tasks[i + 1:] + tasks[:i]
                     if str(o.fields["answer"]).strip() != ref.strip())
        passed += [(task.id, a[:60]) for a in _pairs(ref, wrong) + JUNK if _outcome(task, a) == "pass"]
    assert passed == []
