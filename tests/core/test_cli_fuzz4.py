"""Bad-input leftovers of the CLI (a helper's fourth fuzz, after test_cli_fuzz3.py): each is one line
naming the file, field or value and what was expected, exit 2, before any work.

Before: a recipe that was a dangling or looping symbolic link (or a pipe) was "recipe file not found";
``tasks decontaminate <(...) <(...)`` was "task file not found"; ``generate`` read a model's
``max_position_embeddings: -5`` as its limit; ``rl.lr: 1e23``, ``rl.steps: 10**22``, ``sft.epochs:
1e300``, ``rl.temperature: 1e300`` and ``reward.outcome: 1e300`` were accepted (the run started).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_bad_inputs import MATH, assert_refused_in_one_line
from test_cli_fuzz3 import _pipe

from posttrain.cli import main
from posttrain.policy import EmbeddedModelSpec, build_embedded_default


@pytest.fixture
def ws(tmp_path, monkeypatch) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "good.jsonl").write_text(json.dumps(MATH) + "\n")
    (w / "r.yaml").write_text("seed: 1\n")
    monkeypatch.chdir(w)

    def started(*args, **kwargs):  # a recipe let through: fail here, not after minutes of training
        raise AssertionError("the run started")

    monkeypatch.setattr("posttrain.cli.pipeline.run_recipe", started)
    return w


@pytest.mark.parametrize(("make", "needle"), [
    pytest.param(lambda w: os.symlink("gone.yaml", w / "x.yaml"),
                 "x.yaml: a symbolic link to gone.yaml, which does not exist", id="dangling"),
    pytest.param(lambda w: os.symlink("x.yaml", w / "x.yaml"), "x.yaml: a symbolic link loop", id="loop"),
    pytest.param(lambda w: os.mkfifo(w / "x.yaml"), "x.yaml: a pipe or FIFO, which reads only once", id="fifo"),
])
def test_a_recipe_that_is_no_file_says_what_it_is(ws, capsys, make, needle):
    make(ws)
    assert_refused_in_one_line(capsys, ws, ["run", "x.yaml", "--out", "out"], needle)


def test_decontaminate_reads_pipes(ws, capsys):
    other = {**MATH, "id": "e1", "prompt": "What is the capital of the country whose flag is red and white?"}
    with _pipe((json.dumps(MATH) + "\n").encode()) as train, _pipe((json.dumps(other) + "\n").encode()) as ev:
        assert main(["tasks", "decontaminate", train, ev, "--out", "clean"]) == 0, capsys.readouterr().err
    assert json.loads((ws / "clean" / f"{Path(train).name}.decontaminated.jsonl").read_text())["id"] == "m1"


def test_decontaminate_refuses_a_bad_n_before_reading(ws, capsys):
    assert_refused_in_one_line(capsys, ws, ["tasks", "decontaminate", "good.jsonl", "good.jsonl", "--n", "0",
                                            "--out", "o"], "tasks decontaminate: --n must be >= 1")


def test_a_missing_or_linked_task_file_is_named_whatever_its_suffix(ws, capsys):
    os.symlink("nowhere", ws / "t.txt")
    assert_refused_in_one_line(capsys, ws, ["tasks", "validate", "t.txt"], "t.txt: a symbolic link to nothing")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_embedded_default(tmp_path_factory.mktemp("m") / "tiny",
                                  spec=EmbeddedModelSpec(hidden_size=16, num_layers=1, max_positions=64))


@pytest.mark.parametrize("value", [-5, 0])
def test_a_corrupt_position_count_is_refused(ws, tiny, capsys, value):
    model = ws / "m"
    shutil.copytree(tiny, model)
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": value}))
    assert_refused_in_one_line(capsys, ws, ["generate", "m", "--prompt", "hi", "--max-new-tokens", "2"],
                               f"m/config.json max_position_embeddings: expected a positive integer (the model's "
                               f"positions), got {value!r}")


SANE_RANGES = [
    ("rl.lr=1e23", "rl.lr: expected a number in (0, 1], got 1e+23"),
    ("sft.lr=2", "sft.lr: expected a number in (0, 1], got 2.0"),
    ("rl.critic_lr=1.5", "rl.critic_lr: expected a number in (0, 1]"),
    ("rl.steps=10000000000000000000000", "rl.steps: expected an integer in [1, 10000000], got 10000000000000000000000"),
    ("rl.checkpoint_every=100000000", "rl.checkpoint_every: expected an integer in [1, 10000000]"),
    ("sft.epochs=1e300", "sft.epochs: expected a number in (0, 10000], got 1e+300"),
    ("rl.temperature=1e300", "rl.temperature: expected a number in [1e-05, 10], got 1e+300"),
    ("eval.temperature=11", "eval.temperature: expected a number in [0, 10], got 11.0"),
    ("reward.outcome=1e300", "reward.outcome: expected a number >= 0 of magnitude at most 1e+12, got 1e+300"),
    ("rl.kl_coef=1e13", "rl.kl_coef: expected a number >= 0 of magnitude at most 1e+12"),
    ("rl.max_refills=10000000000000000000000", "rl.max_refills: expected an integer >= 0 that fits in 64 bits"),
    ("reward.max_tokens=9223372036854775808", "reward.max_tokens: expected an integer >= 1 that fits in 64 bits"),
    # before: "start the head node with `ray start --head --port=99999`", a port no one can open
    ("sched={backend: ray, ray_address: 'localhost:99999'}", "sched.ray_address: expected HOST:PORT (the head of "
     "`ray start --head`; a port in [1, 65535]), got 'localhost:99999'"),
]


@pytest.mark.parametrize(("override", "needle"), SANE_RANGES, ids=[o.split("=")[0] for o, _ in SANE_RANGES])
def test_recipe_numbers_out_of_a_sane_range_are_refused(ws, capsys, override, needle):
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "out", "--set", override], needle)


EVAL = ["eval", "--responses", "resp.jsonl", "--tasks", "good.jsonl"]


@pytest.mark.parametrize(("argv", "needle"), [
    # before: ValueError's traceback (embedded null byte) making the directory, after the evaluation: lost
    pytest.param([*EVAL, "--out", "o\x00ut"], "--out 'o\\x00ut': expected a name without NUL characters", id="eval-out"),
    pytest.param(["tasks", "decontaminate", "good.jsonl", "good.jsonl", "--out", "o\x00"],
                 "--out 'o\\x00': expected a name without NUL characters", id="decontaminate-out"),
    pytest.param(["run", "r\x00.yaml", "--out", "o"], "'r\\x00.yaml': expected a recipe file name without NUL",
                 id="run-recipe"),
    # before: accepted (the sampler's logits divided by 1e300: uniform noise)
    pytest.param([*EVAL[:1], "--model", "m", *EVAL[3:], "--temperature", "1e300"],
                 "posttrain eval: --temperature must be 0 (greedy) or a number >= 1e-05 (the samplers' least) and <= 10",
                 id="eval-temperature"),
    pytest.param(["generate", "m", "--prompt", "a", "--temperature", "11"],
                 "generate: --temperature must be 0 (greedy) or a number >= 1e-05 (the samplers' least) and <= 10",
                 id="generate-temperature"),
    # before: "no such model directory", and eval took it for a hub name "not in the Hugging Face cache"
    pytest.param(["generate", "gone", "--prompt", "a"], "generate: gone: a symbolic link to nothing (or a loop)",
                 id="generate-model-link"),
    pytest.param([*EVAL[:1], "--model", "gone", *EVAL[3:]], "--model gone: a symbolic link to nothing (or a loop)",
                 id="eval-model-link"),
    # before: "cannot load a tokenizer (We couldn't connect to 'https://huggingface.co' ...)", a hub name
    pytest.param(["eval", "--endpoint", "http://127.0.0.1:9", "--model-name", "x", "--tokenizer", "gone", *EVAL[3:]],
                 "--tokenizer gone: a symbolic link to nothing (or a loop)", id="eval-tokenizer-link"),
    # before: "no such response file"
    pytest.param(["verify", "--task", "good.jsonl", "--response", "gone"], "gone: a symbolic link to nothing (or a loop)",
                 id="verify-response-link"),
    pytest.param(["verify", "--task", "good.jsonl", "--response", "/dev/null"],
                 "/dev/null: a device or socket, not a file; expected a text file or a pipe", id="verify-response-device"),
    # before: "unknown key ''"; ``rl..lr=3`` listed rl's 40 keys for the key ''
    pytest.param(["run", "r.yaml", "--out", "o", "--set", "rl..lr=3"],
                 "override 'rl..lr=3': the key 'rl..lr' has an empty part", id="override-empty-part"),
])
def test_fuzzed_flags_are_one_line(ws, tiny, capsys, argv, needle):
    (ws / "resp.jsonl").write_text(json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n")
    shutil.copytree(tiny, ws / "m")
    os.symlink("m-moved", ws / "gone")
    assert_refused_in_one_line(capsys, ws, argv, needle)


@pytest.mark.parametrize(("argv", "needle"), [
    # before: ``Path("")`` is "."; tasks validate and verify read the current directory as a dataset (its
    # bad.parquet: "cannot read as Parquet"), report/audit/stats took it for a run
    pytest.param(["tasks", "validate", ""], "argument FILE: expected a path, got ''", id="validate"),
    pytest.param(["verify", "--tasks", "", "--responses", "good.jsonl"], "argument --tasks: expected a path, got ''",
                 id="verify"),
    pytest.param(["tasks", "decontaminate", "", "good.jsonl"], "argument train: expected a path, got ''",
                 id="decontaminate"),
    pytest.param(["tasks", "stats", ""], "argument RUN: expected a path, got ''", id="stats"),
    pytest.param(["report", ""], "argument RUN_DIR: expected a path, got ''", id="report"),
    pytest.param(["audit", ""], "argument RUN_DIR: expected a path, got ''", id="audit"),
    pytest.param(["generate", "", "--prompt", "a"], "argument CKPT: expected a path, got ''", id="generate"),
    pytest.param(["run", "r.yaml", "--out", "o", "--set", "tasks={train: [{file: ''}], eval: [{file: good.jsonl}]}"],
                 "tasks.train[0]: file: expected a task file name, got ''", id="recipe-task-file"),
])
def test_an_empty_path_is_not_the_current_directory(ws, capsys, argv, needle):
    (ws / "bad.parquet").write_bytes(b"PAR1 not parquet")
    assert_refused_in_one_line(capsys, ws, argv, needle)


@pytest.mark.parametrize(("override", "needle"), [
    # before: "no such task file" / "no such demonstrations file", for a name that is there
    ("tasks={train: [{file: gone.jsonl}], eval: [{file: good.jsonl}]}",
     "tasks.train[0]: file: gone.jsonl: a symbolic link to nothing (or a loop)"),
    ("sft.demonstrations=gone.jsonl", "sft.demonstrations: gone.jsonl: a symbolic link to nothing (or a loop)"),
    ("sft.demonstrations=/dev/null", "sft.demonstrations: /dev/null: a device or socket, not a file"),
], ids=["task-file-link", "demonstrations-link", "demonstrations-device"])
def test_a_recipe_file_that_is_a_link_to_nothing_or_a_device_says_so(ws, capsys, override, needle):
    os.symlink("moved.jsonl", ws / "gone.jsonl")
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "o", "--set", override], needle)


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """``posttrain tasks list | head -1``. Before: BrokenPipeError's traceback (generate --json, eval --json,
    tasks validate --all-domains alike), then Python's 'Exception ignored' at exit."""
    import subprocess
    import sys

    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line is written
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-m", "posttrain", "tasks", "validate", "--all-domains", "--no-run",
                           "--only", "math"], stdout=w, stderr=subprocess.PIPE, env=env, timeout=120)
    os.close(w)
    assert proc.stderr == b"" and proc.returncode == 141, proc.stderr.decode()[-800:]


def _big_suite(ws: Path, n: int = 60) -> None:
    """``n`` math tasks and a response to each, a few KB apiece: more than a 128 KiB disk holds."""
    filler = "x " * 2000
    with open(ws / "big.jsonl", "w") as tasks, open(ws / "big-resp.jsonl", "w") as responses:
        for i in range(n):
            tasks.write(json.dumps({**MATH, "id": f"t{i}", "prompt": f"{i} {filler}"}) + "\n")
            responses.write(json.dumps({"task_id": f"t{i}", "response": filler}) + "\n")


def test_eval_on_a_full_disk_keeps_no_cut_results(ws, small_tmpfs, capsys):
    """Before: OSError's traceback, and a cut records.jsonl (an evaluation of fewer tasks, to anyone who read it)
    that made the next ``--out`` there "already holds records.jsonl"."""
    _big_suite(ws)
    code = main(["eval", "--responses", "big-resp.jsonl", "--tasks", "big.jsonl", "--out", str(small_tmpfs / "ev")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert "cannot write the results (No space left on device); none were kept; pass@1 was 0.000" in err, err
    assert list((small_tmpfs / "ev").iterdir()) == []


def test_decontaminate_on_a_full_disk_keeps_no_cut_file(ws, small_tmpfs, capsys):
    """Before: OSError's traceback, and a cut big.decontaminated.jsonl: a smaller 'clean' training split."""
    _big_suite(ws)
    code = main(["tasks", "decontaminate", "big.jsonl", "good.jsonl", "--out", str(small_tmpfs / "dc")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "cannot write big.decontaminated.jsonl (No space left on device)" in err, err
    assert list((small_tmpfs / "dc").iterdir()) == []


def test_stdout_on_a_full_disk_is_one_line(small_tmpfs):
    """``posttrain tasks list > FULL/list.txt``. Before: OSError's traceback (No space left on device)."""
    import subprocess
    import sys

    (small_tmpfs / "fill").write_bytes(b"\0" * (120 << 10))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with open(small_tmpfs / "list.txt", "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "posttrain", "tasks", "list"], stdout=out, stderr=subprocess.PIPE,
                              env=env, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and err.strip().splitlines() == [
        "posttrain: error: cannot write (No space left on device): free space, or write elsewhere"], err[-800:]
