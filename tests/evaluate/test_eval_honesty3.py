"""Adversarial reads of evaluation honesty, third round: a records file given as ``--baseline``
stated no settings, so an evaluation sampled otherwise than the one it belongs to was judged
against it (its results directory was not); a whole run's gate (``eval --run``, failing on any
checkpoint's regression) judged each checkpoint as a family of its own, so identical models failed
it more often the more checkpoints a run had."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from posttrain.errors import UserError
from posttrain.evaluate.baseline import compare, family_widening, load_baseline
from posttrain.evaluate.records import EvalRecord, write_records
from posttrain.evaluate.summary import summarize
from posttrain.policy import EmbeddedModelSpec, build_embedded_default

PROTOCOL = {"tasks": "eval.jsonl", "n_tasks": 20, "samples_per_task": 1, "temperature": 1.0, "max_new_tokens": 24,
            "seed": 0, "max_attempts": 1}


def _records(domains: list[str], passed: int, n_tasks: int = 20, stage: str = "eval") -> list[EvalRecord]:
    return [EvalRecord(f"{d}{t}", d, "pass" if t < passed else "fail", float(t < passed), prompt=f"q {d}{t}",
                       stage=stage) for d in domains for t in range(n_tasks)]


def _evaluation(root: Path, records: list[EvalRecord], protocol: dict | None, name: str = "records.jsonl",
                summary_name: str = "summary.json") -> Path:
    """An evaluation's files as ``posttrain eval --out`` writes them: records and the summary beside."""
    root.mkdir(parents=True, exist_ok=True)
    summary = summarize(records, ks=(1,), n_boot=200)
    if protocol is not None:
        summary["eval_protocol"] = protocol
    (root / summary_name).write_text(json.dumps(summary))
    return write_records(root / name, records)


def _current(records: list[EvalRecord], **settings) -> dict:
    return {**summarize(records, ks=(1,), n_boot=200), "eval_protocol": {**PROTOCOL, **settings}}


def test_a_records_baseline_keeps_the_settings_its_evaluation_states(tmp_path):
    """The same model, evaluated greedy at 512 tokens, against its own temperature-1 24-token records:
    judged through the results directory (not comparable), but through its records.jsonl it was
    judged, no regression (regressions [] before; the directory's two rows now)."""
    recs = _records(["math"], 12)
    path = _evaluation(tmp_path / "prev", recs, PROTOCOL)
    cur = _current(recs, temperature=0.0, max_new_tokens=512)
    assert load_baseline(path)["eval_protocol"] == PROTOCOL
    by_dir, by_records = compare(cur, load_baseline(tmp_path / "prev")), compare(cur, load_baseline(path))
    assert by_records["regressions"] == by_dir["regressions"] == ["math (different settings)",
                                                                  "overall (different settings)"]
    assert compare(_current(recs), load_baseline(path))["regressions"] == []  # sampled alike: judged
    alone = write_records(tmp_path / "base.jsonl", recs)  # nothing beside it: compared as before
    assert "eval_protocol" not in load_baseline(alone)
    responses = _evaluation(tmp_path / "responses", recs, None)  # a responses evaluation states no settings
    assert "eval_protocol" not in load_baseline(responses)
    assert compare(cur, load_baseline(alone))["regressions"] == []


def test_a_run_eval_records_baseline_reads_its_protocol_summary_and_the_run_its_own(tmp_path):
    recs = _records(["math"], 12, stage="rl")
    tagged = _evaluation(tmp_path / "run" / "eval", recs, PROTOCOL, name="rl@eval20-n1-t1-len24-seed0.jsonl",
                         summary_name="summary@eval20-n1-t1-len24-seed0.json")
    assert load_baseline(tagged)["eval_protocol"] == PROTOCOL
    run = tmp_path / "run2"
    (run / "eval").mkdir(parents=True)
    stated = {"temperature": 1.0, "max_new_tokens": 24, "samples_per_task": 1}
    (run / "summary.json").write_text(json.dumps({"eval": {}, "eval_protocol": stated}))
    assert load_baseline(write_records(run / "eval" / "rl.jsonl", recs))["eval_protocol"] == stated


def test_a_records_baseline_whose_summary_does_not_read_is_one_line(tmp_path):
    path = _evaluation(tmp_path / "prev", _records(["math"], 12), PROTOCOL)
    (tmp_path / "prev" / "summary.json").write_text("{not json")
    with pytest.raises(UserError) as e:
        load_baseline(path)
    assert "\n" not in str(e.value) and str(tmp_path / "prev" / "summary.json") in str(e.value)


def test_a_gate_over_several_checkpoints_judges_their_rows_as_one_family():
    """Three checkpoints of 10 identical domains (20 tasks x 1 sample at 0.5), each compared as its
    own family of 11 rows, failed the whole run's gate 22 of 300 times (7.3%; one checkpoint: 7/300);
    as one family of 33 rows, 11 of 300. Here: 10 of 20 to 0 of 20, flagged by a family of 11, not by one of
    33 (the price: a drop needs more tasks to be seen, 30 of 60 to 5 of 60 is)."""
    domains = [f"d{i}" for i in range(10)]
    base = summarize(_records(domains, 10), ks=(1,), n_boot=200)
    cur = summarize(_records(domains[:9], 10) + _records(domains[9:], 0), ks=(1,), n_boot=200)
    alone, together = compare(cur, base), compare(cur, base, evaluations=3)
    assert alone["family"] == {"rows": 11, "widening": family_widening(11)}
    assert together["family"] == {"rows": 33, "widening": family_widening(33)}
    assert alone["regressions"] == ["d9"] and together["regressions"] == []
    base = summarize(_records(domains, 30, n_tasks=60), ks=(1,), n_boot=200)  # 60 tasks: a clear drop still fails
    far = summarize(_records(domains[:9], 30, n_tasks=60) + _records(domains[9:], 5, n_tasks=60), ks=(1,), n_boot=200)
    assert compare(far, base, evaluations=3)["regressions"] == ["d9"]


def _draw(rng: random.Random, domains: list[str], stage: str) -> dict:
    """One model's evaluation of 20 tasks per domain, each passed with chance 0.5."""
    return summarize([EvalRecord(f"{d}{t}", d, o, float(o == "pass"), prompt=f"q {d}{t}", stage=stage)
                      for d in domains for t in range(20) for o in ["pass" if rng.random() < 0.5 else "fail"]],
                     ks=(1,), n_boot=200)


def test_identical_models_fail_a_three_checkpoint_gate_rarely():
    """60 trials of the measurement above (300 took 17 s): a few at most, where 3 families failed more."""
    domains, failed = [f"d{i}" for i in range(10)], 0
    for trial in range(60):
        rng = random.Random(1000 + trial)
        base = _draw(rng, domains, "eval")
        failed += any(compare(_draw(rng, domains, s), base, evaluations=3)["regressions"] for s in ("sft", "rl", "dpo"))
    assert failed <= 4


@pytest.fixture(scope="module")
def run_of_two(tmp_path_factory) -> Path:
    tiny = build_embedded_default(tmp_path_factory.mktemp("m") / "tiny", spec=EmbeddedModelSpec(max_positions=1024))
    run = tmp_path_factory.mktemp("r") / "run"
    for name in ("sft", "rl"):
        shutil.copytree(tiny, run / "checkpoints" / name)
    (run / "summary.json").write_text(json.dumps({"train": {"steps": 3}}))
    return run


def test_posttrain_eval_run_gates_its_checkpoints_as_one_family_and_keeps_its_records_settings(run_of_two, run_cli):
    args = ("eval", "--run", str(run_of_two), "--suite", "humaneval", "--limit", "2", "--json")
    code, _, err = run_cli(*args, "--max-new-tokens", "4")
    assert code == 0, err
    baseline = run_of_two / "eval" / "rl@humaneval2-n1-t0-len4-seed0.jsonl"
    # the same checkpoints against their own 4-token records: one family of 2 rows (1 domain x 2 checkpoints)
    code, out, err = run_cli(*args, "--max-new-tokens", "4", "--baseline", str(baseline), "--fail-on-regression")
    assert code == 0, err
    assert json.loads(out)["eval"]["sft"]["baseline"]["family"]["rows"] == 2
    # at 6 tokens, against the 4-token records: not judged, the gate fails closed (exit 0 before)
    code, out, err = run_cli(*args, "--max-new-tokens", "6", "--baseline", str(baseline), "--fail-on-regression")
    assert code == 1, err
    assert json.loads(out)["eval"]["rl"]["baseline"]["regressions"] == ["code (different settings)",
                                                                         "overall (different settings)"]


def test_an_audit_finds_a_flipped_evaluation_verdict_beside_many_training_passes(tmp_path):
    """500 RL passes and 10 evaluation passes, one a wrong answer stored as a pass: drawn uniformly over
    records, an audit of 20 found it with 0 of 5 seeds (at --sample 50 beside 2,000 RL passes: 0 of 20);
    drawn file by file in turn, every evaluation pass is re-verified."""
    from posttrain.cli import open_service
    from posttrain.evaluate.audit import run_audit

    tasks = [{"id": f"m{i}", "domain": "math", "answer": str(i + 1),
              "prompt": f"{i}+1? Put your final answer in \\boxed{{}}."} for i in range(110)]
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "eval.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))

    def passed(i: int, sample: int, answer: int, stage: str, step: int | None) -> EvalRecord:
        return EvalRecord(f"m{i}", "math", "pass", 1.0, sample_idx=sample, prompt=tasks[i]["prompt"],
                          completion=f"\\boxed{{{answer}}}", stage=stage, step=step)

    write_records(tmp_path / "trajectories" / "rl.jsonl", [passed(i, s, i + 1, "rl", 1) for i in range(100) for s in range(5)])
    write_records(tmp_path / "eval" / "rl.jsonl", [passed(i, 0, i + 1 + (i == 104), "eval", None) for i in range(100, 110)])
    for seed in range(5):
        result = run_audit(tmp_path, sample=20, seed=seed, open_service=open_service)
        assert result.population == 510 and result.disagreements == 1, seed
    items = [json.loads(line) for line in (tmp_path / "audit" / "audit.jsonl").read_text().splitlines()]
    assert sorted(i["source"] for i in items) == ["eval/rl.jsonl"] * 10 + ["trajectories/rl.jsonl"] * 10


def test_greedy_samples_drawn_several_times_are_refused_before_any_work(run_of_two, run_cli):
    """--n 4 --temperature 0: four copies of one greedy answer, read as four i.i.d. samples (pass@4
    reported; a one-task domain's one flipped answer, drawn 10 times, was judged a regression where
    drawn once it is not). Refused in one line, exit 2 (was exit 0 with pass@4)."""
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--model",
                             str(run_of_two / "checkpoints" / "rl"), "--n", "4", "--temperature", "0", "--json")
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and "--n 4 with --temperature 0" in err
