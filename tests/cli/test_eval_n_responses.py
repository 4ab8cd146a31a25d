"""``posttrain eval --responses FILE --n N``: N is the count of samples the file holds per task.

``--n`` was read only where a model samples: with ``--responses`` a file of 3 samples to one task
and 1 to another was scored as given under ``--n 2`` (pass@k over whatever each task held), and the
records stated no count. Given, each task answered must have exactly N responses (one line, exit 2,
before any work), and the records and summary state ``samples_per_task`` N; without it, as before.

Real ``posttrain eval`` runs (``posttrain.cli.main``) over three math tasks, the math verifier scoring.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.cli import main


@pytest.fixture
def sums(tmp_path: Path) -> Path:
    tasks = tmp_path / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"m{i}", "domain": "math", "answer": str(2 * i + 10),
                                         "prompt": f"{i}+{i + 10}? Put your final answer in \\boxed{{}}."}) + "\n"
                             for i in range(3)))
    return tasks


def _responses(path: Path, rows: list[tuple[int, int]]) -> Path:
    """(task, answer) per line, in order."""
    path.write_text("".join(json.dumps({"task_id": f"m{t}", "response": f"\\boxed{{{a}}}"}) + "\n" for t, a in rows))
    return path


def _eval(capsys, sums: Path, responses: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["eval", "--tasks", str(sums), "--responses", str(responses), "--k", "1,2", "--json",
                 "--workers", "1", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_n_given_with_responses_is_stated_in_records_and_summary(tmp_path, sums, capsys):
    # two samples of each of m0 and m1 (one right, one wrong), m2 unanswered
    rows = [(0, 10), (0, 0), (1, 12), (1, 0)]
    code, out, err = _eval(capsys, sums, _responses(tmp_path / "r.jsonl", rows), "--n", "2",
                           "--out", str(tmp_path / "res"))
    assert code == 0, err
    s = json.loads(out)
    assert (s["samples_per_task"], s["n_samples"], s["pass@1"], s["unanswered_tasks"]) == (2, 4, 0.5, 1)
    assert "m2" in err and "warning" in err  # an unanswered task stays the warning it was
    records = [json.loads(line) for line in (tmp_path / "res" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {r.get("samples_per_task") for r in records} == {2}  # was absent: None
    assert json.loads((tmp_path / "res" / "summary.json").read_text())["samples_per_task"] == 2
    # without --n, as before: no count stated, each task's own scored as given
    code, out, err = _eval(capsys, sums, _responses(tmp_path / "u.jsonl", [*rows, (1, 12)]),
                           "--out", str(tmp_path / "u"))
    assert code == 0, err
    s = json.loads(out)
    assert "samples_per_task" not in s and s["n_samples"] == 5
    records = [json.loads(line) for line in (tmp_path / "u" / "records.jsonl").read_text().splitlines()]
    assert all("samples_per_task" not in r for r in records)


@pytest.mark.parametrize("rows, task, count, n, more", [
    ([(0, 10), (0, 0), (1, 12), (1, 0), (1, 12), (2, 14), (2, 0)], "m1", 3, 2, ""),  # one more
    ([(0, 10), (0, 0), (1, 12), (2, 14), (2, 0)], "m1", 1, 2, ""),  # one fewer (a failure's line deleted)
    ([(0, 10), (1, 12), (2, 14)], "m0", 1, 8, " (3 of the 3 tasks answered are off)"),  # --n 8 of a file of one
])
def test_a_task_with_another_count_than_n_is_refused_before_any_work(tmp_path, sums, capsys, rows, task, count, n,
                                                                     more):
    path = _responses(tmp_path / "r.jsonl", rows)
    out_dir = tmp_path / "res"
    code, out, err = _eval(capsys, sums, path, "--n", str(n), "--out", str(out_dir))
    assert (code, out) == (2, ""), err  # was 0: scored as given, pass@k over each task's own count
    assert err.splitlines() == [
        f"posttrain: error: {path}: task {task!r} has {count} response(s), --n {n} expects exactly {n} for each task "
        f"answered{more}; give the file's count as --n, or fix the file"]
    assert not (out_dir / "records.jsonl").exists()  # no work: nothing verified or written
