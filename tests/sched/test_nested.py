"""The service's nested lane (``Service.verify_nested``, ``Service.verifier``): a step that holds a
worker verifies through the service without waiting on a queue, so steps on every worker at once,
each verifying, finish; each try is recorded and counted; a crash of the verifier is infra."""

from __future__ import annotations

import threading

from posttrain.sched import DomainHooks, LocalBackend, Service, Step
from posttrain.types import Observation, StepResult, Task, Verdict

TASK = Task(id="n", domain="arith", prompt="1+1?", fields={"answer": "2"})


def exact(task, response):
    return Verdict("pass", 1.0) if response == task.fields["answer"] else Verdict("fail", 0.0)


def test_steps_on_every_worker_verify_through_the_nested_lane_without_waiting_on_each_other():
    with Service(LocalBackend({"arith": DomainHooks(exact)})) as svc:
        n = svc.workers * 3
        barrier = threading.Barrier(svc.workers, timeout=30)  # every worker holds a step at once

        def step(i: int):
            def run() -> StepResult:
                if i < svc.workers:
                    barrier.wait()
                verdict = svc.verifier()(TASK, "2" if i % 2 else "3")
                return StepResult(Observation(()), verdict, True)
            return run

        futures = [svc.submit(Step(TASK, step(i), f"g{i}", 0)) for i in range(n)]
        outcomes = [f.result(timeout=60).verdict.outcome for f in futures]
        stats = svc.stats()
        nested = [a for a in svc.attempts if a.group_id == "~nested"]
    assert outcomes == ["fail" if i % 2 == 0 else "pass" for i in range(n)]
    assert stats["nested"] == len(nested) == n and all(a.final for a in nested)


def test_a_crashing_verifier_on_the_nested_lane_is_infra_never_a_score():
    def crash(task, response):
        raise RuntimeError("the checker died")

    with Service(LocalBackend({"arith": DomainHooks(crash)})) as svc:
        verdict = svc.verify_nested(TASK, "2")
    assert verdict.is_infra_error and verdict.error_class == "infra:worker" and "the checker died" in verdict.feedback + \
        str(verdict.evidence)
