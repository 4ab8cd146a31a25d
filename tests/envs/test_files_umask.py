"""A files episode's verdict does not hang on the umask of the process that runs posttrain.

Since c713dd6 a new file writable by everyone is collateral, and a job's umask was the host
process's: under ``umask 0`` (some containers, some CI runners) an honest ``cp``/``mkdir``/``>`` in
bash made 0666/0777 entries and the oracle's episode failed ("a new file with mode 0666") where under
``umask 022`` it passed (the oracle too: its archive/ was 0777). Every sandboxed job now starts with
umask 022 (``_launch.launcher_argv``), and a workspace's host-side files and directories are 0644/0755
whatever the umask (``workspace._mkdir``, ``write_file``): one episode, the same modes on every host.
"""

from __future__ import annotations

import os
import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT
from posttrain.sandbox import Workspace, open_pool


@pytest.fixture(scope="module")
def loose_pool():
    """A pool run under umask 0, as a host process may be (the process's umask for the module's span)."""
    old = os.umask(0)
    try:
        with open_pool(size=1) as pool:
            yield pool
    finally:
        os.umask(old)


def test_an_honest_bash_episode_passes_whatever_the_hosts_umask(loose_pool) -> None:
    task = build_task(random.Random("files-umask"), 2, "files-umask", ["notes"])
    honest = "cat status.json > s && mv s status.json && umask"  # the target written again by the shell
    calls = [*oracle(task)[:-1], call("bash", command=honest), SUBMIT]
    got = play(loose_pool, task, calls, get_domain("files").make_verifier(None))
    assert got.first.passed, got.first.evidence
    assert got.calls[-2].result.strip().endswith("0022"), got.calls[-2].result


@pytest.mark.parametrize("mask", [0o000, 0o077])
def test_a_workspaces_files_have_the_same_modes_under_any_umask(loose_pool, mask: int) -> None:
    """The initial files, what ``write_file`` makes and what a command makes: 0644 files and 0755
    directories under umask 0 and 077 alike (they were 0666/0777 and 0600/0700)."""
    old = os.umask(mask)
    try:
        with Workspace(loose_pool, {"a.txt": "a\n", "d/e/b.txt": "b\n"}) as ws:
            ws.write_file("n/m.txt", "m\n")
            made = ws.exec(["sh", "-c", "mkdir k && echo k > k/f && stat -c '%n %a' . a.txt d d/e d/e/b.txt n n/m.txt k k/f"])
    finally:
        os.umask(old)
    modes = dict(line.split() for line in made.stdout.decode().splitlines())
    dirs = {".", "d", "d/e", "n", "k"}
    assert modes == {p: "755" if p in dirs else "644" for p in modes} and len(modes) == 9, made
