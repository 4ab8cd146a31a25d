"""What an agent can leave in its workspace between steps and around submit, on the real sandbox: processes
that would outlive their call (``&``, ``setsid``, ``nohup``, a double fork, SIGTERM/SIGHUP ignored, a sleeper
that writes later), and layers it fills. Whatever it leaves costs it its own verdict, never an infra error:
the grader reads its work as its calls left it, the next call runs, and the next episode on the pool (a pool
of one slot: the same exec slot, its uid maybe again) sees nothing of it.

Episodes are stepped as the runner steps them: a snapshot after each step that does not end the episode."""

from __future__ import annotations

import base64
import dataclasses
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from agent_play import CHAT, action, call

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT, AgentLimits, WorkspaceEnv, WorkspaceSpec
from posttrain.sandbox import Limits
from posttrain.sandbox import workspace as workspace_module
from posttrain.types import Task, ToolCallRecord, Verdict

ENV = get_domain("files")
FILL_INODES = ("python3 -c \"import os, secrets\np = secrets.token_hex(4)\nn = 0\ntry:\n    while True: "
               "os.mknod(f'{p}{n}'); n += 1\nexcept OSError as e: print(n, e.strerror)\"")


@pytest.fixture(scope="module")
def verify():
    return ENV.make_verifier(None)


def _task() -> Task:
    return build_task(random.Random("agent-one"), 2, "files-agent-one", ["sales"])


def _writer(task: Task) -> str:
    """A shell snippet that writes the right work (the oracle's files)."""
    writes = [(c["arguments"]["path"], c["arguments"]["content"]) for c in oracle(task) if c["name"] == "write_file"]
    return "; ".join(f"mkdir -p $(dirname {p}); echo {base64.b64encode(c.encode()).decode()} | base64 -d > {p}"
                     for p, c in writes)


def _play(pool: Any, task: Task, actions: Sequence[Any], verify: Any, *, spec: WorkspaceSpec | None = None
          ) -> tuple[list[Verdict], list[ToolCallRecord]]:
    """Step ``actions`` (a call, a list of calls in one action, or a number: seconds to wait); the runner's
    snapshot after each step that goes on."""
    env = WorkspaceEnv(spec or ENV.workspace_spec(task), chat=CHAT, pool=pool, verify=verify,
                       limits=AgentLimits(max_steps=40))
    env.reset(task)
    verdicts, records = [], []
    try:
        for a in actions:
            if isinstance(a, int | float):
                time.sleep(a)
                continue
            result = env.step(action(CHAT.write_tool_calls(a if isinstance(a, list) else [a])))
            records += result.calls
            verdicts += [result.verdict] if result.verdict is not None else []
            if result.done:
                break
            env.snapshot()
    finally:
        env.close()
    return verdicts, records


@pytest.fixture
def few_inodes(monkeypatch) -> Iterator[None]:
    """A workspace of 2048 inodes (the cap is 2^20: filling it takes ~25 s on the test host)."""
    monkeypatch.setattr(workspace_module, "LAYER_INODES", 2048)
    yield


# -- processes: none outlives its call ----------------------------------------------------------------------


DAEMONS = [
    "( sleep 1; {w} ) >/dev/null 2>&1 &",
    "nohup sh -c 'sleep 1; {w}' >/dev/null 2>&1 &",
    "setsid sh -c 'sleep 1; {w}' >/dev/null 2>&1 </dev/null &",
    "( ( trap '' TERM HUP INT; sleep 1; {w} ) & ) >/dev/null 2>&1",
    "( sleep 1; {w} ) &",  # holds the call's stdout
]


def test_a_process_left_running_never_writes_after_its_call(pool1, verify) -> None:
    """Daemons of each flavour would write the right work 1 s after their call: the submit comes after that
    (and a look at the workspace), and the grader reads what the calls left, a fail. Measured: 5 flavours x 3
    runs, each 'fail'/'missing' with the call back in < 0.2 s; the same writer waited for passes."""
    task = _task()
    w = _writer(task)
    daemons = "; ".join(d.format(w=w) for d in DAEMONS)
    t0 = time.monotonic()
    verdicts, records = _play(pool1, task, [call("bash", command=daemons), 2,
                                            call("bash", command="ls reports 2>&1 || true"), SUBMIT], verify)
    assert records[0].seconds < 5, records[0]  # no call waits for what it left behind
    assert "No such file" in records[1].result, records[1].result
    assert [(v.outcome, v.error_class) for v in verdicts] == [("fail", "missing")], verdicts[0].feedback
    assert time.monotonic() - t0 < 20
    verdicts, _ = _play(pool1, task, [call("bash", command=f"( sleep 1; {w} ) & wait"), SUBMIT], verify)
    assert [v.outcome for v in verdicts] == ["pass"]  # the payload is right: only its running on is stopped


def test_the_next_episode_on_the_slot_sees_nothing_of_the_last(pool1, verify) -> None:
    """Episode A leaves sleepers (SIGTERM/SIGHUP ignored) that would write into /work, /tmp and /dev/shm, and a
    setsid loop; it ends; episode B, on the same exec slot after the sleepers' delay, finds none of it and
    passes with the right work."""
    task = _task()
    leave = ("for d in /work /tmp /dev/shm; do ( trap '' TERM HUP; sleep 1; echo A > $d/planted ) >/dev/null 2>&1 & "
             "done; setsid nohup sh -c 'while :; do echo A >> /tmp/ticks; sleep 0.2; done' >/dev/null 2>&1 &")
    _play(pool1, task, [call("bash", command=leave), SUBMIT], verify)
    time.sleep(2)
    look = "ls -A /tmp /dev/shm /work; ps -eo args | grep -c 'sleep\\|ticks' || true"
    verdicts, records = _play(pool1, task, [call("bash", command=look), *oracle(task)], verify)
    assert "planted" not in records[0].result and "ticks" not in records[0].result, records[0].result
    assert [v.outcome for v in verdicts] == ["pass"]


# -- layers: a full workspace is ENOSPC for the agent, never a launch that fails -----------------------------


def test_layers_filled_step_after_step_never_make_the_next_call_infra(pool1, verify) -> None:
    """Each step fills its attempt's layer; the runner's snapshot freezes it. Each new attempt used to get a
    whole ``storage_mb`` of its own, all of it in the workspace's memory cgroup (``memory_mb + storage_mb``):
    after the third full layer every call was killed for memory, ``echo`` too, and sometimes the launch
    itself, an infra_error (512 MB layers: 2 runs of 7). Now the layers share ``storage_mb``: the fills
    after the first are ENOSPC, and the next call runs."""
    task = _task()
    spec = dataclasses.replace(ENV.workspace_spec(task), storage_mb=32,
                               command_limits=Limits(memory_mb=64, pids=64, tmp_mb=16, output_bytes=1 << 16))
    fill = call("bash", command="head -c 40M /dev/zero > big$RANDOM 2>&1; du -sm . | cut -f1")
    verdicts, records = _play(pool1, task, [fill, fill, fill, fill, call("bash", command="echo next-ok"), SUBMIT],
                              verify, spec=spec)
    assert [v.outcome for v in verdicts] == ["fail"], [(v.outcome, v.error_class, v.feedback) for v in verdicts]
    assert records[4].result == "next-ok", records[4].result
    assert int(records[3].result.splitlines()[-1]) <= 33, records[3].result  # the workspace holds <= storage_mb


def test_a_layer_out_of_inodes_never_makes_the_next_call_infra(pool1, verify, few_inodes) -> None:
    """A call uses up its attempt's inodes; the next call of the same action (same attempt: no snapshot in
    between) used to be an infra_error: overlayfs's mount makes two files in the work dir and got ENOSPC
    (3 runs of 3). Now the attempt gets ``RESERVE_INODES`` back before each job."""
    task = _task()
    verdicts, records = _play(pool1, task, [[call("bash", command=FILL_INODES, timeout=60),
                                             call("bash", command="echo next-ok")], SUBMIT], verify)
    assert "No space left" in records[0].result, records[0].result
    assert records[1].result == "next-ok", records[1].result
    assert [v.outcome for v in verdicts] == ["fail"], [(v.outcome, v.error_class) for v in verdicts]


def test_the_layers_share_one_inode_budget(pool1, verify, few_inodes) -> None:
    """Inodes are kernel memory in the workspace's cgroup (1M empty files: 960 MiB): each attempt used to get
    the whole cap again, so two steps of full layers took the workspace past its memory. Now the layers
    share the cap: the step after a full one makes only what the reserve gives."""
    task = _task()
    fill = call("bash", command=FILL_INODES, timeout=60)
    verdicts, records = _play(pool1, task, [fill, fill, call("bash", command="echo next-ok"), SUBMIT], verify)
    first, second = (int(r.result.split()[0]) for r in records[:2])
    assert first > 1900 and second <= 32, (first, second)  # two RESERVE_INODES: the new attempt's, and a remount's
    assert records[2].result == "next-ok" and [v.outcome for v in verdicts] == ["fail"]
