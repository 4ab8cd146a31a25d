"""``wall_s`` of the records of a model's evaluation (``evaluate.sources.runner_episodes``) is 0.0:
the episodes are sampled and verified in one batch, whose time is not any one record's, and a
model's evaluation at a seed writes the same records byte for byte on every run (its sha256 is a
cache key, a resumed evaluation's records equal an uninterrupted one's). An even share of the batch's
time per record (63207e0, reverted) made every rerun's records differ for a number nothing reads;
the batch's time is in the summary (``endpoint`` for a server) and in the run's metrics."""

from __future__ import annotations

import json

from posttrain.cli._service import domain_hooks
from posttrain.evaluate.sources import runner_episodes
from posttrain.policy import build_embedded_default, load_policy
from posttrain.sched import LocalBackend, Service
from posttrain.types import Task


def test_a_models_records_are_the_same_on_every_run(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "tiny", seed=0))  # random weights: garbage, all fail
    tasks = [Task(id=f"m{i}", domain="math", prompt=f"{i}+{i}? Put your final answer in \\boxed{{}}.",
                  fields={"answer": str(2 * i)}) for i in range(1, 4)]
    runs = []
    with Service(LocalBackend(domain_hooks(["math"], None))) as service:
        for _ in range(2):
            records, _ = runner_episodes(policy, tasks, "single", n=2, temperature=1.0, max_new_tokens=6, seed=0,
                                         stage="eval", service=service)
            runs.append([json.dumps(r.to_json()) for r in records])
    assert len(runs[0]) == 6 and {json.loads(r)["wall_s"] for r in runs[0]} == {0.0}
    assert runs[0] == runs[1]
