"""``wall_s`` of the records of a model's evaluation (``evaluate.sources.runner_episodes``): the
episodes are sampled and verified in one batch, whose wall time each record holds an even share of.

Before, every such record said ``wall_s: 0.0``, as if sampling and verifying it took no time, while
records scored from a file (``--responses``) carry their verification's seconds and RL's trajectory
records their step's: a reader summing ``wall_s`` over an evaluation got 0. Now the records of one
batch hold equal shares that add up to the batch's time (within the call's own wall time)."""

from __future__ import annotations

import time

from posttrain.cli._service import domain_hooks
from posttrain.evaluate.sources import runner_episodes
from posttrain.policy import build_embedded_default, load_policy
from posttrain.sched import LocalBackend, Service
from posttrain.types import Task


def test_a_models_records_share_their_batchs_wall_time(tmp_path):
    policy = load_policy(build_embedded_default(tmp_path / "tiny", seed=0))  # random weights: garbage, all fail
    tasks = [Task(id=f"m{i}", domain="math", prompt=f"{i}+{i}? Put your final answer in \\boxed{{}}.",
                  fields={"answer": str(2 * i)}) for i in range(1, 4)]
    with Service(LocalBackend(domain_hooks(["math"], None))) as service:
        start = time.perf_counter()
        records, _ = runner_episodes(policy, tasks, "single", n=2, temperature=0.0, max_new_tokens=6, seed=0,
                                     stage="eval", service=service)
        took = time.perf_counter() - start
    assert len(records) == 6 and {r.outcome for r in records} == {"fail"}
    assert len({r.wall_s for r in records}) == 1 and records[0].wall_s > 0  # one batch, equal shares
    assert sum(r.wall_s for r in records) <= took + 1e-5  # rounded to the microsecond
