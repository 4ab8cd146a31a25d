"""``posttrain run --backend ray``: a tiny RL recipe (math + code) end to end on a Ray cluster the
run starts for itself (own temp dir and port): rollouts sampled by two rollout actors that receive
each policy version (one step stale: rl.max_staleness 1), every verification through the service's
sandbox-pool actor. The records show every task of each batch verified exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STEPS, PROMPTS, GROUP = 3, 4, 2


def test_an_rl_recipe_runs_through_ray(tmp_path):
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        open_pool(size=1).close()
    except HostCannotIsolate as e:
        pytest.skip(f"this host cannot run the sandbox: {e}")
    out = tmp_path / "run"
    sets = ["stages=[rl]", "tasks.n_train_per_domain=20", "tasks.n_eval_per_domain=4", f"rl.steps={STEPS}",
            f"rl.prompts_per_step={PROMPTS}", f"rl.group_size={GROUP}", "rl.max_staleness=1", "rl.checkpoint_every=2",
            "eval.samples_per_task=1", "sched.rollout_workers=2"]
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "configs" / "tiny-grpo.yaml"),
                        "--out", str(out), "--backend", "ray", *[a for s in sets for a in ("--set", s)]],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "backend: ray" in (out / "config.yaml").read_text()

    rl = [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if m["stage"] == "rl"]
    assert [m["step"] for m in rl] == list(range(STEPS))
    assert [m["policy_version"] for m in rl] == [0, 0, 1]  # sampled by the actors holding version max(0, s - 1)
    for m in rl:  # each sample submitted once; every job settled by one final try; no duplicate report
        assert m["sched/jobs"] + m["sched/cache_hits"] + m["sched/deduplicated"] == PROMPTS * GROUP
        assert m["sched/tries"] == m["sched/jobs"] + m["sched/retries"]
        assert m["sched/duplicates"] == 0 and m["sched/samples_dropped"] == 0
    records = [json.loads(x) for x in (out / "trajectories" / "rl.jsonl").read_text().splitlines()]
    verified = Counter((r["step"], r["task_id"], r["sample_idx"]) for r in records)
    assert set(verified.values()) == {1} and len(verified) == STEPS * PROMPTS * GROUP
    assert {r["domain"] for r in records} == {"math", "code"}
    assert all(r["outcome"] in ("pass", "fail") for r in records)  # no infra error reached the trainer
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["eval"]) >= {"base", "rl"} and summary["sched"]["duplicates"] == 0


def test_a_killed_driver_leaves_no_cluster_behind():
    """``local_cluster``'s janitor: SIGKILL the driver (no cleanup of its own can run) and every
    process of its cluster's group is gone within seconds (before, all nine stayed)."""
    import contextlib
    import os
    import shutil
    import signal
    import time

    driver = subprocess.Popen([sys.executable, "-c", (
        "import time\nfrom posttrain.sched import local_cluster\n"
        "with local_cluster(num_cpus=1) as addr:\n    print(addr, flush=True)\n    time.sleep(600)\n")],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    port = driver.stdout.readline().strip().rpartition(":")[2]

    def processes() -> list[tuple[str, str, str]]:
        out = subprocess.run(["ps", "-ww", "-eo", "pid,pgid,args"], capture_output=True, text=True).stdout
        return [tuple(line.split(None, 2)) for line in out.splitlines()[1:] if len(line.split(None, 2)) == 3]

    assert port.isdigit()  # (Ray picks the port: the cluster's group is its janitor's, which watches the driver)
    group = next(g for _, g, a in processes() if f"kill -0 {driver.pid} " in a)
    args = next(a for _, g, a in processes() if g == group and "--block" in a)
    temp = args.split("--temp-dir=")[1].split()[0]  # the driver cannot remove it: this test does
    try:
        assert len([p for p, g, _ in processes() if g == group]) > 1
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 15
        while [p for p, g, _ in processes() if g == group] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [a for _, g, a in processes() if g == group]
    finally:  # whatever is left of that group (never our own). os.killpg, not procps `kill -9 -PGID`:
        # procps-ng 4.0.2 reads "-16976" as pid -1 and signals every process (kill(-1, 9))
        if group.isdigit() and int(group) > 1 and int(group) != os.getpgrp():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(group), signal.SIGKILL)
        if temp.startswith("/tmp/ray"):
            shutil.rmtree(temp, ignore_errors=True)
