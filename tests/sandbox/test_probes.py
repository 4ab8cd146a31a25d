"""Every escape probe of ``posttrain sandbox selftest`` is contained (run inside the real sandbox)."""

from __future__ import annotations

import pytest

from posttrain.sandbox import Execution, _probes_fair
from posttrain.sandbox._probes import FROM_CONFORMANCE, PROBES, HostCanaries, _leaks
from posttrain.sandbox.conformance import check_invariants


@pytest.fixture(scope="module")
def canaries():
    with HostCanaries.start() as c:
        yield c


# Tested elsewhere: the conformance ones in test_between_jobs, issue 21's in test_starvation,
# test_fresh_fs and test_uids.
@pytest.mark.parametrize("name", [n for n in PROBES if n not in FROM_CONFORMANCE | set(_probes_fair.PROBES)])
def test_probe_contained(pool1, canaries, name):
    assert PROBES[name](pool1, canaries) is None


def test_the_selftest_runs_issue_21s_probes():
    assert set(_probes_fair.PROBES) == {"self_starvation", "slow_wipe", "inode_channel", "per_user_counters"}
    assert set(_probes_fair.PROBES) <= set(PROBES)


def _ex(stdout: bytes, outcome: str = "ok") -> Execution:
    return Execution(outcome, 0, None, stdout, b"", False, False, 0.0, None, False, False, None)


def test_probe_verdicts_can_fail():
    # The probes print LEAK for what got through and DONE when they finished: both are checked.
    assert _leaks(_ex(b"DONE\n"), "x") is None
    assert _leaks(_ex(b"LEAK wrote /usr/x\nDONE\n"), "x") is not None
    assert _leaks(_ex(b""), "x") is not None  # a probe that died early proves nothing
    assert _leaks(Execution.infra("slot died"), "x") is not None


def test_conformance_invariants_reject_lies():
    assert check_invariants(_ex(b"")) is None
    assert check_invariants(Execution("ok", 1, None, b"", b"", False, False, 0.0, None, False, False, None))
    assert check_invariants(Execution("ok", 0, None, b"", b"", False, False, 0.0, None, True, False, None))
    assert check_invariants(
        Execution("infra_error", 0, None, b"", b"", False, False, 0.0, None, False, False, None)
    )
