"""Text-level single-turn rollouts: sample completions for tasks and verify them, token-exact.

The older path, kept for the pipeline's evaluation and the preference stage; GRPO samples through the
episode runner (``_runner.py``) instead, with the same results. ``run_episodes`` samples ``n`` completions per task with ``Policy.generate`` and verifies each in a
thread pool (sandbox-backed verifiers spend their time in the sandbox, not in Python). A verdict
that is an ``infra_error`` is retried up to ``infra_retries`` times; if it persists it stays an
``infra_error`` (reward NaN) and the trainer drops it from the update — never scored 0 or 1.

Verdicts are cached per (task id, response text): a verifier is a pure function of the two, and
RL samples the same short completion many times.

Not here: multi-turn episodes (``run_batch`` with an ``Env``); ``Task.limits.max_attempts`` is
honoured as 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from posttrain.policy import Policy
from posttrain.rollout._env import VerdictCache, Verifier, verify_with_retries
from posttrain.types import Rollout, Task, Verdict


def verify_all(
    items: Sequence[tuple[Task, str]],
    verifiers: Mapping[str, Verifier],
    *,
    workers: int,
    infra_retries: int = 2,
    cache: VerdictCache | None = None,
) -> list[Verdict]:
    """Verify (task, response) pairs in parallel; order is kept."""

    def one(item: tuple[Task, str]) -> Verdict:
        task, response = item
        key = (task.id, response)
        if cache is not None and (hit := cache.get(key)) is not None:
            return hit
        verdict = verify_with_retries(verifiers[task.domain], task, response, infra_retries=infra_retries)
        if cache is not None:
            cache.put(key, verdict)
        return verdict

    # Identical (task, response) pairs are verified once: late in RL a group often repeats itself.
    first: dict[tuple[str, str], int] = {}
    for i, (task, response) in enumerate(items):
        first.setdefault((task.id, response), i)
    unique = [items[i] for i in first.values()]
    if workers <= 1:
        verdicts = [one(it) for it in unique]
    else:
        with ThreadPoolExecutor(max_workers=workers) as ex:
            verdicts = list(ex.map(one, unique))
    by_key = dict(zip(first, verdicts, strict=True))
    return [by_key[(task.id, response)] for task, response in items]


def run_episodes(
    policy: Policy,
    tasks: Sequence[Task],
    verifiers: Mapping[str, Verifier],
    *,
    n: int,
    temperature: float,
    max_new_tokens: int,
    seed: int | None,
    workers: int,
    cache: VerdictCache | None = None,
) -> list[list[Rollout]]:
    """``n`` verified rollouts per task: ``out[task_index][sample_index]``."""
    from posttrain.envs import model_prompt

    gens = policy.generate([model_prompt(t) for t in tasks], n=n, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    flat = [(t, g) for t, gs in zip(tasks, gens, strict=True) for g in gs]
    verdicts = verify_all([(t, g.text) for t, g in flat], verifiers, workers=workers, cache=cache)
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
