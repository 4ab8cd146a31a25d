"""Bad-input leftovers of the CLI (a helper's third fuzz, after test_cli_fuzz2.py): each is one line
naming the file and what was expected, exit 2, before any work, and no hang.

Before: a task file that was a FIFO no process wrote to blocked ``tasks validate``, ``eval --tasks``,
``eval --responses`` and a recipe's task source forever; ``generate --tasks <(...)`` (bash's process
substitution, a pipe at /dev/fd/N) was refused as "not a regular file", and the other commands
refused it as "unknown task file type" (no suffix); /dev/zero behind a task file's name was read
as one endless line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_bad_inputs import MATH, assert_refused_in_one_line

from posttrain.cli import main
from posttrain.policy import EmbeddedModelSpec, build_embedded_default


@contextlib.contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fail the test (rather than hang it) when the body blocks longer than ``seconds``."""
    def hung(*_: object) -> None:
        raise AssertionError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def ws(tmp_path, monkeypatch) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "good.jsonl").write_text(json.dumps(MATH) + "\n")
    (w / "resp.jsonl").write_text(json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n")
    os.mkfifo(w / "fifo.jsonl")
    monkeypatch.chdir(w)
    monkeypatch.setattr("posttrain.tasks._load.FIFO_WAIT_S", 0.2)

    def started(*args, **kwargs):  # a recipe let through: fail here, not after minutes of training
        raise AssertionError("the run started")

    monkeypatch.setattr("posttrain.cli.pipeline.run_recipe", started)
    return w


FIFO_CASES = [
    pytest.param(["tasks", "validate", "fifo.jsonl"], id="tasks-validate"),
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", "fifo.jsonl"], id="eval-tasks"),
    pytest.param(["eval", "--responses", "fifo.jsonl", "--tasks", "good.jsonl"], id="eval-responses"),
    pytest.param(["verify", "--tasks", "fifo.jsonl", "--responses", "resp.jsonl"], id="verify-tasks"),
]


@pytest.mark.parametrize("argv", FIFO_CASES)
def test_a_fifo_no_process_writes_to_is_refused_after_a_wait(ws, capsys, argv):
    with _within(20):
        assert_refused_in_one_line(capsys, ws, argv, "fifo.jsonl: a FIFO that no process writes to (waited 0.2 s)")


@pytest.mark.parametrize("source", ["tasks.train[0]", "sft.demonstrations"])
def test_a_recipe_file_that_is_a_fifo_is_refused_at_once(ws, capsys, source):
    tasks = {"train": [{"generator": "quickstart-math", "n": 5, "skip": 10}],
             "eval": [{"generator": "quickstart-math", "n": 5}]}
    recipe: dict = {"tasks": tasks}
    if source == "tasks.train[0]":
        tasks["train"] = [{"file": "fifo.jsonl"}]
    else:
        recipe["sft"] = {"demonstrations": "fifo.jsonl"}
    (ws / "r.yaml").write_text(json.dumps(recipe))
    with _within(20):
        assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "out"],
                                   f"{source}: {'file: ' if 'train' in source else ''}fifo.jsonl: a FIFO or pipe, "
                                   f"which reads only once")


@contextlib.contextmanager
def _pipe(data: bytes) -> Iterator[str]:
    """A pipe a thread writes ``data`` to, by its /dev/fd path: what bash's ``<(...)`` passes."""
    r, w = os.pipe()

    def write() -> None:
        with open(w, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        yield f"/dev/fd/{r}"
    finally:
        writer.join()
        os.close(r)


SECOND = {**MATH, "id": "m2"}
PIPED = [
    pytest.param((json.dumps(MATH) + "\n" + json.dumps(SECOND) + "\n").encode(), 2, id="jsonl"),
    pytest.param(json.dumps({"tasks": [MATH, SECOND]}, indent=2).encode(), 2, id="json-indented"),
    pytest.param(json.dumps([MATH]).encode(), 1, id="json-list-one-line"),
]


@pytest.mark.parametrize(("data", "count"), PIPED)
def test_process_substitution_reads_as_a_task_file(ws, capsys, data, count):
    with _within(20), _pipe(data) as path:
        assert main(["tasks", "validate", path]) == 0
    assert f"{path}: {count} tasks, 0 problem(s)" in capsys.readouterr().out


def test_a_gzipped_or_empty_pipe(ws, capsys):
    import gzip

    with _within(20), _pipe(gzip.compress(json.dumps(MATH).encode())) as path:
        assert main(["eval", "--responses", "resp.jsonl", "--tasks", path]) == 0
    capsys.readouterr()
    with _within(20), _pipe(b"") as path:
        assert_refused_in_one_line(capsys, ws, ["tasks", "validate", path], f"no tasks in {path}")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_embedded_default(tmp_path_factory.mktemp("m") / "tiny",
                                  spec=EmbeddedModelSpec(hidden_size=16, num_layers=1, max_positions=64))


def test_generate_reads_tasks_from_a_pipe(ws, tiny, capsys):
    with _within(60), _pipe((json.dumps(MATH) + "\n").encode()) as path:
        assert main(["generate", str(tiny), "--tasks", path, "--max-new-tokens", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["task_id"] == "m1"


def test_a_device_is_refused(ws, capsys):
    """Before: /dev/null behind a task file's name was "no tasks", /dev/zero one endless line read
    into memory (the device named here is /dev/null so that the old code's run of this test ends)."""
    (ws / "null.jsonl").symlink_to("/dev/null")
    with _within(20):
        assert_refused_in_one_line(capsys, ws, ["tasks", "validate", "null.jsonl"],
                                   "null.jsonl: a device or socket, not a file")



@pytest.mark.parametrize("offline", [False, True])
def test_a_model_name_neither_local_nor_cached_fails_fast(ws, closed_hub, monkeypatch, capsys, offline):
    """Before: huggingface_hub's retries, one warning each (about 50 s without a network), then
    "cannot load the tokenizer (OSError: We couldn't connect to ...)"."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    why = "HF_HUB_OFFLINE is set" if offline else "the hub http://127.0.0.1:9 cannot be reached ([Errno 111]"
    with _within(30):
        assert_refused_in_one_line(capsys, ws, ["eval", "--model", "nope/x", "--tasks", "good.jsonl"],
                                   f"model nope/x: not a local directory and not in the Hugging Face cache ({closed_hub}), "
                                   f"and {why}")


def test_a_cached_hub_model_still_loads_without_the_hub(ws, closed_hub, tmp_path):
    """A model in the cache loads from it when the hub cannot be reached (local files only). Before:
    after huggingface_hub's retries (24 s measured; transformers' adapter lookup asks the hub even
    with local_files_only)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401 (imported before the clock)

    from posttrain.policy import load_policy

    repo = closed_hub / "models--tiny-org--tiny"
    build_embedded_default(repo / "snapshots" / "abc123", spec=EmbeddedModelSpec(hidden_size=16, num_layers=1,
                                                                                 max_positions=64))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    with _within(10):
        policy = load_policy("tiny-org/tiny")
    assert policy.model.config.hidden_size == 16


OUT_CASES = [
    pytest.param(["eval", "--responses", "resp.jsonl", "--tasks", "good.jsonl", "--out"], id="eval"),
    pytest.param(["run", "r.yaml", "--out"], id="run"),
    pytest.param(["tasks", "decontaminate", "good.jsonl", "good.jsonl", "--out"], id="decontaminate"),
]


@pytest.mark.parametrize("link", ["nowhere", "loop"])
@pytest.mark.parametrize("argv", OUT_CASES)
def test_an_out_that_is_a_link_to_nothing_is_refused_before_any_work(ws, capsys, argv, link):
    """Before: ``eval --out`` evaluated, then raised FileExistsError's traceback making the directory
    (the evaluation lost); ``run --out`` started the run."""
    (ws / "r.yaml").write_text("seed: 1\n")
    os.symlink("nowhere" if link == "nowhere" else "out", ws / "out")
    assert_refused_in_one_line(capsys, ws, [*argv, "out"], "--out out: a symbolic link to nothing (or a loop)")


def test_a_prompt_of_bytes_that_are_not_utf8_is_one_line(ws, tiny, capsys):
    """``generate --prompt $'a\\xff'``: Python's argv holds the byte as a lone surrogate. Before: the
    tokenizer's TypeError (TextEncodeInput must be Union[...]) as a traceback, after the model loaded."""
    assert_refused_in_one_line(capsys, ws, ["generate", str(tiny), "--prompt", "x", "--prompt", "a\udcff"],
                               "generate: --prompt #2: not UTF-8 text (byte 0xff at character 2)")


def test_eval_scores_responses_from_a_pipe(ws, capsys):
    """Before: ``eval --responses <(...)`` read the file twice (to check its ids, then to score it):
    "no responses in /dev/fd/N", the pipe empty the second time."""
    line = json.dumps({"task_id": "m1", "response": "\\boxed{2}"}) + "\n"
    with _within(20), _pipe(line.encode()) as path:
        assert main(["eval", "--responses", path, "--tasks", "good.jsonl", "--out", "ev"]) == 0, capsys.readouterr().err
    assert json.loads((ws / "ev" / "records.jsonl").read_text().splitlines()[0])["outcome"] == "pass"
