"""posttrain.sched: the one execution service for verification and episodes, and its scheduler.

    >>> from posttrain.sched import Service, LocalBackend, Verify, hooks_from_envs
    >>> # with Service(LocalBackend(hooks_from_envs(domains, pool), pool)) as svc:
    >>> #     verdicts = svc.run_batch([Verify(task, response, group_id, i) for ...]).results

- ``Service`` (``_service.py``): ``submit(job) -> Future``, ``run_batch(jobs)``; concurrency from
  its backend, infra retries with backoff, group drops, verdict cache and dedup, domain batching.
- ``Scheduler`` (``_core.py``): lanes, priorities, retries, breakers, on any clock.
- ``LocalBackend`` (threads over the sandbox pool) and ``RayBackend`` (``_ray.py``: a pool actor
  per node, the driver's exactly-once ``Ledger``).
- ``simulate`` (``_sim.py``): the same ``Scheduler`` on a virtual clock, for 1,000 workers.

Not here: generation overlapping training (bounded staleness), which belongs to the trainer.

Not yet (issue 11): the four older verification loops still run on their own. Each switches to one
``Service`` opened per run: ``rollout.verify_all``/``SingleTurnEnv`` -> ``run_batch([Verify(t, r,
group_id, i)])`` (a ``None`` result drops the group); ``verify.batch.verify_many`` and ``tasks
validate`` -> the same, ``None`` as ``Verdict.infra("dropped")``, code batching moving to
``CodeEnv.make_batch_verifier(pool)``; ``evaluate.runner.score_responses`` -> ungrouped ``Verify``
jobs with ``SchedPolicy(max_tries=3)``, one record per ``svc.attempts`` entry; the audit's
re-verification -> ``run_batch``.
"""

from posttrain.sched._core import Scheduler, Ticket
from posttrain.sched._jobs import (
    Attempt,
    BatchVerifier,
    DomainHooks,
    Episode,
    GroupDropped,
    Job,
    Ledger,
    ProvidesBatchVerifier,
    Result,
    Verify,
    hooks_from_envs,
)
from posttrain.sched._policy import Breaker, Estimator, SchedPolicy
from posttrain.sched._ray import RayBackend, local_cluster
from posttrain.sched._rollout import RayRollout, RaySampler, RolloutActor, VersionMismatch, ray_session
from posttrain.sched._service import Backend, BatchResult, LocalBackend, Service, open_service

__all__ = [
    "Attempt",
    "Backend",
    "BatchResult",
    "BatchVerifier",
    "Breaker",
    "DomainHooks",
    "Episode",
    "Estimator",
    "GroupDropped",
    "Job",
    "Ledger",
    "LocalBackend",
    "ProvidesBatchVerifier",
    "RayBackend",
    "RayRollout",
    "RaySampler",
    "Result",
    "RolloutActor",
    "SchedPolicy",
    "Scheduler",
    "Service",
    "Ticket",
    "VersionMismatch",
    "Verify",
    "hooks_from_envs",
    "local_cluster",
    "ray_session",
    "open_service",
]
