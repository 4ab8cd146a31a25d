"""The local backend passes every conformance property (posttrain/sandbox/conformance.py)."""

from __future__ import annotations

import pytest

from posttrain.sandbox.conformance import CHECKS


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_conformance(pool, name):
    assert CHECKS[name](pool) is None
