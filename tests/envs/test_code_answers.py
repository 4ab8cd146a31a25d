"""Issue 26, item 7: task files and prompts as a user writes them.

A code prompt that is a bare signature (``def f(x):``, no docstring) takes a complete definition as
the answer, fenced or not, in the real sandbox; ``tasks validate`` says why a reference fails as
``posttrain verify`` does, and names every bad record of a file (up to a cap, with the count).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.cli import main
from posttrain.envs.code._env import extract_program
from posttrain.types import Task

BARE = "import math\n\ndef area(r):\n"
TEST = "def check(candidate):\n    assert abs(candidate(1.0) - math.pi) < 1e-9\n    assert candidate(0) == 0\n"
SOLUTION = "def area(r):\n    return math.pi * r * r\n"


def bare_task() -> Task:
    return Task(id="area", domain="code", prompt=BARE, fields={"entry_point": "area", "test": TEST})


@pytest.mark.parametrize(("prompt", "response", "program", "how"), [
    # a bare signature: a complete definition takes its place, the prompt's imports kept
    (BARE, f"Sure:\n```python\n{SOLUTION}```\n", "import math\n\n" + SOLUTION, "fenced"),
    (BARE, SOLUTION, "import math\n\n" + SOLUTION, "definition"),
    (BARE, "async def area(r):\n    return 1\n", "import math\n\nasync def area(r):\n    return 1\n", "definition"),
    ("@cache\ndef f(x):\n", "def f(x):\n    return x\n", "def f(x):\n    return x\n", "definition"),
    # a body continues the signature, as before
    (BARE, "    return math.pi * r * r\n", BARE + "    return math.pi * r * r\n", "continuation"),
    # a definition of another function is not the answer: appended as before (and it fails to compile)
    (BARE, "```python\ndef other(r):\n    return r\n```", BARE + "\ndef other(r):\n    return r\n", "fenced"),
    # a prompt with a body (a docstring) is complete: a definition follows it, as before
    ('def f(x):\n    """Double."""\n', "```py\ndef f(x):\n    return 2 * x\n```",
     'def f(x):\n    """Double."""\n\ndef f(x):\n    return 2 * x\n', "fenced"),
    # what does not parse stays as it was, whatever it is
    (BARE, "(" * 5000, BARE + "(" * 5000, "continuation"),
    (BARE, "def area(r):\n\x00", BARE + "def area(r):\n\x00", "continuation"),
])
def test_a_complete_definition_is_the_answer_wherever_one_is_given(prompt, response, program, how) -> None:
    assert extract_program(prompt, response) == (program, how)


def test_a_bare_signature_task_passes_a_complete_solution_in_the_sandbox(code_verifier) -> None:
    task = bare_task()
    for response in (f"```python\n{SOLUTION}```", SOLUTION, "    return math.pi * r * r\n"):
        v = code_verifier(task, response)
        assert v.passed, (response, v.feedback)
    wrong = code_verifier(task, "```python\ndef area(r):\n    return 2 * r\n```")
    assert (wrong.outcome, wrong.error_class) == ("fail", "assertion")
    assert not code_verifier(task, "").passed  # the no-op


def _write(path: Path, records: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def test_validate_says_why_a_reference_fails_as_verify_does(tmp_path, capsys, code_verifier) -> None:
    good = {"id": "area", "domain": "code", "prompt": BARE, "entry_point": "area", "test": TEST,
            "reference": f"```python\n{SOLUTION}```"}
    broken = {**good, "id": "broken", "reference": "def area(r):\nreturn r\n"}  # what the reporter wrote
    code = main(["tasks", "validate", str(_write(tmp_path / "t.jsonl", [good, broken]))])
    out, err = capsys.readouterr()
    assert code == 1 and "2 tasks, 1 problem(s)" in out, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"{tmp_path / 't.jsonl'}: broken: reference response does not pass: syntax: "), line
    assert "expected an indented block" in line and "(candidate.py, line 4)" in line and "Hint" not in line, line
    said = code_verifier(bare_task(), broken["reference"]).feedback.splitlines()  # what posttrain verify says
    assert line.endswith(": ".join(said[:2])) and said[2].startswith("Hint"), (line, said)


def test_validate_names_every_bad_record_up_to_a_cap(tmp_path, capsys) -> None:
    from posttrain.cli.tasks import SHOWN_BAD_RECORDS

    ok = {"id": "m", "domain": "math", "prompt": "1+1?", "answer": "2"}
    records = [ok, "{not json", {**ok, "id": "x", "extra": 5}, ok, {"id": "y", "domain": "nope"}]
    path = _write(tmp_path / "bad.jsonl", records)
    assert main(["tasks", "validate", "--no-run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ")[0] for line in err[:-1]] == [f"{path}:{n}" for n in (2, 3, 4, 5)], err
    assert "duplicate task id 'm'" in err[2] and "unknown domain 'nope'" in err[3]
    assert err[-1] == (f"posttrain: error: {path}: 4 bad records of 5 (named above, at most {SHOWN_BAD_RECORDS} "
                       f"a file); no verifier was run")
    many = _write(tmp_path / "many.jsonl", [{**ok, "id": f"b{i}", "extra": i} for i in range(SHOWN_BAD_RECORDS + 5)])
    assert main(["tasks", "validate", "--no-run", str(many)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == SHOWN_BAD_RECORDS + 2 and err[-2] == f"{many}: ... and 5 more bad records", err[-3:]
    one = _write(tmp_path / "one.jsonl", [ok, {**ok, "id": "z", "extra": 1}])
    assert main(["tasks", "validate", "--no-run", str(one)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"posttrain: error: {one}:2: task 'z'"), err  # one bad input, one line
