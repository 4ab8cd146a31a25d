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

Launched by ``torchrun`` instead (``torchrun --nnodes M --nproc-per-node K ... -m posttrain.cli run RECIPE
--out DIR``, ``rl.data_parallel: M x K``; ``Torchrun``): every process starts at once. Rank 0 runs the
run as above, but starts no process: it meets the others on torchrun's store (``env://``) before its
first stage (``torchrun_rank0``) and, at the RL stage, puts the spec there. Ranks 1..N-1 (``follow``)
write nothing, wait on the store however long the stages before RL take, then run the RL stage as a
started rank does; they exit when rank 0 says it runs no RL stage (a finished run resumed, an error
before RL). A rank that dies is torchrun's to report: it stops the others. On several machines the run
directory must be on storage that every node mounts at the same path (each rank loads the checkpoint RL
starts from, and resumes from rank 0's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from posttrain.errors import ConfigError, RunFailure, UserError
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


@dataclass(frozen=True)
class Torchrun:
    """This process's place among ``torchrun``'s workers (its environment: ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``; ``MASTER_ADDR`` / ``MASTER_PORT`` for the store)."""

    rank: int
    world: int
    local_rank: int
    local_world: int


def torchrun(env: Mapping[str, str] = os.environ) -> Torchrun | None:
    """Where this process stands among torchrun's workers, or None when it is not one of several
    (no ``TORCHELASTIC_RUN_ID``, or a world of one: a plain run).

    >>> torchrun({"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    Torchrun(rank=3, world=4, local_rank=1, local_world=2)
    >>> torchrun({"RANK": "0", "WORLD_SIZE": "2"}) is None
    True
    """
    if "TORCHELASTIC_RUN_ID" not in env:
        return None
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    except (KeyError, ValueError):
        return None
    return Torchrun(rank, world, local_rank, local_world) if world > 1 else None


def check_torchrun(recipe: Recipe, tr: Torchrun) -> None:
    """The recipe runs on torchrun's ``tr.world`` processes: one ``ConfigError`` line, on every rank,
    before any work, if not."""
    if "rl" not in recipe.stages:
        raise ConfigError(f"torchrun started {tr.world} processes, but only the RL stage runs on ranks and "
                          f"stages has no rl; run this recipe as one process (posttrain run, without torchrun)")
    if recipe.rl.data_parallel != tr.world:
        raise ConfigError(f"rl.data_parallel: {recipe.rl.data_parallel}, but torchrun started {tr.world} processes "
                          f"(WORLD_SIZE={tr.world}); set rl.data_parallel: {tr.world} (--set rl.data_parallel={tr.world})")


_SPEC_KEY = "rl-spec"
_MEET_TIMEOUT = timedelta(minutes=10)
"""How long a rank waits for torchrun's store at start-up (rank 0 opens it, unless torchrun's agent has)."""
_torchrun: dict[str, Any] = {}
"""Rank 0 under torchrun, while its run lasts: ``store`` and ``tr`` (``torchrun_rank0``; read by ``ranks``)."""


def _meet(tr: Torchrun) -> dist.Store:
    """Torchrun's store (``env://``: rank 0's, or its agent's), under a prefix of ours."""
    store, _, _ = next(dist.rendezvous("env://", rank=tr.rank, world_size=tr.world, timeout=_MEET_TIMEOUT))
    return dist.PrefixStore("posttrain", store)


@contextlib.contextmanager
def torchrun_rank0(tr: Torchrun) -> Iterator[None]:
    """Rank 0 under torchrun, around its whole run: meet the other ranks on torchrun's store first (so
    they can wait however long the stages before RL take); on leaving without an RL stage on ranks (a
    finished run resumed, an error before RL), tell them, so that they exit."""
    store = _meet(tr)
    _torchrun.update(store=store, tr=tr)
    try:
        yield
    finally:
        _torchrun.clear()
        with contextlib.suppress(RuntimeError):  # a store already gone: the others are gone with it
            if not store.check([_SPEC_KEY]):
                store.set(_SPEC_KEY, b"")


def local_world(default: int) -> int:
    """How many ranks share this machine: torchrun's ``LOCAL_WORLD_SIZE`` under torchrun, else ``default``."""
    tr = _torchrun.get("tr")
    return tr.local_world if tr is not None else default


def follow(tr: Torchrun) -> tuple[RankSpec | None, dist.Store]:
    """Ranks 1..N-1 under torchrun: meet rank 0 on torchrun's store, then wait for its RL stage's spec
    (however long its stages before RL take); the spec (None when rank 0 ran no RL stage on ranks) and
    the store, to ``join`` on."""
    store = _meet(tr)
    print(f"posttrain: rank {tr.rank} of {tr.world} (torchrun) waits for rank 0's RL stage", file=sys.stderr, flush=True)
    try:
        while not store.check([_SPEC_KEY]):
            time.sleep(0.5)
        data = store.get(_SPEC_KEY)
    except RuntimeError as e:  # rank 0 hosted the store and is gone
        raise RunFailure(f"rank {tr.rank}: rank 0 is gone before its RL stage ({str(e).splitlines()[0][:200]})") from None
    if not data:
        return None, store
    spec = pickle.loads(data)
    if not isinstance(spec, RankSpec):
        raise RunFailure(f"rank {tr.rank}: rank 0 put something other than a rank spec in torchrun's store")
    return spec, store


def rank_dir(out: Path) -> Path:
    return out / "logs" / "rl-ranks"


def backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


@contextlib.contextmanager
def ranks(spec: RankSpec) -> Iterator[DataParallel]:
    """Start ranks 1..N-1 (module docstring), form the process group as rank 0, yield rank 0's
    ``DataParallel``; on leaving, wait for the ranks to finish, or stop them after an error. Under
    torchrun (``torchrun_rank0``) the ranks are torchrun's, already running: ``_torchrun_ranks``."""
    if _torchrun:
        with _torchrun_ranks(spec, _torchrun["store"], _torchrun["tr"]) as dp:
            yield dp
        return
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


@contextlib.contextmanager
def _torchrun_ranks(spec: RankSpec, store: dist.Store, tr: Torchrun) -> Iterator[DataParallel]:
    """Rank 0's side of ``ranks`` under torchrun: the spec into the store (its paths absolute: every
    node reads them), every rank's ``ready/R``, then the process group on the store."""
    spec = dataclasses.replace(spec, out=spec.out.resolve(), start=spec.start.resolve())
    store.set(_SPEC_KEY, pickle.dumps(spec))
    store.wait([f"ready/{rank}" for rank in range(1, tr.world)], TIMEOUT)
    if torch.cuda.is_available():
        torch.cuda.set_device(tr.local_rank)
    dist.init_process_group(backend(), store=dist.PrefixStore("pg", store), rank=0, world_size=tr.world,
                            timeout=TIMEOUT)
    try:
        try:
            yield DataParallel(0, tr.world)
        except dist.DistError as e:  # another rank is gone (torchrun names it and stops the rest)
            raise RankError(f"rl.data_parallel: a rank failed during training ({str(e).splitlines()[0][:200]}); "
                            "torchrun's output names it; --resume continues from the last checkpoint") from None
        dist.barrier()
    finally:
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


def join(rank: int, world: int, store: dist.Store | None = None) -> DataParallel:
    """Ranks 1..N-1: say ``ready/R`` to rank 0's store (or to torchrun's, ``store``) and join the process
    group; a daemon thread ends this process when its parent (rank 0, or torchrun's agent) is gone."""
    parent = os.getppid()

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=orphaned, name="rank-0-watch", daemon=True).start()
    if store is None:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size=world,
                              is_master=False, timeout=TIMEOUT)
        group_store = store
    else:
        group_store = dist.PrefixStore("pg", store)
    store.set(f"ready/{rank}", "1")
    dist.init_process_group(backend(), store=group_store, rank=rank, world_size=world, timeout=TIMEOUT)
    return DataParallel(rank, world)


def leave() -> None:
    """Ranks 1..N-1, their RL stage done: meet rank 0 once more (it waits for every rank before
    closing the group), then leave the group."""
    dist.barrier()
    dist.destroy_process_group()


def end_rank(code: int) -> NoReturn:
    """End a rank 1..N-1 process once its RL stage has left the group and closed its service: its
    output flushed, then ``os._exit`` without the interpreter's teardown. Gloo's objects a sharded
    model still references are otherwise freed while modules are torn down, where a worker thread
    still joinable aborts the process ("terminate called without an active exception", SIGABRT; CI
    saw it once in tests/train/test_dist.py; pytorch issues 65231, 179291), and rank 0 would report a
    finished run's rank as failed. The rank writes nothing into the run, so nothing is lost."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def read_spec(path: Path) -> RankSpec:
    spec = pickle.loads(path.read_bytes())
    if not isinstance(spec, RankSpec):
        raise UserError(f"{path}: not a posttrain rank spec")
    return spec
