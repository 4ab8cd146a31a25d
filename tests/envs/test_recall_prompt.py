"""A generated recall task's ``Task.prompt`` tells nothing the policy is not shown: it is
``render_prompt``'s text (the notes, the fact among the other codes, the question), never a text that
ends at the fact.

Before, it was the instructions and the notes through the fact's own line: the last 4-digit number
of ``task.prompt`` was the answer in 776 of 776 generated tasks (levels 1-64 and ``generate_tasks``),
and whatever showed or compared ``task.prompt`` -- task files, eval records and reports, the check
that refuses a demonstration whose prompt is a held-out task's -- carried the answer's place. That
check compared demonstrations against ``task.prompt`` while the model is shown ``render_prompt``: a
demonstration written on a held-out recall task's rendered prompt was taken (the first test failed
on the old code, as did the second). ``fact_first`` tasks (the long-horizon comparison's family) are
byte for byte as before.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from posttrain.envs import model_prompt
from posttrain.envs.recall import ENV
from posttrain.errors import UserError
from posttrain.tasks import load_demonstrations

_NUMBER = re.compile(r"(?<!\d)\d{4}(?!\d)")
GENERATED = [*ENV.generate_tasks(120, seed=5),
             *(t for level in (1, 2, 8, 64) for t in ENV.generate_level(30, level=level, seed=6))]


def test_a_demonstration_on_a_held_out_tasks_prompt_is_refused(tmp_path) -> None:
    held_out = GENERATED[:3]
    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps({"prompt": model_prompt(held_out[1]), "response": held_out[1].reference}) + "\n")
    with pytest.raises(UserError, match="evaluation task 'recall-gen-5-1'"):
        load_demonstrations(path, GENERATED[3:], held_out)


def test_a_generated_prompt_is_what_the_policy_is_shown_and_ends_at_no_fact() -> None:
    last_is_answer = sum(_NUMBER.findall(t.prompt)[-1] == t.reference for t in GENERATED)
    assert last_is_answer == 0, f"{last_is_answer} of {len(GENERATED)}"
    assert all(t.prompt == ENV.render_prompt(t) == model_prompt(t) for t in GENERATED)
    assert all(t.prompt.endswith(f"Question: What is the {t.fields['key']}? Answer:") for t in GENERATED)


def test_a_task_file_round_trip_keeps_the_prompt() -> None:
    from posttrain.envs import task_to_record

    for task in GENERATED[:20]:
        again = ENV.parse_task(json.loads(json.dumps(task_to_record(task))), "t.jsonl:1")
        assert (again.prompt, again.fields, again.reference) == (task.prompt, task.fields, task.reference)


def test_the_fact_first_family_is_byte_for_byte_as_before() -> None:
    """Levels 1-64 x seeds 0-9, 3 tasks each: id, prompt, fields, reference, difficulty (the README's
    long-horizon comparison was run on these tasks)."""
    digest = hashlib.sha256()
    for seed in range(10):
        for level in range(1, 65):
            for t in ENV.generate_level(3, level=level, seed=seed, fact_first=True):
                digest.update(json.dumps([t.id, t.prompt, t.fields, t.reference, t.difficulty], sort_keys=True).encode())
    assert digest.hexdigest()[:16] == "1baead2931ea045e"
