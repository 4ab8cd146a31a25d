"""Scheduling of long-tailed sandbox jobs: our scheduler against synchronous FIFO batches and the
lower bound, on the local workers and in a simulation of 1,000 workers and 1,000,000 jobs.

    posttrain bench sched [--jobs 120] [--long-scale 0.5] [--sim-jobs 1000000] [--sim-workers 1000]
    python bench/sched.py --skip-sim          # only the local part (about 2 minutes on 2 cores)

Local part: ``--jobs`` real sandbox jobs (``pool.run_python`` of a program that sleeps for its
duration, so that the numbers measure scheduling, not the CPU load of a shared machine), drawn
from ``posttrain.sched._sim.workload``: 95% of about 0.1 s, 5% from the 5-30 s tail scaled by
``--long-scale`` (0.5 by default, for 2 cores: 2.5-15 s). Workers: the sandbox pool's slots.

  (a) synchronous FIFO batches of 8 x workers jobs: each batch's jobs in order on the workers,
      the next batch only after the slowest job of this one (today's loops);
  (b) the service (``posttrain.sched.Service``): the same jobs and batches, submitted together,
      on the same workers;
  (c) the lower bound max(total work / workers, longest job), from the durations measured in (b).

Targets: (b) <= 1.15 x (c), (a) >= 1.5 x (b). Then the same ``Scheduler`` on a virtual clock
(``posttrain.sched._sim``) for ``--sim-workers`` and ``--sim-jobs`` with the unscaled tail and
injected failures: node n3 fails every job for 200 s, domain d2 runs into its timeout for 100 s,
0.1% random infra errors. Prints the same ratios, breaker opens, retries and samples lost.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def _sleep_hooks(pool: Any) -> Any:
    from posttrain.sched import DomainHooks
    from posttrain.types import Task, Verdict

    def verify(task: Task, response: str) -> Verdict:
        ex = pool.run_python(f"import time; time.sleep({float(response)!r})", timeout=task.limits.timeout_s)
        if ex.outcome == "infra_error":
            return Verdict.infra(f"sandbox: {ex.infra_detail}")
        return Verdict("pass" if ex.outcome == "ok" else "fail", 1.0 if ex.outcome == "ok" else 0.0)

    return DomainHooks(verify)


def _local(args: argparse.Namespace) -> None:
    from posttrain.sandbox import open_pool
    from posttrain.sched import LocalBackend, Service, Verify
    from posttrain.sched._sim import batches, workload
    from posttrain.types import Task, TaskLimits

    jobs = workload(args.jobs, seed=args.seed, long_scale=args.long_scale, group=1, domains=1)
    tasks = [Task(id=f"{j.task_id}-{i}", domain="sleep", prompt="", fields={},
                  limits=TaskLimits(timeout_s=j.timeout_s)) for i, j in enumerate(jobs)]
    with open_pool() as pool:
        workers = pool.size
        batch = 8 * workers
        hooks = {"sleep": _sleep_hooks(pool)}
        long = [j.duration_s for j in jobs if j.timeout_s > 10]
        print(f"local: {workers} workers (sandbox pool slots), {len(jobs)} sandboxed sleep jobs: "
              f"{len(jobs) - len(long)} of ~0.1 s, {len(long)} long ({min(long):.1f}-{max(long):.1f} s: "
              f"the 5-30 s tail x {args.long_scale}); batches of {batch} (8 x workers)")

        def one(i: int) -> float:
            t0 = time.perf_counter()
            hooks["sleep"].verify(tasks[i], repr(jobs[i].duration_s))
            return time.perf_counter() - t0

        # (a) synchronous FIFO batches
        t0 = time.perf_counter()
        busy_a = 0.0
        with ThreadPoolExecutor(workers) as ex:
            for b in batches(list(range(len(jobs))), batch):
                busy_a += sum(ex.map(one, b))
        sync_s = time.perf_counter() - t0
        # (b) the service: the same jobs and batches, submitted together
        t0 = time.perf_counter()
        with Service(LocalBackend(hooks, pool)) as svc:
            out = svc.run_jobs([Verify(t, repr(j.duration_s), t.id, 0) for t, j in zip(tasks, jobs, strict=True)])
        sched_s = time.perf_counter() - t0
        assert all(v is not None and v.passed for v in out.results), "a sleep job did not pass"
        durations = [a.duration_s for a in svc.attempts]
        bound = max(sum(durations) / workers, max(durations))
        print(f"  (a) sync FIFO batches: makespan {sync_s:7.2f} s  utilization {busy_a / (workers * sync_s):.2f}")
        print(f"  (b) scheduler:         makespan {sched_s:7.2f} s  utilization {sum(durations) / (workers * sched_s):.2f}")
        print(f"  (c) lower bound:       makespan {bound:7.2f} s  (max(work / workers, longest job))")
        print(f"  (b)/(c) = {sched_s / bound:.3f} (target <= 1.15)   (a)/(b) = {sync_s / sched_s:.2f} (target >= 1.5)")


def _sim(args: argparse.Namespace) -> None:
    from posttrain.sched._sim import Failures, fifo_makespan, lower_bound, simulate, workload

    w, n = args.sim_workers, args.sim_jobs
    jobs = workload(n, seed=args.seed)
    batch = 8 * w
    failures = Failures(bad_node="n3", node_window=(100.0, 300.0), timeout_domain="d2",
                        domain_window=(400.0, 500.0), random_infra=0.001)
    t0 = time.perf_counter()
    r = simulate(jobs, w, batch, failures=failures)
    wall = time.perf_counter() - t0
    fifo, bound = fifo_makespan(jobs, w, batch), lower_bound(jobs, w)
    work = sum(j.duration_s for j in jobs)
    print(f"simulation: {w} workers (nodes of 8), {n:,} jobs (groups of 8; 5% from the 5-30 s tail), "
          f"batches of {batch}; failures: node n3 fails every job in [100, 300) s, domain d2 times out in "
          f"[400, 500) s, 0.1% random infra errors; {wall:.0f} s of wall time")
    print(f"  (a) sync FIFO batches: makespan {fifo:9.1f} s  utilization {work / (w * fifo):.2f}  (no failures)")
    print(f"  (b) scheduler:         makespan {r.makespan_s:9.1f} s  utilization {r.utilization:.2f}  (with failures)")
    print(f"  (c) lower bound:       makespan {bound:9.1f} s")
    print(f"  (b)/(c) = {r.makespan_s / bound:.3f} (target <= 1.15)   (a)/(b) = {fifo / r.makespan_s:.2f} (target >= 1.5)")
    opens = ", ".join(f"{k} {v}" for k, v in sorted(r.breaker_opens_by.items(), key=lambda kv: -kv[1])[:6])
    print(f"  tries {r.tries:,}  retries {r.retries:,}  exhausted {r.exhausted}  samples lost {r.lost} (target 0)  "
          f"breaker opens {r.breaker_opens} ({opens}{', ...' if len(r.breaker_opens_by) > 6 else ''})  "
          f"jobs held by an open breaker {r.held:,}")


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    parser = bench_parser("sched", __doc__)
    parser.add_argument("--jobs", type=int, default=120, help="local sandbox jobs")
    parser.add_argument("--long-scale", type=float, default=0.5, help="scale of the 5-30 s tail, locally")
    parser.add_argument("--sim-jobs", type=int, default=1_000_000, help="jobs in the simulation")
    parser.add_argument("--sim-workers", type=int, default=1000, help="workers in the simulation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-local", action="store_true", help="only the simulation")
    parser.add_argument("--skip-sim", action="store_true", help="only the local sandbox part")
    args = parser.parse_args(argv)
    if min(args.jobs, args.sim_jobs, args.sim_workers) < 1 or not args.long_scale > 0 or args.seed < 0:
        parser.error("--jobs, --sim-jobs and --sim-workers must be >= 1, --long-scale > 0 and --seed >= 0")
    if not args.skip_local:
        _local(args)
    if not args.skip_sim:
        _sim(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
