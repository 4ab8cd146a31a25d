"""The ``>>>`` examples of the sampler, trajectory and runner modules run and hold."""

import doctest
import importlib

import pytest

MODULES = ["posttrain.types", "posttrain.policy._sampling", "posttrain.policy._sampler", "posttrain.policy._endpoint",
           "posttrain.policy._embedded", "posttrain.rollout._runner", "posttrain.rollout._limits"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
