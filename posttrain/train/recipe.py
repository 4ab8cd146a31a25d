"""The recipe: one typed config for ``posttrain run`` (SFT -> RL -> eval on a task pool).

A recipe file is YAML whose sections map onto these frozen dataclasses; ``load_recipe`` rejects
unknown keys, wrong types and invalid combinations before any work starts, and checks everything
the run will read (``check_inputs``): the task sources (``tasks.train``/``tasks.eval``: files of
any domain and generators by name, ``posttrain.tasks.TaskSource``), the SFT demonstrations, and
the model (a tokenizer with an EOS token, enough positions for the longest prompt + completion).
Every field has a docstring; the resolved recipe is saved as RUN/config.yaml.

The embedded recipe (``configs/quickstart.yaml``, shipped as ``posttrain/configs/quickstart.yaml``)
is what ``posttrain quickstart`` runs.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from huggingface_hub.utils import HFValidationError, validate_repo_id

from posttrain.config import (
    MAX_TEMPERATURE,
    Epochs,
    Fraction,
    LearningRate,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Range,
    Seed,
    Steps,
    apply_overrides,
    load_yaml,
    parse_config,
)
from posttrain.envs import (
    domain_family,
    domain_names,
    is_feedback_only,
    is_registered,
    model_prompt,
)
from posttrain.envs.function import RewardTerm, as_terms, default_reward, noop_problems
from posttrain.errors import ConfigError, UserError
from posttrain.evaluate.baseline import load_baseline
from posttrain.evaluate.runner import MAX_SAMPLES_PER_TASK
from posttrain.policy import MIN_TEMPERATURE
from posttrain.rollout import episodes as kinds
from posttrain.sandbox import MAX_POOL_SIZE
from posttrain.tasks import (
    SamplerSpec,
    TaskPool,
    TaskSampler,
    TaskSource,
    generators,
    load_demonstrations,
    load_pools,
    make_sampler,
)
from posttrain.train._lora import LoraSpec, lora_target_modules
from posttrain.train.dpo import DPOConfig
from posttrain.train.preference import PairsConfig
from posttrain.train.rm import RMConfig
from posttrain.types import Task
from posttrain.verify.rewards import RewardWeights


@dataclass(frozen=True)
class ModelConfig:
    name: str = "embedded"
    """"embedded" builds the embedded default (a small Llama + char tokenizer, from a config);
    anything else is a local path or a hub name loaded with from_pretrained."""
    hidden_size: Annotated[int, Range(ge=8)] | None = None
    """Model width: the embedded default's (128 when not given; a multiple of 8) or, for another model, its
    config.json's, recorded in RUN/config.yaml (a different value is refused). 4 heads of an even width."""
    num_layers: PositiveInt | None = None
    """Transformer blocks: the embedded default's (2 when not given) or, for another model, its config.json's,
    recorded in RUN/config.yaml (a different value is refused)."""
    max_positions: Annotated[int, Range(ge=16)] | None = None
    """Positions, enough for the longest prompt + completion (checked at parse time): the embedded default's
    (256 when not given) or, for another model, its config.json's, recorded (a different value is refused)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights and compute dtype for training and sampling (bfloat16 on GPUs; float32 on CPUs). With
    bfloat16 the optimizer steps fp32 master weights with fp32 moments and gradients (``train._optim``;
    with rl.data_parallel > 1 the fp32 shards, FSDP2 mixed precision): steps finer than bf16's
    precision add up instead of being rounded away."""
    device: str = "cpu"
    """torch device: "cpu", "cuda", "cuda:1", ..."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (transformers gradient checkpointing): less memory, more compute."""
    lora: LoraSpec | None = None
    """Train LoRA adapters (peft) in the sft and rl stages instead of all weights; merged into the
    weights when the stage ends, so every checkpoint is a plain model. (dpo and rm: dpo.lora, rm.lora.)"""
    chat: bool | Literal["auto"] = "auto"
    """Render every prompt of the run (SFT, RL, evaluation) as the model's chat template renders one
    user message with the generation prompt, and repair feedback as a user turn of it: true, false,
    or auto (the template when it is usable for this recipe: its end of an assistant turn is the
    tokenizer's EOS, and with repair feedback it appends a user turn; else plain prompts, said in one
    line naming the tokenizer and the failed check; always plain on the embedded default: it is
    trained from scratch on plain prompts, and its template, which renders them to the same ids,
    would end a length-cut repair attempt with <eos>: true asks for that; on a posttrain checkpoint,
    what it records, so a run from it keeps its prompts). Checked when the recipe
    is parsed: true needs a template that passes those checks (exit 2 otherwise); auto is decided
    once per run (``pipeline.decide_chat``). Each checkpoint (stage and RL step) records the choice
    (posttrain.json), and ``posttrain eval``/``generate`` of it use it unless told otherwise
    (--chat / --no-chat); ``--resume`` keeps what the run's base checkpoint records (no record: plain).
    Tool episodes render through the template whatever this key says."""

    @property
    def chat_setting(self) -> bool | Literal["auto"]:
        """``chat`` as the run applies it: auto is false on the embedded default and, on a posttrain
        checkpoint, what the checkpoint records (a run that starts from it keeps the prompts it was
        trained on, as ``posttrain eval`` of it does); else auto (see ``chat``)."""
        if self.chat != "auto":
            return self.chat
        if self.name == "embedded":
            return False
        from posttrain.policy import recorded_chat

        path = Path(self.name).expanduser()
        recorded = recorded_chat(path) if path.is_dir() else None
        return "auto" if recorded is None else recorded

    def __post_init__(self) -> None:
        _check_device(self.device)
        if self.name == "embedded":
            sizes = {"hidden_size": 128, "num_layers": 2, "max_positions": 256}
        elif _looks_like_path(self.name):
            try:
                path = Path(self.name).expanduser()
            except RuntimeError:  # ``~someone/model`` for a user this machine has not: a traceback before
                raise ConfigError(f"model.name: no such model directory {self.name!r} (no home directory for "
                                  f"{self.name.split('/')[0]!r})") from None
            if not path.is_dir():
                raise ConfigError(f"model.name: no such model directory {self.name!r}")
            if not (path / "config.json").is_file():
                raise ConfigError(f"model.name: {self.name!r} is not a model directory (no config.json)")
            sizes = _recorded_sizes(self, path)
        else:  # a hub name: its architecture is known once it is loaded
            _check_hub_name(self.name)
            sizes = {"hidden_size": None, "num_layers": None, "max_positions": None}
            given = next((k for k in sizes if self.architecture[k] is not None), None)
            if given is not None:
                raise ConfigError(f"model.{given}: sizes the embedded default; model.name {self.name!r} has the "
                                  f"architecture of its own config: remove model.{given} (or --set model.{given}=null)")
        for key, value in sizes.items():  # derived: what RUN/config.yaml records
            if self.architecture[key] is None:
                object.__setattr__(self, key, value)
        if self.name == "embedded" and self.hidden_size % 8:
            raise ConfigError(f"model.hidden_size: expected a multiple of 8 (4 heads of an even width), "
                              f"got {self.hidden_size}")
        if self.name == "embedded":
            _check_embedded_fits(self)
        if self.lora is not None and self.hidden_size is not None and self.lora.r > self.hidden_size:
            raise ConfigError(f"model.lora.r: expected at most the model's width, model.hidden_size "
                              f"{self.hidden_size} (a rank above it adds nothing), got {self.lora.r}")

    @property
    def architecture(self) -> dict[str, int | None]:
        """``hidden_size``, ``num_layers``, ``max_positions``: the embedded default's sizes, or another
        model's own as its config.json gives them (None where it does not, or for a hub name)."""
        return {"hidden_size": self.hidden_size, "num_layers": self.num_layers, "max_positions": self.max_positions}


EMBEDDED_VOCAB = 101
"""The embedded default's vocabulary (its character tokenizer's 97 characters and 4 specials), for
``_check_embedded_fits``' estimate."""


def _check_embedded_fits(cfg: ModelConfig) -> None:
    """Refuse, when the recipe is parsed, an embedded default too large for this machine's memory (the
    memory this process may use: physical, or its cgroup's limit): its parameters (12 h^2 per layer:
    attention with half-width keys and values, an MLP 3 h wide; tied embeddings) at 16 bytes each
    to train on the CPU (float32 weights, gradients, Adam's two moments), 4 to build it on the host
    for another device. Before, ``model.hidden_size: 100000000`` wrote RUN/config.yaml and then ran
    out of memory building the model."""
    from posttrain.sched import memory_limit_mb

    assert cfg.hidden_size is not None and cfg.num_layers is not None
    params = 12 * cfg.num_layers * cfg.hidden_size**2 + EMBEDDED_VOCAB * cfg.hidden_size
    need_mb = params * (16 if cfg.device == "cpu" else 4) / 2**20
    limit_mb = memory_limit_mb()
    if need_mb > limit_mb:
        raise ConfigError(
            f"model.hidden_size {cfg.hidden_size}, model.num_layers {cfg.num_layers}: the embedded default "
            f"would have {params:.3g} parameters, {need_mb / 1024:.3g} GiB to "
            + ("train on the CPU" if cfg.device == "cpu" else "build on the host")
            + f", more than the {limit_mb / 1024:.3g} GiB this process may use; expected a smaller model")


def _recorded_sizes(cfg: ModelConfig, path: Path) -> dict[str, int | None]:
    """A model directory's own sizes (``posttrain.policy.read_architecture``); a size the recipe gives
    that differs from it is a ``ConfigError`` in one line (the embedded default's keys do not resize
    another model)."""
    from posttrain.policy import read_architecture

    try:
        arch = read_architecture(path)
    except UserError as e:
        raise ConfigError(f"model.name: {e}") from None
    own = {"hidden_size": arch.hidden_size, "num_layers": arch.num_layers, "max_positions": arch.positions}
    source = {"hidden_size": "hidden_size", "num_layers": "num_layers", "max_positions": "positions"}
    for key, given in cfg.architecture.items():
        if given is not None and given != own[key]:
            where = arch.keys.get(source[key], f"{path / 'config.json'}")
            has = f"{own[key]} ({where})" if own[key] is not None else f"none given in {where}"
            raise ConfigError(f"model.{key}: {given} sizes the embedded default, but model.name {cfg.name} is a model "
                              f"of its own: its {key} is {has}; remove model.{key} (or --set model.{key}=null)")
    return own


def _check_hub_name(name: str) -> None:
    """A ``model.name`` that is not a local path must be a hub id (``NAME`` or ``ORG/NAME``, huggingface_hub's
    ``validate_repo_id``): before, ``"  "`` or a name with a newline passed the parse, the run wrote its
    directory, and from_pretrained's own error came after."""
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ConfigError(f"model.name: {name!r} is neither a local model directory nor a hub name; expected "
                          f"a path (./dir, /abs/dir, ~/dir) or NAME / ORG/NAME (letters, digits, '-', '_', '.')"
                          ) from None


def _check_hub_model(name: str) -> None:
    """A hub name's config.json can be read (from the local cache, or fetched: the weights come when the
    run loads them). Before, a name not on the hub, or not cached on a machine without network, wrote
    RUN/config.yaml and failed when the run loaded the model (54 s of retries offline, then exit 2).
    ``hub_source`` answers first: a name neither cached nor reachable is one line at once (offline it
    printed huggingface_hub's retries for ~42 s before that line)."""
    from transformers import AutoConfig

    from posttrain.policy import hub_source

    try:
        AutoConfig.from_pretrained(name, **hub_source(name))
    except UserError as e:  # not cached and the hub cannot be reached: said at once, not after ~42 s of retries
        raise ConfigError(f"model.name: {e}") from None
    except (OSError, ValueError) as e:
        said = " ".join(str(e).split())
        raise ConfigError(f"model.name: cannot read the config of hub model {name!r} (neither in the local cache nor "
                          f"fetched): {said[:300]}") from None


def _looks_like_path(name: str) -> bool:
    """A local path rather than a hub id ("org/model"): absolute, ./ ../ ~, or present on disk."""
    return name.startswith(("/", ".", "~")) or Path(name).exists() or name.count("/") > 1


def _check_device(device: str) -> None:
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"model.device: expected a torch device such as cpu, cuda or cuda:1, got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"model.device: {device!r}, but CUDA is not available on this machine; use model.device=cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"model.device: {device!r}, but this machine has {torch.cuda.device_count()} CUDA device(s)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"model.device: {device!r}, but MPS is not available on this machine; use model.device=cpu")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"model.device: expected cpu, cuda[:N] or mps, got {device!r}")


@dataclass(frozen=True)
class TasksConfig:
    """The task pool: ``train`` and ``eval`` sources (files, generators), or the quickstart shorthand
    (``domains`` + ``n_train_per_domain`` + ``n_eval_per_domain``), not both."""

    domains: tuple[str, ...] = ("math", "code")
    """Shorthand: registered domains whose quickstart family (``quickstart-<domain>``, the domain's
    ``task_families``) makes the generated task pool."""
    n_train_per_domain: PositiveInt = 600
    """Shorthand: training tasks per domain."""
    n_eval_per_domain: PositiveInt = 100
    """Shorthand: held-out evaluation tasks per domain; train and eval share no task."""
    train: tuple[TaskSource, ...] = ()
    """Training task sources: ``{file: PATH}`` (optionally ``domain``), ``{generator: NAME, n: N}``,
    each with optional ``n``/``skip`` (posttrain.tasks.TaskSource). When given, the shorthand is unused."""
    eval: tuple[TaskSource, ...] = ()
    """Held-out evaluation task sources, like ``train``; no task id may be in both."""
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    """How RL draws its tasks: ``kind: uniform`` (shuffled epochs, the default) or ``kind: pool``
    (difficulty pools across domains, filtering, curricula, domain weights, canaries;
    ``posttrain.tasks.SamplerSpec``, docs/tasks.md "The task pool")."""
    contamination: Literal["refuse", "drop", "keep"] = "refuse"
    """Sources only: a training task that overlaps an evaluation task (the same prompt, or most of
    an evaluation task's distinctive 13-grams) is refused (one line: the count and an example),
    dropped (one line says how many), or kept (overlap is not looked for)."""

    def __post_init__(self) -> None:
        if not self.domains:
            raise ConfigError("tasks.domains: expected at least one domain")
        if len(set(self.domains)) != len(self.domains):
            raise ConfigError(f"tasks.domains: duplicate domain in {list(self.domains)}")
        for d in self.domains:
            if not is_registered(d):
                raise ConfigError(f"tasks.domains: unknown domain {d!r}; expected one of {', '.join(domain_names())}")
            if domain_family(d, f"quickstart-{d}") is None:
                raise ConfigError(f"tasks.domains: domain {d!r} has no quickstart family (quickstart-{d}); "
                                  f"name its tasks in tasks.train / tasks.eval instead")
        if bool(self.train) != bool(self.eval):
            missing = "tasks.eval" if self.train else "tasks.train"
            raise ConfigError(f"{missing}: expected at least one task source (tasks.train and tasks.eval go together: "
                              f"every run is evaluated on held-out tasks)")
        curriculum = next((i for i, src in enumerate(self.train) if src.curriculum), None)
        if curriculum is not None and self.sampler.kind != "pool":
            raise ConfigError(f"tasks.train[{curriculum}]: curriculum: needs tasks.sampler.kind: pool (the uniform "
                              f"sampler draws fixed tasks only)")
        if self.train:  # left at their defaults (as a saved RUN/config.yaml has them), they are unused
            default = TasksConfig()
            for key in ("domains", "n_train_per_domain", "n_eval_per_domain"):
                if getattr(self, key) != getattr(default, key):
                    raise ConfigError(f"tasks.{key}: the shorthand is not used with tasks.train/tasks.eval sources; "
                                      f"drop it (or set n/skip on a source)")


@dataclass(frozen=True)
class DemonstratorConfig:
    error_rate: Annotated[float, Range(ge=0, lt=1)] = 0.4
    """Fraction of tasks on which the scripted demonstrator is wrong (imitation's ceiling)."""


@dataclass(frozen=True)
class SFTConfig:
    epochs: Epochs = 3.0
    """Passes over the demonstrations (fractions allowed)."""
    batch_size: PositiveInt = 32
    """Sequences per optimizer step."""
    lr: LearningRate = 3e-3
    """Peak learning rate (AdamW, linear warmup then cosine decay)."""
    warmup_frac: Fraction = 0.05
    """Fraction of steps spent warming up the learning rate."""
    pack_len: PositiveInt | None = None
    """Pack demonstrations into rows of this many tokens (padding-free); null = one padded row each."""
    demonstrations: str = "demonstrator"
    """What SFT imitates: "demonstrator" (the scripted, imperfect demonstrator of the quickstart
    families), "references" (each training task's ``reference``), "repair" (the feedback-only
    family's tasks as the scripted demonstrator's repair episodes: a guess, the environment's
    feedback on it, then the reference, or on demonstrator.error_rate of them a shortcut that passes
    only the shown test; any other training task as the demonstrator's single answer), or the path of a JSONL file of ``{"prompt", "response"}`` or
    ``{"task_id", "response"}`` lines (training tasks only)."""

    def __post_init__(self) -> None:
        if self.batch_size > MAX_ROWS:  # a step draws its batch's indices at once: 10**12 asked for 8 TB
            raise ConfigError(f"sft.batch_size: expected at most {MAX_ROWS:,} sequences a step, got {self.batch_size:,}")


@dataclass(frozen=True)
class AdaptiveTemperatureConfig:
    """A temperature per task from its groups' diversity (``posttrain.rollout.TemperatureController``):
    each task starts at rl.temperature; after each of its groups, its temperature goes up x step
    while the group repeats itself (duplicate rate above target_dup), else back down towards
    rl.temperature, never above high."""

    high: Annotated[float, Range(gt=0, le=MAX_TEMPERATURE)] = 1.5
    """The most a task's temperature rises to (at least rl.temperature)."""
    target_dup: Annotated[float, Range(ge=0, lt=1)] = 0.25
    """A group whose duplicate rate (1 - distinct completions / G) is above this raises its task's temperature."""
    step: Annotated[float, Range(gt=1)] = 1.1
    """Factor of each move: x step up, / step back down."""


@dataclass(frozen=True)
class AdaptiveBudgetConfig:
    """A token cap per task from its observed difficulty (``posttrain.rollout.BudgetController``):
    each task starts at rl.max_new_tokens; after each of its groups, an easy task's cap becomes
    margin x its longest passing completion (not below low), a hard task's grows x grow (not above
    high), any other keeps its cap."""

    low: PositiveInt = 8
    """The smallest cap an easy task gets (at most rl.max_new_tokens)."""
    high: PositiveInt | None = None
    """The largest cap a hard task grows to (at least rl.max_new_tokens; null: 4 x rl.max_new_tokens);
    the model's positions must hold the longest prompt + high (checked when the recipe is parsed)."""
    easy: Fraction = 0.8
    """A group whose pass rate is at least this makes its task easy (cap shrinks)."""
    hard: Fraction = 0.2
    """A group whose pass rate is at most this makes its task hard (cap grows); below easy."""
    margin: Annotated[float, Range(ge=1)] = 1.25
    """An easy task's cap: margin x the longest completion of it that passed."""
    grow: Annotated[float, Range(gt=1)] = 1.5
    """A hard task's cap grows x grow per group."""


MAX_ROWS = 1 << 20
"""The most completions one RL step may sample (``rl.prompts_per_step`` x ``rl.group_size``), and the most
sequences an SFT step takes (``sft.batch_size``): a step holds them all at once; past this a mistyped value
filled memory before the first was sampled."""


@dataclass(frozen=True)
class RLConfig:
    algorithm: Literal["grpo", "ppo"] = "grpo"
    """grpo: group-relative advantages (see ``advantage``). ppo: a critic (value head on the
    starting policy's backbone) and GAE advantages per token."""
    steps: Steps = 200
    """Policy updates (one generation batch each)."""
    prompts_per_step: PositiveInt = 16
    """Tasks sampled per step."""
    group_size: PositiveInt = 8
    """G: samples per task; advantages are relative within the group."""
    temperature: Annotated[float, Range(ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE)] = 1.0
    """Sampling temperature, at least 1e-5 (logprobs are taken at this temperature; below it logits / T
    overflow, and a sampler refuses it -- after the stages before RL had run); with adaptive_temperature, each
    task's first."""
    max_new_tokens: PositiveInt = 24
    """Completion length cap; completions cut here finish with reason "length"; with adaptive_budget,
    each task's first."""
    lr: LearningRate = 1e-3
    """Learning rate (AdamW, constant after a short warmup)."""
    advantage: Literal["grpo", "rloo", "reinforce_pp"] = "grpo"
    """Advantage estimator (posttrain.algo.ADVANTAGES)."""
    scale_by_std: bool | None = None
    """Divide by the group std: null = the estimator's own default (on for grpo, off for rloo);
    false with grpo = Dr.GRPO; with rloo, the leave-one-out std floored at half the group's
    (|advantage| <= 2 sqrt(group_size))."""
    policy_loss: Literal["ppo_clip", "gspo", "cispo"] = "ppo_clip"
    """Per-token policy loss (posttrain.algo.POLICY_LOSSES)."""
    clip_low: Annotated[float, Range(ge=0, lt=1)] = 0.2
    """Lower clip range of the ratio (1 - clip_low)."""
    clip_high: NonNegativeFloat = 0.28
    """Upper clip range of the ratio (1 + clip_high); > clip_low is DAPO's clip-higher."""
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"] = (
        "token_mean"
    )
    """How per-token losses become one scalar (posttrain.algo.aggregate)."""
    kl_coef: NonNegativeFloat = 0.0
    """Weight of the KL penalty to the reference (SFT) policy, in the loss; 0 loads no reference model."""
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (posttrain.algo.kl_penalty)."""
    kl_placement: Literal["loss", "reward"] = "loss"
    """Where the KL to the reference goes: a per-token term in the loss (GRPO), or subtracted from
    each sample's reward as beta * sum_t KL_t before advantages (PPO/RLHF style; with a group
    estimator the KL term is centred in its group but never divided by the rewards' std)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose rewards are all equal and draw more tasks."""
    max_refills: NonNegativeInt = 3
    """Dynamic sampling: at most this many extra draws per step."""
    micro_batch_size: PositiveInt = 64
    """Sequences per forward/backward; gradients accumulate to the full generation batch."""
    skip_zero_advantage: bool = False
    """Leave out of the update's forward and backward the rows whose advantage is 0 (every row of a
    group whose rewards are all equal): their gradient is exactly 0, their tokens still count in the
    loss's normalizer, so the update is the same up to summation order, without their compute.
    metrics.jsonl: zero_advantage_rows; the update's token-weighted metrics are the computed rows'.
    Needs rl.kl_coef 0 or rl.kl_placement reward (a KL term in the loss has a gradient on every row)."""
    max_grad_norm: PositiveFloat = 1.0
    """Gradient clipping (the largest global gradient norm)."""
    checkpoint_every: Steps = 50
    """Save a resumable checkpoint every N steps (and at the end)."""
    gae_lambda: Fraction = 0.95
    """PPO only: GAE lambda (gamma is 1: one outcome reward per completion)."""
    critic_lr: LearningRate = 1e-3
    """PPO only: learning rate of the value head and its backbone."""
    reward_model_weight: NonNegativeFloat = 0.0
    """RLHF: weight of the reward model's sigmoid(score) as the "rm" reward component (needs the
    rm stage before rl)."""
    episodes: Literal["single", "repair", "agent", "tool"] = "single"
    """single: one answer per episode. repair: after a failed attempt the model reads the verifier's
    feedback and tries again, up to the task's limits.max_attempts (posttrain.envs.RepairEnv).
    agent: each task's domain runs its own multi-turn environment (tool calling on tool tasks,
    BFCL's backends, a workspace agent: posttrain.envs.HasEpisodes). tool: agent's former name
    (accepted with a warning until the next release). posttrain.rollout.episodes builds them."""
    max_turns: PositiveInt | None = None
    """The step limit: actions per episode (null: 1 for single, the most attempts a training task
    allows for repair, 4 for agent). Agent episodes on BFCL tasks: each user turn's cap on steps with
    calls (BFCL's 20 at most); the episode runs up to its user turns x (max_turns + 1) actions."""
    max_episode_tokens: PositiveInt | None = None
    """Token budget of an episode after its prompt, actions and observations together (null: none; the
    context is always held to the model's positions: an episode whose context fills them ends, cut)."""
    attempt_discount: Annotated[float, Range(gt=0, le=1)] = 1.0
    """Multiplier of the success per attempt after the first: an episode's reward is its last verdict's,
    every component but the length penalty times attempt_discount ** (attempts - 1), on every model
    token of the episode (the penalty is never discounted: more failed attempts never shrink it)."""
    process_coef: NonNegativeFloat = 0.0
    """Per-attempt process reward: the tokens of a failed attempt before the last get
    process_coef * (r_attempt - r_last) more advantage (grpo only)."""
    max_staleness: Annotated[int, Range(ge=0, le=64)] = 0
    """Generation overlapping training (posttrain/train/_overlap.py): the batch of step s is sampled
    by policy version max(0, s - max_staleness) while earlier steps train, with the truncated-IS
    correction on stale samples. 0 = the synchronous loop."""
    data_parallel: Annotated[int, Range(ge=1, le=64)] = 1
    """Processes the RL stage trains on (torch.distributed, FSDP2; posttrain/train/_dist.py): each
    samples and verifies its share of every step's tasks, the decoder layers are sharded over them and
    the update is of the whole batch. One per GPU on a GPU host (nccl), gloo on the CPU; posttrain
    starts them itself, on this machine, or torchrun does (on several machines: torchrun's WORLD_SIZE,
    README). GRPO with verifier rewards, rl.max_staleness 0, rl.sampler local or fast, no model.lora,
    sched.backend local."""
    sampler: Literal["local", "fast", "vllm"] = "local"
    """What samples the rollouts (posttrain/train/_backends.py): local = transformers' generate;
    fast = posttrain's decoding loop on the same weights (a group's prompt computed once, finished
    rows leave the batch); vllm = a vLLM engine in its own process (``make vllm-env``), the weights
    pushed and checked after every update. Same distribution, other samples for one seed."""
    speculative: bool = False
    """sampler fast: prompt-lookup drafts in the tail of a batch, verified exactly (same distribution)."""
    rollout_reuse: bool = False
    """sampler fast: a task sampled again drafts with its previous completions (SPEC-RL), exactly."""
    dedup: bool = False
    """Identical completions of a group count once in its baseline: the advantage is over its distinct
    completions, every copy is trained with its first copy's advantage, never masked, and a repeat never
    raises an advantage (each sample gets the lesser of that and its advantage without dedup)
    (posttrain/rollout/_adaptive.py; grpo only: refused with ppo, which has no group baseline)."""
    adaptive_temperature: AdaptiveTemperatureConfig | None = None
    """A sampling temperature per task, raised while its groups repeat themselves, each row scored at
    the temperature it was sampled at (``{}``: the section's defaults; null: rl.temperature for every
    task). metrics.jsonl has adaptive/temperature_mean, the mean over each step's groups."""
    adaptive_budget: AdaptiveBudgetConfig | None = None
    """A max_new_tokens per task from its difficulty, shrunk on tasks solved reliably and grown on tasks
    failed (``{}``: the section's defaults; null: rl.max_new_tokens for every task). metrics.jsonl has
    adaptive/budget_mean, the mean over each step's groups."""

    def _not_data_parallel(self) -> str | None:
        """What in this section data-parallel ranks do not run, or None."""
        if self.algorithm == "ppo":
            return "rl.algorithm: ppo trains a critic they do not shard; use rl.algorithm: grpo or rl.data_parallel: 1"
        if self.max_staleness > 0:
            return f"rl.max_staleness: {self.max_staleness} is not theirs yet; use rl.max_staleness: 0"
        if self.sampler == "vllm":
            return "rl.sampler: vllm runs one engine; use rl.sampler: local or fast"
        if self.reward_model_weight > 0:
            return "rl.reward_model_weight > 0 is not theirs yet; use rl.reward_model_weight: 0"
        if self.skip_zero_advantage:
            return "rl.skip_zero_advantage would give the ranks different micro-batch counts; use it on one process"
        return None

    @property
    def most_new_tokens(self) -> int:
        """The largest cap an action can be sampled with: rl.adaptive_budget.high when it is on, else
        rl.max_new_tokens (the model's positions must hold it; Dr.GRPO's constant counts it)."""
        budget = self.adaptive_budget  # its high is set by __post_init__ when null
        return self.max_new_tokens if budget is None or budget.high is None else budget.high

    def __post_init__(self) -> None:
        object.__setattr__(self, "episodes", kinds.episode_kind(self.episodes, where="rl.episodes"))
        if self.sampler != "fast" and (self.speculative or self.rollout_reuse):
            raise ConfigError(f"rl.speculative and rl.rollout_reuse need rl.sampler: fast, got {self.sampler}")
        if self.data_parallel > 1 and (why := self._not_data_parallel()) is not None:
            raise ConfigError(f"rl.data_parallel: {self.data_parallel} runs GRPO ranks with verifier rewards; {why}")
        if self.process_coef > 0 and self.algorithm == "ppo":
            raise ConfigError("rl.process_coef > 0 is for group-relative advantages (rl.algorithm: grpo); "
                              "PPO's GAE has no process term")
        if self.episodes in kinds.MULTI_TURN and self.reward_model_weight > 0:
            raise ConfigError("rl.reward_model_weight > 0 scores one-turn responses; it cannot be combined with "
                              f"rl.episodes: {self.episodes}")
        if (why := kinds.limits_problem(self.episodes, max_turns=self.max_turns)) is not None:
            raise ConfigError(f"rl.max_turns: {why} (rl.episodes)")
        if self.prompts_per_step * self.group_size > MAX_ROWS:
            field = "rl.prompts_per_step" if self.prompts_per_step > self.group_size else "rl.group_size"
            raise ConfigError(f"{field}: {self.prompts_per_step} prompts x {self.group_size} samples is "
                              f"{self.prompts_per_step * self.group_size:,} completions a step; expected at most "
                              f"{MAX_ROWS:,} (rl.prompts_per_step x rl.group_size)")
        if self.group_size < 2 and self.algorithm == "grpo":
            raise ConfigError(f"rl.group_size: group-relative advantages need >= 2 samples, got {self.group_size}")
        if self.policy_loss == "gspo" and self.loss_agg != "seq_mean_token_mean":
            raise ConfigError("rl.policy_loss gspo needs rl.loss_agg: seq_mean_token_mean (a sequence-level ratio)")
        if self.skip_zero_advantage and self.kl_coef > 0 and self.kl_placement == "loss":
            raise ConfigError("rl.skip_zero_advantage: a row with advantage 0 still has the loss's KL term "
                              f"(rl.kl_coef {self.kl_coef}, rl.kl_placement loss); use rl.kl_coef: 0 or "
                              "rl.kl_placement: reward")
        if self.dynamic_sampling and self.group_size < 2:
            raise ConfigError("rl.dynamic_sampling keeps groups with reward variance: it needs rl.group_size >= 2")
        if self.dedup and self.algorithm == "ppo":
            raise ConfigError("rl.dedup counts a repeated completion once in its group's baseline; rl.algorithm: ppo "
                              "has none (a critic): use rl.algorithm: grpo or rl.dedup: false")
        self._check_adaptive()

    def _check_adaptive(self) -> None:
        """The adaptive sections against the values every task starts at (rl.temperature,
        rl.max_new_tokens); ``adaptive_budget.high`` derived when null."""
        temp = self.adaptive_temperature
        if temp is not None and temp.high < self.temperature:
            raise ConfigError(f"rl.adaptive_temperature.high: expected >= rl.temperature ({self.temperature}), where "
                              f"every task starts, got {temp.high}")
        budget = self.adaptive_budget
        if budget is None:
            return
        if budget.high is None:
            budget = dataclasses.replace(budget, high=4 * self.max_new_tokens)
            object.__setattr__(self, "adaptive_budget", budget)
        if budget.low > self.max_new_tokens:
            raise ConfigError(f"rl.adaptive_budget.low: expected <= rl.max_new_tokens ({self.max_new_tokens}), where "
                              f"every task starts, got {budget.low}")
        if budget.high < self.max_new_tokens:
            raise ConfigError(f"rl.adaptive_budget.high: expected >= rl.max_new_tokens ({self.max_new_tokens}), where "
                              f"every task starts, got {budget.high}")
        if budget.hard >= budget.easy:
            raise ConfigError(f"rl.adaptive_budget.hard: expected < rl.adaptive_budget.easy ({budget.easy}), "
                              f"got {budget.hard}")


@dataclass(frozen=True)
class EvalConfig:
    samples_per_task: Annotated[int, Range(ge=1, le=MAX_SAMPLES_PER_TASK)] = 4
    """Samples per held-out task, drawn independently (1 with temperature 0: greedy); pass@1 is their mean success."""
    temperature: Annotated[float, Range(ge=0, le=MAX_TEMPERATURE)] = 1.0
    """Sampling temperature for evaluation: the policy as trained samples (0 = greedy; else at least 1e-5)."""
    max_new_tokens: PositiveInt = 24
    """Completion length cap at evaluation (per attempt)."""
    episodes: Literal["single", "repair", "agent", "tool"] = "single"
    """single: one answer per sample (pass@1). repair: after a failed attempt the model reads the
    feedback and tries again, up to the task's limits.max_attempts; reports first-attempt pass rate,
    repair@r, mean attempts to success, turns and tokens per episode, truncation rate. agent: each
    task's domain runs its own multi-turn environment (also the tool-call validity rate). tool:
    agent's former name (accepted with a warning until the next release)."""
    max_turns: PositiveInt | None = None
    """The step limit of eval episodes (null: 1 for single, each task's max_attempts for repair, 4 for agent;
    on BFCL tasks each user turn's cap on steps with calls, as rl.max_turns)."""
    baselines: tuple[str, ...] = ()
    """The seesaw gate: earlier runs (run directories, or ``posttrain eval --out`` results) whose
    held-out pass@1 per domain this run's last model is held to, each domain against the baselines
    that evaluated it (single-domain runs from the same start: a multi-domain run must not lose
    what one domain alone learns). summary.json's ``regression`` has every row; the run fails
    (exit 1, after its summary and report) when a domain dropped beyond both 95% intervals."""

    def __post_init__(self) -> None:
        if 0 < self.temperature < MIN_TEMPERATURE:  # a sampler refuses it, after training
            raise ConfigError(f"eval.temperature: expected 0 (greedy) or a number >= {MIN_TEMPERATURE:g}, "
                              f"got {self.temperature}")
        if self.temperature == 0 and self.samples_per_task > 1:  # as posttrain eval's --n with --temperature 0
            raise ConfigError(f"eval.samples_per_task: expected 1 with eval.temperature 0 (one greedy answer drawn "
                              f"{self.samples_per_task} times is no i.i.d. sample: the seesaw gate would count it "
                              f"{self.samples_per_task} times), got {self.samples_per_task}")
        object.__setattr__(self, "episodes", kinds.episode_kind(self.episodes, where="eval.episodes"))
        if (why := kinds.limits_problem(self.episodes, max_turns=self.max_turns)) is not None:
            raise ConfigError(f"eval.max_turns: {why} (eval.episodes)")


@dataclass(frozen=True)
class SandboxConfig:
    workers: Annotated[int, Range(ge=1, le=MAX_POOL_SIZE)] | None = None
    """Sandbox pool slots (None = number of CPU cores)."""


@dataclass(frozen=True)
class SchedConfig:
    backend: Literal["local", "ray"] = "local"
    """Where rollouts and verification run: local (this process and its sandbox pool) or ray (rollout
    actors that receive each policy version, a sandbox-pool actor per node; ``posttrain run --backend ray``)."""
    ray_address: str | None = None
    """ray: the cluster's address (HOST:PORT of ``ray start --head``); null = a one-node cluster of the
    run's own on this machine (own temp dir and port), stopped when the run ends."""
    rollout_workers: Annotated[int, Range(ge=1, le=256)] = 1
    """ray: rollout actors; the prompts of each generate call are split between them. At most 256:
    each is a process holding the model, started at once when the RL stage starts (10**30 built the
    list of actors forever there, after SFT had run)."""

    def __post_init__(self) -> None:
        if self.ray_address is not None and self.backend != "ray":
            raise ConfigError(f"sched.ray_address: {self.ray_address!r} is a Ray cluster, for sched.backend: ray")
        if self.ray_address is not None and not (
                re.fullmatch(r"(ray://)?[^\s:/]+:\d{1,5}", self.ray_address)
                and 1 <= int(self.ray_address.rsplit(":", 1)[1]) <= 65535):  # port 99999: a connect error at the RL stage
            raise ConfigError(f"sched.ray_address: expected HOST:PORT (the head of `ray start --head`; a port in "
                              f"[1, 65535]), got {self.ray_address!r}")


@dataclass(frozen=True)
class TrackingConfig:
    tensorboard: bool = False
    """Also log every metrics row to TensorBoard (RUN/tensorboard; needs the tensorboard package)."""
    mlflow: bool = False
    """Also log to a local MLflow store under RUN/ (needs the mlflow package)."""
    wandb: bool = False
    """Also log to Weights & Biases (RUN/wandb; project $WANDB_PROJECT, default posttrain; WANDB_MODE=offline
    for a local run directory only, else `wandb login` first)."""


@dataclass(frozen=True)
class Recipe:
    """The whole run: model, tasks, demonstrator, SFT, RL, evaluation, sandbox, execution backend."""

    seed: Seed = 0
    """Seeds every RNG (python, numpy, torch) and the task pool."""
    torch_threads: Annotated[int, Range(ge=1, le=1024)] | None = 1
    """CPU threads for torch (None = torch's default). 1 avoids OpenMP oversubscription while the
    sandbox workers verify on the same cores; measured 20x faster sampling on 2 busy cores. At most
    1024 (100,000 made OpenMP abort the run at its first matrix product: "Thread creation failed")."""
    stages: tuple[Literal["sft", "rm", "dpo", "rl"], ...] = ("sft", "rl")
    """Training stages to run, in order; every stage that produces a policy is evaluated.
    sft: imitate sft.demonstrations. rm: train a reward model on verifier-judged pairs. dpo: DPO on
    those pairs. rl: GRPO against the verifiers (+ the reward model's score when rm ran)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    demonstrator: DemonstratorConfig = field(default_factory=DemonstratorConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    pairs: PairsConfig = field(default_factory=PairsConfig)
    """How preference pairs are built for the rm and dpo stages."""
    rm: RMConfig = field(default_factory=RMConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    reward: RewardWeights | str | tuple[str | RewardTerm, ...] = field(default_factory=RewardWeights)
    """Weights of the named reward components for RL (outcome, format, process, length); or a reward
    function ``package.module:function`` (a list of them, or of ``{function, weight, range}``) that
    scores the function-domain tasks naming none (docs/tasks.md, "function"; components at their
    default weights)."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    sched: SchedConfig = field(default_factory=SchedConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self) -> None:
        width = self.model.hidden_size
        for key, lora in (("dpo.lora", self.dpo.lora), ("rm.lora", self.rm.lora)):  # model.lora: ModelConfig's
            if lora is not None and width is not None and lora.r > width:  # 10**30 was a TypeError at the stage
                raise ConfigError(f"{key}.r: expected at most the model's width, model.hidden_size {width} (a rank "
                                  f"above it adds nothing), got {lora.r}")
        if len(set(self.stages)) != len(self.stages):
            raise ConfigError(f"stages: each stage may run once, got {list(self.stages)}")
        if self.rl.reward_model_weight > 0 and not ("rm" in self.stages and "rl" in self.stages
                                                    and self.stages.index("rm") < self.stages.index("rl")):
            raise ConfigError("rl.reward_model_weight > 0 needs the rm stage before the rl stage in stages")
        if self.rl.max_staleness > 0 and any(src.curriculum for src in self.tasks.train):
            raise ConfigError(f"rl.max_staleness: {self.rl.max_staleness} queues batches across checkpoints by task "
                              f"id, and a curriculum source's tasks are made as it goes; use rl.max_staleness: 0")
        if self.rl.kl_coef > 0 and "sft" not in self.stages and self.model.name == "embedded":
            raise ConfigError("rl.kl_coef > 0 needs a reference policy: run the sft stage or load a trained model")
        weights = self.reward_weights
        if weights.length and weights.max_tokens is not None and "rl" in self.stages and \
                self.rl.episodes == "single" and weights.max_tokens > self.rl.most_new_tokens:
            # a completion is cut at the cap before the penalty reaches -1: running long paid part of it
            raise ConfigError(f"reward.max_tokens: {weights.max_tokens} is above the completion cap "
                              f"{self.rl.most_new_tokens} (rl.max_new_tokens, or rl.adaptive_budget.high), so a "
                              f"completion cut at the cap gets only part of the length penalty; set it at most "
                              f"{self.rl.most_new_tokens} (DAPO: the generation cap)")
        if not isinstance(self.reward, RewardWeights):
            try:
                as_terms(self.reward)
            except ConfigError as e:
                raise ConfigError(f"reward: {e}") from None

    @property
    def reward_weights(self) -> RewardWeights:
        """The component weights RL combines (the defaults when ``reward`` names functions)."""
        return self.reward if isinstance(self.reward, RewardWeights) else RewardWeights()

    @property
    def reward_functions(self) -> tuple[RewardTerm, ...]:
        """The reward functions ``reward`` names (none when it holds weights)."""
        return () if isinstance(self.reward, RewardWeights) else as_terms(self.reward)


EMBEDDED_RECIPE = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Parse a recipe file (+ ``section.key=value`` overrides) into a ``Recipe``, strictly.

    Everything the run reads is checked here, before any work (``check_inputs``): the task
    sources, the SFT demonstrations, the model's tokenizer and its positions.
    """
    data = load_yaml(path)
    try:
        recipe = parse_config(Recipe, apply_overrides(data, overrides or []))
        check_lora_targets(recipe)
        train, held = check_inputs(recipe)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    warn_shared_prompts(train, held)
    for line in noop_problems([*train, *held]):  # a reward function that cannot tell a no-op from a solution
        print(f"posttrain: warning: {line}", file=sys.stderr)
    return recipe


def warn_shared_prompts(train: Sequence[Task], held: Sequence[Task]) -> None:
    """One warning line on stderr when held-out tasks have the exact prompt of a training task.

    Not an error: ids are distinct, and generated families repeat prompts by design; but the
    pass@1 of such tasks measures recall, so the user is told which.
    """
    seen = {model_prompt(t): t.id for t in train}
    shared = [(t.id, seen[model_prompt(t)]) for t in held if model_prompt(t) in seen]
    if shared:
        shown = ", ".join(f"{e!r} = {tr!r}" for e, tr in shared[:3]) + (", ..." if len(shared) > 3 else "")
        print(f"posttrain: warning: {len(shared)} of {len(held)} held-out task(s) have the prompt of a training task "
              f"({shown}); their pass@1 measures recall, not generalization", file=sys.stderr)


def recipe_tasks(recipe: Recipe) -> tuple[list[Task], list[Task]]:
    """``(train, eval)`` tasks of the recipe: its sources, or the quickstart shorthand.

    The shorthand generates each domain's quickstart family and holds out its first tasks.
    """
    cfg = recipe.tasks
    if cfg.train:
        with default_reward(recipe.reward_functions):  # function tasks naming no reward take the recipe's
            return load_pools(cfg.train, cfg.eval, seed=recipe.seed,
                              contamination=None if cfg.contamination == "keep" else cfg.contamination)
    train, held = [], []
    for domain in cfg.domains:
        family = domain_family(domain, f"quickstart-{domain}")
        assert family is not None  # checked by TasksConfig
        tasks = family(seed=recipe.seed)
        need = cfg.n_train_per_domain + cfg.n_eval_per_domain
        if need > len(tasks):
            raise ConfigError(f"tasks.n_train_per_domain: the {domain} family has {len(tasks)} tasks, the recipe "
                              f"asks for {need} (n_train_per_domain + n_eval_per_domain)")
        tr, ev = generators.split_tasks(tasks[:need], n_eval=cfg.n_eval_per_domain)
        train += tr
        held += ev
    return train, held


def make_demonstrator(recipe: Recipe) -> generators.Demonstrator:
    return generators.Demonstrator(error_rate=recipe.demonstrator.error_rate, seed=recipe.seed)


def uses_demonstrator(recipe: Recipe, eval_tasks: Sequence[Task]) -> bool:
    """Whether the scripted demonstrator is part of the run (and so evaluated): SFT imitates it
    and it knows every held-out task."""
    demo = make_demonstrator(recipe)
    return recipe.sft.demonstrations == "demonstrator" and all(demo.knows(t) for t in eval_tasks)


def sft_demonstrations(recipe: Recipe, train: Sequence[Task], eval_tasks: Sequence[Task]) -> list[tuple[str, str]]:
    """``(prompt, response)`` pairs SFT imitates, from ``sft.demonstrations``; ``ConfigError`` if unusable."""
    how = recipe.sft.demonstrations
    if how == "repair":  # the episodes are built by the pipeline (their feedback comes from the sandbox)
        demo = make_demonstrator(recipe)
        unknown = next((t for t in train if not (is_feedback_only(t) or demo.knows(t))), None)
        if unknown is not None:
            raise ConfigError(f"sft.demonstrations: repair needs feedback-only tasks (the tag feedback-only: "
                              f"generator repair) or tasks of a family the scripted demonstrator knows "
                              f"(quickstart-math, quickstart-code), not training task {unknown.id!r}")
        if not any(is_feedback_only(t) for t in train):
            raise ConfigError("sft.demonstrations: repair, but no training task is of the feedback-only family "
                              "(generator: repair)")
        for t in train:  # the scripted demonstrator must be able to play every feedback-only task
            if is_feedback_only(t) and generators.repair_script_problem(t) is not None:
                raise ConfigError(f"sft.demonstrations: repair: the scripted demonstrator cannot play training task "
                                  f"{t.id!r}: {generators.repair_script_problem(t)}")
        return [(model_prompt(t), str(t.reference) if is_feedback_only(t) else demo.respond(t)) for t in train]
    if how == "references":
        missing = next((t for t in train if t.reference is None), None)
        if missing is not None:
            raise ConfigError(f"sft.demonstrations: references, but training task {missing.id!r} has no reference "
                              f"(field 'reference', or 'canonical_solution' for code)")
        return [(model_prompt(t), str(t.reference)) for t in train]
    if how == "demonstrator":
        demo = make_demonstrator(recipe)
        unknown = next((t for t in train if not demo.knows(t)), None)
        if unknown is not None:
            raise ConfigError(f"sft.demonstrations: the scripted demonstrator knows only the quickstart families, "
                              f"not training task {unknown.id!r} ({unknown.domain}); use sft.demonstrations: "
                              f"references, or a demonstrations file")
        return [(model_prompt(t), demo.respond(t)) for t in train]
    return load_demonstrations(how, train, eval_tasks)


def rl_sampler(recipe: Recipe, train: Sequence[Task], held: Sequence[Task], *,
               fits: Callable[[Task], bool] = lambda task: True) -> TaskSampler | TaskPool:
    """The RL stage's task sampler (``tasks.sampler``) over the training tasks and the curriculum
    sources; a curriculum leaves out tasks that overlap ``held`` or do not ``fit`` the model."""
    return make_sampler(recipe.tasks.sampler, train, seed=recipe.seed, sources=recipe.tasks.train,
                        eval_tasks=held, fits=fits)


def check_inputs(recipe: Recipe) -> tuple[list[Task], list[Task]]:
    """The checks ``load_recipe`` runs before any work: task sources, demonstrations, model (see
    each); returns the ``(train, eval)`` tasks."""
    train, held = recipe_tasks(recipe)
    if "rl" in recipe.stages and recipe.tasks.sampler.kind == "pool":  # weights, canaries, curricula: said now
        rl_sampler(recipe, train, held)
    demos = sft_demonstrations(recipe, train, held) if "sft" in recipe.stages else []
    attempts = max(t.limits.max_attempts for t in [*train, *held]) if train or held else 1
    turns = {key: kinds.episode_turns(cfg.episodes, tasks, max_turns=cfg.max_turns, max_attempts=attempts)
             for key, cfg, tasks in (("rl", recipe.rl, train), ("eval", recipe.eval, held))}
    check_model(recipe, [model_prompt(t) for t in [*train, *held]], demos, attempts, turns=turns)
    for key, cfg, tasks in (("rl", recipe.rl, train if "rl" in recipe.stages else []), ("eval", recipe.eval, held)):
        if (why := kinds.tasks_problem(cfg.episodes, tasks)) is not None:
            raise ConfigError(f"{key}.episodes: {cfg.episodes}: {why}")
        local = kinds.local_only(cfg.episodes, tasks)
        if local is not None and recipe.sched.backend == "ray":
            raise ConfigError(f"{key}.episodes: {cfg.episodes} on {local.domain} tasks (task {local.id!r}) runs its "
                              f"environment in this machine's sandbox, not yet on a Ray cluster; use sched.backend: local")
    for i, path in enumerate(recipe.eval.baselines):  # each one readable now, not after the training
        try:
            load_baseline(path)
        except UserError as e:
            raise ConfigError(f"eval.baselines[{i}]: {e}") from None
    lora = recipe.model.lora
    if "rl" in recipe.stages and recipe.rl.max_staleness > 0 and lora is not None and lora.dropout > 0:
        raise ConfigError(f"rl.max_staleness: {recipe.rl.max_staleness} generates while the update trains, and "
                          f"model.lora.dropout {lora.dropout} draws from the same random stream, so the run would not "
                          f"be reproducible; set model.lora.dropout: 0 or rl.max_staleness: 0")
    if "rl" in recipe.stages and recipe.rl.data_parallel > 1 and (recipe.sched.backend == "ray" or lora is not None):
        raise ConfigError(f"rl.data_parallel: {recipe.rl.data_parallel} starts its ranks on this machine with whole "
                          f"plain weights; " + ("sched.backend: ray" if recipe.sched.backend == "ray" else "model.lora")
                          + " is not theirs yet; use rl.data_parallel: 1")
    if "rl" in recipe.stages and recipe.rl.sampler != "local" and (recipe.sched.backend == "ray" or lora is not None):
        raise ConfigError(f"rl.sampler: {recipe.rl.sampler} samples from this process's plain weights; "
                          + ("sched.backend: ray samples on its rollout actors" if recipe.sched.backend == "ray"
                             else "model.lora trains adapters it does not see") + "; use rl.sampler: local")
    demo_kind = demonstration_kind(recipe)
    if "sft" in recipe.stages and recipe.sched.backend == "ray" and kinds.local_only(demo_kind, train) is not None:
        raise ConfigError(f"sft.demonstrations: {recipe.sft.demonstrations} as {demo_kind} episodes of sandboxed tasks "
                          f"run in this machine's sandbox, not yet on a Ray cluster; use sched.backend: local")
    return train, held


def demonstration_kind(recipe: Recipe) -> kinds.EpisodeKind:
    """The episodes SFT's demonstrations are played as: ``repair`` for ``sft.demonstrations: repair``
    (its feedback-only tasks), ``agent`` for ``references`` when RL or evaluation runs agent
    episodes (each task's reference calls, in its own environment), else ``single`` (one answer)."""
    how = recipe.sft.demonstrations
    if how == "repair":
        return "repair"
    agent = "agent" in (recipe.rl.episodes, recipe.eval.episodes)
    return "agent" if how == "references" and agent else "single"


OBSERVATION_TOKENS = kinds.OBSERVATION_TOKENS


def check_model(recipe: Recipe, prompts: Sequence[str], demos: Sequence[tuple[str, str]],
                max_attempts: int = 1, *, turns: Mapping[str, int] | None = None) -> None:
    """The model has a tokenizer with an EOS token and enough positions for the recipe's lengths.

    Needed positions: the longest prompt (in the model's tokens, BOS included) + the longest
    completion or episode any stage samples (rl, eval, pairs; ``rollout.episodes.episode_tokens``
    over ``turns[key]``, the runner's cap on the actions of an episode of ``key``; default: each
    task's max_attempts for repair), and the longest
    SFT demonstration + EOS. A hub name (not a local directory) is checked when it is loaded
    (``load_policy``: tokenizer, EOS).
    """
    from posttrain.policy import ModelFacts, build_char_tokenizer, inspect_model

    cfg = recipe.model
    if cfg.name == "embedded":
        facts = ModelFacts(cfg.max_positions, "model.max_positions", build_char_tokenizer())
    elif _looks_like_path(cfg.name):
        try:
            facts = inspect_model(Path(cfg.name).expanduser())
        except UserError as e:
            raise ConfigError(f"model.name: {e}") from None
    else:
        _check_hub_model(cfg.name)
        return
    _check_chat_template(recipe, facts.tokenizer)
    chat = check_chat(recipe, facts.tokenizer, "the embedded default's tokenizer" if cfg.name == "embedded"
                      else f"the tokenizer of {cfg.name}")
    if facts.positions is None:
        return

    def cap(cfg: RLConfig | EvalConfig) -> tuple[str, int]:  # the per-action cap's key and its largest value
        if isinstance(cfg, RLConfig) and cfg.adaptive_budget is not None:
            return "rl.adaptive_budget.high", cfg.most_new_tokens
        return f"{'rl' if isinstance(cfg, RLConfig) else 'eval'}.max_new_tokens", cfg.max_new_tokens

    def label(key: str, cfg: RLConfig | EvalConfig) -> str:
        return f"a {key}.episodes: {cfg.episodes} episode ({cap(cfg)[0]} per turn, observations, budget)" \
            if cfg.episodes in kinds.MULTI_TURN else cap(cfg)[0]

    def length(key: str, cfg: RLConfig | EvalConfig, budget: int | None = None) -> int:
        n = (turns or {}).get(key) or cfg.max_turns or max_attempts
        return kinds.episode_tokens(cfg.episodes, n, cap(cfg)[1], budget=budget)

    new_tokens = {label("eval", recipe.eval): length("eval", recipe.eval)}
    if "rl" in recipe.stages:
        new_tokens[label("rl", recipe.rl)] = length("rl", recipe.rl, recipe.rl.max_episode_tokens)
    if {"rm", "dpo"} & set(recipe.stages):
        new_tokens["pairs.max_new_tokens"] = recipe.pairs.max_new_tokens
    key_new = max(new_tokens, key=lambda k: new_tokens[k])
    prompt_len, longest = _longest(facts.tokenizer, prompts, chat)
    need = prompt_len + new_tokens[key_new]
    what = f"the longest prompt ({longest!r:.40}) is {prompt_len} tokens + {key_new} {new_tokens[key_new]}"
    if demos:
        if chat is None:
            demo_len, demo = _longest(facts.tokenizer, [p + r for p, r in demos])
        else:  # the rendered prompt, then the response's own ids (as SFT encodes them)
            lengths = [a + b for a, b in zip(_counts(facts.tokenizer, [p for p, _ in demos], chat),
                                             _counts(facts.tokenizer, [r for _, r in demos], None, bos=False),
                                             strict=True)]
            at = max(range(len(demos)), key=lengths.__getitem__)
            demo_len, demo = lengths[at], demos[at][0] + demos[at][1]
        if demo_len + 1 > need:
            need, what = demo_len + 1, f"the longest SFT demonstration ({demo!r:.40}) is {demo_len + 1} tokens with EOS"
        _check_pack_len(recipe.sft, demo_len + 1, demo, facts.positions)
    if need > facts.positions:
        fix = "raise model.max_positions" if cfg.name == "embedded" else "use a model with more positions"
        key = "model.max_positions" if cfg.name == "embedded" else f"model.name: {facts.positions_key}"
        raise ConfigError(f"{key}: the model has {facts.positions} positions, the recipe needs {need}: "
                          f"{what}; {fix}, or shorten the tasks or {key_new}")


def _check_pack_len(cfg: SFTConfig, longest: int, demo: str, positions: int) -> None:
    """``sft.pack_len`` against the SFT demonstrations when the recipe is parsed: at least the longest
    one with EOS (``train.sft.check_pack_len`` refused it when the stage started, after the run had
    written its directory and evaluated the base model; counted here as ``check_model`` counts, never
    more than SFT's rows), and at most ``sft.batch_size`` x the model's positions (a step's whole batch
    fits in one row of that many tokens: more is padding; 10**30 was a TypeError from torch.full at
    the stage)."""
    if cfg.pack_len is None:
        return
    if longest > cfg.pack_len:
        raise ConfigError(f"sft.pack_len: the longest SFT demonstration ({demo!r:.40}) is {longest} tokens with EOS, "
                          f"more than pack_len={cfg.pack_len} (an example is never split across rows); raise "
                          f"sft.pack_len to at least {longest}")
    most = cfg.batch_size * positions
    if cfg.pack_len > most:
        raise ConfigError(f"sft.pack_len: expected at most sft.batch_size x the model's positions ({cfg.batch_size} x "
                          f"{positions} = {most}: a step's whole batch fits in one row of that many tokens), "
                          f"got {cfg.pack_len}")


def _check_chat_template(recipe: Recipe, tokenizer: Any) -> None:
    """Agent episodes render through the model's chat template: it must exist, teach a tool-call
    format posttrain parses, and let tool results be appended (``rollout.episodes.chat_problem``)."""
    for key, cfg in (("rl", recipe.rl), ("eval", recipe.eval)):
        if key == "eval" or "rl" in recipe.stages:
            if (why := kinds.chat_problem(cfg.episodes, tokenizer, None)) is not None:
                raise ConfigError(f"{key}.episodes: {cfg.episodes} needs the model's chat template (model.name "
                                  f"{recipe.model.name}): {why}") from None


def uses_repair_feedback(recipe: Recipe) -> bool:
    """Whether the run appends repair feedback to episodes (rl or eval repair episodes, or the sft
    stage's repair demonstrations): chat-rendered, it is a user turn of the template."""
    return (("rl" in recipe.stages and kinds.gives_feedback(recipe.rl.episodes)) or kinds.gives_feedback(recipe.eval.episodes)
            or ("sft" in recipe.stages and kinds.gives_feedback(demonstration_kind(recipe))))


def check_chat(recipe: Recipe, tokenizer: Any, where: str) -> Any:
    """``model.chat`` against the model's tokenizer (``where`` names it): the ``ChatTemplate`` the
    run's prompts are rendered with, or None for plain prompts. Auto renders through the template
    when it is usable for this recipe (``resolve_chat``, ``chat_unusable``), else plain (the run says
    why: ``pipeline.decide_chat``). True is a ``ConfigError`` naming the key and the tokenizer when
    there is no template, when the template does not end an assistant turn with the EOS
    (``ChatTemplate.check_end_of_turn``), or, with repair feedback, when it cannot append a user turn
    (``check_appends("user")``)."""
    from posttrain.policy import prompt_template, resolve_chat

    setting = recipe.model.chat_setting
    repair = uses_repair_feedback(recipe)
    try:
        if not resolve_chat(setting, tokenizer, repair=repair):
            return None
        chat = prompt_template(tokenizer)
        chat.check_end_of_turn()
        if repair:
            chat.check_appends("user")
    except UserError as e:
        raise ConfigError(f"model.chat: true, {where}: {e}; set model.chat: false for plain-text prompts"
                          ) from None
    return chat


def _longest(tokenizer: Any, texts: Sequence[str], chat: Any = None) -> tuple[int, str]:
    """``(tokens, text)`` of the longest of ``texts`` as ``Policy.encode_prompt`` counts it (BOS included;
    ``chat``: the ``ChatTemplate`` prompts are rendered with)."""
    if not texts:
        return 0, ""
    counts = _counts(tokenizer, texts, chat)
    at = max(range(len(texts)), key=counts.__getitem__)
    return counts[at], texts[at]


def _counts(tokenizer: Any, texts: Sequence[str], chat: Any, *, bos: bool = True) -> list[int]:
    """Token counts of ``texts`` as prompts (``chat``: rendered as one user message with the generation
    prompt; else BOS included when ``bos``), tokenized in chunks (thousands of prompts at parse time)."""
    first = tokenizer.bos_token_id if bos and chat is None else None
    counts = []
    for start in range(0, len(texts), 512):
        chunk = list(texts[start : start + 512])
        if chat is not None:
            chunk = [chat.render_text([{"role": "user", "content": t}]) for t in chunk]
        ids = tokenizer(chunk, add_special_tokens=bos and chat is None)["input_ids"]
        counts += [len(x) + (1 if first is not None and x[:1] != [first] else 0) for x in ids]
    return counts


def check_lora_targets(recipe: Recipe) -> None:
    """Each LoRA spec names modules its model has, checked on an empty (meta-device) model.

    A hub model that is not in the local cache cannot be checked here; ``apply_lora`` checks it
    when it is loaded, with the same message.
    """
    for key, spec, seq_cls in (("model.lora", recipe.model.lora, False), ("dpo.lora", recipe.dpo.lora, False),
                               ("rm.lora", recipe.rm.lora, True)):
        if spec is not None and (model := _skeleton(recipe.model, seq_cls=seq_cls)) is not None:
            lora_target_modules(model, spec, key=f"{key}.target_modules")


def _skeleton(cfg: ModelConfig, *, seq_cls: bool) -> torch.nn.Module | None:
    """The recipe's model architecture with no weights (module names only), or None if unknown here."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, LlamaConfig

    if cfg.name == "embedded":  # posttrain.policy.build_embedded_default: Llama; sizes do not change names
        config = LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                             num_attention_heads=1, num_key_value_heads=1)
    else:
        try:
            config = AutoConfig.from_pretrained(cfg.name, local_files_only=True)
        except (OSError, ValueError, KeyError):
            return None
    auto = AutoModelForSequenceClassification if seq_cls else AutoModelForCausalLM
    with torch.device("meta"):
        try:
            return auto.from_config(config)
        except (ValueError, KeyError, ImportError):
            return None
