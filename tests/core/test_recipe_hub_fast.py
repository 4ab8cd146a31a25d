"""A recipe's hub ``model.name`` that is neither cached nor reachable is one line at once.

``posttrain run`` reads a hub model's config while the recipe is checked (before RUN/config.yaml
is written). Offline, huggingface_hub retried a name it had not cached for ~42 s, printing each
retry, before that line; ``hub_source`` (the check ``eval --model`` and ``generate`` use) now answers
first. The hub is pointed at a closed loopback port, as in test_cli_fuzz3.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from test_bad_inputs import MATH, assert_refused_in_one_line


@pytest.fixture
def ws(tmp_path, monkeypatch, closed_hub) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "train.jsonl").write_text(json.dumps(MATH) + "\n")
    (w / "eval.jsonl").write_text(json.dumps({**MATH, "id": "e1", "prompt": "2+3?", "answer": "5", "reference": "\\boxed{5}"}) + "\n")
    (w / "r.yaml").write_text(yaml.safe_dump({
        "stages": ["sft"], "model": {"name": "nope/x"},
        "tasks": {"train": [{"file": "train.jsonl"}], "eval": [{"file": "eval.jsonl"}]},
        "sft": {"demonstrations": "references"}}))
    monkeypatch.chdir(w)
    return w


@pytest.mark.parametrize("offline", [False, True])
def test_a_recipe_hub_model_neither_cached_nor_reachable_fails_at_once(ws, monkeypatch, capsys, offline):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    why = "HF_HUB_OFFLINE is set" if offline else "the hub http://127.0.0.1:9 cannot be reached ([Errno 111]"
    start = time.monotonic()
    assert_refused_in_one_line(capsys, ws, ["run", "r.yaml", "--out", "out"],
                               "model.name: model nope/x: not a local directory and not in the Hugging Face cache "
                               f"({ws.parent / 'hub'}), and {why}")
    assert time.monotonic() - start < 20, "retried the hub before its line (~42 s before hub_source)"
