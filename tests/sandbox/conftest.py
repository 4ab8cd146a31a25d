"""One sandbox pool per test module; the sandbox needs root, bwrap, cgroups and libseccomp."""

from __future__ import annotations

import pytest

from posttrain.sandbox import open_pool


@pytest.fixture(scope="module")
def pool():
    with open_pool(size=2) as p:
        yield p


@pytest.fixture(scope="module")
def pool1():
    """A one-slot pool: consecutive jobs land in the same slot (needed by 'next job' probes)."""
    with open_pool(size=1) as p:
        yield p
