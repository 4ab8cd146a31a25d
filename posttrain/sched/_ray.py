"""The Ray backend of the service: one sandbox-pool actor per node, the driver keeps the books.

    >>> # with local_cluster(num_cpus=2) as address:              # or an existing cluster's address
    >>> #     with Service(RayBackend(address, domains=["code"])) as svc:
    >>> #         svc.run_jobs(jobs)

- ``RayBackend``: on each alive node of the cluster, a ``SandboxPoolActor`` (pinned to that node,
  ``max_concurrency`` = its CPUs, holding a ``LocalSandboxPool`` of that size and the domains'
  verifiers). The service gets one worker slot per CPU of every node, so the scheduler core sees
  the whole cluster; its node breakers are per Ray node.
- Retries are ours, not Ray's: actors restart (``max_restarts=-1``, constructor re-run: a fresh
  pool) but their tasks are never re-run by Ray (``max_task_retries=0``). A try lost with its actor
  comes back to the service as an infra error (after the actor answers again), is retried by the
  scheduler as a new attempt, and the driver's ``Ledger`` (keyed by group, task, sample and attempt)
  settles each try once and each job once: Ray alone is at-least-once at best
  (reference/scheduling.md, section 4).
- ``local_cluster``: a real single-node cluster for tests and the bench, with its own temp dir,
  port (Ray's choice, read back) and auth token, stopped by killing its own process group (never ``ray stop``, which ends
  every Ray process of the user on the machine).

Multi-node: ``ray start --head --port=6379 --num-cpus=N`` on one machine, ``ray start
--address=HEAD:6379`` on the others (the sandbox needs root on every node), then
``RayBackend("HEAD:6379", ...)`` on the driver (README, "Ray").
Also ``ray_session`` (join a cluster, or start one of the run's own) and ``ray_backend``.
Not here: rollout workers as actors with weight broadcast (``posttrain.policy.RayRollout``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from posttrain.errors import UserError
from posttrain.sched._jobs import HooksFactory, verify_with
from posttrain.types import Task, Verdict


class SandboxPoolActor:
    """Runs tries on one node: a sandbox pool sized to the node's CPUs, the domains' hooks (built on
    the node by ``hooks``, the wiring's factory: ``posttrain.cli.domain_hooks``)."""

    def __init__(self, cpus: int, domains: Sequence[str], hooks: HooksFactory) -> None:
        from posttrain.sandbox import open_pool

        self.pool = open_pool(size=cpus)
        self.hooks = hooks(domains, self.pool)

    def ping(self) -> int:
        return os.getpid()

    def max_batch(self, domain: str) -> int:
        batch = self.hooks[domain].batch
        return batch.max_batch if batch is not None else 1

    def replays(self, domain: str) -> bool:
        return self.hooks[domain].replay

    def verify(self, domain: str, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        return verify_with(self.hooks[domain], domain, pairs)


class RayBackend:
    """Service backend over a Ray cluster at ``address`` (module docstring); ``hooks`` builds each
    node's ``DomainHooks`` for ``domains`` over that node's pool (``posttrain.cli.domain_hooks``)."""

    RESTART_WAIT_S = 120.0
    """How long a try that lost its actor waits for the restarted actor before reporting infra."""
    SLACK_S = 60.0
    """A try is waited for ``WAIT_PER_TIMEOUT`` times its tasks' timeouts plus this (queueing, a pool's
    start), then infra."""
    WAIT_PER_TIMEOUT = 9.0
    """What a verification may take per second of its task's timeout, at most: the code domain's batch
    gives each item 2.5 x its timeout (a warm-up, the test, a replay) and re-runs an item the batch
    could not verify alone for as long again, a task with hidden tests being two items (~8.4x).
    Waited twice the timeouts, eight samples that each spent their share made the batch outlast the
    wait, and every verdict of it infra -- the honest samples' beside them too."""

    def __init__(self, address: str, *, domains: Sequence[str], hooks: HooksFactory) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        remote = ray.remote(SandboxPoolActor)
        self.actors: list[Any] = []
        self.nodes: list[str] = []
        self._actor_of: list[Any] = []
        for node in sorted(ray.nodes(), key=lambda n: n["NodeID"]):
            cpus = int(node["Resources"].get("CPU", 0)) if node["Alive"] else 0
            if cpus < 1:
                continue
            actor = remote.options(
                num_cpus=0, max_concurrency=cpus, max_restarts=-1, max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(cpus, list(domains), hooks)
            self.actors.append(actor)
            self.nodes += [node["NodeID"][:12]] * cpus
            self._actor_of += [actor] * cpus
        if not self.actors:
            raise RuntimeError(f"Ray cluster at {address}: no alive node with a CPU")
        self._max_batch = {d: ray.get(self.actors[0].max_batch.remote(d)) for d in domains}
        self._replays = {d: ray.get(self.actors[0].replays.remote(d)) for d in domains}

    def serves(self, domain: str) -> bool:
        return domain in self._max_batch

    def max_batch(self, domain: str) -> int:
        return self._max_batch.get(domain, 1)

    def replays(self, domain: str) -> bool:
        """Whether ``domain``'s verdicts may be cached (``DomainHooks.replay``, as the nodes' hooks say)."""
        return self._replays.get(domain, True)

    def _call(self, worker: int, method: str, *args: Any, timeout_s: float) -> Any:
        """``actor.method(*args)``, waited for ``timeout_s`` at most: a try that hangs (an actor that
        neither answers nor dies) is cancelled and comes back as an exception, i.e. infra, retried."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        actor = self._actor_of[worker]
        ref = getattr(actor, method).remote(*args)
        try:
            return ray.get(ref, timeout=timeout_s)
        except GetTimeoutError:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
            raise
        except RayActorError:
            # The actor died with this try; wait until it is back so the retry has somewhere to go.
            with contextlib.suppress(Exception):
                self._ping(actor)
            raise

    def _ping(self, actor: Any) -> int:
        """The actor's pid, waiting up to ``RESTART_WAIT_S`` while Ray restarts it: a ping sent
        during a restart fails at once as unavailable (not queued), so it is sent again until one
        is answered; an actor that died for good raises."""
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError

        deadline = time.monotonic() + self.RESTART_WAIT_S
        while True:
            try:
                return int(ray.get(actor.ping.remote(), timeout=max(0.1, deadline - time.monotonic())))
            except (ActorUnavailableError, GetTimeoutError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def verify(self, worker: int, domain: str, pairs: Sequence[tuple[Task, str]]) -> list[Verdict]:
        wait = self.SLACK_S + self.WAIT_PER_TIMEOUT * sum(t.limits.timeout_s for t, _ in pairs)
        return self._call(worker, "verify", domain, list(pairs), timeout_s=wait)

    def actor_pids(self) -> list[int]:
        """Each actor's pid; one Ray is restarting is waited for (``_ping``)."""
        return [self._ping(a) for a in self.actors]

    def close(self) -> None:
        import ray

        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self.actors = []


AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")


def _use_auth(env: dict[str, str | None]) -> None:
    """Set (a value) or remove (None) Ray's auth variables in this process, and make the Ray
    already imported here read them again (its config and its cached token: a second cluster in
    one process has a token of its own)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _own_address(temp: Path, proc: subprocess.Popen, deadline: float) -> str:
    """The address ``ray start --port=0`` wrote once its head was up (``temp/ray_current_cluster``),
    as ``127.0.0.1:PORT``; a ``RuntimeError`` naming its log if it exited or ``deadline`` passed."""
    written = temp / "ray_current_cluster"
    while True:
        with contextlib.suppress(OSError, ValueError):
            port = int(written.read_text().strip().rpartition(":")[2])
            if 0 < port < 65536:
                return f"127.0.0.1:{port}"
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"ray start did not come up (see {temp / 'ray-start.log'})")
        time.sleep(0.2)


@contextlib.contextmanager
def local_cluster(num_cpus: int = 2, *, object_store_mb: int = 80, start_timeout_s: float = 120.0) -> Iterator[str]:
    """A real one-node Ray cluster of this process's own: own temp dir, own port, own token.

    Ray binds its port itself (``--port=0``) and the address is read back from the cluster's own
    temp dir: a port picked here and handed to ``ray start`` could be taken first by a sibling,
    whose cluster this driver then joined (measured: a second ``local_cluster`` given the first's
    port connected to the first's cluster), or whose plain socket ``ray.init`` waited on for
    minutes. Token auth is on, with a random token in a 0600 file of the temp dir
    (``RAY_AUTH_TOKEN_PATH``), set in this process only while the cluster runs: another local
    process, a sandboxed job or another posttrain run, cannot join it, nor this driver another's.

    Yields its address; on exit disconnects the driver, SIGKILLs the cluster's process group and
    removes its temp dir. A driver killed outright (SIGKILL, out of memory) cannot do that, so the
    cluster runs under a small shell, leader of the cluster's own process group, that watches the
    driver and, when it is gone, SIGKILLs its own group (``kill -9 0``: never a group by number).
    """
    import ray

    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths are length-capped
    token = temp / "auth_token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    old_auth = {k: os.environ.get(k) for k in AUTH_VARS}
    _use_auth({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_AUTH_TOKEN": None})
    ray_bin = Path(sys.executable).with_name("ray")
    cmd = [str(ray_bin), "start", "--head", "--port=0", f"--num-cpus={num_cpus}", f"--temp-dir={temp}",
           f"--object-store-memory={object_store_mb * 1024 * 1024}", "--include-dashboard=false",
           "--disable-usage-stats", "--block"]
    watch = (f'"$@" & while kill -0 {os.getpid()} 2>/dev/null && kill -0 $! 2>/dev/null; do sleep 1; done; '
             "kill -9 0")  # the driver or the cluster is gone: end the whole group, this shell included
    with open(temp / "ray-start.log", "wb") as log:
        proc = subprocess.Popen(["/bin/sh", "-c", watch, "sh", *cmd], start_new_session=True, stdout=log,
                                stderr=subprocess.STDOUT)
    started = False
    try:
        deadline = time.monotonic() + start_timeout_s
        address = _own_address(temp, proc, deadline)
        while True:
            try:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ray start did not come up (see {temp / 'ray-start.log'})") from None
                time.sleep(0.5)
        started = True
        yield address
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if started:  # a cluster that never came up keeps its log for the message above
            shutil.rmtree(temp, ignore_errors=True)
        _use_auth(old_auth)


JOIN_TIMEOUT_S = 10.0
"""How long ``ray_session`` waits for the head node's port to answer before it gives up."""


def check_reachable(address: str) -> None:
    """Raise a one-line ``UserError`` unless something answers at the cluster ``address`` (HOST:PORT).

    ``ray.init`` retries an address nobody answers at for minutes: ask once, briefly, before any work.
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=JOIN_TIMEOUT_S).close()
    except (OSError, ValueError) as e:
        raise UserError(f"sched.ray_address: nothing answers at {address} ({e}); start the head node with "
                        f"`ray start --head --port={port}` or give its HOST:PORT") from None


@contextlib.contextmanager
def ray_session(address: str | None, *, num_cpus: int) -> Iterator[str]:
    """Connect this process (the driver) to the cluster at ``address``, or, when ``address`` is None,
    to a one-node cluster of its own (``local_cluster``: own temp dir and port, ``num_cpus`` CPUs),
    stopped on exit. Never ``address="auto"``: a neighbour's cluster may run on the same host.
    Yields the address."""
    import ray

    if address is None:
        with local_cluster(num_cpus=num_cpus) as own:
            yield own
        return
    check_reachable(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - any failure to join is the user's address or cluster
        raise UserError(f"sched.ray_address: cannot join the Ray cluster at {address!r} "
                        f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    try:
        yield address
    finally:
        ray.shutdown()


@contextlib.contextmanager
def ray_backend(address: str | None, domains: Sequence[str], *, num_cpus: int,
                hooks: HooksFactory) -> Iterator[RayBackend]:
    """The service's ``RayBackend`` (a sandbox-pool actor per node, ``hooks`` building each node's
    domain hooks) on the cluster at ``address``, or on a one-node cluster of the run's own with
    ``num_cpus`` CPUs (``ray_session``)."""
    with ray_session(address, num_cpus=num_cpus) as joined:
        backend = RayBackend(joined, domains=domains, hooks=hooks)
        try:
            yield backend
        finally:
            backend.close()
