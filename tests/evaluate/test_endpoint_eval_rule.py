"""``posttrain eval --endpoint`` gives its sampler the served model's tokenizer (``--tokenizer``), so the
server's rows follow posttrain's stop-string rule (tests/policy/test_endpoint_stops.py: how, on a
loopback server that matches stops as vLLM does). Before, eval built ``EndpointSampler`` without it and
took a server's stops as they came, as every local sampler does not."""

from __future__ import annotations

import argparse

from posttrain.cli._eval import _model
from posttrain.policy import build_char_tokenizer


def test_eval_endpoint_sampler_holds_the_tokenizer(tmp_path):
    build_char_tokenizer().save_pretrained(tmp_path / "tok")
    args = argparse.Namespace(agent=None, endpoint="http://127.0.0.1:9", model_name="m", endpoint_timeout=None,
                              tokenizer=str(tmp_path / "tok"), chat=False)
    model = _model(args, None)
    assert model.endpoint.tokenizer is model.tokenizer
    assert model.endpoint._stops is not None  # the rule's per-tokenizer cache: the rule is applied
