"""The canary alarm, shown to work end to end (issue 24): a policy given a planted exploit trips it
within a few steps, in the step's metrics, in report.html (each passing canary attempt linked to
its trajectory), in ``posttrain tasks stats`` and in the audit's count; the same policy on the
same tasks without the exploit trips nothing.

The domains are a plugin installed the way pip leaves one (entry points; tests/envs/plugin/
planted_domain.py): reverse a three-letter word, ``planted`` with a verifier bug that also passes
the question's word echoed back, ``honest`` without it; both make canaries (the prompt shows one
word, the check expects another reversed: no honest answer passes). The policy is the embedded
model taught the exploit by SFT on echoes (450 steps: it copies the word), then GRPO with the task
pool mixing canaries in at a quarter of the draws."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "envs" / "plugin" / "planted_domain.py"
RECIPE = """seed: 0
stages: {stages}
model: {{name: {model}, hidden_size: 64, max_positions: 64}}
tasks:
  train: [{{file: {domain}-train.jsonl}}]
  eval: [{{file: {domain}-eval.jsonl}}]
  contamination: keep
  sampler: {{kind: pool, canary_rate: 0.25, canaries_per_domain: 4}}
sft: {{demonstrations: echo.jsonl, epochs: 150, batch_size: 32, lr: 0.003}}
rl: {{steps: 3, prompts_per_step: 8, group_size: 4, max_new_tokens: 8, checkpoint_every: 3}}
eval: {{samples_per_task: 2, max_new_tokens: 8}}
"""


def _posttrain(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain.cli", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)


def _rl(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "rl"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("canary")
    site = root / "site"
    info = site / "planted_domain-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "planted_domain.py").write_text(PLUGIN.read_text())
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-domain\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[posttrain.domains]\nplanted = planted_domain:ENV\n"
                                           "honest = planted_domain:HONEST\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    make = ("import json, sys; from planted_domain import ENV, HONEST; from posttrain.envs import task_to_record\n"
            "for e in (ENV, HONEST):\n"
            "    for split, seed, n in (('train', 0, 96), ('eval', 1, 8)):\n"
            "        open(f'{e.name}-{split}.jsonl', 'w').write(''.join(json.dumps(task_to_record(t)) + '\\n' "
            "for t in e.generate_tasks(n, seed=seed)))\n"
            "open('echo.jsonl', 'w').write(''.join(json.dumps({'task_id': t.id, 'response': t.fields['word']}) + '\\n' "
            "for t in ENV.generate_tasks(96, seed=0)))\n")
    subprocess.run([sys.executable, "-c", make], cwd=root, env=env, check=True, timeout=120)
    (root / "planted.yaml").write_text(RECIPE.format(stages="[sft, rl]", model="embedded", domain="planted"))
    p = _posttrain(root, env, "run", "planted.yaml", "--out", "planted")
    assert p.returncode == 0, p.stderr[-3000:]
    # the same policy (its SFT checkpoint) on the same tasks, with no exploit in the verifier
    (root / "honest.yaml").write_text(RECIPE.format(stages="[rl]", model=root / "planted" / "checkpoints" / "sft",
                                                    domain="honest"))
    p = _posttrain(root, env, "run", "honest.yaml", "--out", "honest")
    assert p.returncode == 0, p.stderr[-3000:]
    return root, root / "planted", root / "honest", env


@pytest.mark.slow
def test_a_planted_exploit_trips_the_alarm_within_a_few_steps(runs) -> None:
    root, planted, _, env = runs
    rl = _rl(planted)
    first = next(r["step"] for r in rl if r.get("canary/alarm") == 1.0)
    assert first <= 2 and sum(r.get("canary/passed", 0) for r in rl) >= 2
    assert all("pass_rate/planted" in r for r in rl)  # the canaries are the alarm's, not the domain's pass rate
    html = (planted / "report.html").read_text()
    assert "<b>hack alarm</b>" in html and 'href="#alarm-planted-0"' in html and 'id="alarm-planted-0"' in html
    stats = _posttrain(root, env, "tasks", "stats", str(planted))
    assert stats.returncode == 0 and "hack alarm" in stats.stdout, stats.stdout + stats.stderr[-2000:]
    audit = _posttrain(root, env, "audit", str(planted), "--sample", "4")
    assert audit.returncode == 1 and "hack alarm:" in audit.stdout, audit.stdout + audit.stderr[-2000:]


@pytest.mark.slow
def test_without_the_exploit_the_same_policy_trips_nothing(runs) -> None:
    root, _, honest, env = runs
    rl = _rl(honest)
    assert sum(r.get("canary/episodes", 0) for r in rl) >= 8 and all(r.get("canary/passed", 0) == 0 for r in rl)
    assert "No alarm:" in (honest / "report.html").read_text()
    audit = _posttrain(root, env, "audit", str(honest), "--sample", "4")
    assert "hack alarm" not in audit.stdout, audit.stdout
