"""Tiny transformers models built in-process, and an OpenAI-compatible test server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from posttrain.policy import EndpointSampler, LocalSampler, SamplingParams, build_char_tokenizer


def tiny_llama(tokenizer, *, seed: int = 0, eos_like: str | None = " ") -> torch.nn.Module:
    """A 1-layer Llama over ``tokenizer``. ``eos_like``: EOS gets the output row of that token, so
    EOS is sampled about as often as it (random weights alone almost never stop)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128, tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peakier than init, so top-k/top-p cut real mass
        if eos_like is not None:
            [like] = tokenizer(eos_like, add_special_tokens=False)["input_ids"]
            # 1.02: no exact tie with that token, which would blur where top-k cuts
            model.lm_head.weight[tokenizer.eos_token_id] = 1.02 * model.lm_head.weight[like]
    return model


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
