"""Preference stages of ``posttrain run``: pairs from verified samples, then DPO or a reward model.

Pairs come from the verifiers, not from a judge: for each training task the current policy
samples ``pairs.samples_per_task`` completions (single-turn episodes through the runner,
``rollout.episodes.sample_tasks``); a completion that passed (or, if none did, the
task's reference) is *chosen* and one that failed is *rejected*. Tasks with no failing sample
give no pair. Infra-error samples are never used. A pair's prompt is the text the policy was shown
(``model_prompt``), and DPO and the reward model encode it with the policy's own
``Policy.encode_prompt`` (plain or chat-rendered, ``model.chat``): pairs are scored after the very
prompt ids their completions were sampled from.

- stage ``dpo``: ``train_dpo`` on those pairs, the policy as it entered the stage as reference.
- stage ``rm``: ``train_rm`` (a value head on the same backbone) on those pairs; RL then adds
  ``rl.reward_model_weight * sigmoid(score)`` as the ``rm`` reward component (RLHF), next to the
  verifier's outcome (``RewardModelScorer``: a completion cut before its EOS is scored with it, as
  the pairs were encoded).

Not here: human preference data files (a ``PreferencePair`` list is the seam where they plug in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch

from posttrain.config import MAX_TEMPERATURE, PositiveInt, Range
from posttrain.envs import model_prompt
from posttrain.errors import ConfigError
from posttrain.evaluate.runner import MAX_SAMPLES_PER_TASK
from posttrain.policy import MIN_TEMPERATURE, Policy, SamplingParams
from posttrain.rollout import as_rollout
from posttrain.rollout.episodes import make_episodes, sample_tasks
from posttrain.sched import Service
from posttrain.train.dpo import DPOConfig, PreferencePair, train_dpo
from posttrain.train.rm import RMConfig, make_reward_model, score_rows, train_rm
from posttrain.types import Rollout, Task


@dataclass(frozen=True)
class PairsConfig:
    samples_per_task: Annotated[int, Range(ge=1, le=MAX_SAMPLES_PER_TASK)] = 4
    """Completions sampled per training task to find a passing and a failing one; capped as
    eval.samples_per_task (sampled as evaluations are: every one held at once)."""
    max_tasks: PositiveInt = 400
    """Training tasks used to build pairs (the first ones of the pool)."""
    temperature: Annotated[float, Range(ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE)] = 1.0
    """Sampling temperature for the pair candidates (a sampler refuses one below 1e-5, where logits / T
    overflow)."""
    max_new_tokens: PositiveInt = 24
    """Completion length cap for the pair candidates."""

    def __post_init__(self) -> None:
        if self.samples_per_task < 1 or self.max_tasks < 1:
            raise ConfigError("pairs.samples_per_task and pairs.max_tasks must be >= 1")


def build_pairs(
    policy: Policy,
    tasks: Sequence[Task],
    service: Service,
    cfg: PairsConfig,
    *,
    seed: int,
) -> list[PreferencePair]:
    """(chosen, rejected) pairs judged by the verifiers (through ``service``) on the policy's own samples."""
    tasks = list(tasks[: cfg.max_tasks])
    params = SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=seed)
    plan = make_episodes("single", tasks, policy, service=service)
    groups = sample_tasks(plan, policy.sampler(), tasks, n=cfg.samples_per_task, params=params, service=service,
                          stage="pairs")
    pairs = []
    for task, group in zip(tasks, groups, strict=True):
        pair = pair_from_group(task, [as_rollout(t) for t in group])
        if pair is not None:
            pairs.append(pair)
    return pairs


def pair_from_group(task: Task, group: Sequence[Rollout]) -> PreferencePair | None:
    """A passing sample (else the reference) over a failing one with another text, after the prompt
    the policy was shown (``model_prompt``); None if nothing else failed.

    >>> from posttrain.types import Verdict
    >>> t = Task(id="t", domain="math", prompt="x=", fields={}, reference="1")
    >>> bad = Rollout("t", 0, (), (), (), "2", "stop", Verdict(outcome="fail", reward=0.0))
    >>> pair_from_group(t, [bad])
    PreferencePair(prompt='x=', chosen='1', rejected='2')
    """
    passed = [r.text for r in group if r.verdict is not None and r.verdict.passed]
    chosen = passed[0] if passed else task.reference
    # a text that both passed and failed (a verifier timing out under load) prefers nothing over itself
    failed = [r.text for r in group if r.verdict is not None and r.verdict.outcome == "fail" and r.text != chosen]
    if not failed or chosen is None:
        return None
    return PreferencePair(prompt=model_prompt(task), chosen=chosen, rejected=failed[0])


def run_dpo(policy: Policy, pairs: Sequence[PreferencePair], cfg: DPOConfig,
            log: Callable[[dict[str, float]], None]) -> dict[str, float]:
    """DPO in place on ``policy.model``; the reference is a frozen copy of it at entry. Prompts are
    encoded as ``policy`` encodes them for sampling."""
    return train_dpo(policy.model, None, policy.tokenizer, pairs, cfg, encode_prompt=policy.encode_prompt, log=log)


def run_rm(base_dir: Path, policy: Policy, pairs: Sequence[PreferencePair], cfg: RMConfig, out_dir: Path,
           log: Callable[[dict[str, float]], None]) -> dict[str, float]:
    """Train a reward model on the backbone saved at ``base_dir``; save it to ``out_dir``. Prompts are
    encoded as ``policy`` encodes them for sampling (RL then scores its rollouts' own ids)."""
    rm = make_reward_model(base_dir)
    rm.config.pad_token_id = policy.tokenizer.pad_token_id
    metrics = train_rm(rm, policy.tokenizer, pairs, cfg, encode_prompt=policy.encode_prompt, log=log)
    rm.save_pretrained(out_dir, safe_serialization=True)
    policy.tokenizer.save_pretrained(out_dir)
    return metrics


class RewardModelScorer:
    """Scores sampled (prompt, completion) token ids with a trained reward model: sigmoid(score).

    A completion is scored as the reward model was trained (``encode_pairs``: every completion ends
    with EOS, a pair's truncated sample too): one that stopped without EOS (cut at the token cap)
    gets it appended. Read at its last token instead, it is scored at a position the model never
    learned: a wrong answer left unfinished beat the right one 22-61% of the time on a tiny reward
    model that put it below the right one, finished, only 11-31% of the time, an opening for a
    policy that learns never to stop."""

    def __init__(self, path: Path, pad_id: int, *, eos_id: int | None = None) -> None:
        """``eos_id``: None reads it from the tokenizer saved with the reward model (``run_rm``)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.model = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
        self.pad_id = pad_id
        self.eos_id = int(AutoTokenizer.from_pretrained(str(path)).eos_token_id if eos_id is None else eos_id)

    def __call__(self, rollouts: Sequence[Rollout]) -> torch.Tensor:  # (B,) in (0, 1)
        eos = self.eos_id
        completions = [c if c and c[-1] == eos else (*c, eos) for c in (r.completion_ids for r in rollouts)]
        scores = score_rows(self.model, [r.prompt_ids for r in rollouts], completions, pad_id=self.pad_id)
        return torch.sigmoid(scores)
