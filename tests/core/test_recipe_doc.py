"""docs/recipe.md is the typed recipe, generated (posttrain.cli.recipe_doc): in sync, complete, and
its minimal recipe (also in README) is a recipe that parses."""

from __future__ import annotations

import dataclasses
import doctest
import subprocess
import sys
from pathlib import Path

from posttrain.cli import recipe_doc
from posttrain.cli.recipe_doc import MINIMAL_RECIPE, REGENERATE, recipe_reference

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "recipe.md"


def test_docs_recipe_md_is_the_generated_reference() -> None:
    assert DOC.read_text() == recipe_reference(), f"docs/recipe.md is out of date with the recipe: run `{REGENERATE}`"


def test_every_key_of_the_recipe_has_a_row() -> None:
    from posttrain.train.recipe import Recipe

    text = recipe_reference()

    def keys(cls, prefix):
        for f in dataclasses.fields(cls):
            yield f"{prefix}{f.name}"
    assert all(f"| `{k}` |" in text for k in keys(Recipe, ""))
    assert "| `rl.group_size` | integer >= 1 | `8` | G: samples per task" in text
    assert "| `tasks.train[].skip` | integer >= 0 | `0` |" in text and "## `tasks.train[]`, `tasks.eval[]`" in text
    assert "| `reward[].function` | string | required |" in text and "| `reward.outcome` | number >= 0 |" in text


def test_the_minimal_recipe_parses_and_is_in_readme(tmp_path, monkeypatch) -> None:
    from posttrain.train.recipe import load_recipe

    monkeypatch.chdir(ROOT)  # its task file paths are relative to the checkout
    path = tmp_path / "recipe.yaml"
    path.write_text(MINIMAL_RECIPE)
    recipe = load_recipe(path)
    assert recipe.stages == ("sft", "rl") and recipe.sft.demonstrations == "references"
    assert MINIMAL_RECIPE.rstrip() in (ROOT / "README.md").read_text()


def test_check_mode_says_how_to_regenerate(tmp_path) -> None:
    stale = tmp_path / "recipe.md"
    stale.write_text("old\n")
    p = subprocess.run([sys.executable, "-m", "posttrain.cli.recipe_doc", "--check", str(stale)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 1 and REGENERATE in p.stderr and len(p.stderr.strip().splitlines()) == 1
    help_text = subprocess.run([sys.executable, "-m", "posttrain.cli", "run", "--help"], capture_output=True, text=True,
                               cwd=ROOT, timeout=120).stdout
    assert "docs/recipe.md" in help_text
    assert doctest.testmod(recipe_doc).failed == 0


def test_readme_starts_with_what_a_user_needs_first() -> None:
    """The two commands, a minimal recipe, a reward as a Python function, where every key is (issue 26)."""
    text = (ROOT / "README.md").read_text()
    sections = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert sections[:4] == ["Two commands", "A recipe", "A reward as a Python function", "Every key"], sections[:6]
    first = text.split("\n## ")[1]
    assert "posttrain run recipe.yaml" in first and "posttrain eval --run" in first
    assert "docs/recipe.md" in text.split("\n## ")[2] and "docs/recipe.md" in text.split("\n## ")[4]
    assert "reward: my_rewards:exact" in text.split("\n## ")[3]
