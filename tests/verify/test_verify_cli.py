"""``posttrain verify`` and ``posttrain tasks validate``, through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_TASK = {"id": "c1", "domain": "code", "prompt": "def inc(x: int) -> int:\n    \"\"\"x + 1\"\"\"\n",
             "entry_point": "inc", "test": "def check(candidate):\n    assert candidate(1) == 2\n",
             "reference": "    return x + 1\n"}
MATH_TASK = {"id": "m1", "domain": "math", "prompt": "1+1?", "answer": "2", "reference": "\\boxed{2}"}


def posttrain(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_verify_single_prints_verdict_and_exits_zero(tmp_path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps(MATH_TASK))
    (tmp_path / "good.txt").write_text("so \\boxed{2}")
    (tmp_path / "bad.txt").write_text("\\boxed{3}")
    r = posttrain("verify", "--task", task, "--response", tmp_path / "good.txt")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outcome"] == "pass"
    r = posttrain("verify", "--task", task, "--response", tmp_path / "bad.txt")
    assert r.returncode == 0 and json.loads(r.stdout)["outcome"] == "fail"


def test_verify_errors_name_the_problem(tmp_path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps({**MATH_TASK, "answer": ""}))
    (tmp_path / "r.txt").write_text("x")
    r = posttrain("verify", "--task", task, "--response", tmp_path / "r.txt")
    assert r.returncode == 2 and "field 'answer'" in r.stderr and "task.json" in r.stderr
    task.write_text(json.dumps(MATH_TASK))
    r = posttrain("verify", "--task", task, "--response", tmp_path / "missing.txt")
    assert r.returncode == 2 and "missing.txt" in r.stderr
    r = posttrain("verify", "--task", tmp_path / "nope.json", "--response", tmp_path / "r.txt")
    assert r.returncode == 2 and "nope.json" in r.stderr


def test_verify_many_in_parallel_with_sandbox(tmp_path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(CODE_TASK) + "\n" + json.dumps(MATH_TASK) + "\n")
    responses = tmp_path / "responses.jsonl"
    lines = [("c1", "    return x + 1\n"), ("c1", "    return x\n"), ("m1", "\\boxed{2}"),
             ("c1", "```python\nimport sys\nsys.exit(0)\n```"), ("m1", "\\boxed{2} \\boxed{3}")]
    responses.write_text("".join(json.dumps({"task_id": t, "response": r}) + "\n" for t, r in lines))
    r = posttrain("verify", "--tasks", tasks, "--responses", responses)
    assert r.returncode == 0, r.stderr
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(o["task_id"], o["outcome"]) for o in out] == [
        ("c1", "pass"), ("c1", "fail"), ("m1", "pass"), ("c1", "fail"), ("m1", "fail")]
    responses.write_text(json.dumps({"task_id": "zz", "response": "x"}) + "\n")
    r = posttrain("verify", "--tasks", tasks, "--responses", responses)
    assert r.returncode == 2 and "responses.jsonl:1" in r.stderr and "'zz'" in r.stderr


def test_tasks_validate(tmp_path) -> None:
    # One per domain of posttrain's own, but repo's and cad's (their real suites and renders): their
    # files are validated in tests/envs/test_domains.py, their CLI in test_repo_run.py and test_cad.py.
    files = sorted(f for f in (ROOT / "examples" / "tasks").glob("*.jsonl") if f.stem not in ("repo", "cad"))
    r = posttrain("tasks", "validate", *files, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("0 problem(s)") == len(files) >= 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**MATH_TASK, "reference": "\\boxed{3}"}) + "\n"
                   + json.dumps({**CODE_TASK, "id": "c2", "test": "def check(candidate):\n    pass\n"}) + "\n")
    r = posttrain("tasks", "validate", bad)
    assert r.returncode == 1
    assert "m1: reference response does not pass" in r.stderr
    assert "c2: the do-nothing response passes" not in r.stderr  # never calls the candidate -> fails
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps({**MATH_TASK, "answer": 5, "extra": 1}) + "\n")
    r = posttrain("tasks", "validate", broken)
    assert r.returncode == 2 and "broken.jsonl:1" in r.stderr and "extra" in r.stderr
