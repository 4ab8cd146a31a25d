"""The verifiers' deadline workers (posttrain.verify._deadline) decide blame by CPU time.

A check that burns its CPU budget is the response's failure; a check that ran out of wall time
while its worker waited for a CPU (here: two nice -20 spinners on the one CPU the worker may use, as
an overloaded machine would starve it) is an infra error, which the caller retries; a check that ran
out of wall time without waiting for a CPU (its worker stopped, or asleep) is a fail. Real workers,
real signals, real contention.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from hogs import held_cpu

from posttrain.envs import get_domain
from posttrain.envs.json import make_json_verifier
from posttrain.envs.math import make_math_verifier
from posttrain.envs.math._check import MathChecker
from posttrain.verify._deadline import CheckPool

JSON = get_domain("json")
SCHEMA = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}, "required": ["code"]}
TASK = JSON.parse_task({"id": "d", "domain": "json", "prompt": "p", "schema": SCHEMA, "expected": {"code": "aaa"}}, "t")
BACKTRACKS = '{"code": "' + "a" * 64 + '!"}'


def _stop_soon(pids: list[int], delay: float = 0.2) -> threading.Thread:
    (pid,) = pids

    def stop() -> None:
        time.sleep(delay)
        os.kill(pid, signal.SIGSTOP)

    thread = threading.Thread(target=stop)
    thread.start()
    return thread


@contextlib.contextmanager
def _starved(pids: list[int]) -> Iterator[None]:
    """The worker kept to a CPU that two spinners at nice -20 hold (``hogs.held_cpu``): it gets ~1% of
    that CPU."""
    (pid,) = pids
    with held_cpu() as cpu:
        os.sched_setaffinity(pid, {cpu})
        yield


def retried(verify, task, response: str, tries: int = 3):
    """What a caller does: retry an infra error (here: a 2 s wall limit on a loaded machine)."""
    for _ in range(tries):
        v = verify(task, response)
        if not v.is_infra_error:
            return v
    return v


def test_a_check_that_burns_its_cpu_budget_fails() -> None:
    pool = CheckPool("posttrain.envs.json._env", size=1, cpu_budget_s=1.0)
    try:
        v = make_json_verifier(pool)(TASK, BACKTRACKS)
        assert (v.outcome, v.reward, v.error_class) == ("fail", 0.0, "timeout"), v
        assert v.evidence["checker"] == "cpu_exceeded" and v.evidence["cpu_s"] >= 1.0
    finally:
        pool.close()


@pytest.mark.cpu_hog
def test_a_check_starved_of_cpu_is_an_infra_error_and_the_pool_recovers() -> None:
    pool = CheckPool("posttrain.envs.json._env", size=1, cpu_budget_s=30.0, wall_limit_s=2.0)
    verify = make_json_verifier(pool)
    try:
        assert retried(verify, TASK, '{"code": "aaa"}').passed  # starts the worker
        with _starved(pool.worker_pids()):
            v = verify(TASK, BACKTRACKS)  # a long check whose worker waits for a CPU: not the answer's doing
        assert (v.outcome, v.error_class) == ("infra_error", "infra:starved"), v
        assert v.evidence["cpu_s"] < 5.0 and v.evidence["wall_s"] >= 2.0  # far below the 30 s budget
        assert retried(verify, TASK, '{"code": "aaa"}').passed  # the starved worker was replaced
    finally:
        pool.close()


def test_a_check_that_got_no_cpu_without_waiting_for_one_is_not_starved() -> None:
    """Stopped (as a completion run inside a user's reward function could stop its own worker), the
    worker uses no CPU and waits for none: the check's own stall, a fail, never a dropped sample."""
    pool = CheckPool("posttrain.envs.json._env", size=1, cpu_budget_s=30.0, wall_limit_s=2.0)
    verify = make_json_verifier(pool)
    try:
        assert retried(verify, TASK, '{"code": "aaa"}').passed  # starts the worker
        stopper = _stop_soon(pool.worker_pids())
        v = verify(TASK, BACKTRACKS)
        stopper.join()
        assert (v.outcome, v.error_class, v.evidence["checker"]) == ("fail", "timeout", "stalled"), v
        assert retried(verify, TASK, '{"code": "aaa"}').passed  # the stopped worker was replaced
    finally:
        pool.close()


SLOW_MATH = "\\boxed{9^{9^{9^{9^{9}}}} - 9^{9^{9^{9^{9}}}} + 3 + 10^{10^{10^{10}}}}"


@pytest.mark.cpu_hog
def test_math_starved_is_infra() -> None:
    checker = MathChecker(size=1, cpu_budget_s=30.0, wall_limit_s=2.0)
    verify = make_math_verifier(checker)
    # an expression-form task: its answers (unsimplified, a power tower) reach sympy, not refused by form
    task = get_domain("math").parse_task({"id": "m", "domain": "math", "prompt": "p", "answer": "\\sqrt{2}",
                                          "form": "expression"}, "t")
    try:
        assert retried(verify, task, "\\boxed{\\frac{2}{\\sqrt{2}}}").passed  # starts the worker
        with _starved(checker.pool.worker_pids()):
            v = verify(task, SLOW_MATH)
        assert (v.outcome, v.error_class) == ("infra_error", "infra:math_checker"), v
        assert retried(verify, task, "\\boxed{\\frac{2}{\\sqrt{2}}}").passed
    finally:
        checker.close()


def test_a_worker_killed_during_a_check_is_retried_on_a_fresh_one() -> None:
    pool = CheckPool("posttrain.envs.json._env", size=1, cpu_budget_s=1.5)
    verify = make_json_verifier(pool)
    try:
        assert verify(TASK, '{"code": "aaa"}').passed
        (first,) = pool.worker_pids()

        def kill_soon() -> None:
            time.sleep(0.3)
            os.kill(first, signal.SIGKILL)

        killer = threading.Thread(target=kill_soon)
        killer.start()
        v = verify(TASK, BACKTRACKS)  # the first worker is killed from outside; the retry burns the budget
        killer.join()
        assert (v.outcome, v.error_class, v.evidence["checker"]) == ("fail", "timeout", "cpu_exceeded"), v
        assert v.evidence["cpu_s"] >= 1.5  # measured on the second worker, from its start
        assert verify(TASK, '{"code": "aaa"}').passed and pool.worker_pids() != [first]
    finally:
        pool.close()


def test_a_worker_that_cannot_start_is_an_infra_error() -> None:
    pool = CheckPool("posttrain.no_such_module", size=1, startup_timeout_s=60)
    try:
        v = make_json_verifier(pool)(TASK, '{"code": "aaa"}')
        assert (v.outcome, v.error_class) == ("infra_error", "infra:no_worker"), v
    finally:
        pool.close()


@pytest.mark.parametrize("domain", ["json", "tool"])
def test_checks_run_outside_the_trainer_process(domain: str) -> None:
    env = get_domain(domain)
    (task,) = env.generate_tasks(1, seed=2)
    maker = getattr(__import__(f"posttrain.envs.{domain}", fromlist=["x"]), f"make_{domain}_verifier")
    module = maker.__module__  # where the domain's checks run in workers
    pool = CheckPool(module, size=1)
    try:
        assert maker(pool)(task, task.reference).passed
        (pid,) = pool.worker_pids()
        assert pid != os.getpid()
    finally:
        pool.close()
