"""One data-parallel rank (1..N-1) of the RL stage, started by rank 0 (posttrain/cli/_ranks.py):

    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=P python -m posttrain.cli._rank_main RUN/logs/rl-ranks/spec.pkl

It builds its own execution service and loads the model RL starts from, joins the process group,
and runs the same ``run_rl`` as rank 0, writing nothing into the run (rank 0 does). Under torchrun
the same (``run_rank``) follows ``posttrain run`` on ranks 1..N-1 (posttrain/cli/run.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist

from posttrain.cli._ranks import RankSpec, end_rank, join, leave, read_spec
from posttrain.cli.pipeline import TaskPools, load_model, run_rl, run_service, seed_everything
from posttrain.errors import UserError
from posttrain.sandbox import usable_cpus


def run_rank(spec: RankSpec, rank: int, world: int, *, local_rank: int, local_world: int,
             store: dist.Store | None = None) -> None:
    """The RL stage as rank ``rank`` of ``world`` (``local_world`` of them on this machine), joining on
    rank 0's store (or torchrun's, ``store``)."""
    recipe = spec.recipe
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    torch.set_num_threads(recipe.torch_threads or max(1, usable_cpus() // local_world))
    seed_everything(recipe.seed + rank)
    if not spec.start.exists():
        raise UserError(f"rank {rank}: {spec.start} (the checkpoint RL starts from) is not on this machine; on "
                        "several machines the run directory must be on storage every node mounts at the same path")
    pools = TaskPools(list(spec.train), list(spec.held))
    with run_service(recipe, pools) as service:
        policy = load_model(recipe, spec.start)
        dp = join(rank, world, store)
        run_rl(policy, pools.train, service, recipe, spec.out, None, resume=spec.resume, held=pools.eval, dp=dp)
        leave()


def main(argv: list[str]) -> NoReturn:
    spec = read_spec(Path(argv[0]))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    run_rank(spec, rank, world, local_rank=int(os.environ.get("LOCAL_RANK", rank)), local_world=world)
    end_rank(0)


if __name__ == "__main__":
    main(sys.argv[1:])
