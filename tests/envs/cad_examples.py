"""The shipped cad example tasks, by id (examples/tasks/cad.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.envs import get_domain
from posttrain.types import Task

ROOT = Path(__file__).resolve().parents[2]


def example(task_id: str) -> Task:
    for line in (ROOT / "examples" / "tasks" / "cad.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["id"] == task_id:
            return get_domain("cad").parse_task(record, "examples/tasks/cad.jsonl")
    raise AssertionError(f"no example task {task_id}")
