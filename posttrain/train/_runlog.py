"""The run directory's append-only logs: metrics.jsonl and trajectory JSONL files.

Each line is flushed as it is written, so a killed run keeps everything up to its last step.
On resume, ``truncate_after`` drops the lines a killed run wrote past its last checkpoint, so the
resumed run's logs read exactly like an uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from posttrain.evaluate.records import EvalRecord, record_from_verdict
from posttrain.evaluate.runner import verifier_version
from posttrain.types import Rollout, Task, Trajectory, Verdict


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class JsonlWriter:
    """Append JSON lines to a file, one flush per line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f = path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, Any] | EvalRecord) -> None:
        self.write_many([record])

    def write_many(self, records: Iterable[Mapping[str, Any] | EvalRecord]) -> None:
        for r in records:
            d = r.to_json() if isinstance(r, EvalRecord) else r
            self._f.write(json.dumps({k: _clean(v) for k, v in d.items()}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def truncate_after(path: Path, *, stage: str, step: int) -> None:
    """Drop lines of ``stage`` whose ``step`` is >= ``step`` (written after the checkpoint we resume)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by kill -9
        if rec.get("stage") == stage and rec.get("step", -1) >= step:
            continue
        keep.append(line)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
    tmp.replace(path)


def rollout_record(task: Task, r: Rollout, *, stage: str, step: int | None, wall_s: float) -> EvalRecord:
    """One (task, sample, attempt) record, as documented in docs/records.md."""
    assert r.verdict is not None
    rec = record_from_verdict(
        r.verdict,
        task_id=task.id,
        domain=task.domain,
        completion=r.text,
        sample_idx=r.sample_idx,
        attempt=r.attempt,
        prompt=task.prompt,
        tags=task.tags,
        verifier_version=verifier_version(task.domain),
        tokens=len(r.completion_ids),
        wall_s=wall_s,
        stage=stage,
    )
    return dataclasses.replace(rec, step=step, prompt_ids=r.prompt_ids, completion_ids=r.completion_ids)


def feedback_source_after(task: Task, record: EvalRecord) -> str:
    """The ``feedback_source`` label of the attempt that follows a failed ``record`` (docs/records.md):
    after an ``assertion`` failure the feedback showed a failing test: ``public_tests`` when the task
    splits its tests (only visible tests are shown, hidden ones as a count: a code task's
    ``fields["hidden_test"]``, or ``metadata`` split by ``rollout.split_tests``),
    else ``hidden_tests`` (the task's own tests: not comparable with error-only repair); after any
    other failure, ``error``."""
    from posttrain.rollout import split_tests

    if record.error_class != "assertion":
        return "error"
    splits = split_tests(task) is not None or "hidden_test" in task.fields
    return "public_tests" if splits else "hidden_tests"


def trajectory_records(task: Task, traj: Trajectory, *, stage: str, step: int | None, wall_s: float,
                       decode: Callable[[Sequence[int]], str] | None = None) -> list[EvalRecord]:
    """One record per attempt of an episode (each turn with a verdict), as in docs/records.md.

    ``prompt_ids`` are the ids the attempt was sampled from (the prompt, then every earlier action
    and observation), ``completion_ids`` the attempt's own sampled ids; ``attempt`` counts verdicts
    (0 = first attempt) and ``feedback_source`` says what the previous verdict's feedback was.
    An episode the runner cut (``cut_by``) after its last verdict, or before any, adds one ``fail``
    record for its last action, ``error_class`` ``truncated`` (so every episode has a record).
    A multi-turn episode's records carry ``turns``: the turns since the previous record, each
    ``{"observation", "action", "verdict", "stop_reason"}`` (the observation as ``decode`` writes
    its ids, null for the prompt; the verdict's outcome, null for a step with none, e.g. a tool call).
    A one-turn episode gives exactly ``rollout_record`` of its ``Rollout`` view."""
    out: list[EvalRecord] = []
    context: list[int] = []
    previous: EvalRecord | None = None
    shown: list[dict[str, Any]] = []  # turns since the last record
    for i, turn in enumerate(traj.turns):
        context += turn.observation_ids
        verdict = turn.verdict
        if verdict is None and traj.cut_by is not None and i == len(traj.turns) - 1:
            verdict = Verdict("fail", 0.0, feedback=f"The episode was cut by {traj.cut_by} before a verdict.",
                              error_class="truncated", components={"outcome": 0.0, "format": 0.0})
        if len(traj.turns) > 1:
            observation = None if i == 0 else (decode(turn.observation_ids) if decode is not None
                                                else f"<{len(turn.observation_ids)} tokens>")
            shown.append({"observation": observation, "action": turn.text, "stop_reason": turn.stop_reason,
                          "verdict": None if verdict is None else verdict.outcome})
        if verdict is not None:
            rec = record_from_verdict(
                verdict,
                task_id=task.id,
                domain=task.domain,
                completion=turn.text,
                sample_idx=traj.sample_idx,
                attempt=len(out),
                feedback_source="none" if previous is None else feedback_source_after(task, previous),
                prompt=task.prompt,
                tags=task.tags,
                verifier_version=verifier_version(task.domain),
                tokens=len(turn.action_ids),
                wall_s=wall_s,
                stage=stage,
            )
            previous = dataclasses.replace(rec, step=step, prompt_ids=tuple(context), completion_ids=turn.action_ids,
                                           extra={**rec.extra, "turns": shown} if shown else rec.extra)
            out.append(previous)
            shown = []
        context += turn.action_ids
    return out
