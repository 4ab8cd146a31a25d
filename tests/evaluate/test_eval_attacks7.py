"""Adversarial reads of evaluation honesty: a model that sends the verifier into infra errors on the
tasks it fails (infra is attrition, left out of pass@1's denominator) is judged by a regression gate
as if those samples had failed."""

from __future__ import annotations

import contextlib
import io

from posttrain.evaluate.baseline import compare
from posttrain.evaluate.records import EvalRecord
from posttrain.evaluate.summary import summarize


def _records(outcomes: dict[str, list[str]], domain: str = "math") -> list[EvalRecord]:
    """``{task_id: [outcome of sample 0, 1, ...]}`` as first-attempt records."""
    return [EvalRecord(f"{domain}-{t}", domain, o, None if o == "infra_error" else float(o == "pass"), sample_idx=s)
            for t, per in outcomes.items() for s, o in enumerate(per)]


def _summary(outcomes: dict[str, list[str]], domain: str = "math") -> dict:
    return summarize(_records(outcomes, domain), ks=(1,), n_boot=300)


# the baseline passes 20 of 40 tasks; the current model passes 5 of them and fails the other 35
BASE = {f"m{i}": ["pass" if i < 20 else "fail"] for i in range(40)}
HONEST = {f"m{i}": ["pass" if i < 5 else "fail"] for i in range(40)}
CRASHES = {t: ["infra_error" if o == ["fail"] else o[0]] for t, o in HONEST.items()}  # its fails sent into infra


def test_infra_errors_on_the_tasks_a_model_fails_do_not_pass_a_gate():
    base = _summary(BASE)
    assert compare(_summary(HONEST), base)["regressions"] == ["math", "overall"]
    cheat = _summary(CRASHES)
    # the rates still leave infra out (attrition, not failures): pass@1 1.0 over the 5 tasks scored
    assert cheat["pass@1"] == 1.0 and cheat["n_tasks"] == 5 and cheat["infra_dropped_tasks"] == 35
    assert cheat["task_set"] == base["task_set"]  # infra-dropped tasks are in: compared as the same tasks
    assert cheat["infra_as_fail"]["pass@1"] == 5 / 40
    gate = compare(cheat, base)
    # was regressions [] and delta +0.5: the regression read as a gain
    assert gate["regressions"] == ["math", "overall"]
    row = gate["overall"]
    assert row["regressed"] and row["delta"] == 0.5
    assert row["note"].startswith("regressed with its infra-dropped samples counted as failures (pass@1 0.125 [")


def test_a_domain_whose_every_sample_was_an_infra_error_is_judged():
    base = summarize([*_records(BASE), *_records(BASE, "code")], ks=(1,), n_boot=300)
    gone = {t: ["infra_error"] for t in BASE}
    cur = summarize([*_records(BASE), *_records(gone, "code")], ks=(1,), n_boot=300)
    assert "pass@1" not in cur["per_domain"]["code"]
    row = compare(cur, base)["per_domain"]["code"]
    # was regressed False, note "pass@1 missing on one side": a whole domain lost, the gate passed
    assert row["regressed"] and row["delta"] is None and "infra-dropped samples counted as failures" in row["note"]
    from posttrain.cli.evaluate import _print_block

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _print_block("eval", {**cur, "baseline": compare(cur, base)})
    line = next(x for x in out.getvalue().splitlines() if "vs baseline code" in x)
    assert "REGRESSED: regressed with its infra-dropped samples counted as failures" in line


def test_an_honest_model_with_a_few_infra_errors_is_not_flagged():
    base = _summary(BASE)
    flaky = {t: (["infra_error"] if t in ("m0", "m30") else o) for t, o in BASE.items()}
    cur = _summary(flaky)
    assert cur["infra_as_fail"]["pass@1"] == 19 / 40
    gate = compare(cur, base)
    assert gate["regressions"] == [] and not gate["overall"]["regressed"]
    assert "infra_as_fail" not in _summary(BASE)  # nothing lost: no such figure

