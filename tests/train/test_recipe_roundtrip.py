"""RUN/config.yaml reads back as the recipe that was run: every text field, however much it looks
like a number, a bool, a null or a date, is the same string after write -> read.

The writer is the pipeline's (``prepare_run_dir``: ``config.dump_yaml`` of ``to_dict(recipe)``); the reader
is ``parse_yaml`` (YAML 1.2 numbers) then ``parse_config``. PyYAML's dumper quotes what YAML 1.1 reads
as another type, so ``0o17``, ``1e3``, ``-.5`` and ``1.5e3`` went out plain and came back 15, 1000.0,
-0.5 and 1500.0: a str field then refused its own run's config, and a ``Mapping[str, ...]`` key turned
into a float. Covered: tuple items, a scalar str field, mapping keys. The property over many awkward
strings in every str field runs outside the suite (the commit gives its count).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.cli.pipeline import prepare_run_dir
from posttrain.config import parse_config, parse_yaml
from posttrain.errors import ConfigError
from posttrain.train.recipe import Recipe

AWKWARD = ("0o17", "1e3", "-.5", "1.5e3", "+1e3", "0x1F", "yes", "off", "null", "~", "1:30", ".inf", "2026-12-06", "")


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Recipe:
    tasks = tmp_path_factory.mktemp("tasks") / "t.jsonl"
    tasks.write_text("")
    source = {"file": str(tasks), "split": "1e3"}
    return parse_config(Recipe, {
        "model": {"lora": {"target_modules": list(AWKWARD)}},
        "eval": {"baselines": list(AWKWARD)},
        "tasks": {"train": [source], "eval": [source],
                  "sampler": {"kind": "pool", "weights": {s: 1.0 for s in AWKWARD if s}}},
    })


def test_config_yaml_reads_back_as_the_recipe(recipe: Recipe, tmp_path: Path) -> None:
    prepare_run_dir(tmp_path, recipe, resume=False)
    saved = parse_yaml((tmp_path / "config.yaml").read_text(encoding="utf-8"))
    assert saved["eval"]["baselines"] == list(AWKWARD)
    assert list(saved["tasks"]["sampler"]["weights"]) == [s for s in AWKWARD if s]
    assert parse_config(Recipe, saved) == recipe


def test_a_model_path_under_an_unknown_home_is_one_line() -> None:
    """``model.name: ~nosuchuser/m`` raised RuntimeError from ``Path.expanduser`` (a traceback)."""
    with pytest.raises(ConfigError, match=r"^model.name: no such model directory '~nosuchuser/m' \(no home "
                                          r"directory for '~nosuchuser'\)$"):
        parse_config(Recipe, {"model": {"name": "~nosuchuser/m"}})
