"""Records that would make a score read higher than the evaluation gave: records of several
evaluations mixed into one file (the failed samples of one model, the re-sampled passes of
another), and samples whose records were left out (a failure's lines deleted by hand). Each is a
one-line ``UserError`` from ``summarize`` (``posttrain report``, ``eval --baseline FILE.jsonl``),
never a figure."""

from __future__ import annotations

import json

import pytest

from posttrain.errors import UserError
from posttrain.evaluate.records import EvalRecord, read_records
from posttrain.evaluate.summary import summarize


def _rec(task: int, outcome: str, sample: int, *, stage: str = "eval", step: int | None = None,
         version: str = "math@posttrain-0.1.0", domain: str = "math") -> EvalRecord:
    return EvalRecord(f"t{task}", domain, outcome, None if outcome == "infra_error" else float(outcome == "pass"),
                      sample_idx=sample, stage=stage, step=step, verifier_version=version)


def _honest() -> list[EvalRecord]:
    """4 tasks x 4 samples, 1 pass each: pass@1 0.25."""
    return [_rec(t, "pass" if s == 0 else "fail", s) for t in range(4) for s in range(4)]


def test_an_honest_evaluation_reads_its_score() -> None:
    s = summarize(_honest(), ks=(1,))
    assert s["pass@1"] == 0.25 and s["n_samples"] == 16


def test_samples_of_another_evaluation_mixed_in_are_refused() -> None:
    # the 3 failed samples of each task swapped for passes re-sampled at another checkpoint: read 1.0
    cherry = [r for r in _honest() if r.passed] + [_rec(t, "pass", s, step=200) for t in range(4) for s in (1, 2, 3)]
    with pytest.raises(UserError, match=r"several evaluations.*step 200.*step None"):
        summarize(cherry, ks=(1,))
    other_model = [r for r in _honest() if r.passed] + [_rec(t, "pass", s, stage="eval/rl") for t in range(4)
                                                        for s in (1, 2, 3)]
    with pytest.raises(UserError, match=r"several evaluations.*'eval'.*'eval/rl'"):
        summarize(other_model, ks=(1,))


def test_samples_scored_by_another_verifier_version_are_refused() -> None:
    # the failures re-verified by another (laxer) verifier version: one domain, two verifiers
    regraded = [r for r in _honest() if r.passed] + [_rec(t, "pass", s, version="math@posttrain-0.0.9")
                                                     for t in range(4) for s in (1, 2, 3)]
    with pytest.raises(UserError, match=r"domain 'math'.*2 verifier versions"):
        summarize(regraded, ks=(1,))
    # two domains, each its own verifier: one evaluation
    mixed = _honest() + [_rec(9, "pass", 0, domain="code", version="code@posttrain-0.1.0")]
    assert summarize(mixed, ks=(1,))["n_tasks"] == 5


def test_a_sample_left_out_of_the_records_is_refused(tmp_path) -> None:
    # samples 1 and 2 of task t0 (failures) deleted from the file: t0 read 2/2 instead of 1/4
    path = tmp_path / "records.jsonl"
    kept = [r for r in _honest() if not (r.task_id == "t0" and r.sample_idx in (1, 2))]
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in kept))
    with pytest.raises(UserError, match=r"task 't0' has samples \[0, 3\]; expected 0, 1, \.\.\. without gaps"):
        summarize(read_records(path), ks=(1,))


def test_infra_retries_and_infra_dropped_samples_are_no_gap() -> None:
    # a sample whose every try was an infra error keeps its records: attrition, counted, not a gap
    recs = _honest() + [_rec(0, "infra_error", 4), _rec(0, "infra_error", 4), _rec(1, "infra_error", 1)]
    s = summarize(recs, ks=(1,))
    assert s["infra_errors"] == 3 and s["infra_dropped_samples"] == 1 and s["n_samples"] == 16


def test_a_domain_whose_failures_are_infra_errors_says_so_on_its_line(capsys) -> None:
    from posttrain.cli.evaluate import _print_summary

    # math: 3 of 10 tasks pass, the other 7 send the verifier into infra errors; code: 10 honest tasks
    recs = [_rec(t, "pass" if t < 3 else "infra_error", s) for t in range(10) for s in range(2)]
    recs += [_rec(20 + t, "pass" if t < 5 else "fail", 0, domain="code", version="code@1") for t in range(10)]
    _print_summary(summarize(recs, ks=(1,)))
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "domain math" in x]
    assert "pass@1 1.000" in line and "infra as fail 0.300" in line, line
    assert "14 first attempts never scored, 7 tasks left out" in line, line


def test_the_reports_domain_table_shows_infra_as_fail_beside_pass_at_1(tmp_path) -> None:
    from posttrain.evaluate.records import write_records
    from posttrain.evaluate.report import write_report

    recs = [_rec(t, "pass" if t < 3 else "infra_error", s, stage="eval/rl") for t in range(10) for s in range(2)]
    recs += [_rec(20 + t, "pass" if t < 5 else "fail", 0, domain="code", version="code@1", stage="eval/rl")
             for t in range(10)]
    write_records(tmp_path / "run" / "eval" / "rl.jsonl", recs)
    html = write_report(tmp_path / "run").read_text(encoding="utf-8")
    section = html[html.index("<h3>Per domain</h3>"):]
    section = section[:section.index("</table>")]
    assert "<th>pass@1, infra as fail</th>" in section
    math_row = next(row for row in section.split("<tr>") if "<td>math</td>" in row)
    assert "<td>1.000" in math_row and "<td>0.300" in math_row, math_row  # summary: pass@1 1.0, infra as fail 0.3


def test_a_task_whose_records_disagree_on_its_domain_or_tags_is_refused() -> None:
    # one task id over two domains counted as a task in each domain (per_domain 2 tasks out of 1)
    two = [_rec(0, "pass", 0), _rec(0, "fail", 1, domain="code", version="code@1")]
    with pytest.raises(UserError, match=r"task 't0'.*domain 'code'.*'math'"):
        summarize(two, ks=(1,))
    # a canary whose failed sample lost its tag: the failure counted as a task of the rates, the pass a hack alarm
    canary = EvalRecord("c0", "math", "pass", 1.0, sample_idx=0, tags=("canary",), stage="eval", verifier_version="math@1")
    untagged = EvalRecord("c0", "math", "fail", 0.0, sample_idx=1, stage="eval", verifier_version="math@1")
    with pytest.raises(UserError, match=r"task 'c0'.*tags"):
        summarize([canary, untagged, _rec(1, "pass", 0, version="math@1")], ks=(1,))
