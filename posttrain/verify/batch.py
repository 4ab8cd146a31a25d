"""Verify many (task, response) pairs in parallel: threads over the domains' verifiers.

The sandbox pool is thread-safe and does the real parallel work for code tasks (each
``pool.run_python`` blocks its thread while a sandbox runs), so a thread pool sized to the
sandbox pool keeps every slot busy. Math comparisons run in their own worker processes
(``posttrain.verify._mathcheck``). The pool is opened only when a task needs one.

>>> from posttrain.types import Task
>>> t = Task(id="a", domain="math", prompt="1+1?", fields={"answer": "2"})
>>> [v.outcome for v in verify_many([(t, "\\\\boxed{2}"), (t, "3")])]
['pass', 'fail']
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from posttrain.types import Task, Verdict

SANDBOX_DOMAINS = frozenset({"code"})
"""Domains whose verifier needs a sandbox pool."""


@contextlib.contextmanager
def pool_for(tasks: Sequence[Task], size: int | None = None) -> Iterator[Any | None]:
    """A sandbox pool if any task needs one (closed on exit), else None."""
    if not any(t.domain in SANDBOX_DOMAINS for t in tasks):
        yield None
        return
    from posttrain.sandbox import open_pool

    with open_pool(size=size) as pool:
        yield pool


def verify_many(
    pairs: Sequence[tuple[Task, str]], pool: Any | None = None, *, workers: int | None = None
) -> list[Verdict]:
    """Verdicts for ``pairs``, in order. ``pool`` is needed only for sandbox-backed domains.

    Code pairs go to the sandbox in batches of up to ``MAX_BATCH`` per job
    (``posttrain.envs.code_env.verify_code_batch``: fresh processes per candidate, cleanup in
    between, re-run alone if a batch cannot vouch for an item); everything else is verified one
    by one. Batches and single verifications run on ``workers`` threads.
    """
    from posttrain.envs import get_env
    from posttrain.envs.code_env import MAX_BATCH, verify_code_batch
    from posttrain.sandbox import usable_cpus

    verifiers: dict[str, Any] = {}
    for task, _ in pairs:
        if task.domain not in verifiers:
            env = get_env(task.domain)
            verifiers[task.domain] = env.make_verifier(pool if task.domain in SANDBOX_DOMAINS else None)
    code = [i for i, (task, _) in enumerate(pairs) if task.domain == "code"]
    n_batches = -(-len(code) // MAX_BATCH) if code else 0
    if workers is None:
        workers = max(2, getattr(pool, "size", None) or usable_cpus())
    # Spread code pairs over at least ``workers`` batches so that every sandbox slot gets work.
    per_batch = max(1, min(MAX_BATCH, -(-len(code) // max(workers, n_batches)))) if code else 1
    jobs: list[list[int]] = [code[i : i + per_batch] for i in range(0, len(code), per_batch)]
    jobs += [[i] for i, (task, _) in enumerate(pairs) if task.domain != "code"]

    def run(job: list[int]) -> list[Verdict]:
        first = pairs[job[0]][0]
        if first.domain != "code":
            return [verifiers[first.domain](*pairs[job[0]])]
        try:
            return verify_code_batch(pool, [pairs[i] for i in job])
        except Exception as e:  # noqa: BLE001 - the verifier's own failure is an infra error
            return [Verdict.infra(f"code verifier crashed: {type(e).__name__}: {e}",
                                  error_class="infra:verifier_crash") for _ in job]

    out: list[Verdict | None] = [None] * len(pairs)
    with ThreadPoolExecutor(max_workers=workers) as ex:
        for job, verdicts in zip(jobs, ex.map(run, jobs), strict=True):
            for i, v in zip(job, verdicts, strict=True):
                out[i] = v
    missing = [i for i, v in enumerate(out) if v is None]
    if missing:
        raise RuntimeError(f"verify_many lost the verdicts of pairs {missing[:5]}")
    return [v for v in out if v is not None]
