"""Shared fixtures: one real sandbox pool for the service's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def pool():
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        p = open_pool(size=2)
    except HostCannotIsolate as e:
        pytest.skip(f"this host cannot run the sandbox: {e}")
    with p:
        yield p
