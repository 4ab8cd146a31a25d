"""Every reasoning-gym generator (0.1.25, 106 of them) as a posttrain domain ``rg/<generator>``.

>>> from posttrain.envs import get_domain
>>> env = get_domain("rg/basic_arithmetic")
>>> env.name, env.level_range(), env.capabilities()
('rg/basic_arithmetic', (0, 4), ('reasoning', 'math', 'arithmetic'))

The registry lists these domains through ``PROVIDER`` (``posttrain.envs._registry.NAMESPACES``),
whose names come from a static table (``_names.py``), so listing domains imports neither
reasoning-gym nor its 106 modules; a domain imports reasoning-gym when it first generates or
parses a task, and its checks run in a worker process that imports it once.

- ``_names.py``: the generators, their categories and usable curriculum levels;
- ``_domain.py``: ``RgDomain`` (parse, render, verifier, no-op, levels, capabilities, canaries);
- ``_check.py``: the check (strict answer extraction, the generator's scorer, binary reward);
- ``_hardened.py``: the generators whose scorers passed an exploit, and their fixes;
- ``_life.py``: game_of_life_halting's boards, drawn by posttrain and answered by simulation;
- ``_config.py``, ``_generate.py``, ``_solvers.py``, ``_fixtures.py``: configurations, entries
  (balanced: no constant or copied number passes over a quarter of them), references for generators
  that store none, exploit fixtures.

In a recipe: ``{generator: rg/countdown, n: 200, level: 1}`` or with ``params: {...}``
(posttrain.tasks.TaskSource).
"""

from __future__ import annotations

from posttrain.envs.rg._domain import RgCanaryDomain, RgDomain, make_rg_verifier, rg_domain
from posttrain.envs.rg._names import GENERATORS, NO_CANARIES, VERSION


class _Provider:
    """The ``rg`` namespace of the registry: names without importing, a domain per name."""

    def names(self) -> tuple[str, ...]:
        return tuple(GENERATORS)

    def domain(self, name: str) -> RgDomain:
        return rg_domain(name)


PROVIDER = _Provider()

__all__ = ["GENERATORS", "NO_CANARIES", "PROVIDER", "VERSION", "RgCanaryDomain", "RgDomain", "make_rg_verifier",
           "rg_domain"]
