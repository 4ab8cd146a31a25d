"""Cost of the cad verifier against bare OpenSCAD renders of the same scripts, same run.

    python bench/cad.py [--tasks 24] [--rounds 3] [--seed 0]

Generated cad tasks (levels 1-6), two responses each: the reference (passes) and the gold with a
feature moved out of place (fails on shape or IoU), through:

  (a) bare: ``openscad --export-format binstl`` on the host, no sandbox, no checks: the floor of
      any verifier that renders (what an unguarded one would do before its mesh check);
  (b) render only: the same scripts through ``_render.render_stl`` (one fresh sandbox job each);
  (c) ours: the execution service's ``verify_pairs`` with the golds already rendered (the
      steady state of RL: a task's G samples share one gold render), i.e. sandbox render + mesh
      checks in the worker + verdict;
  (d) ours, cold: (c) on a fresh process cache (each gold rendered once, in the same jobs).

Two submitting threads (the machine's two cores) for every path; rounds alternate the paths so
load drifts hit all. Prints, per response, the median wall time and the CPU time (this process's
reaped children: OpenSCAD, the sandbox launcher; plus the check workers' CPU as each verdict
reports it) of each path, and the ratios to (a). CPU time moves far less with the machine's load
than wall time: on a shared machine compare the CPU ratios.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _bare(script: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "part.scad"), os.path.join(d, "part.stl")
        Path(src).write_text(script)
        t0 = time.perf_counter()
        subprocess.run(["openscad", "--export-format", "binstl", "-o", out, src], capture_output=True, timeout=120)
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    parser = bench_parser("cad", __doc__)
    parser.add_argument("--tasks", type=int, default=24, help="generated tasks (two responses each)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each path (median reported)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if min(args.tasks, args.rounds) < 1 or not 0 <= args.seed < 2**32:
        parser.error(f"--tasks and --rounds must be >= 1, --seed in [0, 2**32); got --tasks {args.tasks}, "
                     f"--rounds {args.rounds}, --seed {args.seed}")

    from posttrain.cli import domain_hooks
    from posttrain.envs import get_domain
    from posttrain.envs.cad import _render, fenced
    from posttrain.sandbox import open_pool
    from posttrain.sched import LocalBackend, SchedPolicy, Service, Verify

    env = get_domain("cad")
    tasks = env.generate_tasks(args.tasks, seed=args.seed)
    pairs = []
    for t in tasks:
        gold = t.fields["gold"]
        wrong = gold.replace("translate([0, 0, -1])", "translate([1.5, 0, -1])", 1) if "translate([0, 0, -1])" \
            in gold else gold.replace("$fn = 48;", "$fn = 48;\nscale(0.97)", 1)
        pairs += [(t, fenced(gold)), (t, fenced(wrong))]
    scripts = [fenced_script for _, fenced_script in pairs]

    with open_pool(size=2) as pool:
        def bare() -> float:
            with ThreadPoolExecutor(2) as ex:
                list(ex.map(_bare, [s.split("\n", 1)[1].rsplit("```", 1)[0] for s in scripts]))
            return 0.0

        def render_only() -> float:
            with ThreadPoolExecutor(2) as ex:
                list(ex.map(lambda s: _render.render_stl(pool, s.split("\n", 1)[1].rsplit("```", 1)[0],
                                                        timeout_s=60, memory_mb=1024), scripts))
            return 0.0

        outcomes: list[str] = []
        checks: list[float] = []

        def ours() -> float:
            # a service of its own each time: a service caches verdicts by (task id, response)
            with Service(LocalBackend(domain_hooks(["cad"], pool), pool), SchedPolicy(max_tries=1)) as svc:
                jobs = [Verify(task, response, f"bench/{i}") for i, (task, response) in enumerate(pairs)]
                results = svc.run_jobs(jobs).results
            outcomes[:] = [r.outcome if r is not None else "dropped" for r in results]
            checks[:] = [r.evidence["check_cpu_s"] for r in results if r is not None and "check_cpu_s" in r.evidence]
            return 0.0

        def cold() -> float:
            _render._golds.done.clear()
            return ours()

        def children_cpu() -> float:
            r = resource.getrusage(resource.RUSAGE_CHILDREN)
            return r.ru_utime + r.ru_stime

        paths = {"(a) bare openscad": bare, "(b) sandboxed render": render_only, "(d) ours, cold golds": cold,
                 "(c) ours, golds cached": ours}
        times: dict[str, list[float]] = {name: [] for name in paths}
        cpus: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name, run in paths.items():
                t0, c0 = time.perf_counter(), children_cpu()
                run()
                times[name].append((time.perf_counter() - t0) / len(pairs))
                worker = sum(checks) if name.startswith(("(c)", "(d)")) else 0.0
                cpus[name].append((children_cpu() - c0 + worker) / len(pairs))
    base, base_cpu = statistics.median(times["(a) bare openscad"]), statistics.median(cpus["(a) bare openscad"])
    print(f"cad verifier, {len(pairs)} responses ({args.tasks} tasks, levels 1-6), 2 threads, {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name in sorted(paths):
        med, cpu = statistics.median(times[name]), statistics.median(cpus[name])
        print(f"  {name:<26} wall {med * 1000:7.1f} ms/response ({med / base:4.2f}x bare)   "
              f"cpu {cpu * 1000:7.1f} ms/response ({cpu / base_cpu:4.2f}x bare)")
    print(f"  mesh checks in the worker: median {statistics.median(checks) * 1000:.1f} ms of CPU, "
          f"max {max(checks) * 1000:.1f} ms")
    print(f"  outcomes: {outcomes.count('pass')} pass, {outcomes.count('fail')} fail, "
          f"{len(outcomes) - outcomes.count('pass') - outcomes.count('fail')} other")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
