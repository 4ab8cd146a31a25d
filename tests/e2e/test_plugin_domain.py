"""Issue 20's acceptance: a multi-turn workspace domain from outside posttrain, end to end.

``tests/plugins/wsdomain`` (shell commands in a ``Workspace`` with snapshot/restore/close) is installed
the way pip leaves a package (module + dist-info, entry point ``posttrain.domains``) and runs, with
zero edits to posttrain, through ``posttrain run`` (SFT on its scripted episodes, GRPO over ``agent``
episodes, evaluation as agent episodes; tiny settings on the embedded default) and ``posttrain eval
--episodes agent``. An infra error is injected mid-episode (after a command wrote to the workspace;
its output carries its wall time, so a replay could never match): the episode restarts from its
snapshot (a restart, no group dropped). Afterwards every workspace was closed and no tmpfs or
cgroup of either process is left (mountinfo, the cgroup tree).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "plugins" / "wsdomain" / "wsdomain.py"

RECIPE = """\
seed: 0
stages: [sft, rl]
model: {name: embedded, hidden_size: 64, max_positions: 2048}
tasks:
  train: [{generator: wsdomain, skip: 2, n: 8}]
  eval: [{generator: wsdomain, n: 2}]
  contamination: keep  # every task shows the same prompt: the lines to sort are in its workspace
sft: {demonstrations: references, epochs: 1, batch_size: 8, lr: 0.003}
rl: {episodes: agent, max_turns: 2, steps: 1, prompts_per_step: 2, group_size: 2, max_new_tokens: 48, lr: 0.0005,
     checkpoint_every: 1}
eval: {episodes: agent, max_turns: 2, samples_per_task: 1, max_new_tokens: 48}
sandbox: {workers: 2}
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        open_pool(size=1).close()
    except HostCannotIsolate as e:
        pytest.skip(f"this host cannot run the sandbox: {e}")
    root = tmp_path_factory.mktemp("wsdomain")
    site = root / "site"
    site.mkdir()
    (site / "wsdomain.py").write_text(PLUGIN.read_text())
    info = site / "wsdomain-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: wsdomain\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[posttrain.domains]\nwsdomain = wsdomain:ENV\n")
    (root / "fail").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
           "WSDOMAIN_FAIL_DIR": str(root / "fail"), "WSDOMAIN_LOG": str(root / "workspaces.log")}
    return root, env


def _posttrain(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, int]:
    proc = subprocess.Popen([sys.executable, "-m", "posttrain.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=1500)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def _leftovers(pid: int) -> list[str]:
    """Mounts and cgroups of process ``pid``'s sandbox pool (its workspaces' tmpfs and cgroups among them)."""
    prefix = f"posttrain-sbx-{pid}-"
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if prefix in line.split()[4]]
    cgroups = [str(Path(d) / name) for d, names, _ in os.walk("/sys/fs/cgroup") for name in names
               if name.startswith(prefix)]
    return mounts + cgroups


def test_a_workspace_plugin_trains_and_evaluates_as_agent_episodes(installed):
    root, env = installed
    (root / "recipe.yaml").write_text(RECIPE)
    run = root / "run"
    res, pid = _posttrain(env, "run", str(root / "recipe.yaml"), "--out", str(run))
    assert res.returncode == 0, res.stderr[-3000:]
    assert (root / "fail" / "failed").exists()  # the injected infra error happened
    summary = json.loads((run / "summary.json").read_text())
    sched = summary["sched"]
    assert sched["restarts"] >= 1 and sched["groups_dropped"] == 0 and sched["exhausted"] == 0, sched
    assert sched["nested"] > 0  # the episodes' verdicts went through the service
    assert "episodes" in summary["eval"]["rl"] and summary["eval"]["rl"]["n_tasks"] == 2
    rl = [json.loads(x) for x in (run / "trajectories" / "rl.jsonl").read_text().splitlines()]
    assert len(rl) == 4 and {r["domain"] for r in rl} == {"wsdomain"}
    assert not _leftovers(pid), _leftovers(pid)

    res, pid = _posttrain(env, "eval", "--model", str(run / "checkpoints" / "rl"), "--tasks",
                          str(run / "tasks" / "eval.jsonl"), "--episodes", "agent", "--max-turns", "2",
                          "--max-new-tokens", "48", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["n_tasks"] == 2 and "episodes" in out and out["sched"]["groups_dropped"] == 0
    assert not _leftovers(pid), _leftovers(pid)

    events = Counter(line.split()[0] for line in (root / "workspaces.log").read_text().splitlines())
    assert events["open"] == events["close"] > 0, events  # every workspace closed
