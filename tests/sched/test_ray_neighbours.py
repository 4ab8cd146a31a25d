"""Two posttrain runs on one host, each with a ``local_cluster`` of its own (real Ray, loopback).

What broke: ``local_cluster`` picked a free port, closed it and handed it to ``ray start``, then
``ray.init``-ed that port until something answered, with token auth off. A sibling that bound the
port in between was joined: a second run given the first's port connected to the first's cluster
(same node id, in 0.6 s); given a port a plain socket held, it waited past 5 minutes. And any local
process (another user's run, a job escaped from a sandbox) could join the cluster and run code in
it. Now Ray binds the port itself (``--port=0``, read back from the cluster's own temp dir) and the
cluster takes only its own random token (a 0600 file in that dir): measured, a join without it, or
with the other run's token, is refused (ConnectionError after ~20 s) and one with it joins in ~2 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import json, os, sys
import ray
from posttrain.sched import local_cluster
with local_cluster(num_cpus=1) as address:
    ctx = ray.get_runtime_context()
    print(json.dumps({"address": address, "node": ctx.get_node_id(), "gcs_port": ctx.gcs_address.rpartition(":")[2],
                      "token": os.environ.get("RAY_AUTH_TOKEN_PATH")}), flush=True)
    sys.stdin.read()
"""
JOIN = """
import sys
import ray
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
except Exception as e:
    print("refused", type(e).__name__)
else:
    print("joined", ray.get_runtime_context().get_node_id())
"""
WAIT_S = 90.0


def _env(**auth: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return {**env, "PYTHONPATH": str(ROOT), **auth}


@pytest.fixture(scope="module")
def runs():
    """Two runs started at the same moment, each holding its cluster; then, all at once, the joins
    the tests read: without a token, with auth disabled, with the other run's token, with its own."""
    holders = [subprocess.Popen([sys.executable, "-c", HOLD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=_env()) for _ in range(2)]  # fmt: skip
    try:
        seen = [json.loads(h.stdout.readline() or "null") for h in holders]
        assert all(seen), "a local_cluster did not come up"
        a, b = seen
        tries = {
            "none": ({}, a),
            "disabled": ({"RAY_AUTH_MODE": "disabled"}, a),
            "other's token": ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": b["token"] or "/nonexistent"}, a),
            "own token": ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": a["token"] or "/nonexistent"}, a),
        }
        t0 = time.monotonic()
        joins = {k: subprocess.Popen([sys.executable, "-c", JOIN, run["address"]], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=_env(**auth))
                 for k, (auth, run) in tries.items()}  # fmt: skip
        got = {k: p.communicate(timeout=WAIT_S)[0].strip() for k, p in joins.items()}
        print(f"joins answered within {time.monotonic() - t0:.1f} s: {got}")
        yield seen, got
    finally:
        for h in holders:
            h.stdin.close()  # its cluster is stopped and its temp dir removed
            h.wait(timeout=60)


def test_two_runs_starting_at_once_each_get_a_cluster_of_their_own(runs):
    (a, b), got = runs
    assert a["address"] != b["address"] and a["node"] != b["node"], (a, b)
    for run in (a, b):  # each driver is on the port its own cluster bound
        assert run["address"] == f"127.0.0.1:{run['gcs_port']}", run
    assert got["other's token"].startswith("refused"), got  # one run's token opens only its own cluster
    assert got["own token"] == f"joined {a['node']}", got


def test_a_local_process_without_the_clusters_token_cannot_join_it(runs):
    _, got = runs
    assert got["none"].startswith("refused") and got["disabled"].startswith("refused"), got


def test_each_runs_token_is_its_own_in_a_file_only_its_user_reads(runs):
    (a, b), _ = runs
    for run in (a, b):
        st = os.stat(run["token"])
        assert st.st_mode & 0o077 == 0 and st.st_uid == os.getuid(), oct(st.st_mode)
    assert a["token"] != b["token"]
