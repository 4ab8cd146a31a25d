"""A gate that judges many domains at once widens each judged interval (``family_widening``), so two
identical models fail it about 5% of the time in all, not once per domain at ~8% each; a clear drop is
still flagged, and a single comparison is judged as before."""

from __future__ import annotations

import numpy as np
import pytest

from posttrain.evaluate.baseline import _row, compare, compare_domains, family_widening
from posttrain.evaluate.records import EvalRecord
from posttrain.evaluate.summary import summarize


def _records(domain: str, passed: int, n: int) -> list[EvalRecord]:
    return [EvalRecord(f"{domain}-{t}", domain, *(("pass", 1.0) if t < passed else ("fail", 0.0))) for t in range(n)]


def _identical(seed: int, side: int) -> dict:
    """One side of two identical models: 10 domains x 20 tasks x 1 sample, every task at a 0.5 rate."""
    rng = np.random.default_rng([seed, side])
    return summarize([EvalRecord(f"d{d}-{t}", f"d{d}", *(("pass", 1.0) if rng.random() < 0.5 else ("fail", 0.0)))
                      for d in range(10) for t in range(20)], ks=(1,))


@pytest.fixture(scope="module")
def identical_pairs() -> list[tuple[dict, dict]]:
    return [(_identical(seed, 0), _identical(seed, 1)) for seed in range(9)]


def test_identical_ten_domain_models_are_not_flagged(identical_pairs):
    # each domain alone at the 95% intervals (the rule before): some domain flagged in 4 of these 9
    old = [seed for seed, (cur, base) in enumerate(identical_pairs)
           if any(_row(cur["per_domain"][d], base["per_domain"][d])["regressed"] for d in base["per_domain"])]
    assert len(old) >= 4
    for cur, base in identical_pairs:
        cmp, gate = compare(cur, base), compare_domains(cur, {"runs/base": base})
        assert cmp["regressions"] == [] and cmp["family"]["rows"] == 11
        assert gate["regressions"] == [] and gate["family"]["rows"] == 10


def test_a_clear_drop_among_ten_domains_is_still_flagged():
    rest = [r for d in range(1, 10) for r in _records(f"d{d}", 10, 20)]
    base = summarize(_records("d0", 40, 50) + rest, ks=(1,))  # 0.8 -> 0.3 over 50 tasks
    cur = summarize(_records("d0", 15, 50) + rest, ks=(1,))
    assert compare(cur, base)["regressions"] == ["d0"]
    assert compare_domains(cur, {"runs/base": base})["regressions"] == ["d0 (runs/base)"]


def _s(p: float, lo: float, hi: float, **domains: tuple[float, float, float]) -> dict:
    return {"pass@1": p, "ci": {"pass@1": [lo, hi]},
            "per_domain": {d: {"pass@1": v[0], "ci": {"pass@1": [v[1], v[2]]}} for d, v in domains.items()}}


def test_one_comparison_is_judged_at_the_stated_intervals_and_many_pay_for_it():
    assert family_widening(1) == 1.0 and family_widening(10) == pytest.approx(1.858, abs=1e-3)
    one = compare(_s(0.5, 0.4, 0.6, math=(0.5, 0.4, 0.6)), _s(0.75, 0.65, 0.85, math=(0.65, 0.55, 0.75)))
    assert one["family"] == {"rows": 1, "widening": 1.0}  # the overall of one domain is that domain again
    assert one["regressions"] == ["math", "overall"] and "current_judged_ci" not in one["overall"]
    # the same drop beside 9 unchanged domains is inside the widened intervals (the price of 11 rows)
    others = {f"d{i}": (0.5, 0.4, 0.6) for i in range(9)}
    many = compare(_s(0.5, 0.45, 0.55, math=(0.5, 0.4, 0.6), **others),
                   _s(0.52, 0.47, 0.57, math=(0.65, 0.55, 0.75), **others))
    assert many["family"]["rows"] == 11 and many["regressions"] == []
    assert many["per_domain"]["math"]["baseline_judged_ci"][0] == pytest.approx(0.65 - 0.1 * family_widening(11))
