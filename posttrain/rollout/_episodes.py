"""Text-level single-turn rollouts: sample completions for tasks and verify them, token-exact.

The older path, kept for the pipeline's evaluation and the preference stage; GRPO samples through the
episode runner (``_runner.py``) instead, with the same results. ``run_episodes`` samples ``n``
completions per task with ``Policy.generate`` and verifies them all as one batch of the execution
service (``posttrain.sched.Service``: its workers, infra retries, verdict cache and dedup). Each
sample is its own job (no group): one that runs out of infra retries stays an ``infra_error``
(reward NaN) that the caller drops, never scored 0 or 1.

Not here: multi-turn episodes (``run_batch`` with an ``Env``); ``Task.limits.max_attempts`` is
honoured as 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from posttrain.policy import Policy
from posttrain.sched import Service
from posttrain.types import Rollout, Task


def run_episodes(
    policy: Policy,
    tasks: Sequence[Task],
    service: Service,
    *,
    n: int,
    temperature: float,
    max_new_tokens: int,
    seed: int | None,
) -> list[list[Rollout]]:
    """``n`` verified rollouts per task: ``out[task_index][sample_index]``."""
    from posttrain.envs import model_prompt

    gens = policy.generate([model_prompt(t) for t in tasks], n=n, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    flat = [(t, g) for t, gs in zip(tasks, gens, strict=True) for g in gs]
    verdicts = service.verify_pairs([(t, g.text) for t, g in flat])
    rollouts = [
        Rollout(
            task_id=t.id,
            sample_idx=i % n,
            prompt_ids=g.prompt_ids,
            completion_ids=g.completion_ids,
            logprobs=g.logprobs,
            text=g.text,
            finish_reason=g.finish_reason,
            verdict=v,
        )
        for i, ((t, g), v) in enumerate(zip(flat, verdicts, strict=True))
    ]
    return [rollouts[i * n : (i + 1) * n] for i in range(len(tasks))]
