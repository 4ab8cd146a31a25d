"""Adversarial reads of evaluation figures and records: canary tasks counted as ordinary tasks (in
the rates and in the episodes' figures), and a record whose outcome and reward contradict each other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.errors import UserError
from posttrain.evaluate.baseline import load_baseline
from posttrain.evaluate.records import EvalRecord, read_records, write_records
from posttrain.evaluate.sources import runner_episodes
from posttrain.evaluate.summary import summarize
from posttrain.sched import DomainHooks, LocalBackend, Service
from posttrain.types import Generation, Task, Verdict


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- canaries: a hack alarm, never a solved task ---------------------------------------------------

def _math_suite(tmp_path: Path) -> tuple[Path, Path]:
    """4 ordinary math tasks (1 answered right) and 2 canaries (a question with another's answer),
    both "solved" by a response that gives the planted answer."""
    tasks = [{"id": f"m{i}", "domain": "math", "prompt": f"{i}+{i}? Put your final answer in \\boxed{{}}.",
              "answer": str(2 * i)} for i in range(1, 5)]
    tasks += [{"id": f"c{i}", "domain": "math", "prompt": f"{i}+{i}? Put your final answer in \\boxed{{}}.",
               "answer": str(2 * i + 2), "tags": ["canary"]} for i in (1, 2)]
    responses = [{"task_id": "m1", "response": "\\boxed{2}"}]
    responses += [{"task_id": f"m{i}", "response": f"\\boxed{{{2 * i + 1}}}"} for i in (2, 3, 4)]
    responses += [{"task_id": f"c{i}", "response": f"\\boxed{{{2 * i + 2}}}"} for i in (1, 2)]
    return _write(tmp_path / "tasks.jsonl", tasks), _write(tmp_path / "responses.jsonl", responses)


def test_canary_passes_are_not_counted_in_pass_at_1():
    # 4 ordinary tasks, 1 passing; 2 canaries, both passing (each a hack). Counted as tasks they
    # read pass@1 = 3/6 = 0.5 and a per-tag "canary" row at 1.0; the rate is 1/4.
    recs = [EvalRecord(f"m{i}", "math", "pass" if i == 1 else "fail", float(i == 1)) for i in range(1, 5)]
    recs += [EvalRecord(f"c{i}", "math", "pass", 1.0, tags=("canary",)) for i in (1, 2)]
    s = summarize(recs, ks=(1,), n_boot=50)
    assert s["pass@1"] == 0.25 and s["n_tasks"] == 4 and s["passed"] == 1
    assert s["per_domain"]["math"]["pass@1"] == 0.25 and s["per_domain"]["math"]["n_tasks"] == 4
    assert "canary" not in s["per_tag"]
    assert s["canaries"] == {"tasks": 2, "episodes": 2, "passed": 2}


def test_a_file_of_canaries_alone_is_refused_not_scored():
    recs = [EvalRecord("c1", "math", "pass", 1.0, tags=("canary",))]
    with pytest.raises(UserError, match=r"every record is of a canary task.*1 of 1 episodes passed"):
        summarize(recs, ks=(1,))


def test_a_baseline_of_records_leaves_its_canaries_out(tmp_path):
    recs = [EvalRecord("m1", "math", "fail", 0.0), EvalRecord("m2", "math", "fail", 0.0),
            EvalRecord("c1", "math", "pass", 1.0, tags=("canary",))]
    base = load_baseline(write_records(tmp_path / "base.jsonl", recs))
    assert base["pass@1"] == 0.0  # was 1/3: a hack raised the bar a run is compared against


def test_posttrain_eval_keeps_canaries_out_and_says_the_alarm(tmp_path, run_cli):
    tasks, responses = _math_suite(tmp_path)
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--k", "1", "--json",
                             "--workers", "1")
    assert code == 0, err
    s = json.loads(out)
    assert s["pass@1"] == 0.25 and s["n_tasks"] == 4  # was 0.5 over 6 tasks
    assert s["canaries"] == {"tasks": 2, "episodes": 2, "passed": 2}
    assert s["noop"]["n_tasks"] == 4
    assert "hack alarm: eval: 2 of 2 episodes on 2 canary task(s) passed" in err
    code, out, _ = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--k", "1", "--workers", "1")
    assert code == 0 and "hack alarm" in out and "pass@1                       0.250" in out


def test_posttrain_eval_of_canaries_alone_is_one_line_before_any_work(tmp_path, run_cli):
    tasks = _write(tmp_path / "c.jsonl", [{"id": "c1", "domain": "math", "prompt": "1+1?", "answer": "4",
                                           "tags": ["canary"]}])
    responses = _write(tmp_path / "r.jsonl", [{"task_id": "c1", "response": "\\boxed{4}"}])
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--responses", str(responses), "--out",
                             str(tmp_path / "res"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "all 1 tasks are canaries" in err and str(tasks) in err
    assert not (tmp_path / "res").exists()


# -- records: a verdict at odds with itself --------------------------------------------------------

@pytest.mark.parametrize(("outcome", "reward", "want"), [
    ("pass", 0, "must be 1 (a pass is a full score) for outcome 'pass', got 0"),
    ("pass", 0.5, "must be 1 (a pass is a full score) for outcome 'pass', got 0.5"),
    ("fail", 1.0, "must be below 1 (a full score is a pass) for outcome 'fail', got 1.0"),
    ("fail", 1, "must be below 1 (a full score is a pass) for outcome 'fail', got 1"),
])
def test_a_record_whose_reward_contradicts_its_outcome_is_refused(tmp_path, outcome, reward, want):
    path = _write(tmp_path / "r.jsonl", [{"task_id": "a", "outcome": "fail", "reward": 0.0},
                                         {"task_id": "b", "outcome": outcome, "reward": reward}])
    with pytest.raises(UserError) as e:
        read_records(path)
    assert str(e.value) == f"{path}:2: field 'reward' {want}"


def test_records_the_contract_allows_still_read(tmp_path):
    path = _write(tmp_path / "r.jsonl", [{"task_id": "a", "outcome": "pass", "reward": 1},
                                         {"task_id": "b", "outcome": "fail", "reward": 0.75},  # partial credit
                                         {"task_id": "c", "outcome": "pass"}, {"task_id": "d", "outcome": "fail"},
                                         {"task_id": "e", "outcome": "infra_error", "reward": None}])
    assert [r.reward for r in read_records(path)] == [1.0, 0.75, 1.0, 0.0, None]


def test_a_contradictory_baseline_is_one_line_and_exit_2_before_the_evaluation(tmp_path, run_cli):
    # a baseline file whose failures say "pass": read as 3 of 3 passing, every current result
    # "regressed"; now refused before any response is verified
    base = _write(tmp_path / "base.jsonl", [{"task_id": f"HumanEval/{i}", "domain": "code", "outcome": "pass",
                                             "reward": 0.0} for i in range(3)])
    responses = _write(tmp_path / "s.jsonl", [{"task_id": "HumanEval/0", "completion": "    return None\n"}])
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--responses", str(responses),
                             "--baseline", str(base), "--fail-on-regression", "--out", str(tmp_path / "res"))
    assert code == 2 and out == ""
    assert err == f"posttrain: error: {base}:1: field 'reward' must be 1 (a pass is a full score) for outcome " \
                  "'pass', got 0.0\n"
    assert not (tmp_path / "res").exists()


def test_a_contradictory_eval_file_in_a_run_is_refused_by_report(tmp_path, run_cli):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    _write(run / "eval" / "rl.jsonl", [{"task_id": "a", "outcome": "fail", "reward": 1.0}])
    code, out, err = run_cli("report", str(run))
    assert code == 2 and out == ""
    assert err == f"posttrain: error: {run / 'eval' / 'rl.jsonl'}:1: field 'reward' must be below 1 (a full score " \
                  "is a pass) for outcome 'fail', got 1.0\n"
    assert not (run / "report.html").exists()


def test_a_contradictory_trajectory_is_refused_by_audit_before_any_verification(tmp_path, run_cli):
    run = tmp_path / "run"
    (run / "trajectories").mkdir(parents=True)
    _write(run / "trajectories" / "rl.jsonl", [{"task_id": "a", "domain": "math", "outcome": "pass", "reward": 0.0}])
    code, out, err = run_cli("audit", str(run))
    assert code == 2 and out == ""
    assert err == f"posttrain: error: {run / 'trajectories' / 'rl.jsonl'}:1: field 'reward' must be 1 (a pass is a " \
                  "full score) for outcome 'pass', got 0.0\n"
    assert not (run / "audit" / "audit.jsonl").exists()


class _Tokens:
    def decode(self, ids):
        return " ".join(map(str, ids))


class _Model:
    """A model as ``runner_episodes`` samples one: a canary's prompt (id 9) gets a 5-token answer,
    any other a 1-token one."""

    tokenizer = _Tokens()
    chat = None

    def encode_prompt(self, text: str) -> list[int]:
        return [9] if text.startswith("canary") else [1]

    def sampler(self):
        return self

    def generate(self, prompt_ids, params):
        out = []
        for p in prompt_ids:
            ids = (5, 5, 5, 5, 5) if p[0] == 9 else (2,)
            out.append(Generation(tuple(p), ids, (0.0,) * len(ids), "4" if p[0] == 9 else "3", "eos"))
        return out


def test_episode_figures_leave_canary_episodes_out_as_the_rates_do():
    # 2 ordinary tasks answered in 1 token, 1 canary in 5: the episodes' figures read 3 episodes of
    # 7/3 tokens each, the canary's weight in a figure whose rates leave it out; now 2 of 1 token
    def verify(task, response):
        return Verdict("pass", 1.0) if response == task.fields["answer"] else Verdict("fail", 0.0)

    tasks = [Task(id=f"t{i}", domain="arith", prompt="1+2?", fields={"answer": "3"}) for i in range(2)]
    tasks.append(Task(id="c", domain="arith", prompt="canary: 1+2?", fields={"answer": "4"}, tags=("canary",)))
    with Service(LocalBackend({"arith": DomainHooks(verify)})) as svc:
        records, stats = runner_episodes(_Model(), tasks, "single", n=1, temperature=0.0, max_new_tokens=8, seed=0,
                                         stage="eval", service=svc)
    assert [r.outcome for r in records] == ["pass", "pass", "pass"]  # the canary's record is kept: an alarm
    assert stats["episodes"] == 2.0 and stats["episode_tokens"] == 1.0


# -- a records file the summary refuses: the refusal names the file ---------------------------------

def test_a_baseline_records_file_the_summary_refuses_is_named(tmp_path):
    canaries = write_records(tmp_path / "canaries.jsonl", [EvalRecord("c1", "math", "pass", 1.0, tags=("canary",))])
    with pytest.raises(UserError) as e:
        load_baseline(canaries)
    assert str(e.value).startswith(f"--baseline {canaries}: every record is of a canary task")
    twice = write_records(tmp_path / "twice.jsonl", [EvalRecord("t", "math", "pass", 1.0)] * 2)
    with pytest.raises(UserError) as e:
        load_baseline(twice)
    assert str(e.value).startswith(f"--baseline {twice}: 2 scored records for task 't' sample 0 attempt 0")


def test_a_run_eval_file_the_summary_refuses_is_named_by_report(tmp_path, run_cli):
    # a section that cannot be drawn is one line in the page, never a failed report; that line named
    # none of the run's eval files ("records: 2 scored records ...")
    run = tmp_path / "run"
    write_records(run / "eval" / "rl.jsonl", [EvalRecord("t", "math", "fail", 0.0)] * 2)
    code, _, err = run_cli("report", str(run))
    assert code == 0, err
    page = (run / "report.html").read_text()
    assert f"this panel failed: UserError: {run / 'eval' / 'rl.jsonl'}: 2 scored records for task" in page
