"""GRPO (and PPO): RL from verifiable rewards, one readable loop.

    for step:
        sample   tasks from the pool, G completions each (token ids + sampling logprobs)
        score    each completion with its domain's verifier (sandboxed for code)
        advantage  group-relative (GRPO; Dr.GRPO, RLOO, REINFORCE++ by name), or PPO: GAE on a
                 critic's values (``rl.algorithm: ppo``, posttrain/train/_critic.py)
        loss     clipped surrogate per token (PPO clip / GSPO / CISPO), aggregated, + optional KL
        step     AdamW, gradient accumulation over micro-batches, grad clip
        log      metrics.jsonl, trajectories, checkpoint every N steps

Departures from the paper (Shao et al. 2024), stated plainly:
1) One policy update per generation batch, so ``old_logp`` is the *sampling* logprob of each token
   (exactly as sampled; the ratio is 1 at the update and the clip is a guard, as in nanochat's
   chat_rl.py and verl's on-policy mode).
2) No KL to a reference by default (``kl_coef: 0``, as TRL's and DAPO's defaults); when on, it is
   in the loss, estimator k3, with the SFT model as the reference.
3) Infra-error samples (reward NaN) get advantage 0 and loss mask 0: they are dropped from the
   update, never scored 0 (DESIGN.md "three outcomes").

Launch (1 CPU or GPU):  posttrain run configs/tiny-grpo.yaml --out runs/tiny
Resume after a crash:   posttrain run configs/tiny-grpo.yaml --out runs/tiny --resume
N GPUs (torch.distributed) is not wired yet: the update step is FSDP-ready, the loop is not.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from posttrain.algo import ADVANTAGES, kl_in_reward
from posttrain.algo.shaping import frac_zero_std, informative_groups
from posttrain.policy import Policy, SamplingParams
from posttrain.rollout import Episode, SingleTurnEnv, VerdictCache, Verifier, as_rollout, run_batch
from posttrain.tasks import TaskSampler
from posttrain.train._batch import collate
from posttrain.train._critic import Critic
from posttrain.train._runlog import JsonlWriter, rollout_record
from posttrain.train._step import LossSpec, PolicyBatch, policy_update, token_logprobs
from posttrain.train.checkpoint import load_latest, restore, save_checkpoint
from posttrain.train.recipe import RLConfig
from posttrain.types import Rollout, Task
from posttrain.verify.rewards import COMPONENTS, RewardWeights, combine


def loss_spec(cfg: RLConfig) -> LossSpec:
    """The recipe's RL section -> the loss hyperparameters (one source of truth: the recipe)."""
    return LossSpec(
        policy_loss=cfg.policy_loss,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        agg=cfg.loss_agg,
        norm_const=float(cfg.max_new_tokens) if cfg.loss_agg == "seq_mean_token_sum_norm" else None,
        kl_coef=cfg.kl_coef if cfg.kl_placement == "loss" else 0.0,
        kl_kind=cfg.kl_kind,
        temperature=cfg.temperature,
    )


def build_batch(groups: Sequence[Sequence[Rollout]], adv: torch.Tensor, pad_id: int,
                device: torch.device | str = "cpu", *, mask_truncated: bool = False) -> PolicyBatch:
    """Rollouts (N groups of G) + advantages (N, G) -> a PolicyBatch of N*G rows, token-exact.

    Infra-error rows get no gradient; with ``mask_truncated`` neither do completions that hit the
    length cap (DAPO's overlong filtering)."""
    flat = [r for g in groups for r in g]
    rows = collate(
        [r.prompt_ids for r in flat],
        [r.completion_ids for r in flat],
        pad_id=pad_id,
        values=[r.logprobs for r in flat],
    )
    valid = torch.tensor([not r.verdict.is_infra_error and not (mask_truncated and r.finish_reason == "length")
                          for r in flat], dtype=torch.float32)  # (B,)
    return PolicyBatch(
        input_ids=rows.input_ids.to(device),
        attention_mask=rows.attention_mask.to(device),
        loss_mask=(rows.loss_mask * valid[:, None]).to(device),
        old_logp=rows.values.to(device),
        adv=adv.reshape(-1).to(device),
    )


def rewards_of(
    groups: Sequence[Sequence[Rollout]],
    weights: RewardWeights,
    *,
    reward_model: Callable[[Sequence[Rollout]], torch.Tensor] | None = None,
    reward_model_weight: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted rewards (N, G), NaN = infra error, and the mean of each weighted component.

    With a reward model (RLHF), ``reward_model_weight * rm(rollout)`` is added as component "rm";
    an infra-error sample stays NaN whatever the reward model says.
    """
    parts = [[combine(r.verdict, weights, completion_tokens=len(r.completion_ids)) for r in g] for g in groups]
    rewards = torch.tensor([[p.total for p in g] for g in parts], dtype=torch.float32)
    scored = [p for g in parts for p in g if p.total == p.total]  # not NaN
    means = {f"reward/{k}": sum(p.components[k] for p in scored) / max(len(scored), 1) for k in COMPONENTS}
    if reward_model is not None:
        rm = reward_model_weight * reward_model([r for g in groups for r in g]).reshape(rewards.shape)  # (N, G)
        rewards = rewards + rm  # NaN stays NaN
        means["reward/rm"] = float(rm[~torch.isnan(rewards)].mean()) if scored else float("nan")
    return rewards, means


def sample_groups(
    policy: Policy,
    sampler: TaskSampler,
    verifiers: Mapping[str, Verifier],
    cfg: RLConfig,
    reward_weights: RewardWeights,
    reward_model: Callable[[Sequence[Rollout]], torch.Tensor] | None,
    *,
    workers: int,
    cache: VerdictCache,
    step: int = 0,
) -> tuple[list[Task], list[list[Rollout]], dict[str, float]]:
    """Draw ``prompts_per_step`` tasks and G rollouts each. With ``dynamic_sampling`` (DAPO), groups
    whose rewards are all equal carry no gradient: drop them and draw more tasks, at most
    ``max_refills`` times; the batch may then be smaller than asked (logged as groups_kept). If no
    group is informative at all, the last draw is kept as is (its advantages are zero)."""
    tasks: list[Task] = []
    groups: list[list[Rollout]] = []
    drawn = 0
    for _ in range(1 + (cfg.max_refills if cfg.dynamic_sampling else 0)):
        new_tasks = sampler.next(cfg.prompts_per_step - len(tasks))
        new_groups = sample_episodes(policy, new_tasks, verifiers, cfg, workers=workers, cache=cache,
                                     group_ids=[f"{step}/{drawn + k}/{t.id}" for k, t in enumerate(new_tasks)],
                                     policy_version=step)
        drawn += len(new_tasks)
        keep = [True] * len(new_tasks)
        if cfg.dynamic_sampling:
            rewards, _ = rewards_of(new_groups, reward_weights, reward_model=reward_model,
                                    reward_model_weight=cfg.reward_model_weight)
            keep = informative_groups(rewards).tolist()
        tasks += [t for t, k in zip(new_tasks, keep, strict=True) if k]
        groups += [g for g, k in zip(new_groups, keep, strict=True) if k]
        if len(tasks) >= cfg.prompts_per_step:
            break
    if not groups:
        tasks, groups = new_tasks, new_groups
    return tasks, groups, {"groups_drawn": float(drawn), "groups_kept": float(len(groups))}


def sample_episodes(policy: Policy, tasks: Sequence[Task], verifiers: Mapping[str, Verifier], cfg: RLConfig, *,
                    workers: int, cache: VerdictCache, group_ids: Sequence[str], policy_version: int
                    ) -> list[list[Rollout]]:
    """G single-turn episodes per task through the episode runner, as ``Rollout`` views: one
    ``generate`` call over every prompt (seed None: torch's stream continues, as it always did)."""
    g = cfg.group_size
    episodes = [Episode(t, SingleTurnEnv(verifiers[t.domain], policy.encode_prompt, cache=cache), gid, i)
                for t, gid in zip(tasks, group_ids, strict=True) for i in range(g)]
    trajs = run_batch(policy.sampler(), episodes,
                      SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens),
                      workers=workers, policy_version=policy_version)
    return [[as_rollout(t) for t in trajs[k * g : (k + 1) * g]] for k in range(len(tasks))]


def train_grpo(
    policy: Policy,
    train_tasks: Sequence[Task],
    verifiers: Mapping[str, Verifier],
    cfg: RLConfig,
    *,
    reward_weights: RewardWeights,
    reward_model: Callable[[Sequence[Rollout]], torch.Tensor] | None = None,
    critic: Critic | None = None,
    out: Path,
    seed: int,
    workers: int,
    resume: bool = False,
    log: Callable[[dict[str, float]], None] = lambda m: None,
    progress: Callable[[int], None] = lambda step: None,
) -> int:
    """Run GRPO (or PPO, given a ``critic``) in place on ``policy``. Returns the steps done."""
    model = policy.model
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    warmup = max(1, cfg.steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    sampler = TaskSampler(train_tasks, seed=seed)
    spec = loss_spec(cfg)
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
    ckpt_dir = out / "checkpoints" / "rl-state"
    start = 0
    torch.manual_seed(seed)
    if resume and (ckpt := load_latest(ckpt_dir)) is not None:
        restore(ckpt, model, optimizer, scheduler)
        sampler.load_state(ckpt.sampler_state)
        if ref_model is not None:  # the reference is the policy RL started from, saved beside
            ref_model.load_state_dict(model.state_dict() if ckpt.step == 0 else _load_ref(ckpt_dir))
        start = ckpt.step
        if critic is not None:
            critic.load(ckpt_dir, start)
    if ref_model is not None and start == 0:
        torch.save(ref_model.state_dict(), _ref_path(ckpt_dir))
    trajectories = JsonlWriter(out / "trajectories" / "rl.jsonl")
    cache = VerdictCache()
    t0 = time.perf_counter()
    tokens_done = 0
    for step in range(start, cfg.steps):
        t_step = time.perf_counter()
        # --- sample + score (dynamic sampling refills groups whose rewards have no variance)
        tasks, groups, sampled = sample_groups(policy, sampler, verifiers, cfg, reward_weights, reward_model,
                                               workers=workers, cache=cache, step=step)
        rewards, reward_parts = rewards_of(groups, reward_weights, reward_model=reward_model,
                                           reward_model_weight=cfg.reward_model_weight)  # (N, G)
        batch = build_batch(groups, torch.zeros_like(rewards), policy.tokenizer.pad_token_id, device,
                            mask_truncated=cfg.mask_truncated)
        if ref_model is not None:
            with torch.no_grad():
                ref_logp = token_logprobs(ref_model, batch.input_ids, batch.attention_mask,
                                          loss_mask=batch.loss_mask, temperature=cfg.temperature)
            batch = dataclasses.replace(batch, ref_logp=ref_logp)
            if cfg.kl_placement == "reward":  # r - beta * sum_t KL_t, before advantages
                shaped = kl_in_reward(rewards.reshape(-1), batch.old_logp.cpu(), ref_logp.cpu(), batch.loss_mask.cpu(),
                                      kl_coef=cfg.kl_coef, kind=cfg.kl_kind).reshape(rewards.shape)
                reward_parts["kl_in_reward"] = float(torch.nanmean(rewards - shaped)) / cfg.kl_coef  # mean seq KL
                rewards = shaped
        # --- advantages (NaN rewards -> advantage 0, masked in the batch)
        if critic is None:  # group-relative
            std_kw = {} if cfg.scale_by_std is None else {"scale_by_std": cfg.scale_by_std}
            adv = ADVANTAGES[cfg.advantage](rewards, **std_kw)  # (N, G)
            batch = dataclasses.replace(batch, adv=adv.reshape(-1).to(device))
        else:  # PPO: GAE on the critic's values, per token
            adv_tok, returns, old_values = critic.advantages(batch, rewards.reshape(-1).to(device))  # (B, T) each
            batch = dataclasses.replace(batch, adv=adv_tok)
        # --- loss + step
        stats = policy_update(model, optimizer, batch, spec,
                              micro_batch_size=cfg.micro_batch_size, max_grad_norm=cfg.max_grad_norm)
        scheduler.step()
        if critic is not None:
            stats |= critic.update(batch, returns, old_values, micro_batch_size=cfg.micro_batch_size,
                                   max_grad_norm=cfg.max_grad_norm)
        # --- log
        tokens_done += int(batch.attention_mask.sum())
        wall = time.perf_counter() - t0
        metrics = step_metrics(groups, tasks, rewards, stats) | reward_parts | sampled
        metrics.update(step=step, wall_s=wall, step_s=time.perf_counter() - t_step,
                       tokens_per_s=tokens_done / max(wall, 1e-9), lr=scheduler.get_last_lr()[0])
        log(metrics)
        warn_if_degenerate(metrics)
        trajectories.write_many(  # wall_s of a record: the wall time of the step that produced it
            rollout_record(t, r, stage="rl", step=step, wall_s=metrics["step_s"])
            for t, g in zip(tasks, groups, strict=True) for r in g
        )
        progress(step + 1)
        done = step + 1
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            if critic is not None:  # before the checkpoint that names this step
                critic.save(ckpt_dir, done)
            save_checkpoint(ckpt_dir, model=model, tokenizer=policy.tokenizer, optimizer=optimizer,
                            scheduler=scheduler, step=done, sampler_state=sampler.state(),
                            extra={"finished": done == cfg.steps}, keep_last=2)
    trajectories.close()
    model.eval()
    return cfg.steps


def step_metrics(groups: Sequence[Sequence[Rollout]], tasks: Sequence[Task], rewards: torch.Tensor,
                 stats: Mapping[str, float]) -> dict[str, float]:
    """Reward, outcome and length statistics of one step, plus the update's own stats."""
    flat = [r for g in groups for r in g]
    valid = ~torch.isnan(rewards)
    r = rewards[valid]
    out = {k: float(v) for k, v in stats.items()}  # loss, clip_frac, approx_kl, entropy, grad_norm, ...
    out.update(
        reward_mean=float(r.mean()) if r.numel() else float("nan"),
        reward_std=float(r.std()) if r.numel() > 1 else 0.0,
        frac_zero_std=frac_zero_std(rewards),
        infra_error_rate=float((~valid).float().mean()),
        completion_len=sum(len(x.completion_ids) for x in flat) / len(flat),
        clipped_ratio=sum(x.finish_reason == "length" for x in flat) / len(flat),
        kl=float(stats.get("kl", 0.0)),  # 0 when no KL term is in the loss (kl_coef 0)
    )
    for domain in sorted({t.domain for t in tasks}):
        outcomes = [r.verdict.passed for t, g in zip(tasks, groups, strict=True) if t.domain == domain for r in g]
        out[f"pass_rate/{domain}"] = sum(outcomes) / len(outcomes)
    return out


def warn_if_degenerate(metrics: Mapping[str, float]) -> None:
    """Degenerate batches say so (trl#5697/#6263): no reward variance, or every completion cut.
    Python shows each warning once per run."""
    if metrics["frac_zero_std"] >= 0.95:
        warnings.warn("95%+ of groups have zero reward variance, so they give no gradient (tasks too easy "
                      "or too hard; try rl.dynamic_sampling); see frac_zero_std in metrics.jsonl", stacklevel=2)
    if metrics["clipped_ratio"] >= 0.95:
        warnings.warn("95%+ of completions hit max_new_tokens (raise rl.max_new_tokens or set "
                      "rl.mask_truncated); see clipped_ratio in metrics.jsonl", stacklevel=2)


def _ref_path(ckpt_dir: Path) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return ckpt_dir / "reference.pt"


def _load_ref(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(_ref_path(ckpt_dir), map_location="cpu", weights_only=True)
