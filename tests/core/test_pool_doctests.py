"""The ``>>>`` examples in posttrain.tasks' pool modules run and hold."""

import doctest
import importlib

import pytest

MODULES = ["_canary", "_decontaminate", "_difficulty", "_metrics", "_pool", "_refill"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(f"posttrain.tasks.{name}"))
    assert result.failed == 0 and result.attempted > 0
