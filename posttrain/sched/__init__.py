"""posttrain.sched: the one execution service for verification and episodes, and its scheduler.

    >>> from posttrain.sched import Service, LocalBackend, DomainHooks, Verify
    >>> # with posttrain.cli.open_service(domains) as svc:    # the wiring: a pool and the domains' hooks
    >>> #     verdicts = svc.run_jobs([Verify(task, response, group_id, i) for ...]).results

Layering: this package imports only ``posttrain.types``, ``posttrain.errors`` and the sandbox. It is
handed each domain's verifiers (``DomainHooks``; a Ray backend a ``HooksFactory`` to call on each
node) by the wiring (``posttrain.cli.domain_hooks``, ``posttrain.cli.open_service``), and never
looks a domain up.

- ``Service`` (``_service.py``): ``submit(job) -> Future``, ``run_jobs(jobs)``; concurrency from
  its backend, infra retries with backoff, group drops, verdict cache and dedup, domain batching.
- ``Scheduler`` (``_core.py``): lanes, priorities, retries, breakers, on any clock.
- ``LocalBackend`` (threads over the sandbox pool) and ``RayBackend`` (``_ray.py``: a pool actor
  per node, the driver's exactly-once ``Ledger``).
- ``simulate`` (``_sim.py``): the same ``Scheduler`` on a virtual clock, for 1,000 workers.

Every verification of posttrain goes through one ``Service`` opened per run or command and passed
down: ``posttrain run`` (the pipeline opens it over its sandbox pool: GRPO's single-turn episodes via
``rollout.SingleTurnEnv``, evaluations, the no-op floor, the demonstrator, preference pairs),
``posttrain eval`` (``evaluate.runner.score_responses``: one record per try from
``BatchResult.tries``), ``posttrain audit``, ``posttrain tasks validate`` and ``posttrain verify``
(``posttrain.cli.open_service``, ``Service.verify_pairs``). No trainer takes a ``workers`` argument: the service's
workers (one per sandbox-pool slot) are the concurrency. Its counters and breaker states go into
metrics.jsonl per RL step (``Service.metrics``), ``eval --json`` and summary.json (``stats``), and its
scheduler state into RL checkpoints (``state_dict``).

Stateful episodes (repair, tool, BFCL) go through it too, step by step: ``rollout.run_batch`` keeps
one ``generate`` call per round and submits each episode's step as a ``Step`` job run on that
episode's own environment (which stays where it was built); a step is never retried on its own: on
an infra error the runner restarts the episode from its initial state in a fresh environment and
replays its recorded actions, tries capped by ``SchedPolicy.max_tries``, and an episode out of tries
gives its group up (``Service.give_up``: dropped, counted, never scored). An error of the
environment itself (an exception that is not infra, by ``rollout.run_batch``'s rule) is no infra
try: the step's ``run`` raises ``StepError``, which the job's future and the runner raise.

Each job also carries a memory estimate (EWMA per domain and per task, the task's
``limits.memory_mb`` as the prior, observed peaks where a verifier reports them), and jobs start
only while the running jobs' estimates fit the memory budget (``SchedPolicy.memory_budget_mb``);
``stats()["memory"]``. While a domain's breaker is open, ``Service.open_domains`` names it and the
GRPO task sampler passes over its tasks (``TaskSampler.next(skip=...)``; metric ``tasks_skipped``).

Not here: generation overlapping training (bounded staleness), which belongs to the trainer
(``train/_overlap.py``).
"""

from posttrain.sched._core import Scheduler, Ticket
from posttrain.sched._jobs import (
    Attempt,
    DomainHooks,
    GroupDropped,
    HooksFactory,
    Job,
    Ledger,
    Result,
    Step,
    StepError,
    Verify,
    verifier_bug,
)
from posttrain.sched._memory import memory_limit_mb
from posttrain.sched._ray import RayBackend, check_reachable, local_cluster, ray_backend, ray_session
from posttrain.sched._rules import Breaker, Estimator, SchedPolicy
from posttrain.sched._service import (
    PEAK_MEMORY_KEY,
    Backend,
    BatchResult,
    LocalBackend,
    Service,
)

__all__ = [
    "Attempt",
    "Backend",
    "BatchResult",
    "Breaker",
    "check_reachable",
    "DomainHooks",
    "Estimator",
    "GroupDropped",
    "HooksFactory",
    "Job",
    "Ledger",
    "LocalBackend",
    "RayBackend",
    "Result",
    "PEAK_MEMORY_KEY",
    "SchedPolicy",
    "Scheduler",
    "Service",
    "Step",
    "StepError",
    "Ticket",
    "Verify",
    "local_cluster",
    "memory_limit_mb",
    "ray_backend",
    "ray_session",
    "verifier_bug",
]
