"""``posttrain eval --endpoint`` attacked by the server it evaluates: one that answers the tasks it can
solve and, on the others, fails some other way than a wrong answer, hoping the task leaves the
denominator as infra or unanswered (pass@1 over the tasks it solved alone: 1.0).

Standing cases: a fault of the server's (an HTTP error, 429 with Retry-After, a body that is not
JSON or is cut mid-way, no choice, a finish reason that is neither stop nor length, no token ids,
negative ids, no answer within the timeout) ends the whole evaluation in one line naming the URL,
with no summary and no records, and is never retried (a retry would let the server keep the best
of its draws: best-of-n posing as pass@1); an answer that fails in form (cut at length, a refusal,
nothing, ids outside the vocabulary) is a failed attempt like a wrong one. The scripted server
answers m0 and m2 right and attacks m1 and m3.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_endpoint import send_completion, write_math_suite

from posttrain.errors import UserError
from posttrain.policy import EndpointSampler, SamplingParams, build_char_tokenizer

TOK = build_char_tokenizer()
N_TASKS = 4
RELEASE = threading.Event()  # a hanging reply waits on it; set when the module's server stops


def _ids(text: str) -> list[int]:
    return [*TOK(text, add_special_tokens=False)["input_ids"], TOK.eos_token_id]


class _Handler(BaseHTTPRequestHandler):
    """Keyed by the request's model name: what the server does on the tasks it cannot solve."""

    seen: Counter[tuple[str, int]] = Counter()  # (model, task) -> requests

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = TOK.decode(body["prompt"])
        a, b = map(int, re.search(r"(\d+)\+(\d+)\?", prompt).groups())
        mode, right = body["model"], f"\\boxed{{{a + b}}}"
        type(self).seen[(mode, a)] += 1
        repairing = "\\boxed{0}" in prompt  # a repair round: its first answer is in the context
        if a % 2 == 0 or mode == "honest" or (mode == "flaky" and type(self).seen[(mode, a)] > 1):
            return send_completion(self, right, _ids(right))
        if mode == "repair-503" and not repairing:
            return send_completion(self, "\\boxed{0}", _ids("\\boxed{0}"))
        if mode in ("500", "503", "429", "flaky", "repair-503"):
            return self._raw(int(mode[-3:]) if mode[-3:].isdigit() else 503, b'{"error": "busy"}',
                             {"Retry-After": "0"} if mode == "429" else {})
        if mode == "not-json":
            return self._raw(200, b'{"choices": [')
        if mode == "no-choice":
            return self._raw(200, b'{"object": "text_completion", "choices": []}')
        if mode == "text-only":  # the right answer as text, no ids to score
            return self._raw(200, json.dumps({"choices": [{"text": right, "finish_reason": "stop"}]}).encode())
        if mode == "cut-mid-body":
            self.send_response(200)
            self.send_header("Content-Length", "500")
            self.end_headers()
            self.wfile.write(b'{"choices": [{"text": "')
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if mode == "hang":
            RELEASE.wait(10)
            return None
        if mode == "trickle":  # a byte every 0.1 s: never silent for the per-read timeout
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(100):
                if RELEASE.wait(0.1):
                    break
                self.wfile.write(b" ")
                self.wfile.flush()
            return None
        wrong = {"length": ("\\boxed{0}", _ids("\\boxed{0}")[:-1], "length"),
                 "content-filter": ("", [], "content_filter"),
                 "refusal": ("I cannot help with that.", _ids("I cannot help with that."), "stop"),
                 "nothing": ("", [], "stop"),
                 "negative-ids": (right, [-1], "stop"),
                 "out-of-vocab": (right, [10**9], "stop")}[mode]
        return send_completion(self, *wrong)

    def _raw(self, code: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    RELEASE.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> tuple[Path, str]:
    return write_math_suite(tmp_path_factory.mktemp("suite"), TOK, N_TASKS)


def _eval(run_cli, server, suite, model: str, *extra: str) -> tuple[int, str, str]:
    tasks, tok = suite
    return run_cli("eval", "--tasks", str(tasks), "--endpoint", server, "--model-name", model, "--tokenizer", tok,
                   "--max-new-tokens", "24", "--k", "1", "--json", "--workers", "1", *extra)


@pytest.mark.parametrize("mode", ["honest", "length", "content-filter", "refusal", "nothing", "out-of-vocab"])
def test_an_answer_that_fails_in_form_is_a_failed_attempt(run_cli, server, suite, mode):
    if mode == "content-filter":  # neither stop nor length: the server's fault, not an answer
        code, out, err = _eval(run_cli, server, suite, mode)
        assert code == 2 and out == "" and "finish_reason must be 'stop' or 'length'" in err
        return
    code, out, err = _eval(run_cli, server, suite, mode)
    assert code == 0, err
    s = json.loads(out)
    assert s["n_tasks"] == N_TASKS and s["infra_errors"] == 0 and "infra_as_fail" not in s
    assert s["pass@1"] == (1.0 if mode == "honest" else 0.5)
    if mode == "honest":  # its cost: the server's request time is seen only in the summary
        cost = s["endpoint"]
        assert cost["requests"] == N_TASKS and cost["request_s"] > 0
        assert cost["completion_tokens"] == sum(len(_ids(f"\\boxed{{{2 * i + 10}}}")) for i in range(N_TASKS))


@pytest.mark.parametrize("mode", ["500", "503", "429", "not-json", "no-choice", "text-only", "cut-mid-body",
                                  "negative-ids", "repair-503"])
def test_a_fault_on_the_tasks_it_fails_ends_the_evaluation(run_cli, server, suite, tmp_path, mode):
    extra = ("--max-attempts", "2") if mode == "repair-503" else ()
    code, out, err = _eval(run_cli, server, suite, mode, "--out", str(tmp_path / "r"), *extra)
    # before any of these was scored as infra (left out of pass@1: 1.0 over m0 and m2) it must stop
    # the run: nothing printed, nothing written, one line naming the server
    assert code == 2 and out == "", err
    [line] = [x for x in err.splitlines() if x.startswith("posttrain: error:")]
    assert f"{server}/v1/completions" in line
    assert not (tmp_path / "r" / "summary.json").exists() and not (tmp_path / "r" / "records.jsonl").exists()


def test_a_failed_request_is_never_retried_into_another_draw(run_cli, server, suite):
    """``flaky`` answers m1 and m3 right on a second request: a client that retried a 503 would read
    pass@1 1.0 from a server that keeps only the draws it likes."""
    code, out, err = _eval(run_cli, server, suite, "flaky")
    assert code == 2 and out == "" and "HTTP 503" in err
    # (requests run concurrently: one not yet sent when the first 503 came back is cancelled)
    assert _Handler.seen[("flaky", 1)] + _Handler.seen[("flaky", 3)] >= 1
    assert max(_Handler.seen[("flaky", a)] for a in range(N_TASKS)) == 1


def test_a_server_that_never_answers_is_a_clear_error_at_the_timeout(server):
    sampler = EndpointSampler(server, "hang", timeout=0.2)
    prompt = TOK("1+11? Put your final answer in \\boxed{}.", add_special_tokens=False)["input_ids"]
    with pytest.raises(UserError, match=r"endpoint .*/v1/completions: request failed \(.*timed out"):
        sampler.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=8))


def test_the_timeout_is_a_flag_of_eval(run_cli, server, suite):
    code, out, err = _eval(run_cli, server, suite, "hang", "--endpoint-timeout", "0.2")
    assert code == 2 and out == "" and "timed out" in err.splitlines()[-1]
    for bad, why in (("0", "must be seconds in (0, 86400], got 0.0"), ("nan", "got nan")):
        code, _, err = _eval(run_cli, server, suite, "honest", "--endpoint-timeout", bad)
        assert code == 2 and err.strip().endswith(why), err


def test_a_server_that_trickles_its_reply_is_a_clear_error_at_twice_the_timeout(server):
    """A byte every 0.1 s kept a request with a 0.3 s timeout waiting 5.7 s, and for ever with a longer
    reply (the timeout bounds each read); the whole request now has twice the timeout."""
    sampler = EndpointSampler(server, "trickle", timeout=0.3)
    prompt = TOK("1+11? Put your final answer in \\boxed{}.", add_special_tokens=False)["input_ids"]
    t0 = time.monotonic()
    with pytest.raises(UserError, match=r"endpoint .*/v1/completions: no whole reply within 0.6 s"):
        sampler.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=8))
    assert time.monotonic() - t0 < 3.0
