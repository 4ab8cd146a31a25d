"""A recipe's pool build (``check_pools``, ``tasks.contamination``) reads a held-out task re-spelt in
other characters as the training task it copies: zero-width spaces or soft hyphens inside each word,
Cyrillic look-alikes of Latin letters (each shared no 13-gram and no verbatim prompt with its original:
0 of 200 generated math or code tasks caught), while other problems of the same generator stay two."""

from __future__ import annotations

import dataclasses

import pytest

from posttrain.envs import get_domain
from posttrain.errors import ConfigError
from posttrain.tasks._decontaminate import check_pools, find_contamination, fold

RESPELT = {
    "zero-width": lambda s: " ".join(w[:1] + "\u200b" + w[1:] if len(w) > 2 else w for w in s.split(" ")),
    "soft hyphen": lambda s: " ".join(w[:1] + "\u00ad" + w[1:] if len(w) > 2 else w for w in s.split(" ")),
    "look-alikes": lambda s: s.translate(str.maketrans("aeoAEO", "\u0430\u0435\u043e\u0410\u0415\u041e")),
}


@pytest.fixture(scope="module")
def train() -> list:
    return get_domain("math").generate_tasks(20, seed=0)


@pytest.mark.parametrize("how", sorted(RESPELT))
def test_a_respelt_copy_of_a_training_task_is_refused(train, how):
    copies = [dataclasses.replace(t, id=f"{t.id}-copy", prompt=RESPELT[how](t.prompt)) for t in train]
    assert all(c.prompt != t.prompt for c, t in zip(copies, train, strict=True))
    with pytest.raises(ConfigError, match="20 of 20 evaluation tasks overlap"):  # was clean: 0 of 20
        check_pools(train, copies)
    kept, dropped = check_pools(train, copies, mode="drop")
    assert (kept, dropped) == ([], 20)


def test_a_short_prompt_respelt_is_the_same_prompt():
    # under 13 words a prompt is compared verbatim only: "Solve 67-x=0." re-spelt was another prompt
    from posttrain.types import Task

    t = Task(id="t", domain="math", prompt="Solve 67-x=0.", fields={})
    copy = Task(id="e", domain="math", prompt="S\u200bolv\u0435 67-x=0.", fields={})
    assert [c.why for c in find_contamination([t], [copy])] == ["same prompt"]
    other = Task(id="e2", domain="math", prompt="S\u200bolv\u0435 -67+x=0.", fields={})
    assert find_contamination([t], [other]) == []  # two problems stay two


def test_other_problems_stay_clean(train):
    other = get_domain("math").generate_tasks(20, seed=1)
    assert find_contamination(train, other) == find_contamination(
        train, [dataclasses.replace(t, prompt=RESPELT["look-alikes"](t.prompt)) for t in other])
    assert fold("Wh\u200bat is tw\u043e p\u00adlus \uff54hree?") == "what is two plus three?"
