"""Every slot has a host uid of its own (issue 21, ``posttrain/sandbox/_uids.py``).

Before, every job of every pool ran as host uid 65534, and some kernel limits are per user: a job
in one pool (another process) exhausted the pipe buffer pages and the fds in flight of that uid,
and a job in another pool got 8 KiB pipes instead of 64 KiB and ETOOMANYREFS from send_fds.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from posttrain.sandbox import open_pool
from posttrain.sandbox._probes_fair import per_user_counters
from posttrain.sandbox._uids import UID_BASE, UID_SPAN, _try, claim_uid


@pytest.mark.slow
def test_a_job_of_another_pool_cannot_exhaust_this_pools_per_user_counters(pool1):
    for _ in range(2):  # the neighbour's job must hold its counters while ours runs: one more try on a slow host
        leak = per_user_counters(pool1)
        if leak is None or "try again" not in leak:
            break
    assert leak is None


def test_every_slot_and_workspace_has_a_uid_of_its_own(pool):
    from posttrain.sandbox.workspace import Workspace

    with Workspace(pool) as ws:
        uids = [s.claim.uid for s in pool._all_z] + [s.claim.uid for s in pool._all_x] + [ws.uid]
        assert len(set(uids)) == len(uids) and all(UID_BASE <= u < UID_BASE + UID_SPAN for u in uids), uids
        for z in pool._all_z:  # what the fork-server runs as, outside its namespaces
            pid = max(z.keep)  # (bwrap's monitor is its parent: the higher pid)
            assert f"Uid:\t{z.uid}\t" in open(f"/proc/{pid}/status").read()
        assert ws.exec(["sh", "-c", "echo x > f; id -u"]).stdout == b"65534\n"  # the same uid inside
        assert os.stat(ws._lookup(ws._check("f"))).st_uid == ws.uid


def test_claims_are_exclusive_and_released_with_their_owner(tmp_path):
    registry = tmp_path / "uids"
    a = claim_uid(registry)
    assert _try(registry / str(a.uid)) is None  # held: another claimant skips it
    # a claim whose owner died is taken over; here the owner is another process that exits
    child = subprocess.run([sys.executable, "-c", (
        "import sys\nfrom pathlib import Path\nfrom posttrain.sandbox._uids import claim_uid\n"
        f"print(claim_uid(Path({str(registry)!r})).uid)")], capture_output=True, text=True, check=True)  # fmt: skip
    stale = int(child.stdout)
    assert stale != a.uid and (registry / str(stale)).is_dir()
    fd = _try(registry / str(stale))
    assert fd is not None
    os.close(fd)
    a.release()
    assert not (registry / str(a.uid)).exists()


def test_two_pools_claim_different_uids():
    with open_pool(size=1) as p, open_pool(size=1) as q:
        assert not {s.claim.uid for s in p._all_z + p._all_x} & {s.claim.uid for s in q._all_z + q._all_x}
