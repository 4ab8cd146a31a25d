"""load_tasks: formats, and errors that name the file, line, task id and field."""

from __future__ import annotations

import gzip
import json

import pytest

from posttrain.errors import TaskError, UserError
from posttrain.tasks._load import load_tasks

MATH = {"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2", "reference": "\\boxed{2}"}
CODE = {"id": "c1", "domain": "code", "prompt": "def f():\n", "entry_point": "f",
        "test": "def check(candidate):\n    assert candidate() == 1\n", "reference": "    return 1\n"}


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_jsonl_json_list_single_and_gz(tmp_path) -> None:
    lines = json.dumps(MATH) + "\n\n" + json.dumps(CODE) + "\n"
    assert [t.id for t in load_tasks(write(tmp_path, "a.jsonl", lines))] == ["m1", "c1"]
    assert len(load_tasks(write(tmp_path, "b.json", json.dumps([MATH, CODE])))) == 2
    assert len(load_tasks(write(tmp_path, "c.json", json.dumps({"tasks": [MATH]})))) == 1
    assert load_tasks(write(tmp_path, "d.json", json.dumps(MATH)))[0].fields == {"answer": "2"}
    gz = tmp_path / "e.jsonl.gz"
    gz.write_bytes(gzip.compress(lines.encode()))
    assert len(load_tasks(gz)) == 2


def test_humaneval_records_with_default_domain(tmp_path) -> None:
    rec = {"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f",
           "canonical_solution": "    return 1\n", "test": "def check(candidate):\n    assert candidate() == 1\n"}
    (t,) = load_tasks(write(tmp_path, "he.jsonl", json.dumps(rec)), domain="code")
    assert (t.id, t.reference) == ("HumanEval/0", "    return 1\n")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (json.dumps(MATH) + "\n{not json}\n", r"a\.jsonl:2: invalid JSON"),
        (json.dumps({**MATH, "answer": None}), r"a\.jsonl:1: task 'm1': field 'answer'"),
        (json.dumps({k: v for k, v in MATH.items() if k != "answer"}), r"field 'answer': expected a value \(missing\)"),
        (json.dumps({**MATH, "domain": "chess"}), r"a\.jsonl:1: unknown domain 'chess'"),
        (json.dumps({k: v for k, v in MATH.items() if k != "domain"}), r"field 'domain': missing"),
        (json.dumps(MATH) + "\n" + json.dumps(MATH), r"duplicate task id 'm1'"),
        (json.dumps({**MATH, "limits": {"timeout_s": -1}}), r"field 'limits.timeout_s'"),
        (json.dumps({**MATH, "limits": {"gpu": 1}}), r"field 'limits'"),
        (json.dumps({**MATH, "id": ""}), r"field 'id'"),
        (json.dumps({**MATH, "anwser": "2"}), r"unknown field\(s\) \['anwser'\]"),
        ('{"id": "m1", "id": "m2", "domain": "math", "prompt": "p", "answer": "1"}', "duplicate key 'id'"),
        (json.dumps({**MATH, "difficulty": "hard"}), "field 'difficulty'"),
        (json.dumps({**CODE, "entry_point": "not an identifier"}), "field 'entry_point'"),
        (json.dumps({**CODE, "test": "def check(candidate):\n    assert (\n"}), "field 'test': expected valid Python"),
        (json.dumps({**CODE, "test": "assert True\n"}), r"defines check\(candidate\)"),
        ("[1, 2]", r"expected a JSON object per task"),
    ],
)
def test_errors_name_the_problem(tmp_path, text: str, match: str) -> None:
    with pytest.raises(TaskError, match=match):
        load_tasks(write(tmp_path, "a.jsonl", text))


def test_missing_and_unknown_files(tmp_path) -> None:
    with pytest.raises(UserError, match="no such task file"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(TaskError, match="unknown task file type"):
        load_tasks(write(tmp_path, "x.csv", "a,b"))
