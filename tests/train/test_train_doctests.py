"""The ``>>>`` examples of the trainer's batch, credit (GRPO's rewards) and SFT modules run and hold."""

import doctest
import importlib

import pytest

MODULES = ["posttrain.train._batch", "posttrain.train._credit", "posttrain.train.sft"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
