"""Recipe parsing: unknown keys, wrong types and invalid combinations fail before any work."""

import subprocess
import sys

import pytest

from posttrain.errors import ConfigError
from posttrain.train.recipe import EMBEDDED_RECIPE, Recipe, load_recipe


def test_embedded_recipe_parses():
    r = load_recipe(EMBEDDED_RECIPE)
    assert isinstance(r, Recipe)
    assert r.rl.group_size >= 2 and r.stages == ("sft", "rl")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("rl.stepz=3", "unknown key 'rl.stepz' (did you mean 'steps'?)"),
        ("rl.steps=abc", "rl.steps: expected an integer, got 'abc'"),
        ("rl.lr=true", "rl.lr: expected a number"),
        ("rl.group_size=1", "rl.group_size"),
        ("rl.policy_loss=gspo", "seq_mean_token_mean"),
        ("rl.advantage=reinforce_plue_plus", "rl.advantage: expected one of"),
        ("tasks.domains=[math,math]", "duplicate domain"),
        ("demonstrator.error_rate=1.5", "demonstrator.error_rate"),
        ("rl=3", "rl: expected a mapping"),
        ("bogus=1", "unknown key 'bogus'"),
        ("rl.reward_model_weight=0.5", "needs the rm stage before the rl stage"),
        ("stages=[sft,rl,sft]", "each stage may run once"),
        ("model.dtype=float16", "model.dtype: expected one of"),
        ("rl.scale_by_std=maybe", "rl.scale_by_std"),
    ],
)
def test_bad_recipe_values_are_named(override, needle):
    with pytest.raises(ConfigError) as e:
        load_recipe(EMBEDDED_RECIPE, [override])
    assert needle in str(e.value)
    assert str(EMBEDDED_RECIPE) in str(e.value)


def test_missing_recipe_file(tmp_path):
    with pytest.raises(ConfigError, match="recipe file not found"):
        load_recipe(tmp_path / "nope.yaml")


def test_cli_bad_recipe_exits_2_before_any_work(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("rl:\n  steps: 10\n  clip_hihg: 0.3\n")
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "posttrain.cli", "run", str(bad), "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 2
    assert "unknown key 'rl.clip_hihg' (did you mean 'clip_high'?)" in p.stderr
    assert not out.exists()  # nothing was started


def test_help_lists_commands():
    p = subprocess.run([sys.executable, "-m", "posttrain.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    for cmd in ("quickstart", "run", "sandbox", "verify", "tasks", "eval", "report", "audit", "bench"):
        assert cmd in p.stdout


def test_second_quickstart_gets_a_new_default_directory(tmp_path):
    from posttrain.train.cli import _unused_dir

    base = tmp_path / "quickstart"
    assert _unused_dir(base) == base
    base.mkdir()
    assert _unused_dir(base) == base  # an empty directory holds no run
    (base / "config.yaml").write_text("seed: 0\n")
    assert _unused_dir(base) == tmp_path / "quickstart-2"
    (tmp_path / "quickstart-2").mkdir()
    (tmp_path / "quickstart-2" / "config.yaml").write_text("seed: 0\n")
    assert _unused_dir(base) == tmp_path / "quickstart-3"
