"""A numeric recipe field whose huge value would loop or allocate before any of its stage's work is
refused when the recipe is parsed, in one line naming the field.

Found by sweeping every numeric field without an upper bound at 10**30 (1e30 for floats) through
load_recipe, make_pools, prepare_run_dir and the run header, then through run_recipe until the
field's stage wrote its first metrics row (outside the suite; the commit gives the figures). A huge
count that is simply run (``rl.steps``, ``sft.epochs``, ``dpo.epochs``) is work, and stays allowed.
"""

from __future__ import annotations

import pytest

from posttrain.config import parse_config
from posttrain.errors import ConfigError
from posttrain.train.recipe import Recipe


def test_ray_rollout_workers_are_bounded() -> None:
    """RayRollout starts one actor per worker (``num_cpus=0``: none waits) in a list comprehension at
    the RL stage's start: 10**30 built it forever, after SFT had run."""
    with pytest.raises(ConfigError, match=r"^sched.rollout_workers: expected an integer in \[1, 256\], got 10{30}$"):
        parse_config(Recipe, {"sched": {"backend": "ray", "rollout_workers": 10**30}})
    assert parse_config(Recipe, {"sched": {"backend": "ray", "rollout_workers": 256}}).sched.rollout_workers == 256


@pytest.mark.parametrize(("section", "value", "message"), [
    ("rl", 1e-38, r"^rl.temperature: expected a number in \[1e-05, 10\], got 1e-38$"),
    ("pairs", 1e-9, r"^pairs.temperature: expected a number in \[1e-05, 10\], got 1e-09$"),
    ("eval", 1e-38, r"^eval.temperature: expected 0 \(greedy\) or a number >= 1e-05, got 1e-38$"),
])
def test_a_temperature_a_sampler_refuses_is_refused_at_parse(section: str, value: float, message: str) -> None:
    """A temperature in (0, 1e-5) passed the recipe and was refused by the sampler at the stage that
    sampled (logits / T overflowed): after SFT, or after the whole run for eval."""
    with pytest.raises(ConfigError, match=message):
        parse_config(Recipe, {section: {"temperature": value}})
    assert parse_config(Recipe, {section: {"temperature": 1e-5}})
    assert parse_config(Recipe, {"eval": {"temperature": 0, "samples_per_task": 1}}).eval.temperature == 0


def test_greedy_eval_takes_one_sample_per_task() -> None:
    """As ``posttrain eval --n N --temperature 0`` (0423da9): a recipe's greedy eval with 4 samples per
    task (the default) ran and counted one answer four times in the seesaw gate's intervals."""
    with pytest.raises(ConfigError, match=r"^eval.samples_per_task: expected 1 with eval.temperature 0 .*, got 4$"):
        parse_config(Recipe, {"eval": {"temperature": 0}})
