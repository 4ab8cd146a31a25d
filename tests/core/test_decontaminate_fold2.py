"""Decontamination reads a number in one spelling: a held-out task whose numbers were re-written
(``4x + -7 = 17`` as ``4.0x + -7.0 = 17.0``, with leading zeros, signs ``+``, thousands separators,
Arabic-Indic digits or a minus sign) is the training task it copies (each was clean before: 0 of 200
generated math tasks caught), while numbers that differ stay apart (``0.5`` and ``5``, ``3.10`` and
``3.1``, versions, ``2+3`` and ``23``)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from posttrain.envs import get_domain
from posttrain.errors import ConfigError
from posttrain.evaluate.decontaminate import find_overlap
from posttrain.tasks._decontaminate import check_pools, find_contamination, fold
from posttrain.types import Task

_INT = re.compile(r"(?<![\d.])\d+(?![\d.])")
REWRITTEN = {
    "trailing .0": lambda s: _INT.sub(lambda m: m.group() + ".0", s),
    "leading zero and +": lambda s: _INT.sub(lambda m: "+0" + m.group(), s),
    "arabic-indic digits": lambda s: s.translate(str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")),
}


@pytest.fixture(scope="module")
def train() -> list[Task]:
    return get_domain("math").generate_tasks(20, seed=0)


@pytest.mark.parametrize("how", sorted(REWRITTEN))
def test_a_copy_with_its_numbers_rewritten_is_refused(train, how):
    copies = [dataclasses.replace(t, id=f"{t.id}-copy", prompt=REWRITTEN[how](t.prompt), reference=None) for t in train]
    assert all(c.prompt != t.prompt for c, t in zip(copies, train, strict=True))
    with pytest.raises(ConfigError, match="20 of 20 evaluation tasks overlap"):  # was clean: 0 of 20
        check_pools(train, copies)
    # posttrain tasks decontaminate: the prompt alone now shares its grams (it matched only by answer fields)
    records = [{"id": t.id, "prompt": t.prompt} for t in train]
    assert len(find_overlap(records, [{"id": c.id, "prompt": c.prompt} for c in copies])) == 20


def _task(tid: str, prompt: str) -> Task:
    return Task(id=tid, domain="math", prompt=prompt, fields={})


@pytest.mark.parametrize(("original", "copy"), [
    ("Calculate 12 - 3.", "Calculate 12 \u2212 3.0."),
    ("What is 1000 + 250?", "What is 1,000 + +250?"),
    ("What is 1000 + 250?", "What is 1 000 + 0250?"),
    ("Round 12345 down.", "Round 012_345.00 down."),
])
def test_a_short_prompt_with_numbers_respelt_is_the_same_prompt(original, copy):
    assert [c.why for c in find_contamination([_task("t", original)], [_task("e", copy)])] == ["same prompt"]


@pytest.mark.parametrize(("one", "other"), [
    ("What is 0.5 times 8?", "What is 5 times 8?"),
    ("Upgrade to version 3.10 now.", "Upgrade to version 3.1 now."),
    ("Upgrade to version 1.2.3 now.", "Upgrade to version 1.2 now."),
    ("Calculate 2+3.", "Calculate 23."),
    ("Sort 1,2 and 3.", "Sort 12 and 3."),
    ("Set x2 to 4.", "Set x02 to 4."),
])
def test_different_numbers_stay_two_problems(one, other):
    assert find_contamination([_task("t", one)], [_task("e", other)]) == []
    assert fold(one) != fold(other)


def test_other_problems_stay_clean(train):
    other = get_domain("math").generate_tasks(20, seed=1)
    rewritten = [dataclasses.replace(t, prompt=REWRITTEN["trailing .0"](t.prompt)) for t in other]
    assert find_contamination(train, other) == find_contamination(train, rewritten)
