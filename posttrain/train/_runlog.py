"""The run directory's append-only logs: metrics.jsonl and trajectory JSONL files.

Each batch of lines is flushed and fsynced as it is written, before the checkpoint that follows it
(``train.checkpoint``, fsynced too), so a killed run -- or a machine that lost power -- keeps every
line up to its last checkpoint. On resume, ``truncate_after`` drops the lines a killed run wrote past
its last checkpoint, so the resumed run's logs read exactly like an uninterrupted run's. The one line
it may drop unread is the last, cut short by the kill (no line end); a damaged line anywhere else, a
line that is not a JSON object with an integer ``step``, or a stage's steps out of order (lines
written twice) is a ``UserError`` naming ``file:line``, the file left as it is: the resume would
otherwise delete or double what the run had written. The records themselves are built by
``posttrain.evaluate.records`` (``trajectory_records``), for training and evaluation alike.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from posttrain.errors import UserError
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
        os.fsync(self._f.fileno())  # on disk before the checkpoint that counts these lines as done

    def close(self) -> None:
        self._f.close()


def truncate_after(path: Path, *, stage: str, step: int) -> None:
    """Drop lines of ``stage`` whose ``step`` is >= ``step`` (written after the checkpoint we resume).

    The last line, cut short by a kill (no line end), is dropped too. ``UserError`` naming
    ``path:line``, ``path`` untouched, for any other line that is not a JSON object with an integer
    ``step`` (where present), for a kept line of ``stage`` whose step is below the step of a kept
    line of ``stage`` before it (lines written twice: a resume that appended without truncating), and
    for a file that is not UTF-8 text.
    """
    if not path.exists():
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:  # a directory, bytes the run did not write
        raise UserError(f"{path}: cannot read it as the run's UTF-8 log ({type(e).__name__}); resuming would "
                        "rewrite it (the file is left as it is)") from None
    lines = text.splitlines()
    keep = []
    last: tuple[int, int] | None = None  # (line number, step) of the stage's last kept line so far
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines) and not text.endswith("\n"):
                continue  # the line a kill -9 cut short
            raise UserError(f"{path}:{n}: not a JSON line ({e.msg}); the run's log is damaged here, not at its "
                            "end where a kill cuts it: resuming would delete it (the file is left as it is)") from None
        if not isinstance(rec, dict) or not _is_step(rec.get("step", -1)):
            what = "not a JSON object" if not isinstance(rec, dict) else f"its step {rec['step']!r} is not an integer"
            raise UserError(f"{path}:{n}: {what}, which the run never writes; resuming cannot tell which step it "
                            "belongs to (the file is left as it is)")
        if rec.get("stage") == stage:
            if rec.get("step", -1) >= step:
                continue  # past the checkpoint: the resumed run writes it again
            if last is not None and rec.get("step", -1) < last[1]:
                raise UserError(f"{path}:{n}: step {rec.get('step', -1)} of stage {stage} after step {last[1]} "
                                f"(line {last[0]}): lines written twice; resuming would count those steps again "
                                "(the file is left as it is)")
            last = (n, rec.get("step", -1))
        keep.append(line)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in keep))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _is_step(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
