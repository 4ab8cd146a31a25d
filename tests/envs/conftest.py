"""Shared fixtures: one real sandbox pool for the module's code-verifier tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def pool():
    from posttrain.sandbox import HostCannotIsolate, open_pool

    try:
        p = open_pool(size=2)
    except HostCannotIsolate as e:  # the sandbox says what is missing; the code verifier needs it
        pytest.skip(f"this host cannot run the sandbox: {e}")
    with p:
        yield p


@pytest.fixture(scope="session")
def code_verifier(pool):
    from posttrain.envs import get_domain

    return get_domain("code").make_verifier(pool)
