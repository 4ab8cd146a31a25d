"""Training: one readable loop per method, checkpoints with exact resume, and the run pipeline.

- ``sft.train_sft``: supervised fine-tuning on demonstrations (completion-only loss).
- ``grpo.train_grpo``: RL from verifiable rewards (GRPO; PPO when given a critic).
- ``dpo.train_dpo``, ``rm.train_rm``: preference optimization and a Bradley-Terry reward model.
- ``checkpoint``: atomic checkpoints (model, optimizer, scheduler, RNG, sampler) for exact resume.
- ``pipeline.run_recipe``: ``posttrain run`` — the stages of a recipe, in order, into a run directory.

The shared update step (the policy loss, gradient accumulation) is in ``_step``, the token log-probs
in ``_logprobs``, LoRA in ``_lora``;
the loss math itself is in ``posttrain.algo``.
"""

import importlib
from typing import Any

# Exported lazily: `posttrain --help` imports posttrain.cli.run and should not pay for torch.
_EXPORTS = {
    "LossSpec": "posttrain.train._step",
    "PolicyBatch": "posttrain.train._step",
    "policy_update": "posttrain.train._step",
    "token_logprobs": "posttrain.train._logprobs",
    "CheckpointError": "posttrain.train.checkpoint",
    "load_latest": "posttrain.train.checkpoint",
    "restore": "posttrain.train.checkpoint",
    "save_checkpoint": "posttrain.train.checkpoint",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'posttrain.train' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = [
    "CheckpointError",
    "LossSpec",
    "PolicyBatch",
    "load_latest",
    "policy_update",
    "restore",
    "save_checkpoint",
    "token_logprobs",
]
