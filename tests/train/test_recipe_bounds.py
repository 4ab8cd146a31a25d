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
