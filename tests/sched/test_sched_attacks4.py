"""One candidate's response that breaks its domain's batch hook must cost that candidate its own verdict,
never its neighbours' (the rule: whatever a candidate does costs it its own verdict, never another's).

Before: a batch hook that raised (a plugin's ``verify_batch`` over the real math verifier, meeting a
response it cannot hold: a ``MemoryError``, a resource kind, so infra) gave every pair of the batch the
same ``infra:worker`` verdict, and the retries were batched again with the same response: each honest
neighbour's tries ran out beside it and its whole group was dropped, unscored (``/tmp/h4/count_batch.py``:
honest groups dropped beside one bad response). Now a batch hook that raises verifies each pair of the
batch alone (``verify_with``), and a job retried after an infra try runs alone (``Scheduler.take_more``
takes no retried job into another's batch, and a retried job takes none into its own).
"""

from __future__ import annotations

import pytest

from posttrain.envs import get_domain, guard
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service, Step, Verify
from posttrain.types import BatchVerifier, Observation, StepResult, Task, Verdict

POLICY = SchedPolicy(max_tries=3, backoff_s=0.0, breaker_threshold=99)
BAD = "\\boxed{" + "9" * 5000 + "}"


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"m{i}", domain="math", prompt=f"{i}+1?", fields={"answer": str(i + 1)}) for i in range(n)]


def _hooks(*, raises: bool) -> DomainHooks:
    """The real math verifier, and a plugin's batch hook over it that holds every response of the batch in
    one buffer sized by the longest (a test double of a batch that allocates per its largest item): past
    its size it raises ``MemoryError`` (``raises``) or, as ``BatchVerifier`` allows, gives every pair an
    infra verdict."""
    real = guard("math", get_domain("math").make_verifier(None))

    def verify_batch(pairs):
        if max(len(r) for _, r in pairs) > 1000:
            if raises:
                raise MemoryError("the batch's buffer")
            return [Verdict.infra("the batch's buffer ran out", error_class="infra:batch")] * len(pairs)
        return [real(t, r) for t, r in pairs]

    return DomainHooks(real, BatchVerifier(max_batch=4, verify_batch=verify_batch))


@pytest.mark.parametrize("raises", [True, False], ids=["batch-raises", "batch-gives-infra"])
def test_a_response_that_breaks_its_batch_gets_its_own_fail_and_drops_no_neighbour(raises):
    """Before (``/tmp/h4/count_batch.py``, 40 runs of 1-4 such responses among 12 honest ones, 4 tries):
    raising, 100 of 100 bad responses went unscored (their groups dropped, never their fail) and 50 of 480
    honest ones were dropped beside them; giving infra, likewise (see the commit)."""
    tasks = _tasks(8)
    jobs = [Verify(t, BAD, f"bad{i}", 0) for i, t in enumerate(tasks[:2])]
    jobs += [Verify(t, f"\\boxed{{{i + 1}}}", f"honest{i}", 0) for i, t in enumerate(tasks)]
    with Service(LocalBackend({"math": _hooks(raises=raises)}), POLICY) as svc:
        out = svc.run_jobs(jobs)
    bad, honest = out.results[:2], out.results[2:]
    assert out.dropped_groups == frozenset(), out.dropped_groups
    assert [v.outcome for v in bad] == ["fail", "fail"], bad
    assert all(v.passed for v in honest), honest


def test_a_step_verifies_on_its_own_worker_s_slot_not_on_a_busy_node_s():
    """A nested verification (a repair or agent step judging its attempt) runs on the slot of the worker
    that runs the step: on a Ray backend that slot's node has a free place in its pool actor. Before, slots
    were taken in turn: on a two-node cluster a quick right answer's try was sent to the node whose workers
    ran long verifications, queued past its actor's concurrency, and its wait ran out: infra, the episode
    restarted, its group dropped when its tries ran out (``/tmp/h4/count_nested_ray.py``: 4 of 20 before, 0
    of 20 after). Here, on a local backend of 4 slots, the slot each nested try took is recorded."""
    real = guard("math", get_domain("math").make_verifier(None))
    backend = LocalBackend({"math": DomainHooks(real)})
    backend.nodes = ["local"] * 4
    task = _tasks(1)[0]
    with Service(backend, POLICY) as svc:
        svc.verify_nested(task, "\\boxed{1}")  # from outside the workers: a slot in turn

        def step():
            verdict = svc.verify_nested(task, "\\boxed{1}")
            return StepResult(Observation(()), verdict, True)

        for i in range(8):
            assert svc.submit(Step(task, step, f"s{i}", 0)).result(timeout=10).verdict.passed
        tries = list(svc.attempts)
    nested = [a.worker for a in tries if a.group_id == "~nested"][1:]
    steps = [a.worker for a in tries if a.group_id.startswith("s")]
    assert nested == steps, (nested, steps)


@pytest.mark.parametrize("replay", [True, False], ids=["replayed", "a-draw"])
def test_a_domain_whose_verdict_is_a_draw_is_verified_afresh_on_each_repeat(replay):
    """A verdict that is a draw (the candidate's program ran, the verifier drew a secret) replayed for the
    rest of the run made one lucky pass a pass forever for repeating the response verbatim
    (``/tmp/h4/count_cache.py``, real code domain, a coin-flipping answer: 60 of 60 repeats after a first
    pass passed, 31 of 50 when verified afresh). ``DomainHooks(replay=False)``: every later job is verified
    afresh until it has passed ``CONFIRM_PASSES`` (3) times in a row, then replayed; a fail is replayed at
    once (the candidate's own loss); identical jobs in flight together still share one verification."""
    real, calls = guard("math", get_domain("math").make_verifier(None)), []

    def counted(task, response):
        calls.append(response)
        return real(task, response)

    task = _tasks(1)[0]
    with Service(LocalBackend({"math": DomainHooks(counted, replay=replay)}), POLICY) as svc:
        for step in range(5):
            out = svc.run_jobs([Verify(task, "\\boxed{1}", f"g{step}", i) for i in range(4)]).results
            assert all(v.passed for v in out)
            svc.run_jobs([Verify(task, "\\boxed{2}", f"w{step}", i) for i in range(2)])  # a fail: replayed
        hits = svc.stats()["cache_hits"]
    assert calls.count("\\boxed{2}") == 1
    assert (calls.count("\\boxed{1}"), hits) == ((1, 16 + 8) if replay else (3, 8 + 8)), (len(calls), hits)


def test_the_wiring_marks_the_domains_whose_verdict_is_a_draw():
    """code, repo, cad and function run what the candidate wrote (or a user's function that may sample): their
    hooks replay a pass only once confirmed; a domain whose verdict is a function of the response (math)
    and a plugin that says nothing replay at once."""
    from posttrain.cli._service import domain_hooks

    hooks = domain_hooks(["math", "function"], None)
    assert hooks["math"].replay and not hooks["function"].replay
    assert all(get_domain(d).verdict_is_a_draw for d in ("code", "repo", "cad"))  # cad: rands() unseeded
