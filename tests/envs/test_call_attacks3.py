"""A policy attacking three verifiers without doing their tasks: ``bfcl`` (BFCL's multi-turn checker on
the real sandbox), ``function`` (the user's reward function in a check worker) and ``recall``.

The hole: a reward function that runs the completion in a subprocess (the common "execute the answer"
pattern) waits on it without using CPU. The check pool, seeing wall time pass with no CPU, took the
worker for starved by a loaded machine: ``while True: pass`` or ``time.sleep(60)`` as the completion
got an ``infra_error`` (the sample dropped, never scored 0), and its process lived on as an orphan
once the worker was killed (burning a CPU that the next checks then lacked). Now the pool counts the
CPU of what the worker started (the spinner spends the budget: a fail) and calls a check starved only
when it waited for a CPU (the sleeper stalls: a fail), and a replaced worker dies with everything it
started (posttrain/verify/_deadline.py).

The rest are attempts that fail and stay failed: universal BFCL answers (every tool without arguments
in every turn, unknown names), recall hedges in other digits, and near-misses of ``exact_match``."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hogs import held_cpu

from posttrain.envs import get_domain
from posttrain.envs.function import _domain
from posttrain.envs.function._worker import ENV_VAR
from posttrain.verify._deadline import CheckPool

RUNNER = '''
import subprocess, sys

def runs(prompt, completion, answer, **data):
    """Run the completion as a program, with no timeout of its own; full marks when it prints the answer."""
    r = subprocess.run([sys.executable, "-c", completion], capture_output=True, text=True)
    return 1.0 if r.stdout.strip() == answer else 0.0
'''


def _processes_with(token: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def _runner_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wall_limit_s: float) -> tuple[Any, Any, CheckPool]:
    """A function task scored by ``RUNNER`` on a pool of its own: the real pool's numbers scaled down (5 s
    of CPU, 30 s of wall): the same decisions, sooner. (task, verify, pool); the caller closes the pool."""
    (tmp_path / "call_attacks3_rewards.py").write_text(textwrap.dedent(RUNNER))
    monkeypatch.chdir(tmp_path)  # the check workers import the user's module from the working directory
    fn = "call_attacks3_rewards:runs"
    domain = get_domain("function")
    task = domain.parse_task({"id": "w", "prompt": "Print 42.", "reward": fn, "data": {"answer": "42"}}, "test")
    pool = CheckPool(_domain._WORKER, cpu_budget_s=1.0, wall_limit_s=wall_limit_s, env={ENV_VAR: fn})
    monkeypatch.setitem(_domain._pools, fn, pool)
    return task, domain.make_verifier(None), pool


@pytest.mark.parametrize("body", ["while True: pass", "import time; time.sleep(60)"])
def test_a_completion_that_makes_the_function_wait_fails_and_leaves_no_process(tmp_path, monkeypatch, body) -> None:
    task, verify, pool = _runner_check(tmp_path, monkeypatch, wall_limit_s=4.0)
    try:
        assert verify(task, "print(42)").passed and verify(task, "print(41)").outcome == "fail"
        token = f"call-attacks3-{time.monotonic_ns()}"
        for _ in range(3):  # as the execution service does: a check starved by a loaded host is rerun
            v = verify(task, f"{body}  # {token}")
            if not v.is_infra_error:
                break
        assert (v.outcome, v.error_class) == ("fail", "reward_function:timeout"), v
        assert _processes_with(token) == []
        assert verify(task, "print(42)").passed  # the worker is fine for the next check
    finally:
        pool.close()


@pytest.mark.cpu_hog
def test_a_killed_check_waits_for_what_it_started_to_exit(tmp_path, monkeypatch) -> None:
    """A SIGKILL takes effect when its process next runs. The completion, asleep, is moved to a CPU that
    two spinners at nice -20 hold (each its own autogroup, as a loaded host's): killed, it took 0.2-0.4 s
    to exit here, and the pool had already answered (CI, under the suite's own hogs: the completion of the
    test above still listed). The pool now waits for what it killed to exit before it answers."""
    task, verify, pool = _runner_check(tmp_path, monkeypatch, wall_limit_s=2.0)
    try:
        with held_cpu() as cpu:
            token = f"call-attacks3-{time.monotonic_ns()}"
            verdicts = []
            completion = f"import pathlib, time; pathlib.Path('{token}').touch(); time.sleep(60)  # {token}"
            check = threading.Thread(target=lambda: verdicts.append(verify(task, completion)))
            check.start()
            while not (tmp_path / token).exists() and check.is_alive():  # (the check runs in tmp_path)
                time.sleep(0.05)
            time.sleep(0.2)
            asleep = _processes_with(token)
            for pid in asleep:  # moved there asleep: it waits for no CPU until it is killed
                os.sched_setaffinity(pid, {cpu})
            check.join()
            assert asleep and [(v.outcome, v.error_class) for v in verdicts] == [("fail", "reward_function:timeout")], verdicts
            assert _processes_with(token) == []
    finally:
        pool.close()


def test_constant_and_sprayed_bfcl_answers_fail(pool) -> None:
    domain = get_domain("bfcl")
    verify = domain.make_verifier(pool)
    for task in domain.generate_tasks(8, seed=5):
        turns = task.fields["turns"]
        no_args = [t["function"]["name"] for t in task.fields["tools"] if not t["function"]["parameters"].get("required")]
        every_tool = [[{"name": n, "arguments": {}} for n in no_args] for _ in turns]
        unknown = [[{"name": "CD", "arguments": {"folder": "document"}}] for _ in turns]
        for response in (json.dumps(every_tool), json.dumps(unknown), json.dumps([[] for _ in turns])):
            v = verify(task, response)
            assert v.outcome == "fail", (task.id, response[:80], v)


@pytest.mark.parametrize("hedge", ["{v} or 𝟓𝟔𝟕𝟖", "{v} ５６７８", "{v}\n١٢٣٤", "{v}{v}", "{v}-5678"])
def test_recall_hedges_in_other_digits_fail(hedge: str) -> None:
    domain = get_domain("recall")
    [task] = domain.generate_level(1, level=3, seed=7)
    value = task.fields["value"]
    verify = domain.make_verifier(None)
    assert verify(task, f"The code is {value}.").passed
    assert verify(task, hedge.format(v=value)).outcome == "fail"


@pytest.mark.parametrize("completion", ["7\u200b", "７", "7.0", "07", "+7", "7 or 8", "\\boxed{7}"])
def test_exact_match_takes_the_answer_only(completion: str) -> None:
    domain = get_domain("function")
    task = domain.parse_task({"id": "e", "prompt": "3 + 4?", "reward": "posttrain.envs.function.examples:exact_match",
                              "data": {"answer": "7"}}, "test")
    verify = domain.make_verifier(None)
    assert verify(task, " 7\n").passed and verify(task, completion).outcome == "fail"
