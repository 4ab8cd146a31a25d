"""EndpointSampler: an OpenAI-compatible ``/v1/completions`` server as a token-level ``Sampler``.

Token ids go out and come back as ids: the prompt is sent as a list of token ids (the completions
API accepts one), and the completion ids are read from ``choices[0].token_ids`` (vLLM >= 0.10.2,
``return_token_ids``) or else from ``logprobs.tokens`` written as ``"token_id:<id>"`` (vLLM's
``return_tokens_as_token_ids``), so nothing is re-tokenized on either side. One request per prompt,
``concurrency`` at a time; prompt ``i`` of a call is sent ``seed + i`` when a seed is given.

Request body: ``model, prompt (ids), max_tokens, temperature, top_p, top_k (only when > 0), stop,
seed, logprobs: 1, return_token_ids: true, return_tokens_as_token_ids: true,
include_stop_str_in_output: true``. Read back: ``choices[0].text``, the ids, ``logprobs.token_logprobs``,
``finish_reason`` ("length", or "stop" with ``stop_reason`` a string for a stop string, else EOS).

Stop strings: with the served model's ``tokenizer`` (``posttrain eval`` has it, to render prompts),
a row stops by posttrain's rule (``SamplingParams.stop``, ``_sampler.StopStrings``, as ``LocalSampler``
and ``VllmSampler``): at the first token after which ``Generation.text``, the completion ids decoded
alone, contains a stop string, and ``text`` is that decoding. A server matches on its own decoding,
begun after the prompt's tokens (vLLM), which differs where the prompt changes the completion's first
characters (a sentencepiece leading space: "▁b" is " b" to the server, "b" in ``text``; a character
whose bytes span the prompt's end). So each reply is checked again on its ids, token by token: where
the rule stops it before the server did, its ids and logprobs are cut at the token that completed the
stop string; where the server stopped on a string the rule does not see, the row is resumed (a new
request: the prompt and the ids so far, the tokens left, a seed derived from the row's, as
``VllmSampler`` does) until the rule stops it, EOS, or ``max_new_tokens`` (then ``length``). A server's
stop is never taken for the rule's: a stop reported where ``text`` has no stop string would cut an
answer short that a local sampler lets the model finish. Without a tokenizer the server's stops and
``text`` are taken as they come (the per-token texts vLLM can return are each token decoded alone,
not the completion's decoding, so the rule cannot be read from them).

The server must report logprobs of the distribution it sampled from (temperature, top-k, top-p
applied): vLLM does with ``--logprobs-mode processed_logprobs``; its default reports raw-logit
logprobs, which would make every importance ratio wrong. The client cannot check this.

Cost: ``usage()`` counts what the sampler was answered (requests, seconds waited on them, completion
ids), for ``posttrain eval``'s summary: the one place an endpoint's generation time is seen (a server
that draws several samples and returns its best looks like one sample, but not in time per token).

Not here: chat completions (templates are rendered to ids by posttrain, not by the server), HTTP
retries (a failed request is a ``UserError`` naming the URL).
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from posttrain.errors import UserError
from posttrain.policy._sampler import SamplingParams, StopCache, StopStrings
from posttrain.policy._vllm import _first_stop, _resume_seed
from posttrain.types import Generation, StopReason


class EndpointSampler:
    """Sample from ``{base_url}/v1/completions``; ``OPENAI_API_KEY``, when set, is sent as a Bearer token.
    ``tokenizer``: the served model's, to stop rows by posttrain's stop-string rule (module docstring).

    >>> s = EndpointSampler("http://127.0.0.1:8000", "my-model")
    >>> s.url
    'http://127.0.0.1:8000/v1/completions'
    """

    def __init__(self, base_url: str, model: str, *, concurrency: int = 8, timeout: float = 120.0,
                 tokenizer: Any = None) -> None:
        try:
            parts = urllib.parse.urlsplit(base_url)
            parts.port  # noqa: B018 - a port that is not a number in 0-65535 raises here, not at the first request
        except ValueError as e:  # an unclosed IPv6 bracket, a port 'x' or 99999
            raise UserError(f"endpoint: {base_url!r} is not a URL ({e})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"endpoint: expected an http(s) URL, got {base_url!r}")
        base = base_url.rstrip("/")
        if not base.endswith("/completions"):
            base = (base if base.endswith("/v1") else base + "/v1") + "/completions"
        self.url, self.model, self.concurrency, self.timeout = base, model, max(1, concurrency), timeout
        self.tokenizer = tokenizer
        self._stops = None if tokenizer is None else StopCache(tokenizer)
        self._lock = threading.Lock()
        self._usage: dict[str, float] = {"requests": 0, "request_s": 0.0, "completion_tokens": 0}

    def usage(self) -> dict[str, float]:
        """What the server answered so far: ``requests``, ``request_s`` (seconds from each request
        sent to its reply read, summed: concurrent requests overlap), ``completion_tokens`` (the ids
        it returned, before any cut at ``max_tokens``). A request that failed is not counted.

        >>> EndpointSampler("http://127.0.0.1:8000", "m").usage()
        {'requests': 0, 'request_s': 0.0, 'completion_tokens': 0}
        """
        with self._lock:
            return {**self._usage, "request_s": round(self._usage["request_s"], 4)}

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        jobs = [(list(p), None if params.seed is None else params.seed + i) for i, p in enumerate(prompt_ids)]
        if any(not p for p, _ in jobs):
            raise UserError("sampling: every prompt needs at least one token, got an empty one")
        stops = None if self._stops is None else self._stops.get(params.stop)
        with ThreadPoolExecutor(max_workers=self.concurrency) as ex:
            return list(ex.map(lambda job: self._one(job[0], job[1], params, stops), jobs))

    def _one(self, prompt: list[int], seed: int | None, params: SamplingParams, stops: StopStrings | None) -> Generation:
        """One row: the server's reply, held to the stop-string rule where ``stops`` is given (module
        docstring). Each resumed request adds at least one id or ends the row, so at most
        ``max_new_tokens`` rounds (one, nearly always)."""
        ids, logprobs, reason, text = self._request(prompt, seed, params.max_new_tokens, params)
        if self.tokenizer is None:
            return Generation(prompt_ids=tuple(prompt), completion_ids=tuple(ids), logprobs=tuple(logprobs),
                              text=text, stop_reason=reason)
        checked = 0  # leading ids known to complete no stop string
        while stops is not None:
            cut = _first_stop(stops, ids, checked, len(ids) - (reason == "eos"))  # EOS: not text
            if cut is not None:
                ids, logprobs, reason = ids[:cut], logprobs[:cut], "stop"
                break
            if reason != "stop":
                break
            if len(ids) >= params.max_new_tokens:
                reason = "length"
                break
            checked = len(ids)
            more, more_lps, reason, _ = self._request(prompt + ids, _resume_seed(seed, len(ids)),
                                                      params.max_new_tokens - len(ids), params)
            ids, logprobs = ids + more, logprobs + more_lps
            if not more:  # a server that answers a resumed row with nothing: the row ends as it says
                break
        return Generation(prompt_ids=tuple(prompt), completion_ids=tuple(ids), logprobs=tuple(logprobs),
                          text=self.tokenizer.decode(ids, skip_special_tokens=True), stop_reason=reason)

    def _request(self, prompt: list[int], seed: int | None, max_tokens: int,
                 params: SamplingParams) -> tuple[list[int], list[float], StopReason, str]:
        """One ``/v1/completions`` request: the completion's ids, their logprobs, why the server
        stopped (``stop`` where it reports a stop string), and its ``text``."""
        body: dict[str, Any] = {
            "model": self.model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "stop": list(params.stop),
            "logprobs": 1, "return_token_ids": True, "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            # every knob of the distribution said, neutral where ours is off: a vLLM server fills a field
            # left out from the checkpoint's generation_config.json (Qwen2.5-Instruct's top_k 20 and
            # repetition_penalty 1.05), so the endpoint sampled another distribution than the run asked
            # for. top_k -1 is "off" to every vLLM (0 is to recent ones only).
            "top_k": params.top_k or -1, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0,
        }
        if seed is not None:
            body["seed"] = seed
        start = time.monotonic()
        choice = self._choice(self._post(body))
        waited = time.monotonic() - start
        try:
            lp = choice["logprobs"]
            given = choice.get("token_ids")
            ids = [_token_id(t) for t in lp["tokens"]] if given is None else [_int(x) for x in given]
            logprobs = [float(x) for x in lp["token_logprobs"]]
            text, finish = choice["text"], choice["finish_reason"]
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"endpoint {self.url}: choices[0] lacks token ids or logprobs ({e}): "
                            f"{json.dumps(choice)[:200]}") from None
        if len(ids) != len(logprobs) or not isinstance(text, str):
            raise UserError(f"endpoint {self.url}: {len(ids)} token ids but {len(logprobs)} logprobs")
        reason: StopReason
        if finish == "length":
            reason = "length"
        elif finish == "stop":
            reason = "stop" if isinstance(choice.get("stop_reason"), str) else "eos"
        else:
            raise UserError(f"endpoint {self.url}: finish_reason must be 'stop' or 'length', got {finish!r}")
        with self._lock:
            self._usage["requests"] += 1
            self._usage["request_s"] += waited
            self._usage["completion_tokens"] += len(ids)
        return ids, logprobs, reason, text

    def _choice(self, data: dict[str, Any]) -> dict[str, Any]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise UserError(f"endpoint {self.url}: response has no choices[0]: {json.dumps(data)[:200]}")
        return choices[0]

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        return post_json(self.url, body, timeout=self.timeout, label="endpoint")


def _token_id(token: Any) -> int:
    """``"token_id:42"`` -> 42 (vLLM's ``return_tokens_as_token_ids`` form)."""
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise ValueError(f"expected tokens as 'token_id:<id>' (return_tokens_as_token_ids), got {token!r}")
    return _int(int(token.removeprefix("token_id:")))


def _int(x: Any) -> int:
    """A token id as the server gave it: an integer >= 0 (a negative one is no token; the tokenizer's
    decode raised OverflowError on it, a traceback instead of the server named)."""
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise ValueError(f"expected token ids to be integers >= 0, got {x!r}")
    return x


def post_json(url: str, body: dict[str, Any], *, timeout: float, label: str) -> dict[str, Any]:
    """POST ``body`` to an OpenAI-compatible ``url`` (``OPENAI_API_KEY`` as the bearer token, if
    set) and return the JSON object it answers; any failure is one ``UserError`` line that starts
    with ``label`` and the URL. ``timeout`` bounds each wait for bytes (a server that generates
    before it answers sends nothing until then) and twice it the whole request: a server that
    trickles its reply a byte at a time held a request for ever within the per-read timeout."""
    headers = {"Content-Type": "application/json"}
    if key := os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    done: list[bytes | BaseException] = []

    def fetch() -> None:
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                done.append(resp.read())
        except BaseException as e:  # handed to the caller's thread
            done.append(e)

    worker = threading.Thread(target=fetch, name="posttrain-endpoint-request", daemon=True)
    worker.start()
    worker.join(2 * timeout)
    if not done:  # the thread ends with its socket's next timeout; the run ends on this error
        raise UserError(f"{label} {url}: no whole reply within {2 * timeout:g} s (a reply that trickles in)")
    try:
        if isinstance(done[0], BaseException):
            raise done[0]
        payload = done[0]
    except urllib.error.HTTPError as e:
        detail = e.read()[:300].decode("utf-8", "replace")
        raise UserError(f"{label} {url}: HTTP {e.code} {e.reason}: {detail}") from None
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as e:
        raise UserError(f"{label} {url}: request failed ({e})") from None
    try:
        data = json.loads(payload)
    except json.JSONDecodeError:
        raise UserError(f"{label} {url}: response is not JSON: {payload[:200]!r}") from None
    if not isinstance(data, dict):
        raise UserError(f"{label} {url}: expected a JSON object, got {type(data).__name__}")
    return data
