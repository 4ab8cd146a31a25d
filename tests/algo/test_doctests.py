"""The ``>>>`` examples in posttrain.algo docstrings run and hold."""

import doctest
import importlib

import pytest

MODULES = ["__init__", "advantages", "aggregate", "kl", "losses", "preference", "sft", "shaping", "stats", "value"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module("posttrain.algo" if name == "__init__" else f"posttrain.algo.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0, f"{module.__name__} has no example"
