"""files episodes on the workspace kit: the scripted agents (the oracle passes, the no-op and every cheat
fail, never as infra errors), and what an agent could leave in its workspace to get past the host's
reading of it (links, fifos, a directory where a file was, sparse giants, odd names, floods of files),
each a standing test. Real sandbox, real Workspace; scripts are played as a model's actions are
(``agent_play``)."""

from __future__ import annotations

import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import CHEATS, WHY_IT_FAILS, oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT, noop_script
from posttrain.tasks import load_tasks
from posttrain.types import Task

ENV = get_domain("files")
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def verify():
    return ENV.make_verifier(None)


def _tasks() -> list[Task]:
    """Four kinds of work (two in one workspace at level 5) and a hand-written example with nested moves;
    the README's sweep plays every agent on the examples and 200 generated tasks of every kind."""
    made = [build_task(random.Random(f"agent-{'-'.join(k)}"), lv, f"files-agent-{'-'.join(k)}", k)
            for k, lv in ((["sales", "notes"], 5), (["merge", "sqlite"], 5))]
    hand = [t for t in load_tasks(ROOT / "examples" / "tasks" / "files.jsonl") if t.id == "files-hand-2"]
    return made + hand


@pytest.mark.slow
def test_the_oracle_passes_and_the_no_op_and_every_cheat_fail(pool, verify) -> None:
    tasks = _tasks()
    for task in tasks:
        got = play(pool, task, oracle(task), verify)
        assert got.done and [v.outcome for v in got.verdicts] == ["pass"], (task.id, got.first.feedback)
        assert all(c.ok and not c.result.startswith("Error") for c in got.calls), task.id
    for task in tasks[:1]:  # two kinds of work in one workspace, moves among them
        for name, script in [("noop", noop_script), *CHEATS.items()]:
            got = play(pool, task, script(task), verify, resubmit=3)
            assert got.done, (task.id, name)
            outcomes = {v.outcome for v in got.verdicts}
            assert outcomes == {"fail"}, (task.id, name, [(v.outcome, v.feedback) for v in got.verdicts])
            if name in WHY_IT_FAILS:
                assert got.first.error_class in WHY_IT_FAILS[name].split(":")[0].split("|"), (task.id, name, got.first.feedback)


def _one_task() -> Task:
    return build_task(random.Random("agent-one"), 2, "files-agent-one", ["sales"])


def _right(task: Task) -> list[dict]:
    return oracle(task)[:-1]


@pytest.mark.parametrize(("what", "command", "error_class"), [
    ("a fifo", "mkfifo pipe", "not_regular"),
    ("a symlink to a host file", "ln -s /etc/passwd notes.txt", "not_regular"),
    ("a dangling symlink", "ln -s /nowhere notes.txt", "not_regular"),
    ("a directory link", "ln -s /work/reports mirror", "not_regular"),
    ("a file replaced by a directory", "rm README.md && mkdir README.md", "not_regular"),
    ("a hard link beside the report", "ln reports/summary.json reports/copy.json", "collateral"),
    ("a file under a new, deep tree", "mkdir -p a/b/c/d && echo x > a/b/c/d/e.txt", "collateral"),
    # the host's reading said "does not exist" for a deleted path; a name saying it must not read as deleted
    ("a symlink named as deleted", "ln -s /etc/passwd 'x does not exist'", "not_regular"),
    ("a fifo named as deleted", "mkfifo 'does not exist'", "not_regular"),
    ("a sparse giant named as deleted", "truncate -s 20M 'big does not exist'", "format"),
])
def test_what_is_left_beside_the_right_work_fails(pool, verify, what, command, error_class) -> None:
    task = _one_task()
    got = play(pool, task, [*_right(task), call("bash", command=command), SUBMIT], verify)
    assert got.first.outcome == "fail" and got.first.error_class == error_class, (what, got.first.feedback)


@pytest.mark.parametrize(("what", "command"), [
    ("60 MB of changed files (three sparse 20 MB files)", "for i in 1 2 3; do truncate -s 20M big$i; done"),
    ("more changed files than the grader reads", "mkdir many && cd many && seq 1 2500 | xargs touch"),
    ("a file name that is not UTF-8", "touch $'bad\\xff.txt'"),
    ("a file name with a newline", "touch $'two\\nlines.txt'"),
    ("a tree deeper than the grader walks", "mkdir -p $(printf 'd/%.0s' $(seq 1 80)) && touch $(printf 'd/%.0s' $(seq 1 80))x"),
])
def test_what_the_host_will_not_read_fails_and_never_costs_it(pool, verify, what, command) -> None:
    """Each is the agent's ``fail`` (never an infra error, never an exception out of the episode)."""
    task = _one_task()
    got = play(pool, task, [*_right(task), call("bash", command=command), SUBMIT], verify)
    assert got.first.outcome == "fail", (what, got.first.feedback)


def test_the_workspace_starts_as_the_task_and_reads_its_encodings(pool, verify) -> None:
    task = build_task(random.Random("agent-enc"), 5, "files-agent-enc", ["merge", "sqlite"])
    dump = 'python3 -c \'import sqlite3; print(len(list(sqlite3.connect("db/shop.sqlite").iterdump())))\''
    got = play(pool, task, [call("bash", command="file -b exports/* 2>/dev/null || true; " + dump),
                            call("list_dir", path=".", depth=3), SUBMIT], verify)
    listing = got.calls[1].result
    assert all(p in listing for p in task.fields["workspace"]), listing
    assert int(got.calls[0].result.strip().splitlines()[-1]) > 3  # the database is a database


def test_repair_feedback_names_the_path_never_the_content(pool, verify) -> None:
    task = _one_task()
    right = _right(task)
    wrong = [c if c["name"] != "write_file" else call("write_file", path=c["arguments"]["path"], content="{}\n")
             for c in right]
    got = play(pool, task, [*wrong, SUBMIT, *right, SUBMIT], verify)
    assert [v.outcome for v in got.verdicts] == ["fail", "pass"]
    first = got.verdicts[0]
    assert "reports/summary.json" in first.feedback and "revenue" in first.feedback  # the key it misses
    submit_result = next(c.result for c in got.calls if c.name == "submit")
    assert "attempt 1 of 3" in submit_result and str(task.fields["targets"]["reports/summary.json"]["value"][
        "total_revenue"]) not in submit_result


def test_process_signals_are_logged_and_pay_no_detected_attack(pool, verify) -> None:
    """reward.process: the oracle read its inputs first (1.0); writing first reads nothing in time (0.0);
    a failed call followed by a good one of the same tool recovers (1.0); collateral damage keeps its
    signals in the log but its ``process`` is 0 (no credit to a detected attack)."""
    from posttrain.envs.files._agents import report_first, touch_unrelated

    task = _one_task()
    right = play(pool, task, oracle(task), verify).first.components
    assert right["process.inspected"] == 1.0 and right["process"] == 1.0 and "process.recovered" not in right
    early = play(pool, task, report_first(task), verify).first.components
    assert early["process.inspected"] == 0.0 and early["process"] == 0.0
    stumble = [call("read_file", path="data/nope.csv"), *oracle(task)]
    got = play(pool, task, stumble, verify).first.components
    assert got["process.recovered"] == 1.0 and got["process"] == 1.0
    caught = play(pool, task, touch_unrelated(task), verify).first
    assert caught.error_class == "collateral" and caught.components["process.inspected"] == 1.0
    assert caught.components["process"] == 0.0


def test_the_oracle_tells_tasks_with_one_prompt_apart(pool, verify) -> None:
    """Generated workspaces whose instruction and file list (names, sizes) are the same: the scripted
    oracle, played through the runner, finds which one it is in by its probe (a digest of the files)."""
    from agent_play import play_runner

    from posttrain.envs.files._episode import episode_prompt

    by_prompt: dict[str, list[Task]] = {}
    for task in ENV.generate_tasks(60, seed=0):
        by_prompt.setdefault(episode_prompt(task), []).append(task)
    tasks = next(group for group in by_prompt.values() if len(group) >= 2)[:3]
    trajs = play_runner(pool, tasks, "oracle", verify)
    assert [tr.verdicts[0].outcome for tr in trajs] == ["pass"] * len(tasks), [tr.verdicts[0].feedback for tr in trajs]
    assert all(any("md5sum" in str(c.arguments) for t in tr.turns for c in t.calls) for tr in trajs)


def test_checks_still_run_when_the_process_holds_thousands_of_descriptors() -> None:
    """200 agent episodes at once hold >1024 descriptors (their workspaces' and jobs'); a check worker's
    pipe then numbers past select()'s FD_SETSIZE, and every CPU-budget check (files, doc, json, math,
    cad meshes) was an infra:verifier_crash (found by the 200-task oracle sweep). posttrain.verify._deadline
    polls instead."""
    import os

    from posttrain.verify._deadline import CheckPool

    task = _one_task()
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    pool = CheckPool("posttrain.envs.files._check", cpu_budget_s=5.0)
    try:
        outcome = pool.run({"workspace": task.fields["workspace"], "targets": task.fields["targets"],
                            "response": task.reference})
    finally:
        pool.close()
        for fd in held:
            os.close(fd)
    assert outcome.status == "ok" and outcome.result["outcome"] == "pass", outcome


@pytest.mark.slow
def test_a_canary_episode_ends_at_its_first_submit(pool, verify) -> None:
    """The workspace episode of a canary: the honest work, submitted, then submitted again; one
    attempt, done (its feedback names the planted contradiction: ``posttrain.types.CANARY``)."""
    rng = random.Random("files-canary-0")
    task = build_task(rng, 1, "files-canary-0-0")
    [canary] = ENV.canary_tasks(1, seed=0)
    got = play(pool, canary, oracle(task), verify, resubmit=2)
    assert got.done and [v.outcome for v in got.verdicts] == ["fail"], [v.feedback for v in got.verdicts]
