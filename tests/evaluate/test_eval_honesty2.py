"""More records that would make a score read higher than the evaluation gave (after
test_eval_honesty.py): the samples of two models mixed into one set (``posttrain eval --model``,
``--endpoint`` and ``--responses`` wrote stage ``eval`` and step null for any of them, so nothing told
them apart; records now state ``model_fingerprint``), and a task's last samples deleted (no gap in
0..n-1 is left behind; records now state ``samples_per_task``). Each is a one-line ``UserError`` from
``summarize`` (``posttrain report``, ``eval --baseline FILE.jsonl``), never a figure. And the
pipeline's canary count under infra retries: one per episode (a guard: the runner already gave one
record per single-turn episode, so it passed before ``evaluate_canaries`` took summarize's rule)."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_endpoint import send_completion

from posttrain.cli.pipeline import evaluate_canaries
from posttrain.config import parse_config
from posttrain.envs import task_to_record
from posttrain.errors import UserError
from posttrain.evaluate.records import EvalRecord, fingerprint_model_dir, read_records, write_records
from posttrain.evaluate.summary import summarize
from posttrain.policy import build_char_tokenizer, build_embedded_default
from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service
from posttrain.train.recipe import Recipe
from posttrain.types import Generation, Task, Verdict

TOK = build_char_tokenizer()
TASKS = [Task(id=f"t{i}", domain="math", prompt=f"{i}+{i}? Put your final answer in \\boxed{{}}.",
              fields={"answer": str(2 * i)}) for i in range(2)]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> dict[str, Path]:
    """Two random-weight models (seeds 0 and 1), each evaluated by ``posttrain eval --model --n 4``."""
    from posttrain.cli import main

    root = tmp_path_factory.mktemp("two")
    (root / "tasks.jsonl").write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in TASKS))
    out: dict[str, Path] = {}
    for seed in (0, 1):
        model = build_embedded_default(root / f"m{seed}", seed=seed)
        code = main(["eval", "--tasks", str(root / "tasks.jsonl"), "--model", str(model), "--n", "4",
                     "--temperature", "1.0", "--max-new-tokens", "4", "--k", "1", "--out", str(root / f"r{seed}")])
        assert code == 0
        out[f"m{seed}"], out[f"r{seed}"] = model, root / f"r{seed}" / "records.jsonl"
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_records_state_the_model_and_the_samples_asked(evaluated) -> None:
    a, b = fingerprint_model_dir(evaluated["m0"]), fingerprint_model_dir(evaluated["m1"])
    assert a != b and a.startswith("sha256:") and len(a) == len("sha256:") + 16
    recs = read_records(evaluated["r0"])
    assert len(recs) == 8 and {(r.model_fingerprint, r.samples_per_task, r.stage, r.step) for r in recs} == {
        (a, 4, "eval", None)}
    assert summarize(recs, ks=(1,))["n_samples"] == 8


def test_the_fingerprint_is_of_the_weights_not_the_directory(evaluated, tmp_path) -> None:
    copy = shutil.copytree(evaluated["m0"], tmp_path / "elsewhere")
    assert fingerprint_model_dir(copy) == fingerprint_model_dir(evaluated["m0"])
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    assert fingerprint_model_dir(copy) != fingerprint_model_dir(evaluated["m0"])


def test_two_models_records_in_one_set_are_refused_naming_both(evaluated, tmp_path) -> None:
    # task t0 as model 0 answered it, task t1 as model 1 did: both stage eval, step null, one verifier,
    # no index repeated -- summarized as one model's pass@1 over 2 tasks before
    mixed = [r for r in _lines(evaluated["r0"]) if r["task_id"] == "t0"] + \
            [r for r in _lines(evaluated["r1"]) if r["task_id"] == "t1"]
    a, b = sorted([fingerprint_model_dir(evaluated["m0"]), fingerprint_model_dir(evaluated["m1"])])
    with pytest.raises(UserError) as e:
        summarize(read_records(_write(tmp_path / "mixed.jsonl", mixed)), ks=(1,))
    assert str(e.value) == (f"records: samples of 2 models in one set (model_fingerprint {a}, {b}); "
                            "summarize one model's evaluation at a time")


def test_records_that_state_no_model_are_one_unknown_model(evaluated, tmp_path) -> None:
    old = [{k: v for k, v in r.items() if k not in ("model_fingerprint", "samples_per_task")}
           for r in _lines(evaluated["r0"])]
    assert summarize(read_records(_write(tmp_path / "old.jsonl", old)), ks=(1,))["n_samples"] == 8
    # an old file's t0 beside a new file's t1: two models, one of them unknown
    mixed = [r for r in old if r["task_id"] == "t0"] + [r for r in _lines(evaluated["r1"]) if r["task_id"] == "t1"]
    with pytest.raises(UserError, match=r"2 models in one set \(model_fingerprint \(none stated\), sha256:"):
        summarize(read_records(_write(tmp_path / "mixed.jsonl", mixed)), ks=(1,))


def test_a_tasks_last_samples_deleted_are_refused(evaluated, tmp_path) -> None:
    # samples 2 and 3 of t0 deleted: 0, 1 is no gap, and t0 read as a task of 2 samples
    cut = [r for r in _lines(evaluated["r0"]) if not (r["task_id"] == "t0" and r["sample_idx"] >= 2)]
    with pytest.raises(UserError) as e:
        summarize(read_records(_write(tmp_path / "cut.jsonl", cut)), ks=(1,))
    assert str(e.value) == ("records: task 't0' has 2 samples [0, 1]; its records state samples_per_task 4 "
                            "(a sample's records left out)")


def _rec(sample: int, outcome: str = "fail", *, asked: int | None = 4, task: str = "t0") -> EvalRecord:
    return EvalRecord(task, "math", outcome, None if outcome == "infra_error" else float(outcome == "pass"),
                      sample_idx=sample, stage="eval", verifier_version="math@1", samples_per_task=asked)


def test_samples_per_task_more_than_stated_or_two_counts_are_refused(tmp_path) -> None:
    extra = [_rec(s) for s in range(5)]  # a fifth sample of another evaluation
    with pytest.raises(UserError, match=r"task 't0' has 5 samples \[0, 1, 2, 3, 4\]; its records state "
                                        r"samples_per_task 4 \(samples of another evaluation mixed in\)"):
        summarize(read_records(write_records(tmp_path / "extra.jsonl", extra)), ks=(1,))
    two = [_rec(s) for s in range(4)] + [_rec(s, asked=2, task="t1") for s in range(2)]
    with pytest.raises(UserError, match=r"samples_per_task differs between records \(2, 4\)"):
        summarize(read_records(write_records(tmp_path / "two.jsonl", two)), ks=(1,))


def test_a_sample_lost_to_infra_keeps_its_place() -> None:
    # a sample whose every try was an infra error keeps its records: attrition, counted, never short
    recs = [_rec(0, "pass"), _rec(1), _rec(2), _rec(3, "infra_error"), _rec(3, "infra_error")]
    s = summarize(recs, ks=(1,))
    assert (s["n_samples"], s["infra_dropped_samples"], s["infra_errors"]) == (3, 1, 2)


def test_a_bad_samples_per_task_is_refused_naming_the_line(tmp_path) -> None:
    path = _write(tmp_path / "bad.jsonl", [{"task_id": "t0", "outcome": "pass", "samples_per_task": 0}])
    with pytest.raises(UserError) as e:
        read_records(path)
    assert str(e.value) == f"{path}:1: field 'samples_per_task' must be an integer >= 1, got 0"


class _Tokens:
    def decode(self, ids):
        return "x"


class _Model:
    """A model as ``runner_episodes`` samples one: every prompt gets the answer "a<i>"."""

    tokenizer = _Tokens()
    chat = None

    def encode_prompt(self, text: str) -> list[int]:
        return [1]

    def sampler(self):
        return self

    def generate(self, prompt_ids, params):
        return [Generation(tuple(p), (2,), (0.0,), f"a{i}", "eos") for i, p in enumerate(prompt_ids)]


def test_a_canarys_infra_retries_are_not_episodes(tmp_path) -> None:
    # every first try of a verification is an infra error, its retry a pass: 2 canaries x 2 samples are
    # 4 episodes and 4 passes over 8 tries
    tries: dict[tuple[str, str], int] = {}

    def flaky(task: Task, response: str) -> Verdict:
        tries[(task.id, response)] = tries.get((task.id, response), 0) + 1
        return Verdict.infra("sandbox died") if tries[(task.id, response)] == 1 else Verdict("pass", 1.0)

    recipe = parse_config(Recipe, {"tasks": {"sampler": {"kind": "pool", "canary_rate": 0.1, "canaries_per_domain": 2}},
                                   "eval": {"samples_per_task": 2}})
    held = [Task(id="m0", domain="rg/chain_sum", prompt="1+1=", fields={"answer": "2"})]
    with Service(LocalBackend({"rg/chain_sum": DomainHooks(flaky)}), SchedPolicy(max_tries=3)) as svc:
        counted = evaluate_canaries("rl", _Model(), held, svc, recipe, tmp_path)
        assert svc.stats()["tries"] == 8
    assert counted == {"episodes": 4, "passed": 4}
    assert len(read_records(tmp_path / "canaries" / "rl.jsonl")) == 4


class _Server(BaseHTTPRequestHandler):
    """An OpenAI-compatible server (ids in, ids out) whose every completion is "x"."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        send_completion(self, "x", TOK(["x"], add_special_tokens=False)["input_ids"][0])

    def log_message(self, *args):
        pass


def test_an_endpoints_records_state_the_server_and_the_model_name(tmp_path, run_cli) -> None:
    TOK.save_pretrained(tmp_path / "tok")
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in TASKS))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        for name, url in (("a", f"http://127.0.0.1:{port}"), ("b", f"http://127.0.0.1:{port}/v1/")):
            code, _, err = run_cli("eval", "--tasks", str(tmp_path / "tasks.jsonl"), "--endpoint", url, "--model-name",
                                   name, "--tokenizer", str(tmp_path / "tok"), "--n", "2", "--k", "1",
                                   "--out", str(tmp_path / name))
            assert code == 0, err
    finally:
        server.shutdown()
    a, b = (read_records(tmp_path / name / "records.jsonl") for name in ("a", "b"))
    assert {(r.model_fingerprint, r.samples_per_task) for r in a} == {
        (f"endpoint:a@http://127.0.0.1:{port}/v1/completions", 2)}
    assert {r.model_fingerprint for r in b} == {f"endpoint:b@http://127.0.0.1:{port}/v1/completions"}
    with pytest.raises(UserError, match=r"2 models in one set \(model_fingerprint endpoint:a@.*, endpoint:b@"):
        summarize([r for r in a if r.task_id == "t0"] + [r for r in b if r.task_id == "t1"], ks=(1,))


def test_two_response_files_records_in_one_set_are_refused(tmp_path, run_cli) -> None:
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in TASKS))
    for name, answers in (("right", ("\\boxed{0}", "\\boxed{2}")), ("wrong", ("\\boxed{5}", "\\boxed{5}"))):
        _write(tmp_path / f"{name}.jsonl", [{"task_id": t.id, "response": a} for t, a in zip(TASKS, answers, strict=True)])
        code, _, err = run_cli("eval", "--tasks", str(tmp_path / "tasks.jsonl"), "--responses",
                               str(tmp_path / f"{name}.jsonl"), "--k", "1", "--out", str(tmp_path / name))
        assert code == 0, err
    right, wrong = (read_records(tmp_path / name / "records.jsonl") for name in ("right", "wrong"))
    [fingerprint] = {r.model_fingerprint for r in right}
    assert fingerprint.startswith("responses:") and {r.samples_per_task for r in right} == {None}
    with pytest.raises(UserError, match=r"2 models in one set \(model_fingerprint responses:"):
        summarize([r for r in right if r.task_id == "t1"] + [r for r in wrong if r.task_id == "t0"], ks=(1,))
