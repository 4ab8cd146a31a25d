"""Every escape probe of ``posttrain sandbox selftest`` is contained (run inside the real sandbox)."""

from __future__ import annotations

import pytest

from posttrain.sandbox._probes import PROBES, HostCanaries


@pytest.fixture(scope="module")
def canaries():
    with HostCanaries.start() as c:
        yield c


@pytest.mark.parametrize("name", list(PROBES))
def test_probe_contained(pool1, canaries, name):
    assert PROBES[name](pool1, canaries) is None
