"""Tiny transformers models built in-process, and an OpenAI-compatible test server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _tiny_lm import tiny_llama

from posttrain.policy import EndpointSampler, LocalSampler, SamplingParams, build_char_tokenizer


@pytest.fixture(scope="session")
def char_lm():
    tok = build_char_tokenizer()
    return tiny_llama(tok), tok


class SamplerServer:
    """``POST /v1/completions`` in vLLM's format, served by a ``LocalSampler``: the test double of a
    real server (the client under test, ``EndpointSampler``, is the real thing). Records every body."""

    def __init__(self, sampler: LocalSampler) -> None:
        self.sampler, self.bodies, self.lock = sampler, [], threading.Lock()
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
        params = SamplingParams(temperature=body["temperature"], top_p=body["top_p"], top_k=body.get("top_k", 0),
                                max_new_tokens=body["max_tokens"], stop=tuple(body["stop"]), seed=body.get("seed"))
        with self.lock:  # the local sampler draws from torch's global generator
            [g] = self.sampler.generate([body["prompt"]], params)
        hit = next((s for s in params.stop if s in g.text), None) if g.stop_reason == "stop" else None
        return {"choices": [{
            "index": 0, "text": g.text,
            "logprobs": {"tokens": [f"token_id:{i}" for i in g.completion_ids], "token_logprobs": list(g.logprobs)},
            "finish_reason": "length" if g.stop_reason == "length" else "stop", "stop_reason": hit,
        }]}

    def __enter__(self) -> SamplerServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator:
    servers: list[SamplerServer] = []

    def start(sampler: LocalSampler) -> SamplerServer:
        servers.append(SamplerServer(sampler).__enter__())
        return servers[-1]

    yield start
    for s in servers:
        s.__exit__()


@pytest.fixture(params=["local", "endpoint"])
def backend(request, char_lm, serve):
    """(sampler, model, tokenizer) for each backend over the same tiny model."""
    model, tok = char_lm
    local = LocalSampler(model, tok)
    if request.param == "local":
        return local, model, tok
    return EndpointSampler(serve(local).url, "tiny", concurrency=3), model, tok
