"""Adversarial reads of evaluation honesty: a model that sends the verifier into infra errors on the
tasks it fails (infra is attrition, left out of pass@1's denominator) is judged by a regression gate
as if those samples had failed; an evaluation sampled with other settings than its baseline (greedy
against temperature 1, 512 tokens against 24) is not read as the same comparison."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

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
    # the per-domain list left the domain out (only domains with a pass@1 were printed)
    assert "  domain code                  no pass@1: every first attempt an infra error (40 tasks)" in out.getvalue()


def test_an_honest_model_with_a_few_infra_errors_is_not_flagged():
    base = _summary(BASE)
    flaky = {t: (["infra_error"] if t in ("m0", "m30") else o) for t, o in BASE.items()}
    cur = _summary(flaky)
    assert cur["infra_as_fail"]["pass@1"] == 19 / 40
    gate = compare(cur, base)
    assert gate["regressions"] == [] and not gate["overall"]["regressed"]
    assert "infra_as_fail" not in _summary(BASE)  # nothing lost: no such figure


# -- a baseline sampled otherwise ---------------------------------------------------------------------


def _run_baseline(tmp_path):
    """A run's summary.json as the pipeline writes it: the held-out pass@1 of each model, the settings
    (eval_protocol: the recipe's eval defaults, temperature 1.0 and 24 tokens) stated once beside them."""
    run = tmp_path / "run"
    run.mkdir()
    protocol = {"split": "held-out", "samples_per_task": 1, "temperature": 1.0, "max_new_tokens": 24}
    (run / "summary.json").write_text(json.dumps({"eval": {"rl": _summary(BASE)}, "eval_protocol": protocol}))
    return run


def _cli_protocol(*argv: str) -> dict:
    """The eval_protocol ``posttrain eval`` states for these flags (``_score`` puts it in the summary)."""
    import argparse

    from posttrain.cli._eval import _protocol, _resolve_length, _validate_sampling
    from posttrain.cli.evaluate import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["eval", *argv])
    _resolve_length(args)
    _validate_sampling(args)
    return _protocol(args, [])


def test_a_baseline_sampled_with_other_settings_is_not_judged(tmp_path):
    from posttrain.evaluate.baseline import load_baseline

    base = load_baseline(_run_baseline(tmp_path))
    assert base["eval_protocol"]["temperature"] == 1.0  # the run's settings come with its entry
    # the documented CI check: posttrain eval --model ckpt --baseline runs/prev (greedy, 512 tokens by default)
    greedy = _cli_protocol("--model", "ckpt")  # no --suite, --tasks or --run: raised TypeError on Path(None)
    assert (greedy["temperature"], greedy["max_new_tokens"]) == (0.0, 512)
    # the model regressed (15 of 40 where the baseline had 20 at temperature 1), greedy with room reads 22
    cur = {**_summary({f"m{i}": ["pass" if i < 22 else "fail"] for i in range(40)}), "eval_protocol": greedy}
    gate = compare(cur, base)
    # was comparable, delta +0.05, regressions []: another rate read as the same one
    assert gate["not_comparable"] == ["math", "overall"]
    assert gate["regressions"] == ["math (different settings)", "overall (different settings)"]
    row = gate["overall"]
    assert row["comparable"] is False and not row["regressed"]
    assert row["note"] == ("different settings (temperature: current 0.0, baseline 1.0; max_new_tokens: current 512, "
                           "baseline 24); not judged")
    alike = {**cur, "eval_protocol": _cli_protocol("--model", "ckpt", "--temperature", "1", "--max-new-tokens", "24",
                                                   "--n", "4", "--seed", "3")}
    same = compare(alike, base)  # sampled alike (other draws, more of them): judged
    assert same["not_comparable"] == [] and same["regressions"] == [] and same["overall"]["delta"] == pytest.approx(0.05)
    from posttrain.evaluate.baseline import compare_domains

    seesaw = compare_domains(cur, {"runs/prev": base})
    assert seesaw["regressions"] == ["math (runs/prev) (different settings)"]
    assert compare(_summary(BASE), base)["not_comparable"] == []  # a side that states no settings: as before
    # two posttrain eval results: agent episodes (several tool turns) against single answers
    single = {**_summary(BASE), "eval_protocol": _cli_protocol("--model", "ckpt")}
    agent = {**cur, "eval_protocol": _cli_protocol("--model", "ckpt", "--episodes", "agent")}
    assert compare(agent, single)["regressions"] == ["math (different settings)", "overall (different settings)"]
    assert compare(agent, single)["overall"]["note"] == ("different settings (episodes: current 'agent', baseline "
                                                         "None); not judged")
    assert compare({**single, "eval_protocol": _cli_protocol("--model", "ckpt", "--max-attempts", "3")},
                   single)["not_comparable"] == []  # repair: the same first attempts (pass@1 is theirs)


def _run_dir(root, name: str, npass: int, temperature: float, max_new_tokens: int):
    run = root / name
    run.mkdir()
    protocol = {"samples_per_task": 1, "temperature": temperature, "max_new_tokens": max_new_tokens}
    summary = _summary({f"m{i}": ["pass" if i < npass else "fail"] for i in range(40)})
    (run / "summary.json").write_text(json.dumps({"eval": {"rl": summary}, "eval_protocol": protocol}))
    return run


def test_the_report_says_when_its_evaluations_were_sampled_otherwise(tmp_path):
    from posttrain.evaluate.report import write_report

    greedy = _run_dir(tmp_path, "greedy", 22, 0.0, 512)
    sampled = _run_dir(tmp_path, "sampled", 20, 1, 24)  # a recipe's temperature 1: the same as 1.0
    html = write_report([greedy, sampled], tmp_path / "compare.html").read_text()
    # was two bars on the same axes, 0.550 and 0.500, and no word of how each was sampled
    assert ("<b>not comparable:</b> these evaluations were sampled with different settings (temperature: "
            "greedy: rl 0.0, sampled: rl 1; max_new_tokens: greedy: rl 512, sampled: rl 24)") in html
    alike = _run_dir(tmp_path, "alike", 22, 1.0, 24)
    assert "sampled with different settings" not in write_report([alike, sampled], tmp_path / "same.html").read_text()


def test_episode_figures_of_an_evaluation_with_no_scored_first_attempt_are_none():
    from posttrain.evaluate.sources import episode_figures

    # every first attempt an infra error: the summary has no pass@1; a repair evaluation's figures
    # raised KeyError 'pass@1' (posttrain eval, and the pipeline's evaluation after training)
    s = _summary({f"m{i}": ["infra_error"] for i in range(3)})
    assert "pass@1" not in s and s["infra_as_fail"]["pass@1"] == 0.0
    f = episode_figures({**s, "max_attempts": 1}, [{"turns": 1.0, "episodes": 3.0}], max_attempts=3)
    assert f["first_attempt_pass_rate"] is None and f["post_repair_pass_rate"] is None and f["turns"] == 1.0


def test_the_report_and_the_printed_summary_show_pass_at_1_with_infra_as_fail():
    from posttrain.cli.evaluate import _print_block
    from posttrain.evaluate.report import _eval_table

    base, cheat = _summary(BASE), _summary(CRASHES)
    html = _eval_table({"base": base, "rl": cheat})
    # was rl's pass@1 1.000 beside base's 0.500, with "35" in the infra errors column the only hint
    assert "<th>pass@1, infra as fail</th>" in html and "<td>0.125 <span" in html
    assert "infra as fail" not in _eval_table({"base": base})  # nothing lost: no column
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _print_block("eval", cheat)
    assert "  pass@1, infra as fail        0.125 [" in out.getvalue() and "(35 first attempts never scored)" in out.getvalue()


def test_pass_hat_k_and_repair_at_r_with_infra_as_fail():
    # 10 samples a task: 5 pass, and the 5 the model fails it sends into infra errors
    s = summarize(_records({f"m{i}": ["pass"] * 5 + ["infra_error"] * 5 for i in range(2)}), ks=(1, 2), n_boot=100)
    assert s["pass^2"] == 1.0 and s["pass@1"] == 1.0  # the rates leave infra out (attrition), as documented
    assert s["infra_as_fail"]["pass^2"] == pytest.approx(10 / 45) and s["infra_as_fail"]["pass@1"] == 0.5
    # repair: every first attempt fails; 2 of 10 repairs pass and the other 8 end in infra errors
    recs = [EvalRecord(f"r{t}", "code", "fail", 0.0, sample_idx=i) for t in range(2) for i in range(10)]
    recs += [EvalRecord(f"r{t}", "code", "pass" if i < 2 else "infra_error", 1.0 if i < 2 else None, sample_idx=i,
                        attempt=1, feedback_source="error") for t in range(2) for i in range(10)]
    r = summarize(recs, ks=(1,), n_boot=100)
    assert r["repair@1"] == 1.0  # Kaplan-Meier: the 8 are censored, the 2 seen all passed
    assert r["infra_as_fail"]["repair@1"] == pytest.approx(0.2) and r["infra_as_fail"]["pass@1"] == 0.0
    from posttrain.cli.evaluate import _print_block

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _print_block("eval", r)
    assert "  repair@1, infra as fail      0.200" in out.getvalue() and "(16 infra errors)" in out.getvalue()


def test_a_whole_run_evaluation_fails_the_gate_on_any_checkpoints_regression():
    import doctest

    import posttrain.cli.evaluate as cli

    # posttrain eval --run RUN --baseline B --fail-on-regression: a whole run's summary is {"eval": {name:
    # summary}}, each with its own comparison; the gate read summary["baseline"] (none there) and exited
    # 0 with both checkpoints REGRESSED (/tmp script: tiny model, 2 HumanEval tasks, records baseline 2/2)
    base = _summary(BASE)
    whole = {"eval": {"base": {**base, "baseline": compare(base, base)},
                      "rl": {**_summary(HONEST), "baseline": compare(_summary(HONEST), base)}},
             "eval_protocol": {"temperature": 0.0}}
    assert cli.regressions_of(whole) == ["rl: math", "rl: overall"]
    assert cli.regressions_of({**base, "baseline": compare(base, base)}) == []
    runner = doctest.DocTestRunner()
    for example in doctest.DocTestFinder().find(cli.regressions_of, globs={"regressions_of": cli.regressions_of}):
        runner.run(example)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted == 1


def test_the_same_task_ids_asking_other_questions_are_not_judged_as_the_same_tasks():
    def asked(questions: dict[str, str], passed: int) -> dict:
        return summarize([EvalRecord(t, "math", "pass" if i < passed else "fail", float(i < passed), prompt=q)
                          for i, (t, q) in enumerate(questions.items())], ks=(1,), n_boot=300)

    hard = {f"m{i}": f"Find the {i}th prime above 10**{i}." for i in range(40)}
    easy = {f"m{i}": f"What is {i} + 1?" for i in range(40)}  # the task file edited, its ids kept
    base = asked(hard, 20)
    assert compare(asked(hard, 5), base)["regressions"] == ["math", "overall"]
    gate = compare(asked(easy, 22), base)
    # was comparable (task_set is of ids alone), delta +0.05, regressions []
    assert gate["regressions"] == ["math (different task prompts)", "overall (different task prompts)"]
    assert gate["overall"]["note"] == ("the same task ids asking other prompts (an edited or regenerated task file); "
                                       "not judged")
    assert compare(asked(hard, 22), base)["not_comparable"] == []
    from posttrain.evaluate.report import _eval_table

    assert "ask other prompts under the same task ids: base, rl" in _eval_table({"base": base, "rl": asked(easy, 22)})
    assert "not comparable" not in _eval_table({"base": base, "rl": asked(hard, 22)})
    assert "task_prompts" not in _summary(BASE)  # records without prompts (written by hand): compared as before
