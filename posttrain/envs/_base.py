"""What every domain shares: the ``Domain`` protocol, record parsing helpers, and the verifier guard.

A domain package (``posttrain.envs.math``, ``.code``, ``.json``, ``.tool``, or a plugin's) provides one ``Domain``:
``parse_task`` turns a JSON record into a ``Task`` (raising ``TaskError`` that names the source,
the task id and the field), ``render_prompt`` gives the text the model sees, ``make_verifier``
builds a ``Verifier`` (sandbox-backed ones get the pool explicitly), ``noop_response`` is the
do-nothing baseline that must score 0, ``exploit_fixtures`` lists known ways to score without
solving (each must score 0: a ``fail``, never an ``infra_error``), and ``generate_tasks`` builds
procedural tasks with reference responses; ``needs_sandbox`` says whether ``make_verifier`` needs a
pool. Optional hooks are each a runtime-checked Protocol, all declared in ``_hooks.py``
(``HasBatchVerifier``, ``HasTaskFamilies``, ``HasEpisodes``, ...).

``guard`` wraps a verifier so that it never raises into the trainer: an exception inside the
verifier becomes an ``infra_error`` verdict (reward NaN), never a silent 0 (STYLE.md 4.2).

Not here: domain logic, sandbox code, reward weighting (``posttrain.verify.rewards``).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from posttrain.envs._hooks import TaskFamily
from posttrain.errors import TaskError
from posttrain.strict_json import finite_number
from posttrain.types import BatchVerifier, Task, TaskLimits, Verdict, Verifier

__all__ = ["COMMON_KEYS", "BatchVerifier", "Domain", "RecordReader", "TaskFamily", "Verifier", "fail", "guard",
           "parse_common", "passed", "task_to_record"]

COMMON_KEYS = frozenset({"id", "domain", "prompt", "reference", "difficulty", "tags", "limits", "metadata"})
"""Top-level keys every domain accepts; each domain adds its own (docs/tasks.md)."""


class Domain(Protocol):
    """A domain: how its tasks are parsed, shown, verified and generated (module docstring)."""

    name: str
    needs_sandbox: bool
    """Whether ``make_verifier`` needs a sandbox pool (a pool is opened only for such domains)."""

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task: ...

    def render_prompt(self, task: Task) -> str: ...

    def make_verifier(self, pool: Any | None) -> Verifier: ...

    def noop_response(self, task: Task) -> str: ...

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]: ...

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]: ...


@dataclass(frozen=True)
class RecordReader:
    """Typed access to one raw task record, with errors that name the source, task id and field."""

    record: Mapping[str, Any]
    source: str
    domain: str

    @property
    def where(self) -> str:
        tid = self.record.get("id") if isinstance(self.record, Mapping) else None
        return f"{self.source}: task {tid!r}" if tid is not None else f"{self.source}"

    def fail(self, field: str, expected: str, got: Any = None, *, show_got: bool = True) -> TaskError:
        shown = f", got {_short(got)}" if show_got else ""
        return TaskError(f"{self.where}: field {field!r}: expected {expected}{shown}")

    def check_keys(self, domain_keys: frozenset[str]) -> None:
        if not isinstance(self.record, Mapping):
            raise TaskError(f"{self.source}: expected a JSON object per task, got {type(self.record).__name__}")
        allowed = COMMON_KEYS | domain_keys
        unknown = sorted(set(self.record) - allowed)
        if unknown:
            raise TaskError(
                f"{self.where}: unknown field(s) {unknown} for domain {self.domain!r}; "
                f"allowed: {sorted(allowed)}"
            )

    def string(self, field: str, *, allow_empty: bool = False) -> str:
        if field not in self.record:
            raise self.fail(field, "a string (missing)", show_got=False)
        value = self.record[field]
        if not isinstance(value, str) or (not allow_empty and not value.strip()):
            raise self.fail(field, "a non-empty string", value)
        return value

    def optional_string(self, field: str) -> str | None:
        value = self.record.get(field)
        if value is not None and not isinstance(value, str):
            raise self.fail(field, "a string or null", value)
        return value

    def present(self, field: str) -> Any:
        if field not in self.record:
            raise self.fail(field, "a value (missing)", show_got=False)
        return self.record[field]

    def tags(self) -> tuple[str, ...]:
        """The record's ``tags`` (a list of strings; none when absent)."""
        tags = self.record.get("tags", [])
        if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
            raise self.fail("tags", "a list of strings", tags)
        return tuple(tags)

    def boolean(self, field: str, default: bool) -> bool:
        value = self.record.get(field, default)
        if not isinstance(value, bool):
            raise self.fail(field, "true or false", value)
        return value


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _limits(reader: RecordReader, default: TaskLimits) -> TaskLimits:
    raw = reader.record.get("limits")
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        raise reader.fail("limits", "an object with timeout_s, memory_mb, max_attempts", raw)
    unknown = sorted(set(raw) - {"timeout_s", "memory_mb", "max_attempts"})
    if unknown:
        raise reader.fail("limits", "only keys timeout_s, memory_mb, max_attempts", unknown)
    timeout_s = raw.get("timeout_s", default.timeout_s)
    memory_mb = raw.get("memory_mb", default.memory_mb)
    max_attempts = raw.get("max_attempts", default.max_attempts)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not 0 < timeout_s <= 3600:
        raise reader.fail("limits.timeout_s", "a number of seconds in (0, 3600]", timeout_s)
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or not 16 <= memory_mb <= 65536:
        raise reader.fail("limits.memory_mb", "an integer in [16, 65536]", memory_mb)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 100:
        raise reader.fail("limits.max_attempts", "an integer in [1, 100]", max_attempts)
    return TaskLimits(timeout_s=float(timeout_s), memory_mb=memory_mb, max_attempts=max_attempts)


def parse_common(
    reader: RecordReader,
    fields: Mapping[str, Any],
    *,
    reference: str | None = None,
    default_limits: TaskLimits | None = None,
) -> Task:
    """Build a ``Task`` from the keys every domain shares plus the domain's parsed ``fields``."""
    tid = reader.record.get("id")
    if not isinstance(tid, str) or not tid.strip():
        raise reader.fail("id", "a non-empty string", tid)
    domain = reader.record.get("domain", reader.domain)
    if domain != reader.domain:
        raise reader.fail("domain", repr(reader.domain), domain)
    difficulty = reader.record.get("difficulty")
    if difficulty is not None and (
        not finite_number(difficulty)
    ):
        raise reader.fail("difficulty", "a finite number or null", difficulty)
    tags = reader.tags()
    metadata = reader.record.get("metadata", {})
    if not isinstance(metadata, Mapping):
        raise reader.fail("metadata", "an object", metadata)
    ref = reader.optional_string("reference")
    return Task(
        id=tid,
        domain=reader.domain,
        prompt=reader.string("prompt"),
        fields=dict(fields),
        reference=ref if ref is not None else reference,
        difficulty=None if difficulty is None else float(difficulty),
        tags=tuple(tags),
        limits=_limits(reader, default_limits or TaskLimits()),
        metadata=dict(metadata),
    )


def task_to_record(task: Task) -> dict[str, Any]:
    """The JSON record of a task (inverse of ``parse_task``), for writing example files."""
    record: dict[str, Any] = {"id": task.id, "domain": task.domain, "prompt": task.prompt, **task.fields}
    if task.reference is not None:
        record["reference"] = task.reference
    if task.difficulty is not None:
        record["difficulty"] = task.difficulty
    if task.tags:
        record["tags"] = list(task.tags)
    if task.limits != TaskLimits():
        record["limits"] = {
            "timeout_s": task.limits.timeout_s,
            "memory_mb": task.limits.memory_mb,
            "max_attempts": task.limits.max_attempts,
        }
    if task.metadata:
        record["metadata"] = dict(task.metadata)
    return record


def guard(name: str, verifier: Verifier) -> Verifier:
    """Wrap ``verifier`` so that its own failure is an ``infra_error`` verdict, never an exception.

    >>> def broken(task, response):
    ...     raise RuntimeError("boom")
    >>> t = Task(id="t", domain="math", prompt="p", fields={})
    >>> guard("math", broken)(t, "x").outcome
    'infra_error'
    """

    @functools.wraps(verifier)
    def guarded(task: Task, response: str) -> Verdict:
        try:
            if not isinstance(response, str):
                return Verdict.infra(
                    f"{name} verifier got a response of type {type(response).__name__}, expected str",
                    error_class="infra:bad_input",
                )
            return verifier(task, response)
        except Exception as e:  # noqa: BLE001 - the verifier's own bug is an infra error, never a 0
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            return Verdict.infra(f"{name} verifier crashed: {tb}", error_class="infra:verifier_crash")

    return guarded


def fail(
    feedback: str,
    error_class: str,
    evidence: Mapping[str, Any] | None = None,
    components: Mapping[str, float] | None = None,
) -> Verdict:
    """A ``fail`` verdict with reward 0 and an outcome component of 0."""
    comps = {"outcome": 0.0, "format": 0.0}
    comps.update(components or {})
    return Verdict(
        outcome="fail",
        reward=0.0,
        feedback=feedback,
        error_class=error_class,
        evidence=dict(evidence or {}),
        components=comps,
    )


def passed(feedback: str, evidence: Mapping[str, Any] | None = None) -> Verdict:
    """A ``pass`` verdict with reward 1."""
    return Verdict(
        outcome="pass",
        reward=1.0,
        feedback=feedback,
        error_class=None,
        evidence=dict(evidence or {}),
        components={"outcome": 1.0, "format": 1.0},
    )
