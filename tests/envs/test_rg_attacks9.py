"""A ninth adversarial read of the rg domains: generic strategies that read nothing of the task's
solution, played through the check as the worker runs it (``_check.handle_check``).

Scanned (a helper's read, every one of the 106 generators at its default configuration: a prior of
200 tasks of seed 101 scored on 60 of seed 202; the top level of the 51 fast generators with more
than one level, 150/60): the empty answer block; the reference without a block and only inside
``<think>``; the question echoed, and each of its first three and last three numbers and words;
the three commonest answers of the prior as constants; the top two joined by " or ", ", ", a new
line and " and "; and on the reference, case, spacing, a trailing word or unit, a period, quotes,
its list reversed, a superset (one more item, first or last), "the reference or another answer",
True/False for Yes/No. The commonest answer over 1000 tasks (seed 303), scored on 1000 others
(seed 404), for the 20 generators of the rg pool: none above ``MAX_SHARE`` (gcd "2" 250, letter_counting
"1" 250, family_relationships "son" 182, count_bits "16" 155, calendar_arithmetic "No" 112,
number_sequence "0" 107 of 1000).

Nothing passed above its share: no blind strategy above max(25%, 1/k) beyond noise (circuit_logic's
third-last number, 37 of 60, is 185 and 196 of 400 on seeds 11 and 12), no hedge or superset
passed any task, no answer outside its block. So this file holds no fix; it pins the read, so that
a scorer or a generator that changes shows here: each strategy on a sample of answer kinds
(number, word, Yes/No, True/False, three-way, a list, a multiset, a statement, a grid), the
reference passing beside it.
"""

from __future__ import annotations

import collections
import math
import re

import pytest

from posttrain.envs.rg._check import CLOSE, OPEN, handle_check
from posttrain.envs.rg._generate import MAX_SHARE, answer_key, generate

KINDS = ("gcd", "family_relationships", "syllogism", "course_schedule", "acre", "circuit_logic", "word_sorting",
         "prime_factorization", "knights_knaves", "kakurasu", "binary_alternation", "largest_island")
"""One generator per kind of answer, each fast to generate (a second or less for 100 tasks)."""
N = 40


def _passes(name: str, entry: dict, response: str) -> bool:
    request = {"generator": name, "spec": {}, "question": entry["question"], "answer": entry["answer"],
               "metadata": entry["metadata"], "response": response}
    try:
        return handle_check(request)["outcome"] == "pass"
    except Exception:  # noqa: BLE001 - the worker's ``raised``: a fail (exception:<Type>)
        return False


def _blind(question: str, prior: list[str]) -> dict[str, str]:
    """Answers written without solving: the question's numbers and words by place, the question itself,
    the prior's constants and its top two as one hedged answer."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", question)
    words = [w.strip(".,:;?!'\"()") for w in question.split()]
    out = {"question": question, "empty": ""}
    for i in (0, 1, 2, -1, -2, -3):
        if len(numbers) > (i if i >= 0 else -i - 1):
            out[f"number[{i}]"] = numbers[i]
        if len(words) > (i if i >= 0 else -i - 1):
            out[f"word[{i}]"] = words[i]
    out.update({f"prior{j}": a for j, a in enumerate(prior)})
    if len(prior) > 1:
        out.update({f"hedge{sep!r}": sep.join(prior[:2]) for sep in (" or ", ", ", "\n", " and ")})
    return out


@pytest.fixture(scope="module")
def tasks() -> dict[str, tuple[list[dict], list[str]]]:
    """Each generator's N tasks (seed 5) and its prior: the three commonest answers of 100 others (seed 6)."""
    out = {}
    for name in KINDS:
        counts = collections.Counter()
        shown: dict[str, str] = {}
        for e in generate(name, {}, n=100, seed=6):
            counts[answer_key(e["answer"])] += 1
            shown.setdefault(answer_key(e["answer"]), e["answer"].strip())
        out[name] = (generate(name, {}, n=N, seed=5), [shown[k] for k, _ in counts.most_common(3)])
    return out


@pytest.mark.parametrize("name", KINDS)
def test_no_blind_answer_passes_more_than_its_share(name: str, tasks) -> None:
    """Each strategy that reads nothing of the solution passes at most the share a constant is held to
    (``MAX_SHARE``, or 1/k of a k-answer generator), give or take two standard errors over N tasks."""
    entries, prior = tasks[name]
    share = max(MAX_SHARE, 1 / len({answer_key(e["answer"]) for e in entries}))
    bound = share * N + 2 * math.sqrt(N * share * (1 - share))
    passed = collections.Counter()
    for e in entries:
        assert _passes(name, e, OPEN + e["reference"] + CLOSE)
        for how, answer in _blind(e["question"], prior).items():
            passed[how] += _passes(name, e, OPEN + answer + CLOSE)
    assert not {how: c for how, c in passed.items() if c > bound or (how.startswith(("hedge", "empty")) and c)}, (
        passed, bound)


def _two_in_one(reference: str, other: str) -> list[str]:
    """The reference with another answer in one block: hedged, a list with one more item, reversed."""
    out = [f"{reference} or {other}", f"{other} or {reference}", f"{reference}\n{other}", f"{other}\n{reference}",
           f"{reference} / {other}", f"{other}, {reference}", f"{reference} and {other}"]
    for sep in (", ", " "):
        if sep in reference.strip():
            out += [f"{reference}{sep}{other}", f"{other}{sep}{reference}"]
            break
    if reference.strip() in ("Yes", "No", "True", "False"):
        out += ["Yes/No", "Yes or No", "True or False", "True/False", "both", "Yes, No"]
    return out


@pytest.mark.parametrize("name", KINDS)
def test_two_answers_in_one_fail(name: str, tasks) -> None:
    """The reference beside another task's answer (the prior's first that is not it) never passes,
    in either order and any join, nor does a superset of a list answer or every truth value at once."""
    entries, prior = tasks[name]
    for e in entries[:12]:
        other = next(a for a in [*prior, "7"] if answer_key(a) != answer_key(e["answer"]))
        hedges = [h for h in _two_in_one(e["reference"], other) if h.strip() != e["reference"].strip()]
        assert not [h for h in hedges if _passes(name, e, OPEN + h + CLOSE)], e["question"][-200:]


@pytest.mark.parametrize("name", KINDS)
def test_the_answer_outside_its_block_fails(name: str, tasks) -> None:
    """The right answer with no block, only inside the reasoning, or as a True/False for a Yes/No answer
    fails; after the reasoning, in its one block, it passes."""
    entries, _ = tasks[name]
    swap = {"Yes": "True", "No": "False", "True": "Yes", "False": "No"}
    for e in entries[:8]:
        ref = e["reference"]
        assert not _passes(name, e, f"The answer is {ref}")
        assert not _passes(name, e, f"<think>{OPEN}{ref}{CLOSE}</think> I have answered above.")
        assert not _passes(name, e, f"{OPEN}{CLOSE} {ref}")
        if ref.strip() in swap:
            assert not _passes(name, e, OPEN + swap[ref.strip()] + CLOSE)
        assert _passes(name, e, f"<think>it might be something else</think>{OPEN}{ref}{CLOSE}")
