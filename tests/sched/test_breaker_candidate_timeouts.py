"""A candidate's own timeout is its verdict, never a sick domain: it must not open the domain's breaker.

An open domain breaker names the domain in ``Service.open_domains`` and the GRPO task sampler passes
over (consumes) its tasks. The scheduler counted every try whose error class held "timeout" as bad,
infra or not, so five looping programs in a row -- each a ``fail`` verdict, error class ``timeout`` --
opened the code breaker: a policy that answered code tasks with ``while True: pass`` had the code tasks
taken out of its draws (fails on the old scheduler: ``open_domains() == ["code"]``)."""

from __future__ import annotations

from posttrain.cli import domain_hooks
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service, Verify
from posttrain.tasks import TaskSampler
from posttrain.types import Task, TaskLimits, Verdict

PROMPT = "def add(a: int, b: int) -> int:\n"
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n"


def code_task(tid: str = "add") -> Task:
    return Task(id=tid, domain="code", prompt=PROMPT, fields={"entry_point": "add", "test": TEST},
                limits=TaskLimits(timeout_s=0.5))


def test_a_policy_that_loops_never_opens_its_domain_s_breaker(pool):
    loops = [f"    while True:\n        pass  # {i}\n" for i in range(SchedPolicy().breaker_threshold + 1)]
    with Service(LocalBackend(domain_hooks(["code"], pool), pool)) as svc:
        verdicts = svc.run_jobs([Verify(code_task(), r, "g", i) for i, r in enumerate(loops)]).results
        assert [(v.outcome, v.error_class) for v in verdicts] == [("fail", "timeout")] * len(loops)
        assert svc.open_domains() == [] and svc.stats()["breakers"]["domain:code"] == "closed"
        sampler = TaskSampler([code_task("c0"), code_task("c1"), Task(id="m0", domain="math", prompt="", fields={})],
                              seed=0)
        drawn = sampler.next(3, skip=svc.open_domains())
    assert sorted(t.domain for t in drawn) == ["code", "code", "math"] and sampler.skipped == 0


def test_infra_errors_still_open_the_breaker():
    def sick(task: Task, response: str) -> Verdict:
        return Verdict.infra("sandbox: timed out starting", error_class="infra:timeout")

    policy = SchedPolicy(max_tries=1, breaker_threshold=3, breaker_cooldown_s=60.0)
    with Service(LocalBackend({"code": DomainHooks(sick)}), policy) as svc:
        svc.run_jobs([Verify(code_task(), f"r{i}", f"g{i}", 0) for i in range(3)])
        assert svc.open_domains() == ["code"]


def test_a_timeout_verdict_of_any_domain_is_no_breaker_s_business():
    # the verdicts the code and math verifiers give a looping program and an answer too slow to compare
    from posttrain.envs._base import fail

    def slow(task: Task, response: str) -> Verdict:
        return fail("The program did not finish in time.", "timeout" if task.domain == "code" else "answer_timeout")

    def math_task(tid: str) -> Task:
        return Task(id=tid, domain="math", prompt="1+1?", fields={"answer": "2"})

    policy = SchedPolicy(breaker_threshold=2, breaker_cooldown_s=60.0)
    with Service(LocalBackend({"code": DomainHooks(slow), "math": DomainHooks(slow)}), policy) as svc:
        svc.run_jobs([Verify(make(f"t{i}"), f"r{i}", f"g{i}{make.__name__}", 0) for i in range(4)
                      for make in (code_task, math_task)])
        assert svc.open_domains() == []
