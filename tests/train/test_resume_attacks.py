"""Resume from a run directory that was cut, copied short or edited: one line naming the file, or an exact resume.

Stage checkpoints (``cli._stage_check``, read before ``--resume`` loads any): a copy cut short leaves
files out whole. Before, ``stage_checkpoint_problem`` passed 4 of 4 such directories of real sharded
``save_pretrained`` weights: a missing shard, ``config.json`` or index failed only at the load (after
the stages before were re-evaluated, with transformers' traceback), and an index naming a shard that
does not hold a tensor loaded without it, that tensor initialised afresh (``lm_head.weight``
"MISSING" in transformers' report), a silently different model.

RL checkpoints (``train.checkpoint.load_latest``): before, 7 of 7 cut or edited checkpoint directories
got through -- silently, 4: ``latest`` naming a path out of its directory (``../b/step-000001``, an
absolute one) resumed a neighbour run's checkpoint; an unlisted ``model/*.safetensors`` was loaded over
the saved weights; a manifest that did not list ``state.json`` left it unverified; with a traceback, 3:
``latest`` naming a number, a manifest whose ``files`` is no mapping or whose entry has no size. And
``latest`` holding the bare name, the format the module docstring gave and the refusal's own remedy
("write its name into latest"), was refused as corrupt. Now each is one ``CheckpointError`` naming the
file, or (the bare name) a resume.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from posttrain.cli._stage_check import stage_checkpoint_problem
from posttrain.train.checkpoint import CheckpointError, load_latest, restore, save_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algo"))
from _tiny import make_model, make_tokenizer  # noqa: E402


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


# -- RL checkpoints -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two neighbour runs' checkpoint directories, each with one checkpoint (step 1), of different seeds."""
    tok = make_tokenizer()
    root = tmp_path_factory.mktemp("runs")
    for name, seed in (("a", 0), ("b", 1)):
        save_checkpoint(root / name, model=make_model(tok, seed=seed), tokenizer=None, optimizer=None,
                        scheduler=None, step=1, sampler_state={"seed": seed})
    return root / "a", root / "b"


def _latest(d: Path, text: str) -> None:
    (d / "latest").write_text(text)


def _manifest(d: Path, edit) -> None:
    path = d / "step-000001" / "MANIFEST.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _extra_weights(d: Path) -> None:
    state = {k: torch.zeros_like(v) for k, v in make_model(make_tokenizer(), seed=5).state_dict().items()}
    from safetensors.torch import save_file

    save_file(state, str(d / "step-000001" / "model" / "zz-extra.safetensors"))


ATTACKS = {
    "name-up": (lambda d: _latest(d, json.dumps({"name": "../b/step-000001"})), "latest"),
    "name-absolute": (lambda d: _latest(d, json.dumps({"name": str(d.parent / "b" / "step-000001")})), "latest"),
    "name-number": (lambda d: _latest(d, json.dumps({"name": 1})), "latest"),
    "files-list": (lambda d: _manifest(d, lambda m: m.update(files=[])), "MANIFEST.json"),
    "entry-sizeless": (lambda d: _manifest(d, lambda m: m["files"]["state.json"].pop("size")), "MANIFEST.json"),
    "state-unlisted": (lambda d: _manifest(d, lambda m: m["files"].pop("state.json")), "state.json"),
    "extra-weights": (_extra_weights, "zz-extra.safetensors"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_cut_or_edited_checkpoint_is_one_line_naming_the_file(runs, tmp_path, attack):
    a = shutil.copytree(runs[0], tmp_path / "a")
    shutil.copytree(runs[1], tmp_path / "b")
    edit, file = ATTACKS[attack]
    edit(a)
    with pytest.raises(CheckpointError) as e:
        ckpt = load_latest(a)
        restore(ckpt, make_model(make_tokenizer(), seed=9))
    msg = str(e.value)
    assert file in msg and "\n" not in msg, msg


def test_latest_holding_the_bare_name_resumes_as_the_refusal_says(runs, tmp_path):
    a = shutil.copytree(runs[0], tmp_path / "a")
    _latest(a, "step-000001\n")
    ckpt = load_latest(a)
    assert ckpt is not None and ckpt.step == 1 and ckpt.sampler_state == {"seed": 0}
