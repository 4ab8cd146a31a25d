"""The run directory's append-only logs: metrics.jsonl and trajectory JSONL files.

Each line is flushed as it is written, so a killed run keeps everything up to its last step.
On resume, ``truncate_after`` drops the lines a killed run wrote past its last checkpoint, so the
resumed run's logs read exactly like an uninterrupted run's. The records themselves are built by
``posttrain.evaluate.records`` (``trajectory_records``), for training and evaluation alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from posttrain.evaluate.records import EvalRecord


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
