"""``posttrain eval --model`` / ``--run``: real generation with a local transformers checkpoint."""

from __future__ import annotations

import json

import pytest

from posttrain.evaluate.records import read_records
from posttrain.evaluate.report import write_report
from posttrain.policy import EmbeddedModelSpec, build_embedded_default


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    # a random-weight Llama with a char tokenizer: it writes garbage, which must score 0, not crash
    return build_embedded_default(tmp_path_factory.mktemp("m") / "tiny", spec=EmbeddedModelSpec(max_positions=1024))


def test_model_checkpoint_is_generated_and_scored(tiny_model, tmp_path, run_cli):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "2", "--model", str(tiny_model),
                             "--n", "2", "--max-new-tokens", "8", "--k", "1,2", "--json", "--out", str(tmp_path / "r"))
    assert code == 0, err
    s = json.loads(out)
    assert s["n_tasks"] + s["infra_dropped_tasks"] == 2
    assert s["pass@1"] == 0.0 and "pass@2" in s
    recs = read_records(tmp_path / "r" / "records.jsonl")
    scored = [r for r in recs if not r.is_infra_error]
    assert {(r.task_id, r.sample_idx) for r in scored} == {(f"HumanEval/{i}", j) for i in range(2) for j in range(2)}
    assert all(r.prompt_ids and 1 <= len(r.completion_ids) <= 8 and r.tokens == len(r.completion_ids) for r in scored)


def test_run_checkpoints_are_evaluated_into_the_run(tiny_model, tmp_path, run_cli):
    import shutil

    run = tmp_path / "run"
    for name in ("sft", "base"):
        shutil.copytree(tiny_model, run / "checkpoints" / name)
    (run / "summary.json").write_text(json.dumps({"train": {"steps": 3}}))
    code, out, err = run_cli("eval", "--run", str(run), "--suite", "humaneval", "--limit", "2",
                             "--max-new-tokens", "4", "--json")
    assert code == 0, err
    assert list(json.loads(out)["eval"]) == ["base", "sft"]
    # RUN/summary.json is the pipeline's (it marks a run finished); eval writes under RUN/eval/, by protocol
    assert json.loads((run / "summary.json").read_text()) == {"train": {"steps": 3}}
    summary = json.loads((run / "eval" / "summary@humaneval2-n1-t0-len4-seed0.json").read_text())
    assert set(summary["eval"]) == {"base", "sft"} and summary["eval_protocol"]["max_new_tokens"] == 4
    assert summary["eval"]["sft"]["noop"]["pass@1"] == 0.0
    assert (run / "eval" / "base@humaneval2-n1-t0-len4-seed0.jsonl").is_file()
    assert "<th>sft@humaneval2-n1-t0-len4-seed0</th>" in write_report(run).read_text()
