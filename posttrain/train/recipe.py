"""The recipe: one typed config for ``posttrain run`` (SFT -> RL -> eval on a task pool).

A recipe file is YAML whose sections map onto these frozen dataclasses; ``load_recipe`` rejects
unknown keys, wrong types and invalid combinations before any work starts. Every field has a
docstring; the resolved recipe is saved as RUN/config.yaml.

The embedded recipe (``configs/quickstart.yaml``, shipped as ``posttrain/configs/quickstart.yaml``)
is what ``posttrain quickstart`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from posttrain.config import apply_overrides, load_yaml, parse_config
from posttrain.errors import ConfigError
from posttrain.train._step import LoraSpec
from posttrain.train.dpo import DPOConfig
from posttrain.train.preference import PairsConfig
from posttrain.train.rm import RMConfig
from posttrain.verify.rewards import RewardWeights

Domain = Literal["math", "code"]


@dataclass(frozen=True)
class ModelConfig:
    name: str = "embedded"
    """"embedded" builds the embedded default (a small Llama + char tokenizer, from a config);
    anything else is a local path or a hub name loaded with from_pretrained."""
    hidden_size: int = 128
    """Embedded default only: width of the model."""
    num_layers: int = 2
    """Embedded default only: number of transformer blocks."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights and compute dtype for training and sampling (bfloat16 on GPUs; float32 on CPUs)."""
    device: str = "cpu"
    """torch device: "cpu", "cuda", "cuda:1", ..."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward (transformers gradient checkpointing): less memory, more compute."""
    lora: LoraSpec | None = None
    """Train LoRA adapters (peft) in the sft and rl stages instead of all weights; merged into the
    weights when the stage ends, so every checkpoint is a plain model. (dpo and rm: dpo.lora, rm.lora.)"""


@dataclass(frozen=True)
class TasksConfig:
    domains: tuple[Domain, ...] = ("math", "code")
    """Domains of the generated task pool (the quickstart families in posttrain.tasks.generators)."""
    n_train_per_domain: int = 600
    """Training tasks per domain."""
    n_eval_per_domain: int = 100
    """Held-out evaluation tasks per domain; train and eval share no task."""

    def __post_init__(self) -> None:
        if not self.domains:
            raise ConfigError("tasks.domains: expected at least one domain")
        if len(set(self.domains)) != len(self.domains):
            raise ConfigError(f"tasks.domains: duplicate domain in {list(self.domains)}")
        if self.n_train_per_domain < 1 or self.n_eval_per_domain < 1:
            raise ConfigError("tasks.n_train_per_domain and tasks.n_eval_per_domain must be >= 1")


@dataclass(frozen=True)
class DemonstratorConfig:
    error_rate: float = 0.4
    """Fraction of tasks on which the scripted demonstrator is wrong (imitation's ceiling)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.error_rate < 1.0:
            raise ConfigError(f"demonstrator.error_rate: expected a number in [0, 1), got {self.error_rate}")


@dataclass(frozen=True)
class SFTConfig:
    epochs: float = 3.0
    """Passes over the demonstrations (fractions allowed)."""
    batch_size: int = 32
    """Sequences per optimizer step."""
    lr: float = 3e-3
    """Peak learning rate (AdamW, linear warmup then cosine decay)."""
    warmup_frac: float = 0.05
    """Fraction of steps spent warming up the learning rate."""
    pack_len: int | None = None
    """Pack demonstrations into rows of this many tokens (padding-free); null = one padded row each."""

    def __post_init__(self) -> None:
        if self.epochs <= 0 or self.batch_size < 1 or self.lr <= 0:
            raise ConfigError("sft: epochs, batch_size and lr must be positive")


@dataclass(frozen=True)
class RLConfig:
    algorithm: Literal["grpo", "ppo"] = "grpo"
    """grpo: group-relative advantages (see ``advantage``). ppo: a critic (value head on the
    starting policy's backbone) and GAE advantages per token."""
    steps: int = 200
    """Policy updates (one generation batch each)."""
    prompts_per_step: int = 16
    """Tasks sampled per step."""
    group_size: int = 8
    """G: samples per task; advantages are relative within the group."""
    temperature: float = 1.0
    """Sampling temperature (logprobs are taken at this temperature)."""
    max_new_tokens: int = 24
    """Completion length cap; completions cut here finish with reason "length"."""
    lr: float = 1e-3
    """Learning rate (AdamW, constant after a short warmup)."""
    advantage: Literal["grpo", "rloo", "reinforce_pp"] = "grpo"
    """Advantage estimator (posttrain.algo.ADVANTAGES)."""
    scale_by_std: bool | None = None
    """Divide by the group std: null = the estimator's own default (on for grpo, off for rloo);
    false with grpo = Dr.GRPO."""
    policy_loss: Literal["ppo_clip", "gspo", "cispo"] = "ppo_clip"
    """Per-token policy loss (posttrain.algo.POLICY_LOSSES)."""
    clip_low: float = 0.2
    """Lower clip range of the ratio (1 - clip_low)."""
    clip_high: float = 0.28
    """Upper clip range of the ratio (1 + clip_high); > clip_low is DAPO's clip-higher."""
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"] = (
        "token_mean"
    )
    """How per-token losses become one scalar (posttrain.algo.aggregate)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the reference (SFT) policy, in the loss; 0 loads no reference model."""
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (posttrain.algo.kl_penalty)."""
    kl_placement: Literal["loss", "reward"] = "loss"
    """Where the KL to the reference goes: a per-token term in the loss (GRPO), or subtracted from
    each sample's reward as beta * sum_t KL_t before advantages (PPO/RLHF style)."""
    dynamic_sampling: bool = False
    """DAPO dynamic sampling: drop groups whose rewards are all equal and draw more tasks."""
    max_refills: int = 3
    """Dynamic sampling: at most this many extra draws per step."""
    mask_truncated: bool = False
    """Give no gradient to completions cut at max_new_tokens (DAPO overlong filtering)."""
    micro_batch_size: int = 64
    """Sequences per forward/backward; gradients accumulate to the full generation batch."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    checkpoint_every: int = 50
    """Save a resumable checkpoint every N steps (and at the end)."""
    gae_lambda: float = 0.95
    """PPO only: GAE lambda (gamma is 1: one outcome reward per completion)."""
    critic_lr: float = 1e-3
    """PPO only: learning rate of the value head and its backbone."""
    reward_model_weight: float = 0.0
    """RLHF: weight of the reward model's sigmoid(score) as the "rm" reward component (needs the
    rm stage before rl)."""

    def __post_init__(self) -> None:
        if self.group_size < 2 and self.algorithm == "grpo":
            raise ConfigError(f"rl.group_size: group-relative advantages need >= 2 samples, got {self.group_size}")
        if self.temperature <= 0:
            raise ConfigError(f"rl.temperature: sampling needs a temperature > 0, got {self.temperature}")
        if self.policy_loss == "gspo" and self.loss_agg != "seq_mean_token_mean":
            raise ConfigError("rl.policy_loss gspo needs rl.loss_agg: seq_mean_token_mean (a sequence-level ratio)")
        if self.kl_coef < 0:
            raise ConfigError(f"rl.kl_coef: expected >= 0, got {self.kl_coef}")
        if self.dynamic_sampling and self.group_size < 2:
            raise ConfigError("rl.dynamic_sampling keeps groups with reward variance: it needs rl.group_size >= 2")
        if self.max_refills < 0:
            raise ConfigError(f"rl.max_refills: expected an integer >= 0, got {self.max_refills}")
        for name in ("steps", "prompts_per_step", "max_new_tokens", "micro_batch_size", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"rl.{name}: expected an integer >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class EvalConfig:
    samples_per_task: int = 4
    """i.i.d. samples per held-out task; pass@1 is their mean success (unbiased)."""
    temperature: float = 1.0
    """Sampling temperature for evaluation: the policy as trained samples (0 = greedy)."""
    max_new_tokens: int = 24
    """Completion length cap at evaluation."""


@dataclass(frozen=True)
class SandboxConfig:
    workers: int | None = None
    """Sandbox pool slots (None = number of CPU cores)."""


@dataclass(frozen=True)
class TrackingConfig:
    tensorboard: bool = False
    """Also log every metrics row to TensorBoard (RUN/tensorboard; needs the tensorboard package)."""
    mlflow: bool = False
    """Also log to a local MLflow store under RUN/ (needs the mlflow package)."""


@dataclass(frozen=True)
class Recipe:
    """The whole run: model, tasks, demonstrator, SFT, RL, evaluation, sandbox."""

    seed: int = 0
    """Seeds every RNG (python, numpy, torch) and the task pool."""
    torch_threads: int | None = 1
    """CPU threads for torch (None = torch's default). 1 avoids OpenMP oversubscription while the
    sandbox workers verify on the same cores; measured 20x faster sampling on 2 busy cores."""
    stages: tuple[Literal["sft", "rm", "dpo", "rl"], ...] = ("sft", "rl")
    """Training stages to run, in order; every stage that produces a policy is evaluated.
    sft: imitate the demonstrator. rm: train a reward model on verifier-judged pairs. dpo: DPO on
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
    reward: RewardWeights = field(default_factory=RewardWeights)
    """Weights of the named reward components for RL (outcome, format, process, length)."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self) -> None:
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ConfigError(f"torch_threads: expected an integer >= 1 or null, got {self.torch_threads}")
        if len(set(self.stages)) != len(self.stages):
            raise ConfigError(f"stages: each stage may run once, got {list(self.stages)}")
        if self.rl.reward_model_weight > 0 and not ("rm" in self.stages and "rl" in self.stages
                                                    and self.stages.index("rm") < self.stages.index("rl")):
            raise ConfigError("rl.reward_model_weight > 0 needs the rm stage before the rl stage in stages")
        if self.rl.kl_coef > 0 and "sft" not in self.stages and self.model.name == "embedded":
            raise ConfigError("rl.kl_coef > 0 needs a reference policy: run the sft stage or load a trained model")


EMBEDDED_RECIPE = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Parse a recipe file (+ ``section.key=value`` overrides) into a ``Recipe``, strictly."""
    data = load_yaml(path)
    try:
        return parse_config(Recipe, apply_overrides(data, overrides or []))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
