"""Shared fixtures: one real sandbox pool for the module's code-verifier tests."""

from __future__ import annotations

import pytest


def _pool(size: int):
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        return open_pool(size=size)
    except HostCannotIsolate as e:  # the sandbox says what is missing; the code verifier needs it
        pytest.skip(f"this host cannot run the sandbox: {e}")


@pytest.fixture(scope="session")
def pool():
    with _pool(2) as p:
        yield p


@pytest.fixture(scope="module")
def pool1():
    """A pool of one slot: every episode's jobs run in the same exec slot."""
    with _pool(1) as p:
        yield p


@pytest.fixture(scope="session")
def code_verifier(pool):
    from posttrain.envs import get_domain

    return get_domain("code").make_verifier(pool)
