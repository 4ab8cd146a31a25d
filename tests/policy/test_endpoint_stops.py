"""``EndpointSampler`` with the served model's tokenizer stops rows by posttrain's stop-string rule
(``SamplingParams.stop``): at the first token after which ``Generation.text``, the completion decoded
alone, contains a stop string -- as ``LocalSampler`` and ``VllmSampler`` do -- where the server's own
matching, on its decoding begun after the prompt's tokens, differs.

The server is a real HTTP server on loopback (the test double; the client is the real thing) that
matches stop strings as vLLM does: on the decoding of prompt + completion past the prompt's own
decoding, a character whose bytes are not all there yet held back. Its "model" continues a scripted
completion greedily (any request whose prompt is the base prompt plus a prefix of the script goes on
from there), with a Llama-style tokenizer (test_vllm_stop_edges.py's: "▁" a leading space, byte
fallback). Each completion position has its own logprob, so a cut or a resumed row shows whether its
logprobs stayed with its ids.

Before the fix the server's stops were taken as they came: " b" stopped "▁b" at the first token (the
server reads " b" after the prompt; ``text`` is "b"), "停" stopped a completion whose first two bytes
end the prompt's character, U+FFFD (``text`` has it from the first token) never stopped one, and a
stop spanning a resumed row's resume point was run past. The parametrized test failed on all six.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_vllm_stop_edges import HAN, llama_style_tokenizer, rule

from posttrain.policy import EndpointSampler, SamplingParams
from posttrain.policy._vllm import _resume_seed

TOK = llama_style_tokenizer()
_c = TOK.convert_tokens_to_ids
_HAN = [_c(f"<0x{b:02X}>") for b in HAN]
CASES = {  # model name -> (prompt, scripted completion, EOS last)
    "space": ([_c("q")], [_c("▁b"), _c("x"), _c("y"), _c("▁"), _c("b"), _c("z"), TOK.eos_token_id]),
    "split": ([_c("▁q"), _HAN[0]], [*_HAN[1:], _c("a"), _c("c"), _c("▁a"), TOK.eos_token_id]),
}


def logprob(k: int) -> float:
    """The scripted model's logprob of its ``k``-th completion token."""
    return -0.25 * (k + 1)


def complete(body: dict) -> dict:
    """A /v1/completions reply as vLLM gives it, stop strings matched on the server's decoding."""
    base, script = CASES[body["model"]]
    prompt = body["prompt"]
    done = len(prompt) - len(base)
    assert prompt[:len(base)] == base and prompt[len(base):] == script[:done], prompt
    before = TOK.decode(prompt, skip_special_tokens=True).rstrip("\ufffd")  # an unfinished character waits
    out: list[int] = []
    finish, hit = "length", None
    for t in script[done:done + body["max_tokens"]]:
        out.append(t)
        if t == TOK.eos_token_id:
            finish = "stop"
            break
        seen = TOK.decode(prompt + out, skip_special_tokens=True)[len(before):].rstrip("\ufffd")
        hit = next((s for s in body["stop"] if s in seen), None)
        if hit is not None:
            finish = "stop"
            break
    text = TOK.decode(prompt + out, skip_special_tokens=True)[len(before):]
    return {"choices": [{"index": 0, "text": text, "token_ids": out, "finish_reason": finish, "stop_reason": hit,
                         "logprobs": {"tokens": [f"token_id:{i}" for i in out],
                                      "token_logprobs": [logprob(done + k) for k in range(len(out))]}}]}


@pytest.fixture(scope="module")
def server():
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            reply = json.dumps(complete(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", bodies
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(("case", "stop", "max_new", "want"), [
    ("space", (" b",), 16, 5),  # the server stopped at "▁b" (1 token): text "b" lacks " b"; resumed, stops at "▁", "b"
    ("space", (" b", "bx"), 16, 2),  # resumed after "▁b": "bx" spans the resume point, the server runs past it: cut
    ("space", (" b",), 3, 3),  # resumed, no stop in the tokens left: "length"
    ("space", (" b",), 1, 1),  # no token left to resume with: "length"
    ("split", ("停",), 16, 6),  # the server stopped at the 2nd byte (it reads "停"); the rule never does: EOS
    ("split", ("\ufffd",), 16, 1),  # text is U+FFFD from the first token on; the server (reading "停ac a") ran on
])
def test_endpoint_stops_where_the_decoded_completion_has_a_stop_string(server, case, stop, max_new, want):
    url, bodies = server
    prompt, script = CASES[case]
    reason, ids = rule(TOK, script, stop, max_new)
    assert len(ids) == want
    bodies.clear()
    sampler = EndpointSampler(url, case, tokenizer=TOK)
    [g] = sampler.generate([prompt], SamplingParams(temperature=1.0, max_new_tokens=max_new, stop=stop, seed=7))
    assert (g.stop_reason, list(g.completion_ids)) == (reason, ids)
    assert list(g.logprobs) == [logprob(k) for k in range(len(ids))]  # cut with the ids, and in order when resumed
    assert g.text == TOK.decode(ids, skip_special_tokens=True)
    # a resumed request goes on from the ids so far, with the tokens left and a seed of its own
    assert [(len(b["prompt"]) - len(prompt), b["max_tokens"], b["seed"]) for b in bodies][1:] == [
        (len(b["prompt"]) - len(prompt), max_new - (len(b["prompt"]) - len(prompt)),
         _resume_seed(7, len(b["prompt"]) - len(prompt))) for b in bodies[1:]]
    assert sampler.usage()["requests"] == len(bodies)


def test_endpoint_without_stop_strings_sends_one_request_and_decodes_its_ids(server):
    url, bodies = server
    bodies.clear()
    prompt, script = CASES["space"]
    [g] = EndpointSampler(url, "space", tokenizer=TOK).generate([prompt], SamplingParams(max_new_tokens=16, seed=1))
    assert (g.stop_reason, list(g.completion_ids), len(bodies)) == ("eos", script, 1)
    assert g.text == TOK.decode(script, skip_special_tokens=True) == "bxy bz"  # the server's text is " bxy bz"
