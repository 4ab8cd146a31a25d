"""One rank of the data-parallel update test (tests/train/test_dist.py), run under
``torchrun --standalone --nproc_per_node=2``: shard a tiny Llama with FSDP2, run GRPO update steps on
a fixed batch (this rank's rows), optionally save/load the full state between runs; rank 0 writes
the metrics and the final full state dict to ``OUT``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from posttrain.train import _dist
from posttrain.train._step import LossSpec


def make_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def make_batch(step: int):
    """A GRPO-shaped batch: 4 prompts x G=4 minus one row (15 rows: one rank gets a padding row)."""
    from posttrain.train._step import PolicyBatch

    g = torch.Generator().manual_seed(100 + step)
    groups, size, p, c = 4, 4, 6, 10
    prompt = torch.randint(3, 64, (groups, p), generator=g).repeat_interleave(size, 0)
    comp = torch.randint(3, 64, (groups * size, c), generator=g)
    lengths = torch.randint(3, c + 1, (groups * size,), generator=g)
    cmask = (torch.arange(c)[None] < lengths[:, None]).float()
    ids = torch.cat([prompt, comp * cmask.long()], 1)[:-1]
    attn = torch.cat([torch.ones(groups * size, p), cmask], 1).long()[:-1]
    loss_mask = torch.cat([torch.zeros(groups * size, p), cmask], 1)[:-1]
    old = (-4.0 + 0.3 * torch.randn(loss_mask.shape, generator=g)) * loss_mask
    adv = torch.randn(groups * size, generator=g)[:-1]
    group = (torch.arange(groups * size) // size)[:-1]
    return PolicyBatch(input_ids=ids, attention_mask=attn, loss_mask=loss_mask, old_logp=old, adv=adv, group=group)


SPEC = LossSpec(agg="token_mean", clip_low=0.2, clip_high=0.28)
LR, MICRO, CLIP = 1e-3, 3, 1.0


def main() -> int:
    out, steps, first = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    load = sys.argv[4] if len(sys.argv) > 4 else ""
    rank, world, device = _dist.init()
    model = _dist.shard(make_model())
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    if load:
        saved = torch.load(load, weights_only=False)
        _dist.load_state(model, opt, saved["model"], saved["optim"])
    metrics = []
    for step in range(first, first + steps):
        local = _dist.rank_rows(make_batch(step), rank, world)
        metrics.append(_dist.update(model, opt, local, SPEC, micro_batch_size=MICRO, max_grad_norm=CLIP))
    model_state, optim_state = _dist.state(model, opt)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        torch.save({"model": model_state, "optim": optim_state}, out / "state.pt")
        (out / "metrics.json").write_text(json.dumps(metrics))
    torch.distributed.barrier()  # every rank's last collective done before any leaves
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as posttrain's ranks end (cli._ranks.end_rank): no teardown for gloo to abort in
