"""The conformance suite's reward checks (issue 21, reward item 7: failing differently never pays):
a no-op that totals more than 0 under some weighting a recipe can set, or an exploit that pays more
than an honest failure can, is a problem of the domain. Here the plugin domain's own verdicts pass,
and the same verdicts doctored as the tool domain's no-op (format 1 for no call) and the code
domain's answer by call count (format 1, process 1: its first pass passed every assertion) paid
before issue 21's fixes are named."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from posttrain.envs.conformance import WEIGHTINGS, beats_an_honest_failure, check_exploits, check_generated
from posttrain.types import Verdict
from posttrain.verify.rewards import RewardWeights

PLUGIN = Path(__file__).resolve().parent / "plugin"


def _reverse():
    sys.path.insert(0, str(PLUGIN))
    try:
        import reverse_domain
    finally:
        sys.path.remove(str(PLUGIN))
    return reverse_domain.ENV


def _doctored(env, **components: float):
    """``verify_pairs`` whose failures carry ``components`` (as a lax verifier's would)."""
    verify = env.make_verifier(None)

    def verify_pairs(pairs):
        out = []
        for task, response in pairs:
            v = verify(task, response)
            if v.outcome == "fail":
                v = dataclasses.replace(v, components={**v.components, **components})
            out.append(v)
        return out

    return verify_pairs


def test_honest_verdicts_pay_nothing_to_no_ops_and_exploits() -> None:
    env = _reverse()
    assert check_generated(env, _doctored(env)) == [] and check_exploits(env, _doctored(env)) == []


def test_a_no_op_with_format_credit_is_a_problem() -> None:
    env = _reverse()
    problems = check_generated(env, _doctored(env, format=1.0))
    assert problems and all("no-op response" in p and "expected exactly 0" in p for p in problems), problems
    # exploits may keep what a well-formed wrong answer earns
    assert check_exploits(env, _doctored(env, format=1.0)) == []


def test_an_exploit_paid_like_a_pass_of_every_check_is_a_problem() -> None:
    env = _reverse()
    problems = check_exploits(env, _doctored(env, format=1.0, process=1.0))
    assert len(problems) == 2 and all("pays more than an honest failure" in p for p in problems), problems


def test_the_weightings_cover_every_component_alone() -> None:
    """combine is linear in non-negative weights: a verdict that totals 0 under each component alone
    totals 0 under every mix; the weightings hold each alone, and the length term (never positive)."""
    alone = {name for w in WEIGHTINGS for name in ("outcome", "format", "process")
             if getattr(w, name) and all(getattr(w, o) == 0 for o in ("outcome", "format", "process") if o != name)}
    assert alone >= {"format", "process"} and RewardWeights() in WEIGHTINGS and any(w.length for w in WEIGHTINGS)
    assert beats_an_honest_failure(Verdict("fail", 0.0, components={"outcome": 0.0, "format": 1.0})) is None
    assert beats_an_honest_failure(Verdict("fail", 0.0, components={"outcome": 0.0, "process": 1.0}))


def test_a_crashed_reference_says_what_crashed() -> None:
    """An infra verdict's feedback is empty, its detail in evidence: the problem line shows the detail."""
    env = _reverse()

    def crashing(pairs):
        return [Verdict.infra("reverse verifier crashed: OSError: [Errno 24] Too many open files",
                              error_class="infra:verifier_crash") for _ in pairs]

    problems = [p for p in check_generated(env, crashing) if "reference of" in p]
    assert problems and all("OSError: [Errno 24] Too many open files" in p for p in problems), problems
