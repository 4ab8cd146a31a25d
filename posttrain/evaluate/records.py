"""One record per (task, sample, attempt): the JSONL line that trajectories and eval files hold.

The format is documented field by field in docs/records.md; this module is its single parser and
its single builder: ``task_record`` (a verdict on a task), used by ``trajectory_records`` (one record
per attempt of a ``Trajectory``: every sample a model made, in training and in every evaluation, is
recorded from its trajectory alone) and ``evaluate.runner.score_responses`` (responses given as text:
``posttrain eval --responses``, the demonstrator, the no-op floor).
``read_records(path)`` validates every line and raises ``UserError`` naming the file, line, field
and value (a reward at odds with its outcome too: a pass below 1, a fail at 1, an infra error with
one); ``EvalRecord.to_json`` writes the same shape back. Unknown extra keys are kept in
``extra`` (writers may add their own), but a required key that is missing or mistyped is an error.

What it does not do: compute metrics (``summary``) or verify anything (``runner``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import posttrain
from posttrain.errors import UserError, refuse_directory
from posttrain.types import Task, Trajectory, Verdict

__all__ = ["EvalRecord", "OUTCOMES", "feedback_source_after", "fingerprint_model_dir", "read_records",
           "record_from_verdict", "task_record", "trajectory_records", "verifier_version", "write_records"]

OUTCOMES = ("pass", "fail", "infra_error")


@dataclass(frozen=True)
class EvalRecord:
    """One attempt at one task: what was asked, what the model said, what the verifier decided."""

    task_id: str
    domain: str
    outcome: str
    """pass | fail | infra_error."""
    reward: float | None
    """1 for a pass, in [0, 1) for a fail (partial credit: a function task's); None exactly when outcome is
    infra_error (never scored 0 or 1). ``read_records`` refuses a line where reward and outcome disagree."""
    sample_idx: int = 0
    """Index of the i.i.d. draw for this task (0..n-1); pass@k counts over these."""
    attempt: int = 0
    """Repair round: 0 is the first attempt, r the r-th attempt after feedback."""
    feedback_source: str = "none"
    """What feedback was in the context this attempt was generated from: none (attempt 0), error
    (compiler/runtime errors only), public_tests, hidden_tests (leaks; not comparable)."""
    prompt: str = ""
    completion: str = ""
    prompt_ids: tuple[int, ...] = ()
    completion_ids: tuple[int, ...] = ()
    error_class: str | None = None
    feedback: str = ""
    """Normalized feedback the verifier produced for this attempt (what the next attempt reads)."""
    verifier_version: str = ""
    hack_flags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    """Capability tags of the task (per-tag breakdowns)."""
    tokens: int = 0
    wall_s: float = 0.0
    stage: str = ""
    """base | sft | rl | eval | demonstrator | ... (who produced it)."""
    step: int | None = None
    model_fingerprint: str = ""
    """Which model answered (``model_fingerprint``): ``sha256:<16 hex>`` of a model directory's config
    and weight files, ``endpoint:...``, ``hub:<name>``, ``agent:<name>``, ``responses:<16 hex>``; empty
    where the writer states none (training trajectories, records written before it existed)."""
    samples_per_task: int | None = None
    """How many samples per task the evaluation drew (``posttrain eval --n``); None where not stated.
    ``summarize`` refuses a task with fewer (or more) than stated: a sample's records left out."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    @property
    def is_infra_error(self) -> bool:
        return self.outcome == "infra_error"

    def to_json(self) -> dict[str, Any]:
        """The JSONL shape of docs/records.md."""
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "domain": self.domain,
            "sample_idx": self.sample_idx,
            "attempt": self.attempt,
            "feedback_source": self.feedback_source,
            "prompt": self.prompt,
            "completion": self.completion,
            "prompt_ids": list(self.prompt_ids),
            "completion_ids": list(self.completion_ids),
            "outcome": self.outcome,
            "reward": self.reward,
            "error_class": self.error_class,
            "feedback": self.feedback,
            "verifier_version": self.verifier_version,
            "hack_flags": list(self.hack_flags),
            "tags": list(self.tags),
            "tokens": self.tokens,
            "wall_s": self.wall_s,
            "stage": self.stage,
            "step": self.step,
        }
        if self.model_fingerprint:  # written where stated only: records of other writers keep their bytes
            out["model_fingerprint"] = self.model_fingerprint
        if self.samples_per_task is not None:
            out["samples_per_task"] = self.samples_per_task
        out.update(self.extra)
        return out


def verifier_version(domain: str) -> str:
    """The version string stored with each verdict (audits compare against the current one)."""
    return f"{domain}@posttrain-{posttrain.__version__}"


_WEIGHTS = (".safetensors", ".bin", ".index.json")
"""Files of a model directory ``fingerprint_model_dir`` reads besides its configs (sharded weights too)."""


def fingerprint_model_dir(path: str | Path) -> str:
    """``sha256:<16 hex>`` of a model directory: SHA-256 over the sorted ``(name, size, sha256)`` of its
    ``config.json``, ``generation_config.json`` and weight files (``*.safetensors``, ``*.bin``, their
    ``*.index.json``), top level, contents read whole (a 1.6 MB test model in milliseconds; a 14 GB
    checkpoint as fast as the disk reads it, once per evaluation). Two directories holding the same
    weights are one model; a tokenizer or chat template file is not read (``posttrain.json`` and the
    eval protocol say how prompts were rendered).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text("{}")
    >>> fingerprint_model_dir(d)
    'sha256:4591756ae8916c5e'
    """
    path = Path(path)
    files = []
    for f in sorted(path.iterdir(), key=lambda p: p.name):
        if f.is_file() and (f.name in ("config.json", "generation_config.json") or f.name.endswith(_WEIGHTS)):
            digest = hashlib.sha256()
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            files.append([f.name, f.stat().st_size, digest.hexdigest()])
    return "sha256:" + hashlib.sha256(json.dumps(files).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def record_from_verdict(
    verdict: Verdict,
    *,
    task_id: str,
    domain: str,
    completion: str,
    sample_idx: int = 0,
    attempt: int = 0,
    feedback_source: str = "none",
    prompt: str = "",
    tags: Iterable[str] = (),
    verifier_version: str = "",
    hack_flags: Iterable[str] = (),
    tokens: int = 0,
    wall_s: float = 0.0,
    stage: str = "eval",
) -> EvalRecord:
    """Build a record from a verifier's ``Verdict`` (NaN reward becomes None)."""
    reward = None if math.isnan(verdict.reward) else float(verdict.reward)
    flags = list(hack_flags) + [str(f) for f in verdict.evidence.get("hack_flags", ()) or ()]
    return EvalRecord(
        task_id=task_id,
        domain=domain,
        outcome=verdict.outcome,
        reward=reward,
        sample_idx=sample_idx,
        attempt=attempt,
        feedback_source=feedback_source,
        prompt=prompt,
        completion=completion,
        error_class=verdict.error_class,
        feedback=verdict.feedback,
        verifier_version=verifier_version,
        hack_flags=tuple(dict.fromkeys(flags)),
        tags=tuple(tags),
        tokens=tokens,
        wall_s=wall_s,
        stage=stage,
        extra={"infra_detail": str(verdict.evidence.get("detail", ""))} if verdict.is_infra_error else {},
    )


_KNOWN = {f for f in EvalRecord.__dataclass_fields__ if f != "extra"}


def _typed(where: str, obj: Mapping[str, Any], key: str, types: tuple[type, ...], default: Any) -> Any:
    if obj.get(key) is None:
        return default
    value = obj[key]
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        names = "|".join(t.__name__ for t in types)
        raise UserError(f"{where}: field {key!r} must be {names}, got {value!r}")
    return value


def _int_list(where: str, obj: Mapping[str, Any], key: str) -> tuple[Any, ...]:
    value = obj.get(key) or []
    if not isinstance(value, list):
        raise UserError(f"{where}: field {key!r} must be a list, got {value!r}")
    return tuple(value)


def parse_record(obj: Any, where: str) -> EvalRecord:
    """Validate one decoded JSON object; ``where`` is "file:line" for error messages."""
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("task_id", "outcome"):
        if key not in obj:
            raise UserError(f"{where}: missing required field {key!r}")
    task_id = obj["task_id"]
    if not isinstance(task_id, str | int) or isinstance(task_id, bool):
        raise UserError(f"{where}: field 'task_id' must be a string, got {task_id!r}")
    outcome = obj["outcome"]
    if outcome not in OUTCOMES:
        raise UserError(f"{where}: field 'outcome' must be one of {'|'.join(OUTCOMES)}, got {outcome!r}")
    reward = obj.get("reward")
    if outcome == "infra_error":
        if reward is not None:
            raise UserError(f"{where}: an infra_error record must have reward null, got {reward!r}")
    else:
        if "reward" not in obj:
            reward = 1.0 if outcome == "pass" else 0.0
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not 0.0 <= reward <= 1.0:
            raise UserError(f"{where}: field 'reward' must be a number in [0, 1], got {reward!r}")
        reward = float(reward)
        if (reward == 1.0) != (outcome == "pass"):  # a verdict at odds with itself: which one counts?
            want = "1 (a pass is a full score)" if outcome == "pass" else "below 1 (a full score is a pass)"
            raise UserError(f"{where}: field 'reward' must be {want} for outcome {outcome!r}, got {obj['reward']!r}")
    sample_idx = _typed(where, obj, "sample_idx", (int,), 0)
    attempt = _typed(where, obj, "attempt", (int,), 0)
    if sample_idx < 0 or attempt < 0:
        raise UserError(f"{where}: sample_idx and attempt must be >= 0, got {sample_idx}, {attempt}")
    samples_per_task = _typed(where, obj, "samples_per_task", (int,), None)
    if samples_per_task is not None and samples_per_task < 1:
        raise UserError(f"{where}: field 'samples_per_task' must be an integer >= 1, got {samples_per_task}")
    return EvalRecord(
        task_id=str(task_id),
        domain=_typed(where, obj, "domain", (str,), "unknown"),
        outcome=outcome,
        reward=reward,
        sample_idx=sample_idx,
        attempt=attempt,
        feedback_source=_typed(where, obj, "feedback_source", (str,), "none"),
        prompt=_typed(where, obj, "prompt", (str,), ""),
        completion=_typed(where, obj, "completion", (str,), ""),
        prompt_ids=_int_list(where, obj, "prompt_ids"),
        completion_ids=_int_list(where, obj, "completion_ids"),
        error_class=_typed(where, obj, "error_class", (str,), None),
        feedback=_typed(where, obj, "feedback", (str,), "") or "",
        verifier_version=_typed(where, obj, "verifier_version", (str,), "") or "",
        hack_flags=tuple(str(f) for f in _int_list(where, obj, "hack_flags")),
        tags=tuple(str(t) for t in _int_list(where, obj, "tags")),
        tokens=_typed(where, obj, "tokens", (int,), 0) or 0,
        wall_s=float(_typed(where, obj, "wall_s", (int, float), 0.0) or 0.0),
        stage=_typed(where, obj, "stage", (str,), "") or "",
        step=_typed(where, obj, "step", (int,), None),
        model_fingerprint=_typed(where, obj, "model_fingerprint", (str,), "") or "",
        samples_per_task=samples_per_task,
        extra={k: v for k, v in obj.items() if k not in _KNOWN},
    )


def read_records(path: str | Path) -> list[EvalRecord]:
    """Read and validate a records JSONL file (blank lines skipped).

    Raises ``UserError`` naming the file and line for a missing file, bytes that are not UTF-8, bad
    JSON or a bad field.
    """
    path = Path(path)
    refuse_directory(path, "a records .jsonl file")
    if not path.is_file():
        raise UserError(f"{path}: records file not found")
    return [parse_record(obj, where) for where, obj in json_lines(path)]


def json_lines(path: Path, *, cut_last: bool = False) -> Iterator[tuple[str, Any]]:
    """``(path:line, value)`` of each line of a JSONL file that is not blank, read as it goes. Bytes
    that are not UTF-8 (a traceback here, in report, audit and --baseline alike, before) or a line that
    is not JSON: a ``UserError`` naming ``path:line``. ``cut_last``: a last line with no line end after
    it that is not JSON (a writer mid-line, or a kill) is left out, as ``--resume`` leaves it out of a
    run's logs. A UTF-8 byte-order mark before the first line is read past, as the task readers do."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{path}:{lineno}"
            if lineno == 1:  # a byte-order mark, as the task readers take it
                raw = raw.removeprefix(b"\xef\xbb\xbf")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{where}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                if cut_last and not raw.endswith(b"\n"):  # only the last line can lack its line end
                    continue
                raise UserError(f"{where}: not valid JSON ({e.msg})") from None
            yield where, value


def write_records(path: str | Path, records: Iterable[EvalRecord]) -> Path:
    """Write records as JSONL (one object per line), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
    return path


def task_record(task: Task, verdict: Verdict, *, completion: str, stage: str, sample_idx: int = 0, attempt: int = 0,
                feedback_source: str = "none", prompt: str | None = None, prompt_ids: Sequence[int] = (),
                completion_ids: Sequence[int] = (), tokens: int | None = None, wall_s: float = 0.0,
                step: int | None = None, extra: Mapping[str, Any] | None = None) -> EvalRecord:
    """The one record builder: one (task, sample, attempt) record of ``verdict`` on ``completion``
    (docs/records.md), with the task's id, domain, tags and current verifier version; ``prompt``
    defaults to the task's, ``tokens`` to the number of ``completion_ids``. Every record a run or an
    evaluation writes comes from here (``trajectory_records``,
    ``evaluate.runner.score_responses``)."""
    rec = record_from_verdict(
        verdict,
        task_id=task.id,
        domain=task.domain,
        completion=completion,
        sample_idx=sample_idx,
        attempt=attempt,
        feedback_source=feedback_source,
        prompt=task.prompt if prompt is None else prompt,
        tags=task.tags,
        verifier_version=verifier_version(task.domain),
        tokens=len(completion_ids) if tokens is None else tokens,
        wall_s=wall_s,
        stage=stage,
    )
    return dataclasses.replace(rec, step=step, prompt_ids=tuple(prompt_ids), completion_ids=tuple(completion_ids),
                               extra={**rec.extra, **(extra or {})})


def feedback_source_after(task: Task, record: EvalRecord) -> str:
    """The ``feedback_source`` label of the attempt that follows a failed ``record`` (docs/records.md):
    after an ``assertion`` failure the feedback showed a failing test: ``public_tests`` when the task
    splits its tests (only visible tests are shown, hidden ones as a count: a code task's
    ``fields["hidden_test"]``), else ``hidden_tests`` (the task's own tests: not comparable with
    error-only repair); after any other failure, ``error``."""
    if record.error_class != "assertion":
        return "error"
    return "public_tests" if "hidden_test" in task.fields else "hidden_tests"


def _episode_extra(shown: list[dict[str, Any]], verdict: Verdict) -> dict[str, Any] | None:
    """A multi-turn record's ``extra``: its ``turns``, and the graded ``submission`` when the
    environment kept it in the verdict's evidence (a workspace domain's ``keep_submission``)."""
    extra: dict[str, Any] = {"turns": shown} if shown else {}
    if isinstance(verdict.evidence.get("submission"), str):
        extra["submission"] = verdict.evidence["submission"]
    return extra or None


def trajectory_records(task: Task, traj: Trajectory, *, stage: str, step: int | None, wall_s: float,
                       decode: Callable[[Sequence[int]], str] | None = None) -> list[EvalRecord]:
    """One record per attempt of an episode (each turn with a verdict), as in docs/records.md.

    ``prompt_ids`` are the ids the attempt was sampled from (the prompt, then every earlier action
    and observation), ``completion_ids`` the attempt's own sampled ids; ``attempt`` counts verdicts
    (0 = first attempt) and ``feedback_source`` says what the previous verdict's feedback was.
    An episode the runner cut (``cut_by``) after its last verdict, or before any, adds one ``fail``
    record for its last action, ``error_class`` ``truncated``; one its environment ended with no verdict
    at all, one ``fail`` record ``no_verdict`` (so every episode has a record: none would take the sample
    out of the rates' denominators, a way to raise pass@1 by quitting).
    A multi-turn episode's records carry ``turns``: the turns since the previous record, each
    ``{"observation", "action", "verdict", "stop_reason"}`` (the observation as ``decode`` writes
    its ids, null for the prompt; the verdict's outcome, null for a step with none, e.g. a tool call),
    and ``calls`` when the environment ran tool calls (``Turn.calls``: name, arguments, result, ok, seconds).
    A one-turn episode gives one record of its one answer, as a single response's."""
    out: list[EvalRecord] = []
    context: list[int] = []
    previous: EvalRecord | None = None
    shown: list[dict[str, Any]] = []  # turns since the last record
    for i, turn in enumerate(traj.turns):
        context += turn.observation_ids
        verdict = turn.verdict
        if verdict is None and i == len(traj.turns) - 1 and traj.cut_by is not None:
            verdict = Verdict("fail", 0.0, feedback=f"The episode was cut by {traj.cut_by} before a verdict.",
                              error_class="truncated", components={"outcome": 0.0, "format": 0.0})
        elif verdict is None and i == len(traj.turns) - 1 and not out:
            # ended by its environment with no verdict at all (an action that quits): the least a failure
            # scores in training, and a fail here -- with no record the sample left the denominator
            verdict = Verdict("fail", 0.0, feedback="The episode ended without a verdict.", error_class="no_verdict",
                              components={"outcome": 0.0, "format": 0.0})
        if len(traj.turns) > 1:
            observation = None if i == 0 else (decode(turn.observation_ids) if decode is not None
                                                else f"<{len(turn.observation_ids)} tokens>")
            shown.append({"observation": observation, "action": turn.text, "stop_reason": turn.stop_reason,
                          "verdict": None if verdict is None else verdict.outcome,
                          **({"calls": [c.to_json() for c in turn.calls]} if turn.calls else {})})
        if verdict is not None:
            previous = task_record(task, verdict, completion=turn.text, stage=stage, sample_idx=traj.sample_idx,
                                   attempt=len(out),
                                   feedback_source="none" if previous is None else feedback_source_after(task, previous),
                                   prompt_ids=context, completion_ids=turn.action_ids, wall_s=wall_s, step=step,
                                   extra=_episode_extra(shown, verdict))
            out.append(previous)
            shown = []
        context += turn.action_ids
    return out
