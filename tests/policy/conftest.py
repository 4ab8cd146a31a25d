"""Tiny transformers models built in-process, and an OpenAI-compatible test server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _tiny_lm import TEST_DEVICE, need_vllm, tiny_llama

from posttrain.policy import EndpointSampler, LocalSampler, SamplingParams, build_char_tokenizer
from posttrain.policy._fast import FastSampler
from posttrain.policy._spec import SpecConfig


@pytest.fixture(scope="session")
def char_lm():
    tok = build_char_tokenizer()
    return tiny_llama(tok).to(TEST_DEVICE), tok


class SamplerServer:
    """``POST /v1/completions`` in vLLM's format, served by a ``LocalSampler``: the test double of a
    real server (the client under test, ``EndpointSampler``, is the real thing). Records every body."""

    def __init__(self, sampler: LocalSampler, *, token_ids: bool = False) -> None:
        """``token_ids``: answer with ``choices[0].token_ids`` (vLLM >= 0.10.2) instead of "token_id:N" tokens."""
        self.sampler, self.bodies, self.lock, self.token_ids = sampler, [], threading.Lock(), token_ids
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                reply = json.dumps(outer.complete(body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def complete(self, body: dict) -> dict:
        params = SamplingParams(temperature=body["temperature"], top_p=body["top_p"], top_k=max(body.get("top_k", 0), 0),  # -1: off, as vLLM reads it
                                max_new_tokens=body["max_tokens"], stop=tuple(body["stop"]), seed=body.get("seed"))
        with self.lock:  # the local sampler draws from torch's global generator
            [g] = self.sampler.generate([body["prompt"]], params)
        hit = next((s for s in params.stop if s in g.text), None) if g.stop_reason == "stop" else None
        tokens = [tok_text(self.sampler.tokenizer, i) if self.token_ids else f"token_id:{i}" for i in g.completion_ids]
        choice = {
            "index": 0, "text": g.text, "logprobs": {"tokens": tokens, "token_logprobs": list(g.logprobs)},
            "finish_reason": "length" if g.stop_reason == "length" else "stop", "stop_reason": hit,
        }
        if self.token_ids:
            choice["token_ids"] = list(g.completion_ids)
        return {"choices": [choice]}

    def __enter__(self) -> SamplerServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tok_text(tokenizer, i: int) -> str:
    return tokenizer.convert_ids_to_tokens(i)


@pytest.fixture
def serve() -> Iterator:
    servers: list[SamplerServer] = []

    def start(sampler: LocalSampler, **kw: bool) -> SamplerServer:
        servers.append(SamplerServer(sampler, **kw).__enter__())
        return servers[-1]

    yield start
    for s in servers:
        s.__exit__()


@pytest.fixture
def vllm_needed() -> None:
    """``need_vllm`` as a fixture (a test module cannot import a conftest by name under xdist)."""
    need_vllm()


@pytest.fixture(scope="session")
def vllm_engine():
    """A vLLM engine (its own process, .venv-vllm) over a tiny Llama with head dim 32 (vLLM's CPU
    attention needs >= 32), shared by the session's tests. Skipped only outside CI when the vLLM
    environment is not built (``make vllm-env``; ``make test`` builds it)."""
    from posttrain.policy._vllm import VllmSampler

    need_vllm()
    tok = build_char_tokenizer()
    model = tiny_llama(tok, hidden_size=128, heads=4)
    with VllmSampler(model, tok, max_model_len=128) as engine:
        yield engine, model, tok


@pytest.fixture(params=["local", "endpoint", "endpoint-token_ids", "fast", "fast-spec", "fast-static", "vllm"])
def backend(request, char_lm, serve):
    """(sampler, model, tokenizer) for each backend over the same tiny model; the endpoint answers
    in both of vLLM's forms of token ids; "fast-spec" drafts (prompt lookup) on every step;
    "fast-static" decodes with fixed shapes (a CUDA graph on a GPU, eagerly here)."""
    if request.param == "vllm":
        return request.getfixturevalue("vllm_engine")
    model, tok = char_lm
    local = LocalSampler(model, tok)
    if request.param == "local":
        return local, model, tok
    if request.param.startswith("fast"):
        spec = SpecConfig(tail_rows=1000) if request.param == "fast-spec" else None
        return FastSampler(model, tok, speculation=spec, static=request.param == "fast-static" or None), model, tok
    server = serve(local, token_ids=request.param == "endpoint-token_ids")
    return EndpointSampler(server.url, "tiny", concurrency=3), model, tok
