"""``model.name: ~/models/x``: the recipe's parse expands ``~`` to check the directory, and so does
the run when it loads it (``cli.pipeline.model_source``), as a task source's ``file`` is expanded.

Before, the parse accepted the directory and the run then passed ``~/models/x`` as written to
``from_pretrained``, which read it as a hub id: ``posttrain run`` stopped at its first load with
"cannot load model '~/models/x': OSError: Repo id must be in the form 'repo_name' or
'namespace/repo_name'". A ``~`` path that does not exist stays one line naming ``model.name``."""

from __future__ import annotations

import pytest

from posttrain.cli.pipeline import build_base, decide_chat
from posttrain.errors import ConfigError
from posttrain.policy import build_embedded_default
from posttrain.train.recipe import EMBEDDED_RECIPE, load_recipe


def test_a_model_under_home_is_loaded_where_the_parse_found_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    made = build_embedded_default(tmp_path / "home" / "models" / "x", seed=0)
    recipe = load_recipe(EMBEDDED_RECIPE, ["model.name=~/models/x"])
    assert recipe.model.name == "~/models/x"  # the recipe (and RUN/config.yaml) keeps what was written
    assert decide_chat(recipe, say=False).model.chat in (True, False)
    build_base(recipe, tmp_path / "base")
    assert (tmp_path / "base" / "model.safetensors").read_bytes() == (made / "model.safetensors").read_bytes()
    with pytest.raises(ConfigError, match=r": model\.name: no such model directory '~/models/nope'$"):
        load_recipe(EMBEDDED_RECIPE, ["model.name=~/models/nope"])


def test_the_run_header_reads_the_tokenizer_under_home(tmp_path, monkeypatch):
    """The header's tokenizer line read ``~/models/x`` as a hub id too: "tokenizer (loaded when the
    run starts)" in place of the tokenizer's own words."""
    from posttrain.cli._header import run_header

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    build_embedded_default(tmp_path / "home" / "models" / "x", seed=0)
    recipe = load_recipe(EMBEDDED_RECIPE, ["model.name=~/models/x"])
    [line] = [x for x in run_header(recipe, False, tmp_path / "run", [], [], resume=False) if x.startswith("tokenizer")]
    assert "loaded when the run starts" not in line, line
