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

A write that fails (a full disk: ENOSPC or a quota; any ``OSError`` of the write or its fsync) is
one ``UserError`` naming the file, and the lines of that write are taken back (the file cut to where
they began), so no cut line is left in it, every line written before is kept, and the run's
``--resume`` after space is freed is exact. Likewise the rewrite ``truncate_after`` makes (a copy
beside, renamed over): one that fails removes its copy and leaves the file as it was. Not covered:
a kill mid-write (its cut last line is what ``truncate_after`` drops), a cut that the take-back
itself cannot make (an I/O error: said in the message).
"""

from __future__ import annotations

import errno
import io
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
    """Append JSON lines to a file, each ``write_many`` written whole and fsynced, or taken back
    and one ``UserError`` naming the file (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._f: io.FileIO | None = io.FileIO(path, "a")  # unbuffered: nothing left to flush after a failure
        except OSError as e:
            raise UserError(f"{path}: {_what(e)} while opening the run's log ({_said(e)}); nothing was written "
                            "to it") from None

    def write(self, record: Mapping[str, Any] | EvalRecord) -> None:
        self.write_many([record])

    def write_many(self, records: Iterable[Mapping[str, Any] | EvalRecord]) -> None:
        dicts = (r.to_json() if isinstance(r, EvalRecord) else r for r in records)
        lines = "".join(json.dumps({k: _clean(v) for k, v in d.items()}) + "\n" for d in dicts)
        if self._f is None:
            raise ValueError(f"{self.path}: the run's log is closed (a write to it failed, or close was called)")
        f, data = self._f, memoryview(lines.encode("utf-8"))
        start = os.fstat(f.fileno()).st_size  # this process alone appends to the file (the run directory is held)
        try:
            while data:
                n = f.write(data)  # a full disk: first a short write, then ENOSPC
                if not n:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                data = data[n:]
            os.fsync(f.fileno())  # on disk before the checkpoint that counts these lines as done
        except OSError as e:
            raise UserError(f"{self.path}: {_what(e)} while appending to the run's log ({_said(e)}); "
                            f"{self._take_back(start)}: free space (or fix the device), then --resume") from None

    def _take_back(self, start: int) -> str:
        """Cut the file back to ``start`` bytes (the lines of a failed write gone) and close it; says what was done."""
        f, self._f = self._f, None
        assert f is not None
        try:
            os.ftruncate(f.fileno(), start)
            os.fsync(f.fileno())
            said = f"the lines of this write were taken back and the {start} bytes before them are kept"
        except OSError as e:
            said = (f"the lines of this write could not be taken back ({_said(e)}): its last line may be cut short, "
                    "which --resume drops")
        finally:
            f.close()
        return said

    def close(self) -> None:
        if self._f is not None:
            f, self._f = self._f, None
            f.close()


def _what(e: OSError) -> str:
    """What ``e`` says happened, in the words of a full disk when it is one."""
    return {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}.get(
        e.errno or 0, "cannot write")


def _said(e: OSError) -> str:
    return f"{type(e).__name__}: [Errno {e.errno}] {e.strerror}" if e.errno is not None else f"{type(e).__name__}: {e}"


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
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in keep))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)  # a full disk: the copy would hold the space that ran out
        raise UserError(f"{path}: {_what(e)} while rewriting the run's log without the lines past the checkpoint "
                        f"({_said(e)}; the copy needs up to its {len(text.encode())} bytes free); the file is left as it "
                        "is: free space, then --resume") from None


def _is_step(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
