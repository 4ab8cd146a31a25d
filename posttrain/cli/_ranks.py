"""The RL stage on N data-parallel processes (``rl.data_parallel: N``): this process is rank 0 and
starts ranks 1..N-1 on this machine, each ``python -m posttrain.cli._rank_main SPEC`` with
torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).

    with ranks(RankSpec(out, recipe, train, held, start=Path(policy.path), resume=resume)) as dp:
        train_grpo(..., dp=dp)       # rank 0; the others run the same call (posttrain/cli/_rank_main.py)

- SPEC (``RUN/logs/rl-ranks/spec.pkl``) carries what rank 0 runs RL with: the recipe as decided, the
  train and held-out tasks, the checkpoint RL starts from, whether it resumes. Each rank builds its
  own execution service (its own sandboxes) and loads the model itself; its output goes to
  ``RUN/logs/rl-ranks/rank-R.log``; it writes nothing else (rank 0 writes the run's files).
- The ranks meet on a ``TCPStore`` rank 0 opens on loopback (a free port the kernel picks): each
  says ``ready/R`` once its setup is done, and rank 0 forms the process group (gloo on the CPU, nccl
  with one GPU per rank) only then. A rank that exits before is a ``RankError`` naming its log and
  last line, before any step; one that dies later ends the others (its peers' collectives fail on
  the closed connection, rank 0 stops the rest) and rank 0 raises the same error. A rank whose rank 0
  is gone (kill -9) exits: ``--resume`` continues the run from its last checkpoint on all ranks.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from posttrain.errors import RunFailure, UserError
from posttrain.train._dist import DataParallel
from posttrain.train.recipe import Recipe
from posttrain.types import Task

TIMEOUT = timedelta(minutes=30)
"""How long a collective waits for a slow rank (one rank's generation or verification)."""
SPEC = "spec.pkl"


class RankError(RunFailure):
    """A data-parallel rank exited with an error: the message names its exit, its log and its last line."""


@dataclass(frozen=True)
class RankSpec:
    """What every rank runs the RL stage with (rank 0's, pickled into ``RUN/logs/rl-ranks/spec.pkl``)."""

    out: Path
    recipe: Recipe
    train: Sequence[Task]
    held: Sequence[Task]
    start: Path
    """The checkpoint directory RL starts from (the previous stage's, or the base model's)."""
    resume: bool


def rank_dir(out: Path) -> Path:
    return out / "logs" / "rl-ranks"


def backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


@contextlib.contextmanager
def ranks(spec: RankSpec) -> Iterator[DataParallel]:
    """Start ranks 1..N-1 (module docstring), form the process group as rank 0, yield rank 0's
    ``DataParallel``; on leaving, wait for the ranks to finish, or stop them after an error."""
    world = spec.recipe.rl.data_parallel
    logs = rank_dir(spec.out)
    logs.mkdir(parents=True, exist_ok=True)
    (logs / SPEC).write_bytes(pickle.dumps(spec))
    store = dist.TCPStore("127.0.0.1", 0, world_size=world, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    failed: list[int] = []
    stop = threading.Event()
    try:
        for rank in range(1, world):
            env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
                   "PYTHONUNBUFFERED": "1"}  # its log is current when it dies
            with open(logs / f"rank-{rank}.log", "wb") as log:
                procs[rank] = subprocess.Popen([sys.executable, "-m", "posttrain.cli._rank_main", str(logs / SPEC)],
                                               env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_ready(store, procs, logs)
        if torch.cuda.is_available():
            torch.cuda.set_device(0)
        dist.init_process_group(backend(), store=store, rank=0, world_size=world, timeout=TIMEOUT)
        watch = threading.Thread(target=_watch, args=(procs, failed, stop), name="rl-ranks", daemon=True)
        watch.start()
        try:
            yield DataParallel(0, world)
        except Exception as e:
            if (rank := failed[0] if failed else _died(procs)) is not None:  # it broke the collective
                raise _rank_error(rank, procs[rank], logs) from e
            raise
        dist.barrier()
        stop.set()
        for rank, proc in procs.items():
            if proc.wait() != 0:
                raise _rank_error(rank, proc, logs)
    finally:
        stop.set()
        for proc in procs.values():
            _end(proc)
        if dist.is_initialized():
            dist.destroy_process_group()


def _wait_ready(store: dist.TCPStore, procs: dict[int, subprocess.Popen[bytes]], logs: Path) -> None:
    """Until every rank said ``ready/R``; a rank that exits first is its ``RankError``."""
    waiting = set(procs)
    while waiting:
        for rank in sorted(waiting):
            if store.check([f"ready/{rank}"]):
                waiting.discard(rank)
            elif procs[rank].poll() is not None:
                raise _rank_error(rank, procs[rank], logs)
        time.sleep(0.05)


def _watch(procs: dict[int, subprocess.Popen[bytes]], failed: list[int], stop: threading.Event) -> None:
    """While training: a rank that exits with an error ends the others, so that rank 0's collective
    fails on the closed connection instead of waiting out ``TIMEOUT``."""
    while not stop.wait(0.2):
        for rank, proc in procs.items():
            if proc.poll() not in (None, 0):
                failed.append(rank)
                for other in procs.values():
                    _end(other)
                return


def _died(procs: dict[int, subprocess.Popen[bytes]], wait_s: float = 2.0) -> int | None:
    """The first rank that exited with an error within ``wait_s`` (a collective rank 0 was in failed
    on its closed connection a moment before the watch could see it), or None."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for rank, proc in procs.items():
            if proc.poll() not in (None, 0):
                return rank
        time.sleep(0.05)
    return None


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _rank_error(rank: int, proc: subprocess.Popen[bytes], logs: Path) -> RankError:
    log = logs / f"rank-{rank}.log"
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    code = proc.poll()
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return RankError(f"rl.data_parallel: rank {rank} failed ({how}; last line: "
                     f"{lines[-1].strip() if lines else 'none'}); its log: {log}; --resume continues from the last checkpoint")


def join(rank: int, world: int) -> DataParallel:
    """Ranks 1..N-1: say ``ready/R`` to rank 0's store and join the process group; a daemon thread
    ends this process when rank 0 is gone."""
    parent = os.getppid()

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=orphaned, name="rank-0-watch", daemon=True).start()
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=world,
                          is_master=False, timeout=TIMEOUT)
    store.set(f"ready/{rank}", "1")
    dist.init_process_group(backend(), store=store, rank=rank, world_size=world, timeout=TIMEOUT)
    return DataParallel(rank, world)


def leave() -> None:
    """Ranks 1..N-1, their RL stage done: meet rank 0 once more (it waits for every rank before
    closing the group), then leave the group."""
    dist.barrier()
    dist.destroy_process_group()


def read_spec(path: Path) -> RankSpec:
    spec = pickle.loads(path.read_bytes())
    if not isinstance(spec, RankSpec):
        raise UserError(f"{path}: not a posttrain rank spec")
    return spec
