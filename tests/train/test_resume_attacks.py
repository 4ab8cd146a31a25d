"""Resume from a run directory that was cut, copied short or edited: one line naming the file, or an exact resume.

Stage checkpoints (``cli._stage_check``, read before ``--resume`` loads any): a copy cut short leaves
files out whole. Before, ``stage_checkpoint_problem`` passed 4 of 4 such directories of real sharded
``save_pretrained`` weights: a missing shard, ``config.json`` or index failed only at the load (after
the stages before were re-evaluated, with transformers' traceback), and an index naming a shard that
does not hold a tensor loaded without it, that tensor initialised afresh (``lm_head.weight``
"MISSING" in transformers' report), a silently different model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from posttrain.cli._stage_check import stage_checkpoint_problem


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """A small Llama saved by ``save_pretrained`` in shards: a stage checkpoint's weights and config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32))
    out = tmp_path_factory.mktemp("stage") / "sft"
    model.save_pretrained(out, max_shard_size="8KB")
    (out / "DONE").write_text("ok\n")
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _last_shard(d: Path) -> Path:
    return sorted(d.glob("model-*-of-*.safetensors"))[-1]


def _wrong_shard(d: Path) -> None:
    index = d / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    tensor, shard = next(iter(data["weight_map"].items()))
    data["weight_map"][tensor] = next(p.name for p in sorted(d.glob("model-*-of-*.safetensors")) if p.name != shard)
    index.write_text(json.dumps(data))


CUTS = {
    "shard": (lambda d: _last_shard(d).unlink(), "-of-", "missing (named by model.safetensors.index.json for "),
    "config": (lambda d: (d / "config.json").unlink(), "config.json", "missing (the load cannot build the model"),
    "index": (lambda d: (d / "model.safetensors.index.json").unlink(), "model.safetensors.index.json",
              "missing (the index of the sharded weights"),
    "wrong-shard": (_wrong_shard, "model.safetensors.index.json", "which that shard does not hold"),
}


def test_a_whole_sharded_checkpoint_passes(sharded):
    assert len(list(sharded.glob("model-*-of-*.safetensors"))) > 1
    assert stage_checkpoint_problem(sharded) is None


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_a_stage_checkpoint_copied_short_names_the_file(sharded, tmp_path, cut):
    edit, file, needle = CUTS[cut]
    d = _copy(sharded, tmp_path / cut)
    edit(d)
    why = stage_checkpoint_problem(d)
    assert why is not None and why.startswith(str(d)) and "\n" not in why, why
    assert file in why.split(":")[0] and needle in why, why


def test_the_wrong_shard_index_was_a_silently_different_model(sharded, tmp_path):
    """Why ``wrong-shard`` matters: transformers loads it, with one tensor initialised afresh."""
    from transformers import AutoModelForCausalLM

    d = _copy(sharded, tmp_path / "w")
    _wrong_shard(d)
    good = AutoModelForCausalLM.from_pretrained(sharded).state_dict()
    bad = AutoModelForCausalLM.from_pretrained(d).state_dict()
    assert any(not torch.equal(good[k], bad[k]) for k in good)

