"""Bad-input leftovers of the CLI (a helper's fifth fuzz, after test_cli_fuzz4.py): each is one line
naming the file, field or value and what was expected, exit 2, before any work, and nothing already
written is lost.

Before: ``tasks decontaminate --out X`` wrote over an earlier run's files in X, silently; ``tasks
stats``, ``report`` and ``audit`` of a file said "run directory not found"; ``recipe_doc --check`` of a
dangling or looping symbolic link (or a link to a device) said "no such file"; a recipe's plain ``yes``,
``no``, ``on`` or ``off`` outside a boolean field was YAML 1.1's boolean (``name: no`` was "expected a
string, got False"; a generator's ``params: {pdf: no}`` took False; a boolean field still reads it so);
``verify --response <(...)`` was refused as "a device, socket or pipe"; ``eval --endpoint`` to a dead
server loaded the tokenizer and the tasks, started its progress bar, then failed at its first request.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_cli_fuzz4
from test_bad_inputs import MATH, assert_refused_in_one_line
from test_cli_fuzz3 import _pipe

from posttrain.cli import main, recipe_doc
from posttrain.policy import EmbeddedModelSpec, build_embedded_default

ws = test_cli_fuzz4.ws
"""The fixture: a workspace with good.jsonl and r.yaml, in which a recipe that starts fails."""

OTHER = {**MATH, "id": "e1", "prompt": "What is the capital of the country whose flag is red and white?"}


def test_decontaminate_does_not_write_over_an_earlier_run(ws, capsys):
    (ws / "eval.jsonl").write_text(json.dumps(OTHER) + "\n")
    (ws / "other.jsonl").write_text(json.dumps({**MATH, "id": "m9"}) + "\n")
    assert main(["tasks", "decontaminate", "good.jsonl", "eval.jsonl", "--out", "clean"]) == 0
    capsys.readouterr()
    assert_refused_in_one_line(capsys, ws, ["tasks", "decontaminate", "good.jsonl", "eval.jsonl", "--out", "clean"],
                               "--out clean: already holds good.decontaminated.jsonl, eval.clean.jsonl, "
                               "contamination.json (an earlier decontamination's); choose a new or empty directory")
    # another train file: its own names are free, but the report would be written over
    assert_refused_in_one_line(capsys, ws, ["tasks", "decontaminate", "other.jsonl", "eval.jsonl", "--out", "clean"],
                               "--out clean: already holds eval.clean.jsonl, contamination.json")


@pytest.mark.parametrize("argv", [["tasks", "stats"], ["report"], ["audit"]], ids=["stats", "report", "audit"])
def test_a_run_directory_that_is_a_file_says_so(ws, capsys, argv):
    expected = "expected a run directory (the --out DIR of `posttrain run`)"
    assert_refused_in_one_line(capsys, ws, [*argv, "good.jsonl"], f"good.jsonl: a file, not a directory; {expected}")
    os.symlink("moved", ws / "gone")
    assert_refused_in_one_line(capsys, ws, [*argv, "gone"], f"gone: a symbolic link to nothing (or a loop); {expected}")


@pytest.mark.parametrize(("make", "needle"), [
    pytest.param(lambda p: os.symlink("gone.md", p), "recipe.md: a symbolic link to gone.md, which does not exist",
                 id="dangling"),
    pytest.param(lambda p: os.symlink(p.name, p), "recipe.md: a symbolic link loop", id="loop"),
    pytest.param(lambda p: os.symlink("/dev/null", p), "recipe.md: a symbolic link to /dev/null, a device, socket or "
                 "pipe", id="device"),
])
def test_recipe_doc_check_names_a_link_for_what_it_is(ws, capsys, make, needle):
    make(ws / "recipe.md")
    assert recipe_doc.main(["--check", "recipe.md"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err and "no such file" not in err, err


DOC = "{generator: doc, level: 1, n: 1, params: {filler: 0, pdf: false, kinds: [figure]}}"


@pytest.mark.parametrize(("recipe", "override", "needle"), [
    # before: "model.name: expected a string, got False", a value the recipe does not hold
    ("model: {name: no}\n", None, "r.yaml: model.name: no is false to YAML 1.1 and the string 'no' to YAML 1.2; "
     "write true or false, or quote it as a string"),
    ("tasks: {domains: [math, off]}\n", None, "r.yaml: tasks.domains[1]: off is false to YAML 1.1"),
    ("seed: 1\n", "sched.ray_address=on", "r.yaml: sched.ray_address: on is true to YAML 1.1"),
    # before: the generator's params took YAML 1.1's False (the run started); as YAML 1.2's "no" it would be true
    (f"stages: [rl]\nmodel: {{hidden_size: 32, num_layers: 1, max_positions: 6144}}\nrl: {{episodes: agent, max_turns: 2}}\n"
     f"tasks: {{train: [{DOC.replace('false', 'no')}], eval: [{DOC.replace('n: 1', 'n: 1, seed: 7')}]}}\n", None,
     "r.yaml: tasks.train[0].params.pdf: no is false to YAML 1.1 and the string 'no' to YAML 1.2"),
], ids=["str-field", "list-item", "override", "any-field"])
def test_a_yaml11_boolean_word_outside_a_boolean_field_is_refused(ws, capsys, recipe, override, needle):
    (ws / "r.yaml").write_text(recipe)
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "o", *(["--set", override] if override else [])],
                               needle)


def test_verify_reads_a_response_pipe_once(ws, capsys):
    (ws / "t.json").write_text(json.dumps(MATH))
    with _pipe(b"\\boxed{2}") as response:
        assert main(["verify", "--task", "t.json", "--response", response]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["outcome"] == "pass"


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound and never listened on: a connection to it is refused, and no one else takes it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_embedded_default(tmp_path_factory.mktemp("m") / "tiny",
                                  spec=EmbeddedModelSpec(hidden_size=16, num_layers=1, max_positions=64))


def test_eval_checks_the_endpoint_before_any_work(ws, tiny, capsys, closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    assert_refused_in_one_line(capsys, ws, ["eval", "--endpoint", url, "--model-name", "m", "--tokenizer", str(tiny),
                                            "--tasks", "good.jsonl", "--out", "ev"],
                               f"--endpoint {url}: cannot connect to 127.0.0.1:{closed_port} (Connection refused); "
                               "start the server, or check the URL")
