"""The check every host-copy attack on the repo fixture makes (test_repo_attacks6/7): each response,
taking ``total`` from a planted copy of the fixture's project, fails as the candidate's own, and the
honest fix passes beside them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.envs import get_domain
from posttrain.envs.repo import ENV, response_of
from posttrain.envs.repo._diff import render_diff
from posttrain.envs.repo._hacks import PRICING, fixture_record


def assert_each_fails_and_the_fix_passes(pool: Any, attacks: Mapping[str, str]) -> None:
    """``attacks``: name -> the source written over shop/pricing.py."""
    verify = get_domain("repo").make_verifier(pool)
    task = ENV.parse_task(fixture_record(), "t")
    for name, source in attacks.items():
        v = verify(task, response_of(render_diff({"shop/pricing.py": PRICING}, {"shop/pricing.py": source})))
        assert v.outcome == "fail" and v.reward == 0.0, (name, v.outcome, v.error_class, v.feedback)
    honest = verify(task, str(task.reference))
    assert honest.outcome == "pass", honest.feedback
