"""The PPO critic: a value head on the policy's starting backbone, trained on GAE returns.

``Critic.advantages`` turns one scalar outcome reward per sample into per-token advantages with
GAE (the reward sits on the last completion token, gamma 1 by default), whitened over the batch's
completion tokens; ``Critic.update`` fits the value head to the returns with the clipped value
loss. Values are aligned with ``token_logprobs``: position t holds V of the state *before* token t
(the hidden state at t-1), so advantages and log-probs index the same tokens.

Exact resume: ``save(dir, step)`` writes ``critic-<step>.pt`` (weights + optimizer) atomically
before the trainer's checkpoint of that step, whose manifest lists it (``critic_file``: a copy cut
short is refused when the checkpoint is verified); ``load(dir, step)`` restores the matching one, and
one that does not load (a checkpoint saved before its manifest listed the critic) is a
``CheckpointError`` naming it.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from posttrain.algo import aggregate, gae
from posttrain.algo.value import value_loss
from posttrain.train._optim import adamw
from posttrain.train._step import PolicyBatch
from posttrain.train.checkpoint import CheckpointError, save_beside
from posttrain.train.rm import make_reward_model, token_values


class Critic:
    def __init__(self, start_dir: Path, pad_id: int, *, lr: float, gamma: float = 1.0, lam: float = 0.95,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        self.model = make_reward_model(start_dir, dtype=dtype).to(device)
        self.model.config.pad_token_id = pad_id
        self.optimizer = adamw(self.model.parameters(), lr=lr)
        self.gamma, self.lam = gamma, lam

    def values(self, batch: PolicyBatch, rows: slice = slice(None)) -> torch.Tensor:  # (b, T), aligned
        v = token_values(self.model, batch.input_ids[rows], batch.attention_mask[rows])  # (b, T) V(h_t)
        return torch.nn.functional.pad(v[:, :-1], (1, 0))  # position t <- V(h_{t-1})

    @torch.no_grad()
    def advantages(
        self, batch: PolicyBatch, rewards: torch.Tensor  # (B,) NaN = infra error (its mask is 0)
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # adv, returns, old_values: (B, T)
        mask = batch.loss_mask
        old_values = self.values(batch) * mask
        last = (mask * torch.arange(mask.shape[1], device=mask.device)).argmax(-1)  # (B,) last completion position
        tok_rewards = torch.zeros_like(mask)
        tok_rewards[torch.arange(mask.shape[0], device=mask.device), last] = torch.nan_to_num(rewards, nan=0.0)
        adv, returns = gae(tok_rewards, old_values, mask, gamma=self.gamma, lam=self.lam)
        n = mask.sum().clamp(min=1.0)
        mean = (adv * mask).sum() / n
        std = (((adv - mean) ** 2 * mask).sum() / n).sqrt()
        return (adv - mean) / (std + 1e-8) * mask, returns, old_values

    def update(self, batch: PolicyBatch, returns: torch.Tensor, old_values: torch.Tensor, *,
               micro_batch_size: int, max_grad_norm: float) -> dict[str, float]:
        """One optimizer step of the value head over the whole batch (token-mean, micro-batched)."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        n_tok = float(batch.loss_mask.sum())
        total = 0.0
        for s in range(0, batch.input_ids.shape[0], micro_batch_size):
            rows = slice(s, s + micro_batch_size)
            loss_mat = value_loss(self.values(batch, rows), old_values[rows], returns[rows], batch.loss_mask[rows])
            loss = aggregate(loss_mat, batch.loss_mask[rows], "token_mean", num_items=max(n_tok, 1.0))
            loss.backward()
            total += float(loss.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_grad_norm))
        if n_tok > 0:
            self.optimizer.step()
        return {"value_loss": total, "value_grad_norm": grad_norm}

    def save(self, directory: Path, step: int) -> None:
        # beside and renamed, fsynced: a kill leaves no cut file, a full disk one line naming it
        save_beside({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()},
                    critic_file(directory, step))
        for old in sorted(directory.glob("critic-*.pt"), key=_step_of)[:-3]:  # the trainer keeps 2 checkpoints
            old.unlink()

    def load(self, directory: Path, step: int) -> None:
        path = critic_file(directory, step)
        if not path.exists():
            raise CheckpointError(f"{path}: the PPO critic of step {step} is missing; cannot resume exactly")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, EOFError, OSError, ValueError, KeyError, TypeError, pickle.UnpicklingError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CheckpointError(f"{path}: does not load as the PPO critic ({type(e).__name__}: {first}): cut "
                                  "short, or not this run's; cannot resume exactly") from None


def critic_file(directory: Path, step: int) -> Path:
    """The critic file the checkpoint of ``step`` in ``directory`` resumes with."""
    return directory / f"critic-{step}.pt"


def _step_of(p: Path) -> int:
    return int(p.stem.split("-")[1])
