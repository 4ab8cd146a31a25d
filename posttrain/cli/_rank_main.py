"""One data-parallel rank (1..N-1) of the RL stage, started by rank 0 (posttrain/cli/_ranks.py):

    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=P python -m posttrain.cli._rank_main RUN/logs/rl-ranks/spec.pkl

It builds its own execution service and loads the model RL starts from, joins the process group,
and runs the same ``run_rl`` as rank 0, writing nothing into the run (rank 0 does)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from posttrain.cli._ranks import join, leave, read_spec
from posttrain.cli.pipeline import TaskPools, load_model, run_rl, run_service, seed_everything
from posttrain.sandbox import usable_cpus


def main(argv: list[str]) -> int:
    spec = read_spec(Path(argv[0]))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    recipe = spec.recipe
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    torch.set_num_threads(recipe.torch_threads or max(1, usable_cpus() // world))
    seed_everything(recipe.seed + rank)
    pools = TaskPools(list(spec.train), list(spec.held))
    with run_service(recipe, pools) as service:
        policy = load_model(recipe, spec.start)
        dp = join(rank, world)
        run_rl(policy, pools.train, service, recipe, spec.out, None, resume=spec.resume, held=pools.eval, dp=dp)
        leave()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
