"""The ``>>>`` examples in posttrain.evaluate docstrings run and hold."""

import doctest
import importlib

import pytest

MODULES = ["_domains", "_svg", "baseline", "decontaminate", "loggers", "metrics", "report", "sources", "summary",
           "views"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (report's example writes a run directory)
    module = importlib.import_module(f"posttrain.evaluate.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0, f"{module.__name__} has no example"
