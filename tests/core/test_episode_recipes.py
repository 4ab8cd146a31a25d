"""Recipes with multi-turn episodes, checked when the recipe is parsed (before any work): the model's
positions must hold a whole episode, and tool episodes need tasks of a domain that has them."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.errors import ConfigError
from posttrain.train.recipe import OBSERVATION_TOKENS, load_recipe

ROOT = Path(__file__).resolve().parents[2]


def test_position_check_counts_every_turn_of_an_episode():
    # tiny-repair: prompts of at most 20 tokens (BOS included; the repair family shows a bare
    # signature), 3 attempts of 20 tokens. One answer needs 20 + 20 = 40 positions; a repair episode
    # 20 + 3 * 20 + 2 observations.
    need = 20 + 3 * 20 + 2 * OBSERVATION_TOKENS
    with pytest.raises(ConfigError, match=rf"model.max_positions: the model has 300 positions, the recipe needs "
                                          rf"{need}: .*\.episodes: repair episode"):
        load_recipe(ROOT / "configs" / "tiny-repair.yaml", ["model.max_positions=300"])
    load_recipe(ROOT / "configs" / "tiny-repair.yaml", [f"model.max_positions={need}"])
    # a token budget bounds the episode: 20 + 120 fits in 300
    load_recipe(ROOT / "configs" / "tiny-repair.yaml",
                ["model.max_positions=300", "rl.max_episode_tokens=120", "eval.episodes=single"])


def test_tool_episodes_need_tool_tasks():
    with pytest.raises(ConfigError, match=r"rl.episodes: agent: task .* is of domain 'math', which builds no episode "
                                          r"environment"):
        load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml",
                    ["tasks.train=[{generator: math, n: 8}]"])
    with pytest.raises(ConfigError, match=r"eval.max_turns: 3 turns need multi-turn episodes"):
        load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml", ["eval.episodes=single"])
    # a workspace stacks a layer a step, and overlayfs mounts at most 500: refused before any work
    with pytest.raises(ConfigError, match=r"rl.max_turns: 401 turns: agent episodes take at most 400"):
        load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml", ["rl.max_turns=401"])
    load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml", ["rl.max_turns=400"])


def test_tool_episodes_need_a_chat_template(tmp_path):
    import json

    from posttrain.policy import build_embedded_default

    model = build_embedded_default(tmp_path / "m", spec=None)
    (model / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"rl.episodes: agent needs the model's chat template .*no chat template"):
        load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml",  # its embedded sizes do not size another model
                    [f"model.name={model}", "model.hidden_size=null", "model.max_positions=null"])


def test_bfcl_tool_episodes_on_ray_are_refused_at_parse_time():
    """BFCL's tools run in this machine's sandbox; on a Ray cluster that pool is not passed down yet,
    so the recipe is refused in one line before any work (was a ValueError traceback at the base eval)."""
    with pytest.raises(ConfigError, match=r"episodes: agent on bfcl tasks .* not yet on a Ray cluster; use sched.backend: local"):
        load_recipe(ROOT / "configs" / "tiny-bfcl.yaml", ["sched.backend=ray"])
    load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml", ["sched.backend=ray"])  # the tool domain has no sandbox


def test_staleness_with_lora_dropout_is_refused_at_parse_time():
    """Generation overlapping the update shares torch's random stream with LoRA dropout: refused."""
    sets = ["rl.max_staleness=1", "model.lora={r: 4, alpha: 8, dropout: 0.1}"]
    with pytest.raises(ConfigError, match=r"rl.max_staleness: 1 .* model.lora.dropout 0.1"):
        load_recipe(ROOT / "configs" / "tiny-grpo.yaml", sets)
    load_recipe(ROOT / "configs" / "tiny-grpo.yaml", ["rl.max_staleness=1", "model.lora={r: 4, alpha: 8}"])


def test_tool_is_agents_former_name_with_one_deprecation_line(capsys):
    """rl.episodes / eval.episodes: tool is accepted for one release as agent (one line on stderr
    naming the key); the configs say agent."""
    recipe = load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml", ["rl.episodes=tool", "eval.episodes=tool"])
    assert (recipe.rl.episodes, recipe.eval.episodes) == ("agent", "agent")
    err = capsys.readouterr().err
    assert "rl.episodes: tool is now called agent" in err and "eval.episodes: tool is now called agent" in err
    with pytest.raises(ConfigError, match="rl.episodes"):
        load_recipe(ROOT / "configs" / "tiny-tool-episodes.yaml", ["rl.episodes=tools"])
