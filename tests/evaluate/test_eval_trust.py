"""Evaluation you can trust: a gate never judges two evaluations whose prompts were rendered otherwise
(``eval_protocol.prompt_format``), and a responses file appended to itself is said to be one.

Real ``posttrain eval`` runs of a 1-layer Llama over a character tokenizer with Qwen's chat template
(tests/policy/_chat_models.py), on two math tasks, greedy and 4 tokens: the same weights prompted plain,
through that template, or through another one.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "policy"))
from _chat_models import QWEN2_TEMPLATE, qwen_char_tokenizer  # noqa: E402

from posttrain.cli import main  # noqa: E402
from posttrain.evaluate.baseline import compare, load_baseline  # noqa: E402
from posttrain.evaluate.records import EvalRecord  # noqa: E402
from posttrain.evaluate.summary import summarize  # noqa: E402
from posttrain.policy import record_chat  # noqa: E402

OTHER_TEMPLATE = QWEN2_TEMPLATE.replace("You are a helpful assistant.", "You solve sums.")
"""Another chat template, its turns ended as Qwen's (the check of the end of turn passes)."""


def _hex(template: str) -> str:
    return "chat:" + hashlib.sha256(template.encode()).hexdigest()[:16]


def _checkpoint(path: Path, template: str, chat: bool | None) -> Path:
    """The same 1-layer Llama (seed 0) over a char tokenizer with ``template``; ``chat``: the prompt
    rendering the checkpoint records (None: no record, plain)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = qwen_char_tokenizer(template)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    if chat is not None:
        record_chat(path, chat)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trust")
    tasks = root / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"m{i}", "domain": "math", "answer": str(2 * i + 10),
                                         "prompt": f"{i}+{i + 10}? Put your final answer in \\boxed{{}}."}) + "\n"
                             for i in range(2)))
    return {"tasks": tasks, "plain": _checkpoint(root / "plain", QWEN2_TEMPLATE, None),
            "chat": _checkpoint(root / "chat", QWEN2_TEMPLATE, True),
            "other": _checkpoint(root / "other", OTHER_TEMPLATE, True)}


def _eval(run_cli, models, model: str, *extra: str) -> tuple[int, dict, str]:
    code, out, err = run_cli("eval", "--tasks", str(models["tasks"]), "--model", str(models[model]),
                             "--max-new-tokens", "4", "--k", "1", "--json", "--workers", "1", *extra)
    assert code in (0, 1), err
    return code, json.loads(out), err


# -- 1. the prompt rendering is a setting the gate holds ---------------------------------------------


def test_a_checkpoint_prompted_through_its_template_is_not_judged_against_one_prompted_plain(models, tmp_path,
                                                                                              run_cli):
    code, plain, err = _eval(run_cli, models, "plain", "--out", str(tmp_path / "plain"))
    assert code == 0 and "chat" not in plain["eval_protocol"]  # as trained: no flag given
    # the same weights, prompted as the checkpoint records (its chat template): no flag given either, so
    # the protocols differed in nothing the gate read, and the rendering's delta was judged (exit 0)
    code, chat, err = _eval(run_cli, models, "chat", "--baseline", str(tmp_path / "plain"), "--fail-on-regression")
    gate = chat["baseline"]
    assert code == 1, err
    assert gate["regressions"] == ["math (different settings)", "overall (different settings)"]
    assert plain["eval_protocol"]["prompt_format"] == "plain"
    assert chat["eval_protocol"]["prompt_format"] == _hex(QWEN2_TEMPLATE)
    assert gate["overall"]["note"] == (f"different settings (prompt_format: current {_hex(QWEN2_TEMPLATE)!r}, "
                                       "baseline 'plain'); not judged")
    # --chat given to the plain checkpoint: 'chat' stated on one side only was not compared either
    code, given, err = _eval(run_cli, models, "plain", "--chat", "--baseline", str(tmp_path / "plain"),
                             "--fail-on-regression")
    assert code == 1 and given["baseline"]["not_comparable"] == ["math", "overall"], err


def test_two_chat_templates_are_two_renderings_and_the_same_one_is_judged(models, tmp_path, run_cli):
    code, chat, err = _eval(run_cli, models, "chat", "--out", str(tmp_path / "chat"))
    assert code == 0, err
    code, other, err = _eval(run_cli, models, "other", "--baseline", str(tmp_path / "chat"), "--fail-on-regression")
    assert code == 1 and other["baseline"]["not_comparable"] == ["math", "overall"], err  # both 'as trained': judged
    assert other["eval_protocol"]["prompt_format"] == _hex(OTHER_TEMPLATE) != _hex(QWEN2_TEMPLATE)
    # the same checkpoint and rendering against itself: judged, no regression
    code, again, err = _eval(run_cli, models, "chat", "--baseline", str(tmp_path / "chat"), "--fail-on-regression")
    assert code == 0 and again["baseline"]["not_comparable"] == [] and again["baseline"]["regressions"] == [], err


def test_an_eval_run_records_baseline_carries_its_checkpoint_s_own_rendering(models, tmp_path, run_cli):
    """``eval --run``'s file protocol is shared by its checkpoints and fixed before any loads; each
    entry states its own rendering, and its records given as ``--baseline`` take that one."""
    run = tmp_path / "run"
    shutil.copytree(models["plain"], run / "checkpoints" / "sft")
    shutil.copytree(models["chat"], run / "checkpoints" / "rl")
    (run / "summary.json").write_text(json.dumps({"train": {"steps": 1}}))
    code, out, err = run_cli("eval", "--run", str(run), "--tasks", str(models["tasks"]), "--max-new-tokens", "4",
                             "--json", "--workers", "1")
    assert code == 0, err
    tag = "tasks2-n1-t0-len4-seed0"
    code, chat, err = _eval(run_cli, models, "chat", "--baseline", str(run / "eval" / f"sft@{tag}.jsonl"),
                            "--fail-on-regression")
    assert code == 1 and chat["baseline"]["not_comparable"] == ["math", "overall"], err
    assert load_baseline(run / "eval" / f"sft@{tag}.jsonl")["eval_protocol"]["prompt_format"] == "plain"
    assert load_baseline(run / "eval" / f"rl@{tag}.jsonl")["eval_protocol"]["prompt_format"] == _hex(QWEN2_TEMPLATE)
    code, chat, err = _eval(run_cli, models, "chat", "--baseline", str(run / "eval" / f"rl@{tag}.jsonl"),
                            "--fail-on-regression")
    assert code == 0 and chat["baseline"]["not_comparable"] == [], err  # its own rendering: judged


def test_an_endpoint_s_rendering_is_its_tokenizer_s_template():
    from posttrain.evaluate.sources import EndpointModel, prompt_format

    one, two = qwen_char_tokenizer(QWEN2_TEMPLATE), qwen_char_tokenizer(OTHER_TEMPLATE)
    assert prompt_format(EndpointModel(None, one)) == prompt_format(EndpointModel(None, two)) == "plain"
    assert prompt_format(EndpointModel(None, one, chat=True)) == _hex(QWEN2_TEMPLATE)
    assert prompt_format(EndpointModel(None, two, chat=True)) == _hex(OTHER_TEMPLATE)
    assert prompt_format(EndpointModel(None, one), "agent") == _hex(QWEN2_TEMPLATE)  # agents render with it always


def _summary(protocol: dict | None) -> dict:
    records = [EvalRecord(f"m{i}", "math", "pass" if i < 10 else "fail", float(i < 10), prompt=f"q{i}")
               for i in range(20)]
    summary = summarize(records, ks=(1,), n_boot=200)
    return summary if protocol is None else {**summary, "eval_protocol": protocol}


def test_prompt_format_is_held_where_both_protocols_state_it():
    """Two renderings apart are not judged; a protocol written before prompt_format existed compares as
    before (as every setting one side leaves out: a baseline evaluated again states it)."""
    old = {"samples_per_task": 1, "temperature": 0.0, "max_new_tokens": 512}  # a run's summary.json before
    new = {**old, "prompt_format": "plain"}
    chat = {**old, "prompt_format": "chat:0123456789abcdef"}
    assert compare(_summary(old), _summary(old))["not_comparable"] == []  # two older ones: as before
    assert compare(_summary(new), _summary(new))["not_comparable"] == []
    assert compare(_summary(new), _summary(old))["not_comparable"] == []
    assert compare(_summary(old), _summary(new))["not_comparable"] == []
    gate = compare(_summary(new), _summary(chat))
    assert gate["regressions"] == ["math (different settings)", "overall (different settings)"]
    assert gate["overall"]["note"] == ("different settings (prompt_format: current 'plain', baseline "
                                       "'chat:0123456789abcdef'); not judged")
    # a responses evaluation states no protocol (no rendering of its own): compared as before, either way
    assert compare(_summary(None), _summary(new))["not_comparable"] == []
    assert compare(_summary(new), _summary(None))["not_comparable"] == []


# -- 2. a responses file appended to itself --------------------------------------------------------


@pytest.fixture
def sums(tmp_path) -> Path:
    tasks = tmp_path / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"m{i}", "domain": "math", "answer": str(2 * i + 10),
                                         "prompt": f"{i}+{i + 10}? Put your final answer in \\boxed{{}}."}) + "\n"
                             for i in range(3)))
    return tasks


def _responses(path: Path, rows: list[tuple[int, int]]) -> Path:
    """(task, answer) per line, in order."""
    path.write_text("".join(json.dumps({"task_id": f"m{t}", "response": f"\\boxed{{{a}}}"}) + "\n" for t, a in rows))
    return path


def _eval_responses(run_cli, sums: Path, responses: Path) -> tuple[dict, list[str]]:
    code, out, err = run_cli("eval", "--tasks", str(sums), "--responses", str(responses), "--k", "1", "--json",
                             "--workers", "1")
    assert code == 0, err
    return json.loads(out), [line for line in err.splitlines() if "warning" in line]


def test_a_responses_file_appended_to_itself_is_said_to_be_one(tmp_path, sums, run_cli):
    # two samples per task, one right and one wrong; then the same file twice (cat a.jsonl a.jsonl)
    once = [(0, 10), (0, 0), (1, 12), (1, 0), (2, 14), (2, 0)]
    a = _responses(tmp_path / "a.jsonl", once)
    s, warned = _eval_responses(run_cli, sums, a)
    assert s["n_samples"] == 6 and warned == []
    twice = _responses(tmp_path / "aa.jsonl", once + once)
    s, warned = _eval_responses(run_cli, sums, twice)
    # scored as given (12 samples), but no longer in silence: pass@1 the same, its interval over 12 draws
    assert s["n_samples"] == 12 and s["pass@1"] == 0.5
    assert warned == [f"posttrain: warning: {twice}: its 12 responses to 3 task(s) are 6 written twice (each task's "
                      "second half repeats its first): a file appended to itself counts every sample twice, pass@k "
                      "and its intervals over 12 draws where 6 were made; remove the repeated lines, unless a greedy "
                      "model wrote the same answer to each sample"]


def test_only_a_file_whose_every_task_repeats_is_warned_about_and_none_is_refused(tmp_path, sums, run_cli):
    # a greedy model's two samples per task, the same answer twice: the same file as one sample appended to
    # itself, so a warning, never a refusal
    greedy = _responses(tmp_path / "greedy.jsonl", [(0, 10), (0, 10), (1, 0), (1, 0), (2, 14), (2, 14)])
    s, warned = _eval_responses(run_cli, sums, greedy)
    assert s["n_samples"] == 6 and len(warned) == 1 and str(greedy) in warned[0]
    # one task answered alike twice, the others not: honest samples, no warning
    for rows in ([(0, 10), (0, 10), (1, 0), (1, 12), (2, 14), (2, 0)],  # m1, m2: two different answers
                 [(0, 10), (0, 10), (1, 12), (2, 14)],  # m1, m2: one sample each
                 [(0, 10), (0, 0), (0, 10), (1, 12), (1, 12), (1, 12), (2, 14), (2, 14)]):  # an odd count
        s, warned = _eval_responses(run_cli, sums, _responses(tmp_path / "r.jsonl", rows))
        assert warned == [], rows


def test_a_sample_stated_twice_is_refused_before_any_work(tmp_path, sums, run_cli):
    """Lines that say which sample they are (``posttrain generate --json``'s ``sample_idx``; a records
    file's ``attempt`` beside it) settle what the warning can only suspect: a task's sample stated twice
    (a file appended to itself, or a generation run again into it with other answers) is one line,
    exit 2, naming the file, line and sample; the same sample's repair attempts, or another task's
    sample of the same index, are not repeats."""
    def write(name: str, rows: list[dict]) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"response": "\\boxed{10}", **r}) + "\n" for r in rows))
        return path

    once = [{"task_id": f"m{t}", "sample_idx": j} for t in range(3) for j in range(2)]
    assert _eval_responses(run_cli, sums, write("once.jsonl", once))[0]["n_samples"] == 6
    rerun = write("rerun.jsonl", once + [{**once[0], "response": "\\boxed{11}"}])
    code, out, err = run_cli("eval", "--tasks", str(sums), "--responses", str(rerun), "--json")
    assert (code, out) == (2, "") and err.strip().splitlines() == [
        f"posttrain: error: {rerun}:7: task 'm0' sample_idx 0 is already on line 1 (a file appended to itself?); "
        "each sample once"], err
    attempts = write("attempts.jsonl", [{"task_id": "m0", "sample_idx": 0, "attempt": a} for a in range(2)])
    code, _, err = run_cli("eval", "--tasks", str(sums), "--responses", str(attempts), "--json")
    assert code == 0, err
    for bad in (-1, 1.5, True, "0"):
        code, _, err = run_cli("eval", "--tasks", str(sums), "--responses",
                               str(write("bad.jsonl", [{"task_id": "m0", "sample_idx": bad}])), "--json")
        assert code == 2 and "field 'sample_idx' must be a non-negative integer" in err and len(err.splitlines()) == 1


# -- 3. --n with --responses: the count each answered task holds ---------------------------------
# ``posttrain eval --responses FILE --n N``: N is the count of samples the file holds per task.
#
# ``--n`` was read only where a model samples: with ``--responses`` a file of 3 samples to one task
# and 1 to another was scored as given under ``--n 2`` (pass@k over whatever each task held), and the
# records stated no count. Given, each task answered must have exactly N responses (one line, exit 2,
# before any work), and the records and summary state ``samples_per_task`` N; without it, as before.
#
# Real ``posttrain eval`` runs (``posttrain.cli.main``) over three math tasks, the math verifier scoring.


def _eval_n(capsys, sums: Path, responses: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["eval", "--tasks", str(sums), "--responses", str(responses), "--k", "1,2", "--json",
                 "--workers", "1", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_n_given_with_responses_is_stated_in_records_and_summary(tmp_path, sums, capsys):
    # two samples of each of m0 and m1 (one right, one wrong), m2 unanswered
    rows = [(0, 10), (0, 0), (1, 12), (1, 0)]
    code, out, err = _eval_n(capsys, sums, _responses(tmp_path / "r.jsonl", rows), "--n", "2",
                           "--out", str(tmp_path / "res"))
    assert code == 0, err
    s = json.loads(out)
    assert (s["samples_per_task"], s["n_samples"], s["pass@1"], s["unanswered_tasks"]) == (2, 4, 0.5, 1)
    assert "m2" in err and "warning" in err  # an unanswered task stays the warning it was
    records = [json.loads(line) for line in (tmp_path / "res" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {r.get("samples_per_task") for r in records} == {2}  # was absent: None
    assert json.loads((tmp_path / "res" / "summary.json").read_text())["samples_per_task"] == 2
    # without --n, as before: no count stated, each task's own scored as given
    code, out, err = _eval_n(capsys, sums, _responses(tmp_path / "u.jsonl", [*rows, (1, 12)]),
                           "--out", str(tmp_path / "u"))
    assert code == 0, err
    s = json.loads(out)
    assert "samples_per_task" not in s and s["n_samples"] == 5
    records = [json.loads(line) for line in (tmp_path / "u" / "records.jsonl").read_text().splitlines()]
    assert all("samples_per_task" not in r for r in records)


@pytest.mark.parametrize("rows, task, count, n, more", [
    ([(0, 10), (0, 0), (1, 12), (1, 0), (1, 12), (2, 14), (2, 0)], "m1", 3, 2, ""),  # one more
    ([(0, 10), (0, 0), (1, 12), (2, 14), (2, 0)], "m1", 1, 2, ""),  # one fewer (a failure's line deleted)
    ([(0, 10), (1, 12), (2, 14)], "m0", 1, 8, " (3 of the 3 tasks answered are off)"),  # --n 8 of a file of one
])
def test_a_task_with_another_count_than_n_is_refused_before_any_work(tmp_path, sums, capsys, rows, task, count, n,
                                                                     more):
    path = _responses(tmp_path / "r.jsonl", rows)
    out_dir = tmp_path / "res"
    code, out, err = _eval_n(capsys, sums, path, "--n", str(n), "--out", str(out_dir))
    assert (code, out) == (2, ""), err  # was 0: scored as given, pass@k over each task's own count
    assert err.splitlines() == [
        f"posttrain: error: {path}: task {task!r} has {count} response(s), --n {n} expects exactly {n} for each task "
        f"answered{more}; give the file's count as --n, or fix the file"]
    assert not (out_dir / "records.jsonl").exists()  # no work: nothing verified or written
