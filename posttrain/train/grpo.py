"""GRPO (and PPO): RL from verifiable rewards over episodes, one readable loop.

    for step:
        sample   tasks from the pool, G episodes each through the episode runner (``Trajectory``:
                 prompt, then actions sampled and observations inserted, as ids + sampling logprobs),
                 by policy version max(0, step - rl.max_staleness) (posttrain/train/_overlap.py:
                 with K > 0 the next K batches are sampled while this step trains); with
                 rl.adaptive_temperature / rl.adaptive_budget each task at its own temperature and
                 token cap (``adaptive_sampling``), each row then scored at its own temperature
        score    each episode by its last verdict (posttrain/train/_credit.py; its domain's verifier, through the execution
                 service ``posttrain.sched.Service``: workers, infra retries, cache, breakers)
        advantage  group-relative over the carried groups (GRPO; Dr.GRPO, RLOO, REINFORCE++ by
                 name), or PPO: GAE on a critic's values (``rl.algorithm: ppo``, posttrain/train/_critic.py)
        loss     clipped surrogate on every action token of each episode (never the prompt's or an
                 observation's), aggregated, + optional KL
        step     AdamW, gradient accumulation over micro-batches, grad clip
        log      metrics.jsonl, trajectories (one record per attempt), checkpoint every N steps

Episodes are single-turn by default (one answer, one verdict: today's recipes, bit-identical to
before); ``EpisodeSpec`` gives the environment, step limit, token budget and credit of multi-turn
ones (repair, tools): the episode's reward on every model token, its success optionally discounted
per extra attempt, optional per-turn process rewards; an episode cut before a verdict scores as the
worst failure (``failure_floor``): no way of failing pays more than answering wrong (docs/contracts.md,
"Reward accounting").

Departures from the paper (Shao et al. 2024), stated plainly:
1) One policy update per generation batch, so ``old_logp`` is the *sampling* logprob of each token
   (exactly as sampled; the ratio is 1 at the update and the clip is a guard, as in nanochat's
   chat_rl.py and verl's on-policy mode). Sampling uses ``top_p = 1, top_k = 0``, the distribution
   the trainer scores (``softmax(logits / T)``), so the ratio is unbiased.
2) No KL to a reference by default (``kl_coef: 0``, as TRL's and DAPO's defaults); when on, it is
   in the loss, estimator k3, with the SFT model as the reference.
3) A sample that stays an infra error (the service ran out of infra retries: reward NaN) drops
   its whole group from the update (advantage 0, loss mask 0 for every member; a partial group
   biases group-relative advantages, reference/scheduling.md), never scored 0 (DESIGN.md "three
   outcomes"); counted as ``groups_dropped``. An episode cut by the step limit or token budget, or
   ended with no verdict, is never masked: it scores the least a failure can (a cut the policy can
   cause must cost what a failure costs).
4) With ``rl.max_staleness`` K > 0 a batch sampled by an older version is corrected by truncated
   importance sampling (decoupled PPO: ``old_logp`` recomputed under the current weights, the loss
   times min(pi_current / pi_sampling, 2) per token; ``_overlap.correct_staleness``). K = 0 is 1).

Launch (1 CPU or GPU):  posttrain run configs/tiny-grpo.yaml --out runs/tiny
Resume after a crash:   posttrain run configs/tiny-grpo.yaml --out runs/tiny --resume
On a Ray cluster:       posttrain run configs/tiny-grpo.yaml --out runs/tiny --backend ray [--ray-address H:P]
N processes (GPUs):     rl.data_parallel: N in the recipe (``dp``: posttrain/train/_dist.py; the
                        ranks are launched by posttrain/cli/_ranks.py)
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import pickle
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from posttrain.algo import ADVANTAGES, kl_in_reward
from posttrain.algo.shaping import frac_zero_std, informative_groups
from posttrain.evaluate.metrics import episode_metrics, tool_call_validity
from posttrain.evaluate.records import trajectory_records
from posttrain.policy import Policy, Sampler, SamplingParams
from posttrain.rollout import (
    AdaptiveSampling,
    BudgetController,
    TemperatureController,
    dedup_advantages,
    diversity_metrics,
    run_batch,
)
from posttrain.rollout.episodes import Episodes, make_episodes
from posttrain.sched import Service
from posttrain.tasks import TaskPool, TaskSampler, canary_metrics, domain_metrics, fill_batch, is_canary
from posttrain.train import _dist
from posttrain.train._batch import trajectory_rows
from posttrain.train._credit import Groups, process_advantages, rewards_of, without_canaries
from posttrain.train._critic import Critic, critic_file
from posttrain.train._dist import DataParallel
from posttrain.train._logprobs import token_logprobs
from posttrain.train._optim import LOW_PRECISION, adamw
from posttrain.train._overlap import (
    TIS_CAP,
    CopiedWeights,
    Rollouts,
    SharedWeights,
    Weights,
    batches_from_json,
    batches_to_json,
    correct_staleness,
    local_weights,
    overlap_metrics,
)
from posttrain.train._runlog import JsonlWriter
from posttrain.train._step import LossSpec, PolicyBatch, policy_update, row_temperature
from posttrain.train.checkpoint import (
    CheckpointError,
    load_latest,
    load_weights,
    restore,
    rng_state,
    save_beside,
    save_checkpoint,
)
from posttrain.train.recipe import RLConfig
from posttrain.types import Rollout, Task, Trajectory
from posttrain.verify.rewards import RewardWeights

REFERENCE = "reference.pt"
"""The KL reference (the policy RL started from), saved once beside the checkpoints, each of which lists it.
Written at step 0 from the start weights (again by a run resumed before its first checkpoint), beside
and renamed (``save_beside``); from a later checkpoint it is loaded, never rebuilt -- its manifest's
sha256 names the one the run started from, and a cut or replaced file is ``load_latest``'s one line."""


@dataclass(frozen=True)
class EpisodeSpec:
    """How RL runs and credits episodes. The defaults are single-turn RL: one answer, one verdict.

    Credit across attempts: the episode's reward (its last verdict, weighted) is put on every model
    token of the episode, its success (every component but the length penalty) times
    ``attempt_discount ** (attempts - 1)`` (AReaL's ``turn_discount``), so a repair that needed more
    attempts earns less and a failure's penalty never shrinks with them. With ``process_coef`` c > 0, the tokens of an
    attempt k that is not the last get c * (r_k - r_last) more advantage, r_k being that
    intermediate verdict's own weighted reward (``process_advantages``).
    """

    plan: Episodes | None = None
    """The episodes (``posttrain.rollout.episodes.make_episodes``: environments, step limit, token
    budget); None = single-turn episodes over the run's service (``SingleTurnEnv``)."""
    attempt_discount: float = 1.0
    """Multiplier of the success per attempt after the first, in (0, 1]; 1 = every attempt counts alike."""
    process_coef: float = 0.0
    """Weight of per-turn process rewards from intermediate verdicts (GRPO only); 0 = off."""

    def __post_init__(self) -> None:
        if not 0.0 < self.attempt_discount <= 1.0:
            raise ValueError(f"EpisodeSpec.attempt_discount must be in (0, 1], got {self.attempt_discount}")
        if self.process_coef < 0.0:
            raise ValueError(f"EpisodeSpec.process_coef must be >= 0, got {self.process_coef}")

    @property
    def max_turns(self) -> int:
        """The step limit: actions per episode at most."""
        return self.plan.max_turns if self.plan is not None else 1

    @property
    def max_tokens(self) -> int | None:
        """The token budget after the prompt, actions and observations together; None = none."""
        return self.plan.max_tokens if self.plan is not None else None

    def episodes_for(self, policy: Policy, service: Service) -> Episodes:
        """The plan, or single-turn episodes of ``policy`` verified through ``service``."""
        return self.plan or make_episodes("single", (), policy, service=service)


def loss_spec(cfg: RLConfig, episodes: EpisodeSpec | None = None) -> LossSpec:
    """The recipe's RL section -> the loss hyperparameters (one source of truth: the recipe).

    Dr.GRPO's constant (``seq_mean_token_sum_norm``) is the most action tokens an episode can
    have: ``max_new_tokens`` (``adaptive_budget.high`` when on) per turn over ``max_turns`` turns,
    capped by the token budget."""
    most = cfg.most_new_tokens
    if episodes is not None:
        most *= episodes.max_turns
        most = most if episodes.max_tokens is None else min(most, episodes.max_tokens)
    return LossSpec(
        policy_loss=cfg.policy_loss,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        agg=cfg.loss_agg,
        norm_const=float(most) if cfg.loss_agg == "seq_mean_token_sum_norm" else None,
        kl_coef=cfg.kl_coef if cfg.kl_placement == "loss" else 0.0,
        kl_kind=cfg.kl_kind,
        temperature=cfg.temperature,
        tis_cap=TIS_CAP if cfg.max_staleness > 0 else None,  # only rows with sampling_logp: stale ones
    )


def adaptive_sampling(cfg: RLConfig) -> AdaptiveSampling | None:
    """The recipe's per-task temperature and token budget (``rl.adaptive_temperature``,
    ``rl.adaptive_budget``), each starting every task at the recipe's fixed value; None when both are
    off (every task at ``rl.temperature`` and ``rl.max_new_tokens``: one sampling call, as always)."""
    temp, budget = cfg.adaptive_temperature, cfg.adaptive_budget
    if temp is None and budget is None:
        return None
    return AdaptiveSampling(
        cfg.temperature, cfg.max_new_tokens,
        temperatures=None if temp is None else TemperatureController(
            base=cfg.temperature, low=cfg.temperature, high=temp.high, target_dup=temp.target_dup, step=temp.step),
        budgets=None if budget is None else BudgetController(
            base=cfg.max_new_tokens, low=budget.low, high=cfg.most_new_tokens, easy=budget.easy, hard=budget.hard,
            margin=budget.margin, grow=budget.grow),
    )


def group_by_id(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
    """Episodes grouped by their carried ``group_id``, groups in order of first appearance."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t)
    return list(groups.values())


def group_advantages(groups: Groups, rewards: torch.Tensor, cfg: RLConfig, *,
                     kl_term: torch.Tensor | None = None) -> torch.Tensor:  # (N, G)
    """The recipe's group-relative advantages of ``rewards`` (N, G; NaN -> 0). With ``rl.dedup`` a
    repeated completion counts once in its group's baseline and every copy is trained with its first
    copy's advantage (``dedup_advantages``): never masked, so a copy of a failure costs what it does.

    ``kl_term`` (N, G): ``-beta * KL`` of each row (``rl.kl_placement: reward``), ``rewards`` without it.
    The advantage is the rewards' plus the KL term's centred by the same estimator without the std
    scaling: the sum, exactly, where the estimator is linear (no std) and ``rl.dedup`` is off (with it,
    each part is capped by its advantage without dedup on its own), and a KL difference is never
    divided by a reward std. Scaled with the rewards, a group failing alike (rewards that differ only by
    beta * KL, ~1e-3) got full-size advantages from its KL alone: an empty answer, nearest the
    reference, +0.95 where a wrong one got +0.78 (GRPO), and RLOO's leave-one-out std gave a pass +1478."""
    std_kw = {} if cfg.scale_by_std is None else {"scale_by_std": cfg.scale_by_std}
    estimator = functools.partial(ADVANTAGES[cfg.advantage], **std_kw)
    adv = dedup_advantages(groups, rewards, estimator) if cfg.dedup else estimator(rewards)
    if kl_term is not None:
        centred = functools.partial(ADVANTAGES[cfg.advantage], scale_by_std=False)
        adv = adv + (dedup_advantages(groups, kl_term, centred) if cfg.dedup else centred(kl_term))
    return adv


def build_batch(groups: Groups, rewards: torch.Tensor, pad_id: int, device: torch.device | str = "cpu", *,
                temperatures: bool = False) -> PolicyBatch:
    """Episodes (N groups of G) -> a PolicyBatch of N*G rows, token-exact, advantages 0 for now.

    A row is the whole episode (``Trajectory.ids``); the loss mask covers its action tokens only,
    never the prompt's or the observations'; ``old_logp`` are the sampling logprobs; ``group`` is
    the carried group. Rows whose reward (N, G) is NaN (a group dropped for an infra error) get no
    gradient; every other row does, a truncated or cut episode's too (a failure that runs long is
    not shielded from its negative advantage: docs/contracts.md, "Reward accounting").
    ``temperatures``: each row carries the temperature its episode was sampled at
    (``Trajectory.temperature``), which it is scored at (tasks sampled at their own temperatures)."""
    flat = [t for g in groups for t in g]
    if temperatures and any(t.temperature is None for t in flat):
        raise ValueError("build_batch: temperatures=True needs each trajectory's sampling temperature "
                         "(Trajectory.temperature, set by the episode runner)")
    rows = trajectory_rows(flat, pad_id=pad_id)
    valid = ~torch.isnan(rewards.reshape(-1))  # (B,)
    group = torch.tensor([k for k, g in enumerate(groups) for _ in g], dtype=torch.long)
    return PolicyBatch(
        input_ids=rows.input_ids.to(device),
        attention_mask=rows.attention_mask.to(device),
        loss_mask=(rows.loss_mask * valid.float()[:, None]).to(device),
        old_logp=rows.values.to(device),
        adv=torch.zeros(len(flat), device=device),
        group=group.to(device),
        temperature=torch.tensor([t.temperature for t in flat], device=device) if temperatures else None,
    )


def sample_groups(
    policy: Policy,
    sampler: TaskSampler | TaskPool,
    service: Service,
    cfg: RLConfig,
    reward_weights: RewardWeights,
    reward_model: Callable[[Sequence[Rollout]], torch.Tensor] | None,
    *,
    step: int = 0,
    episodes: EpisodeSpec = EpisodeSpec(),
    generator: Sampler | None = None,
    policy_version: int | None = None,
    adaptive: AdaptiveSampling | None = None,
    dp: DataParallel | None = None,
) -> tuple[list[Task], list[list[Trajectory]], dict[str, float]]:
    """Draw ``prompts_per_step`` tasks and G episodes each; the sampler observes every group drawn
    (the task pool learns difficulties, filters and levels from them). With ``dynamic_sampling``
    (DAPO), groups whose rewards are all equal carry no gradient: they are dropped and more tasks
    drawn until the batch is full, at most ``max_refills`` more draws, then ``TaskError`` naming
    the counts (``posttrain.tasks.fill_batch``: never a silent short batch). Canary tasks (the
    pool's ``canary_rate``) are never kept for their variance: drawn by a refill, their groups ride
    along after the batch; the loop masks every canary group (``is_canary``) and the metrics say
    whether one passed. ``generator``: the sampler of the version that samples (default
    ``policy.sampler()``), whose number every trajectory carries (``policy_version``, default ``step``).
    ``adaptive``: each task's group sampled at its own temperature and token cap, and observed by
    the controllers once verified (``rl.adaptive_temperature``, ``rl.adaptive_budget``). ``dp``: this
    rank samples its share of the tasks and every rank gets every group (``sample_episodes``); every
    rank skips the domains any rank's breaker holds open, so that all draw alike."""
    drawn: list[tuple[Task, list[Trajectory], list[float]]] = []  # every group drawn: the per-domain metrics
    settings: list[tuple[float, int]] = []  # what each drawn group was sampled with (adaptive only)
    skipped = sampler.skipped

    def draw(k: int) -> tuple[list[Task], list[list[Trajectory]], list[bool]]:
        skip = service.open_domains() if dp is None else set().union(*dp.every(set(service.open_domains())))
        new_tasks = sampler.next(k, skip=skip, step=step)  # open breaker: skipped
        new_settings = None if adaptive is None else adaptive.settings([t.id for t in new_tasks])
        new_groups = sample_episodes(policy, new_tasks, service, cfg,
                                     group_ids=[f"{step}/{len(drawn) + i}/{t.id}" for i, t in enumerate(new_tasks)],
                                     policy_version=step if policy_version is None else policy_version,
                                     episodes=episodes, generator=generator, settings=new_settings, dp=dp)
        rewards, _ = rewards_of(new_groups, reward_weights,  # the reward model scores only what it decides
                                reward_model=reward_model if cfg.dynamic_sampling else None,
                                reward_model_weight=cfg.reward_model_weight,
                                attempt_discount=episodes.attempt_discount)
        sampler.observe(new_tasks, [[None if math.isnan(e.reward) else bool(e.verdicts) and e.verdicts[-1].passed
                                     for e in g] for g in new_groups])
        if adaptive is not None and new_settings is not None:
            adaptive.observe([t.id for t in new_tasks], new_groups)
            settings.extend(new_settings)
        drawn.extend(zip(new_tasks, new_groups, rewards.tolist(), strict=True))
        keep = informative_groups(rewards).tolist() if cfg.dynamic_sampling else [True] * len(new_tasks)
        return new_tasks, new_groups, [ok and (not cfg.dynamic_sampling or not is_canary(t))
                                       for ok, t in zip(keep, new_tasks, strict=True)]

    filled = fill_batch(draw, want=cfg.prompts_per_step, max_draws=1 + (cfg.max_refills if cfg.dynamic_sampling else 0))
    kept = {id(g) for g in filled.groups}
    riding = [(t, g) for t, g, _ in drawn if is_canary(t) and id(g) not in kept]
    tasks, groups = filled.tasks + [t for t, _ in riding], filled.groups + [g for _, g in riding]
    return tasks, groups, {"groups_drawn": float(filled.drawn), "groups_kept": float(len(filled.groups)),
                           "tasks_skipped": float(sampler.skipped - skipped), **drawn_metrics(drawn), **sampler.metrics(),
                           **({} if adaptive is None else adaptive.metrics(settings))}


def drawn_metrics(drawn: Sequence[tuple[Task, Sequence[Trajectory], Sequence[float]]]) -> dict[str, float]:
    """Of every group a step drew (kept or not; ``(task, episodes, rewards)``): ``zero_variance_drawn``
    (the share without reward variance, canaries aside), the per-domain metrics
    (``posttrain.tasks.domain_metrics``) and, when canaries were drawn, ``canary/*``."""
    honest = [r for t, _, r in drawn if not is_canary(t)]
    out = {"zero_variance_drawn": 1.0 - float(informative_groups(torch.tensor(honest)).float().mean()) if honest else 0.0}
    out |= domain_metrics([t for t, _, _ in drawn], [g for _, g, _ in drawn], [r for _, _, r in drawn])
    if any(is_canary(t) for t, _, _ in drawn):
        out |= canary_metrics([t for t, _, _ in drawn], [g for _, g, _ in drawn])
    return out


def sample_episodes(policy: Policy, tasks: Sequence[Task], service: Service, cfg: RLConfig, *,
                    group_ids: Sequence[str], policy_version: int,
                    episodes: EpisodeSpec = EpisodeSpec(), generator: Sampler | None = None,
                    settings: Sequence[tuple[float, int]] | None = None,
                    dp: DataParallel | None = None) -> list[list[Trajectory]]:
    """G episodes per task through the episode runner, grouped by their carried ``group_id``, in the
    order of ``tasks``. ``settings``: each task's (temperature, max_new_tokens); default the recipe's
    for all. Tasks of one setting run together, one ``run_batch`` per setting in order of first
    appearance (its ``SamplingParams`` are one per call): with a single setting, round 0 is one
    ``generate`` call over every prompt (seed None: torch's stream continues, as always).
    Single-turn episodes are verified as ``service`` jobs of their group; the steps of stateful ones
    run as its ``Step`` jobs, an infra error restarting the episode (``rollout.run_batch``).
    ``dp``: this rank samples and verifies its share (``DataParallel.share``), then every rank's
    groups are gathered: every rank returns them all, in the order of ``tasks``."""
    if dp is not None:
        mine = dp.share(len(tasks))
        groups = sample_episodes(policy, [tasks[k] for k in mine], service, cfg,
                                 group_ids=[group_ids[k] for k in mine], policy_version=policy_version,
                                 episodes=episodes, generator=generator,
                                 settings=None if settings is None else [settings[k] for k in mine])
        return dp.gather(groups, len(tasks))
    plan, sampler = episodes.episodes_for(policy, service), generator or policy.sampler()
    by_setting: dict[tuple[float, int], list[int]] = {}
    for k, setting in enumerate(settings or [(cfg.temperature, cfg.max_new_tokens)] * len(tasks)):
        by_setting.setdefault(setting, []).append(k)
    out: dict[str, list[Trajectory]] = {}
    for (temperature, cap), ks in by_setting.items():
        runs = plan.episodes([tasks[k] for k in ks], [group_ids[k] for k in ks], cfg.group_size)
        trajs = run_batch(sampler, runs, SamplingParams(temperature=temperature, max_new_tokens=cap),
                          max_turns=episodes.max_turns, max_tokens=episodes.max_tokens,
                          policy_version=policy_version, service=service, max_context=plan.max_context)
        out |= {g[0].group_id: g for g in group_by_id(trajs)}
    return [out[gid] for gid in group_ids]


def train_grpo(
    policy: Policy,
    train_tasks: Sequence[Task],
    service: Service,
    cfg: RLConfig,
    *,
    reward_weights: RewardWeights,
    reward_model: Callable[[Sequence[Rollout]], torch.Tensor] | None = None,
    critic: Critic | None = None,
    out: Path,
    seed: int,
    resume: bool = False,
    episodes: EpisodeSpec = EpisodeSpec(),
    log: Callable[[dict[str, float]], None] = lambda m: None,
    progress: Callable[[int], None] = lambda step: None,
    rollout: Weights | None = None,
    sampler: TaskSampler | TaskPool | None = None,
    dp: DataParallel | None = None,
) -> int:
    """Run GRPO (or PPO, given a ``critic``) in place on ``policy``. Returns the steps done.

    Rollouts come from a generator (posttrain/train/_overlap.py): the batch of step s is sampled by
    policy version max(0, s - ``rl.max_staleness``), from ``rollout``'s weights (default: the
    trainer's own model when max_staleness is 0 -- the synchronous loop -- else a copy in this
    process; ``posttrain.policy.RayRollout`` for Ray actors), and stale batches get the truncated-IS
    correction.

    ``service`` verifies (its scheduler's state goes into every checkpoint and comes back on
    resume); ``episodes``: environments, limits and credit of the episodes (default: single-turn);
    ``sampler``: how tasks are drawn (default: uniform epochs over ``train_tasks``; a ``TaskPool``
    from ``posttrain.tasks.make_sampler``), its state in every checkpoint. ``rl.adaptive_temperature``
    / ``rl.adaptive_budget``: each task sampled at its own temperature / token cap
    (``adaptive_sampling``), the controllers' state in every checkpoint, each row scored at the
    temperature it was sampled at (loss, stale-batch correction, reference).

    ``dp``: this process is one of ``dp.world`` data-parallel ranks (posttrain/train/_dist.py): the
    decoder layers are sharded over them, each samples and verifies its share of every step's tasks,
    the update is of the whole batch; ranks sample from a whole copy of the weights (``rollout``, default
    ``CopiedWeights``; ``rollout_weights(..., copy=True)``; never the trainer's own, ``SharedWeights``);
    rank 0 alone writes (``log``, trajectories, checkpoints), and every rank ends with the whole
    trained model in ``policy.model``."""
    _check_args(cfg, episodes, critic=critic, reward_model=reward_model, dp=dp, rollout=rollout)
    if dp is not None and rollout is None:
        rollout = CopiedWeights(policy)  # before the trainer's model is sharded
    # --- setup: optimizer, task sampler, loss, reference; a resume takes them back from the last checkpoint
    model = policy.model
    device = next(model.parameters()).device
    ref_model = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
    ckpt_dir = out / "checkpoints" / "rl-state"
    whole = None if dp is None else _shard(model, ckpt_dir, resume=resume)  # data-parallel: the whole model
    optimizer = adamw(model.parameters(), lr=cfg.lr)
    warmup = max(1, cfg.steps // 20)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
    sampler = TaskSampler(train_tasks, seed=seed) if sampler is None else sampler
    spec = loss_spec(cfg, episodes)
    adaptive = adaptive_sampling(cfg)  # None: one temperature and one token cap for every task
    writes = dp is None or dp.writes
    torch.manual_seed(seed if dp is None else seed + dp.rank)  # ranks sample with streams of their own
    start, in_flight = (_resume(ckpt_dir, model, optimizer, scheduler, sampler, service, ref_model, critic, adaptive, dp)
                        if resume else (0, None))
    if ref_model is not None and start == 0 and writes:  # written beside, renamed: a kill leaves no cut file
        save_beside(ref_model.state_dict(), _ref_path(ckpt_dir))

    def sample(step: int, version: int, generator: Sampler) -> tuple[list[Task], list[list[Trajectory]], dict[str, float]]:
        """One step's batch, the generator's work (``_overlap.Generate``): tasks drawn, G episodes each
        through the episode runner by policy version ``version`` (``sample_groups``), verified by the
        service; its counters since."""
        before = service.stats()
        tasks, groups, drawn = sample_groups(policy, sampler, service, cfg, reward_weights, reward_model, step=step,
                                             episodes=episodes, generator=generator, policy_version=version,
                                             adaptive=adaptive, dp=dp)
        return tasks, groups, drawn | service.metrics(before)

    def generator_state() -> dict[str, object]:
        """What a checkpoint restores to continue the generator: every RNG, the task sampler, the scheduler
        (and the adaptive controllers, when on)."""
        return {"rng": rng_state(), "sampler": sampler.state(), "sched": service.state_dict(),
                **({} if adaptive is None else {"adaptive": adaptive.state()})}

    queued = batches_from_json(in_flight, cfg.max_staleness, {t.id: t for t in sampler.known_tasks()}, after=generator_state())
    rollouts = Rollouts(sample, rollout or local_weights(policy, cfg.max_staleness), model, max_staleness=cfg.max_staleness,
                        start=start, steps=cfg.steps, snapshot=generator_state, queued=queued)
    trajectories = JsonlWriter(out / "trajectories" / "rl.jsonl") if writes else None
    t0 = time.perf_counter()
    tokens_done = 0
    # the step's diversity metrics (pairwise edit distances: ~0.1 s of numpy for 8 x 8 x 256 tokens)
    # are computed beside the update, not before it: numpy and torch release the GIL
    side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="posttrain-metrics")
    try:
        for step in range(start, cfg.steps):
            t_step = time.perf_counter()
            # --- sample + score: the generator's batch of this step, sampled by version max(0, step - K)
            #     (dynamic sampling refills groups whose rewards have no variance)
            gen, train_idle_s = rollouts.get(step)
            tasks, groups = gen.tasks, gen.groups
            diversity = side.submit(diversity_metrics, groups)
            rewards, reward_parts = rewards_of(groups, reward_weights, reward_model=reward_model,
                                               reward_model_weight=cfg.reward_model_weight,
                                               attempt_discount=episodes.attempt_discount)  # (N, G)
            rewards = without_canaries(tasks, rewards)  # canaries are the hack alarm's: no gradient, no baseline
            batch = build_batch(groups, rewards, policy.tokenizer.pad_token_id, device,
                                temperatures=cfg.adaptive_temperature is not None)  # each row at its own
            batch = correct_staleness(batch, model, lag=step - gen.policy_version, temperature=cfg.temperature,
                                      micro_batch_size=cfg.micro_batch_size)  # stale: truncated IS
            task_rewards, kl_term = rewards, None  # kl_term (N, G): -beta * KL per row (rl.kl_placement reward)
            if ref_model is not None:
                with torch.no_grad():
                    ref_logp = token_logprobs(ref_model, batch.input_ids, batch.attention_mask, loss_mask=batch.loss_mask,
                                              temperature=row_temperature(batch, cfg.temperature), groups=batch.group)
                batch = dataclasses.replace(batch, ref_logp=ref_logp)
                if cfg.kl_placement == "reward":  # r - beta * sum_t KL_t, before advantages
                    shaped = kl_in_reward(rewards.reshape(-1), batch.old_logp.cpu(), ref_logp.cpu(), batch.loss_mask.cpu(),
                                          kl_coef=cfg.kl_coef, kind=cfg.kl_kind).reshape(rewards.shape)
                    reward_parts["kl_in_reward"] = float(torch.nanmean(rewards - shaped)) / cfg.kl_coef  # mean seq KL
                    kl_term = shaped - rewards
                    rewards = shaped
            # --- advantages (NaN rewards -> advantage 0, masked in the batch)
            if critic is None:  # group-relative; a KL in the reward is centred, never std-scaled
                adv = group_advantages(groups, task_rewards, cfg, kl_term=kl_term)  # (N, G)
                if episodes.process_coef > 0:  # (B, T): per-turn process rewards
                    adv = process_advantages(groups, adv, batch.input_ids.shape[1], reward_weights,
                                             process_coef=episodes.process_coef)
                batch = dataclasses.replace(batch, adv=adv.reshape(batch.input_ids.shape[0], -1).squeeze(1).to(device))
            else:  # PPO: GAE on the critic's values, per token
                adv_tok, returns, old_values = critic.advantages(batch, rewards.reshape(-1).to(device))  # (B, T) each
                batch = dataclasses.replace(batch, adv=adv_tok)
            # --- loss + step
            stats = _update(model, optimizer, batch, spec, cfg, dp)
            scheduler.step()
            rollouts.publish(step + 1, model)  # version step + 1, for the batch of step + 1 + K
            if critic is not None:
                stats |= critic.update(batch, returns, old_values, micro_batch_size=cfg.micro_batch_size,
                                       max_grad_norm=cfg.max_grad_norm)
            # --- log
            tokens_done += int(batch.attention_mask.sum())
            wall = time.perf_counter() - t0
            metrics = (step_metrics(groups, tasks, rewards, stats) | reward_parts | gen.metrics
                       | overlap_metrics(gen, step, train_idle_s) | diversity.result())
            metrics.update(step=step, wall_s=wall, step_s=time.perf_counter() - t_step,
                           tokens_per_s=tokens_done / max(wall, 1e-9), lr=scheduler.get_last_lr()[0])
            log(metrics)
            warn_if_degenerate(metrics)
            if trajectories is not None:
                trajectories.write_many(  # wall_s of a record: the wall time of the step that produced it
                    rec for t, g in zip(tasks, groups, strict=True) for traj in g
                    for rec in trajectory_records(t, traj, stage="rl", step=step, wall_s=metrics["step_s"],
                                                  decode=policy.tokenizer.decode)
                )
            progress(step + 1)
            if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
                _save(ckpt_dir, step + 1, policy, optimizer, scheduler, rollouts, critic, cfg, dp, whole)
    finally:
        side.shutdown(cancel_futures=True)
        rollouts.close()
    if trajectories is not None:
        trajectories.close()
    if whole is not None:  # every rank ends with the whole trained model
        whole.load_state_dict(_dist.whole_state(model))
        policy.model = whole
    policy.model.eval()
    return cfg.steps


def _check_args(cfg: RLConfig, episodes: EpisodeSpec, *, critic: Critic | None, reward_model: object,
                dp: DataParallel | None, rollout: Weights | None) -> None:
    if critic is not None and episodes.process_coef > 0:
        raise ValueError("EpisodeSpec.process_coef is for group-relative advantages; PPO's GAE has no process term")
    if dp is not None and (critic is not None or reward_model is not None or cfg.max_staleness > 0):
        raise ValueError("data-parallel RL (dp) runs GRPO with verifier rewards and rl.max_staleness 0: "
                         "no critic, no reward model")
    if dp is not None and isinstance(rollout, SharedWeights):
        raise ValueError("data-parallel RL (dp) samples from a whole copy of the weights; SharedWeights is the "
                         "trainer's own model, which is sharded (rollout_weights(..., copy=True))")


def _shard(model: torch.nn.Module, ckpt_dir: Path, *, resume: bool) -> torch.nn.Module:
    """Data-parallel setup of the trainer's ``model``: the last checkpoint's weights loaded (on
    ``resume``; the rest comes back in ``_resume``), a whole copy kept (checkpoints, the result), then
    the decoder layers sharded over the ranks. Returns the whole copy."""
    if resume and (last := load_latest(ckpt_dir)) is not None:
        load_weights(model, last.model_dir)
    whole = copy.deepcopy(model)
    dtype = next(model.parameters()).dtype
    _dist.shard(model, compute_dtype=dtype if dtype in LOW_PRECISION else None)  # bf16: fp32 shards
    return whole


def _update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: PolicyBatch, spec: LossSpec,
            cfg: RLConfig, dp: DataParallel | None) -> dict[str, float]:
    """One optimizer step on ``batch``; data-parallel: the whole batch's, each rank backpropagating its rows."""
    if dp is None:
        return policy_update(model, optimizer, batch, spec, micro_batch_size=cfg.micro_batch_size,
                             max_grad_norm=cfg.max_grad_norm, skip_zero_advantage=cfg.skip_zero_advantage)
    return _dist.update(model, optimizer, _dist.rank_rows(batch, dp.rank, dp.world), spec,
                        micro_batch_size=cfg.micro_batch_size, max_grad_norm=cfg.max_grad_norm)


def _resume(ckpt_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
            sampler: TaskSampler | TaskPool, service: Service, ref_model: torch.nn.Module | None,
            critic: Critic | None, adaptive: AdaptiveSampling | None,
            dp: DataParallel | None = None) -> tuple[int, dict[str, Any] | None]:
    """Back to the last checkpoint (weights, optimizer, schedule, task sampler, scheduler state,
    reference, critic, adaptive controllers): ``(its step, the batches it had in flight)``; ``(0, None)``
    without one. ``dp``: a sharded model, its weights loaded before sharding; this rank's RNGs."""
    ckpt = load_latest(ckpt_dir)
    if ckpt is None:
        return 0, None
    try:  # first: another run's RL state (copied in, or a run of another seed) is refused before any load
        sampler.load_state(ckpt.sampler_state)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{ckpt.path / 'state.json'}: its sampler state is not this run's "
                              f"({type(e).__name__}: {e}); resume the run that wrote it, or start over with "
                              "another --out") from None
    if dp is None:
        restore(ckpt, model, optimizer, scheduler)
    else:
        _dist.restore(ckpt, model, optimizer, scheduler, dp)
    if "sched" in ckpt.extra:  # estimates and breakers: the resumed service chooses as before
        service.load_state_dict(ckpt.extra["sched"])
    if adaptive is not None and "adaptive" in ckpt.extra:  # absent: switched on since, every task starts afresh
        adaptive.load_state(ckpt.extra["adaptive"])
    if ref_model is not None:  # the reference is the policy RL started from, saved beside
        if ckpt.step == 0:
            ref_model.load_state_dict(_dist.whole_state(model))
        else:
            _load_ref(ref_model, ckpt_dir)
    if critic is not None:
        critic.load(ckpt_dir, ckpt.step)
    return ckpt.step, ckpt.extra.get("overlap", {"max_staleness": 0, "queued": []})


def _save(ckpt_dir: Path, done: int, policy: Policy, optimizer: torch.optim.Optimizer, scheduler: Any,
          rollouts: Rollouts, critic: Critic | None, cfg: RLConfig, dp: DataParallel | None = None,
          whole: torch.nn.Module | None = None) -> None:
    """The checkpoint after ``done`` steps: everything ``_resume`` reads, and the batches in flight.
    Data-parallel (every rank calls it; rl.max_staleness 0, nothing in flight): the full state
    gathered into ``whole``, every rank's RNG states (``rng["ranks"]``), and rank 0 writes the
    one-process layout (``_dist.save_state``)."""
    if critic is not None:  # before the checkpoint that names this step
        critic.save(ckpt_dir, done)
    in_flight, after = rollouts.checkpoint(done)  # batches of steps done..done+K-1, state after them
    # K = 0: nothing queued, so the RNGs as they are now (after the update, which may draw: dropout);
    # K > 0: the generator's, right after the last queued batch
    rng = after["rng"] if in_flight else rng_state()
    model, optim, ranks = policy.model, optimizer, {}
    if dp is not None and whole is not None:
        model_state, optim = _dist.save_state(policy.model, optimizer, dp,  # a collective
                                              masters=next(whole.parameters()).dtype in LOW_PRECISION)
        rngs = dp.every(rng)
        if not dp.writes:
            return
        whole.load_state_dict(model_state)
        model, rng, ranks = whole, {**rngs[0], "ranks": rngs}, {"data_parallel": dp.world}
    save_checkpoint(ckpt_dir, model=model, tokenizer=policy.tokenizer, optimizer=optim, scheduler=scheduler,
                    step=done, sampler_state=after["sampler"], rng=rng,
                    extra={"finished": done == cfg.steps, "sched": after["sched"],
                           "overlap": batches_to_json(in_flight, cfg.max_staleness), **ranks,
                           **({"adaptive": after["adaptive"]} if "adaptive" in after else {})}, keep_last=2,
                    chat=policy.chat is not None, beside=[
                        *([REFERENCE] if (ckpt_dir / REFERENCE).is_file() else []),  # written at step 0 (kl_coef > 0)
                        *([critic_file(ckpt_dir, done).name] if critic is not None else [])])


def step_metrics(groups: Groups, tasks: Sequence[Task], rewards: torch.Tensor,
                 stats: Mapping[str, float]) -> dict[str, float]:
    """Reward, outcome and length statistics of one step's episodes, plus the update's own stats.

    ``completion_len``: action tokens per episode; ``clipped_ratio``: actions cut at max_new_tokens;
    ``truncation_rate``: episodes cut by the step limit or token budget (scored as the worst failure);
    ``turns_mean``, ``attempts_mean``, ``episode_tokens`` (tokens after the prompt) per episode;
    ``first_attempt_pass_rate`` / ``post_repair_pass_rate``: episodes whose first / last attempt
    passed; ``tool_call_validity``: valid tool calls / all calls (when the episodes made tool calls,
    ``posttrain.evaluate.metrics``); ``pass_rate/<domain>``: episodes whose last attempt passed."""
    flat = [t for g in groups for t in g]
    turns = [turn for t in flat for turn in t.turns]
    valid = ~torch.isnan(rewards)
    r = rewards[valid]
    out = {k: float(v) for k, v in stats.items()}  # loss, clip_frac, approx_kl, entropy, grad_norm, ...
    out.update(
        reward_mean=float(r.mean()) if r.numel() else float("nan"),
        reward_std=float(r.std()) if r.numel() > 1 else 0.0,
        frac_zero_std=frac_zero_std(rewards),
        infra_error_rate=float(torch.tensor([math.isnan(t.reward) for t in flat]).float().mean()),
        groups_dropped=float(sum(any(math.isnan(t.reward) for t in g) for g in groups)),
        completion_len=sum(len(turn.action_ids) for turn in turns) / len(flat),
        clipped_ratio=sum(turn.stop_reason == "length" for turn in turns) / len(turns),
        kl=float(stats.get("kl", 0.0)),  # 0 when no KL term is in the loss (kl_coef 0)
        truncation_rate=sum(t.cut_by is not None for t in flat) / len(flat),
        turns_mean=len(turns) / len(flat),
        attempts_mean=sum(t.attempts for t in flat) / len(flat),
        episode_tokens=sum(len(t.ids) - len(t.prompt_ids) for t in flat) / len(flat),
        first_attempt_pass_rate=sum(bool(t.verdicts) and t.verdicts[0].passed for t in flat) / len(flat),
        post_repair_pass_rate=sum(bool(t.verdicts) and t.verdicts[-1].passed for t in flat) / len(flat),
    )
    if (validity := tool_call_validity(episode_metrics(flat))) is not None:
        out["tool_call_validity"] = validity
    for domain in sorted({t.domain for t in tasks}):
        outcomes = [bool(e.verdicts) and e.verdicts[-1].passed
                    for t, g in zip(tasks, groups, strict=True) if t.domain == domain and not is_canary(t) for e in g]
        if outcomes:  # canaries are the alarm's (canary/*), not their domain's
            out[f"pass_rate/{domain}"] = sum(outcomes) / len(outcomes)
    return out


def warn_if_degenerate(metrics: Mapping[str, float]) -> None:
    """Degenerate batches say so (trl#5697/#6263): no reward variance, or every completion cut.
    Python shows each warning once per run."""
    if metrics["frac_zero_std"] >= 0.95:
        warnings.warn("95%+ of groups have zero reward variance, so they give no gradient (tasks too easy "
                      "or too hard; try rl.dynamic_sampling); see frac_zero_std in metrics.jsonl", stacklevel=2)
    if metrics["clipped_ratio"] >= 0.95:
        warnings.warn("95%+ of completions hit max_new_tokens (raise rl.max_new_tokens, or penalize length "
                      "with reward.length); see clipped_ratio in metrics.jsonl", stacklevel=2)


def _ref_path(ckpt_dir: Path) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    return ckpt_dir / REFERENCE


def _load_ref(ref_model: torch.nn.Module, ckpt_dir: Path) -> None:
    """The reference saved beside the checkpoints into ``ref_model``; ``CheckpointError`` naming the file
    when it does not load (a checkpoint saved before its manifest listed the reference)."""
    path = _ref_path(ckpt_dir)
    try:
        ref_model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    except (RuntimeError, EOFError, OSError, ValueError, TypeError, pickle.UnpicklingError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(f"{path}: does not load as the KL reference ({type(e).__name__}: {first}): cut short, or "
                              "not this run's; cannot resume exactly") from None
