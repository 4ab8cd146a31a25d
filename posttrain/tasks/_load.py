"""Load task files: JSON or JSONL (optionally gzipped), any mix of domains, dispatched on ``domain``.

``load_tasks(path)`` reads
- ``*.jsonl`` / ``*.jsonl.gz``: one task object per line (blank lines skipped);
- ``*.json``: one task object, a list of them, or ``{"tasks": [...]}``;
and hands each record to its domain's parser (``posttrain.envs.get_env(domain).parse_task``),
which validates the domain's fields (docs/tasks.md). Parsing is strict: NaN/Infinity and
duplicate keys are errors. Every error is a ``TaskError`` naming the file, the line or index,
the task id and the field. Task ids must be unique within a file.

Not here: pools, sampling, splits (``posttrain.tasks``), Parquet / HF datasets.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posttrain.envs import get_env
from posttrain.errors import TaskError, UserError
from posttrain.types import Task
from posttrain.verify.strict_json import StrictJSONError, loads_strict


def _read_text(path: Path) -> str:
    if not path.exists():
        raise UserError(f"{path}: no such task file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a .json or .jsonl task file")
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, gzip.BadGzipFile) as e:
        raise TaskError(f"{path}: cannot read ({e})") from None


def read_records(path: str | Path) -> list[tuple[str, Any]]:
    """``[(where, record)]`` from a JSON / JSONL file; ``where`` is ``file:line`` or ``file[index]``."""
    path = Path(path)
    text = _read_text(path)
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".jsonl"):
        records = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((f"{path}:{lineno}", loads_strict(line)))
            except StrictJSONError as e:
                raise TaskError(f"{path}:{lineno}: {e}") from None
        return records
    if name.endswith(".json"):
        try:
            doc = loads_strict(text)
        except StrictJSONError as e:
            raise TaskError(f"{path}: {e}") from None
        if isinstance(doc, Mapping) and set(doc) == {"tasks"}:
            doc = doc["tasks"]
        if isinstance(doc, list):
            return [(f"{path}[{i}]", r) for i, r in enumerate(doc)]
        return [(str(path), doc)]
    raise TaskError(f"{path}: unknown task file type; expected .json, .jsonl or .jsonl.gz")


def parse_record(record: Any, where: str, *, domain: str | None = None) -> Task:
    """One record -> ``Task``, dispatched on its ``domain`` (or ``domain`` when it has none)."""
    if not isinstance(record, Mapping):
        raise TaskError(f"{where}: expected a JSON object per task, got {type(record).__name__}")
    d = record.get("domain", domain)
    if d is None:
        raise TaskError(f"{where}: task {record.get('id')!r}: field 'domain': missing (expected one of the domains)")
    if not isinstance(d, str):
        raise TaskError(f"{where}: field 'domain': expected a string, got {d!r}")
    try:
        env = get_env(d)
    except TaskError as e:
        raise TaskError(f"{where}: {e}") from None
    return env.parse_task(record, where)


def load_tasks(path: str | Path, *, domain: str | None = None) -> list[Task]:
    """All tasks of a JSON / JSONL file; ``domain`` is the default for records without one.

    Raises ``TaskError`` naming the file, line, task id and field on the first bad record, and
    on duplicate ids.
    """
    tasks = [parse_record(r, where, domain=domain) for where, r in read_records(path)]
    seen: dict[str, int] = {}
    for i, t in enumerate(tasks):
        if t.id in seen:
            raise TaskError(f"{path}: duplicate task id {t.id!r} (records {seen[t.id] + 1} and {i + 1})")
        seen[t.id] = i
    return tasks
