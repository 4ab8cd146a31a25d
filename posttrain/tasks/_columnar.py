"""Task records from columnar data where users keep it: Parquet files and Hugging Face ``datasets``.

``iter_columnar_records(path, split=None)`` yields ``(where, record)`` per row, streamed one record
batch at a time (never the whole table in memory), from

- a ``.parquet`` file (``pyarrow.parquet``, batches of ``BATCH_ROWS`` rows);
- an ``.arrow`` file (Arrow IPC, stream or file format: what ``datasets`` writes);
- a directory saved by ``datasets.Dataset.save_to_disk`` (``state.json`` names its ``.arrow``
  shards) or ``DatasetDict.save_to_disk`` (``dataset_dict.json``; ``split`` picks one);
- a directory of Parquet files (a hub snapshot: ``data/train-00000-of-00002.parquet``, ...): every
  ``*.parquet`` below it in name order, those whose name starts with ``split`` when one is given.

Rows are plain Python values (``to_pylist``). ``where`` is ``FILE: row N`` (N counts from 0 across
shards). ``map_columns(row, columns)`` applies a source's column mapping (``{field: column}``):
with a mapping, only the mapped columns are read, so a dataset's other columns never reach the
domain's schema; without one, every column is a field. ``datasets`` itself is never imported
(pyarrow reads its files; importing it costs ~2 s).

Not here: what a record means (``posttrain.tasks._load.parse_record``, the domains).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from posttrain.errors import TaskError, UserError

BATCH_ROWS = 1024
COLUMNAR_SUFFIXES = (".parquet", ".arrow")


def is_columnar(path: Path) -> bool:
    """Whether ``path`` is read by this module (a Parquet/Arrow file or a dataset directory)."""
    return path.suffix in COLUMNAR_SUFFIXES or path.is_dir()


def iter_columnar_records(path: str | Path, *, split: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for each row of ``path`` (module docstring); ``UserError`` naming the file."""
    path = Path(path)
    row = 0
    for shard in _shards(path, split):
        for batch in _batches(shard):
            for record in batch.to_pylist():
                yield f"{shard}: row {row}", record
                row += 1


def map_columns(row: Mapping[str, Any], columns: Mapping[str, str] | None, where: str) -> dict[str, Any]:
    """The task record of ``row`` under ``columns`` ({field: column}); a missing column is an error
    naming the row and the column."""
    if not columns:
        return dict(row)
    out = {}
    for field, column in columns.items():
        if column not in row:
            raise TaskError(f"{where}: column {column!r} (for field {field!r}): no such column; the columns "
                            f"are {', '.join(map(repr, row))}")
        out[field] = row[column]
    return out


def column_names(path: str | Path, *, split: str | None = None) -> list[str]:
    """The columns of ``path``'s first shard (for error messages and ``posttrain tasks list``)."""
    shards = _shards(Path(path), split)
    return [f.name for f in _schema(shards[0])]


def _shards(path: Path, split: str | None) -> list[Path]:
    if not path.exists():
        raise UserError(f"{path}: no such task file or dataset directory")
    if path.is_file():
        if split is not None:
            raise UserError(f"{path}: split {split!r}: a single file has no splits (split is for a dataset directory)")
        return [path]
    if (path / "dataset_dict.json").is_file():
        splits = _json(path / "dataset_dict.json").get("splits", [])
        if split is None or split not in splits:
            raise UserError(f"{path}: a DatasetDict with splits {', '.join(map(repr, splits))}: "
                            f"{'split ' + repr(split) + ' is not one of them' if split else 'set split to one of them'}")
        return _shards(path / split, None)
    if (path / "state.json").is_file():
        if split is not None:
            raise UserError(f"{path}: split {split!r}: this dataset directory holds one split")
        files = [path / f["filename"] for f in _json(path / "state.json").get("_data_files", [])]
        missing = [f for f in files if not f.is_file()]
        if not files or missing:
            raise UserError(f"{path}: state.json names {'no data files' if not files else f'missing {missing[0].name}'}")
        return files
    try:  # the directory itself must list; below it, a folder that cannot (gone, /proc's) is passed over
        os.listdir(path)
    except OSError as e:
        raise UserError(f"{path}: cannot search it for *.parquet ({e.strerror or e})") from None
    files = sorted(p for p in _parquet_files(path) if split is None or p.name.startswith(split))
    if not files:
        raise UserError(f"{path}: a directory with no dataset (no state.json, dataset_dict.json or "
                        f"*.parquet{f' starting with {split!r}' if split else ''})")
    return files


def _parquet_files(root: Path, depth: int = 3) -> list[Path]:
    """``*.parquet`` files in ``root`` and at most ``depth`` folders down (a dataset's shards sit in data/
    or <config>/<split>/; ``file: /`` walked the whole file system), following links as ``glob`` does. A
    folder that cannot be listed -- gone mid-walk, a /proc entry -- is passed over: a glob over / raised
    EINVAL from /proc now and then. Hidden names are left out, as ``glob``'s ``*`` leaves them."""
    found, level = [], [root]
    for d in range(depth + 1):
        below = []
        for folder in level:
            try:
                with os.scandir(folder) as it:
                    entries = [e for e in it if not e.name.startswith(".")]  # as glob's "*": no hidden names
            except OSError:
                continue
            for e in entries:
                try:
                    if e.name.endswith(".parquet") and e.is_file():
                        found.append(Path(e.path))
                    elif d < depth and e.is_dir():
                        below.append(e.path)
                except OSError:
                    continue
        level = below
    return found


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read ({e})") from None


def _schema(shard: Path) -> Any:
    import pyarrow.parquet as pq

    if shard.suffix == ".parquet":
        return pq.read_schema(shard)
    return _arrow_reader(shard).schema


def _batches(shard: Path) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if shard.suffix == ".parquet":
            yield from pq.ParquetFile(shard).iter_batches(batch_size=BATCH_ROWS)
        else:
            reader = _arrow_reader(shard)
            if isinstance(reader, pa.ipc.RecordBatchFileReader):
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
            else:
                yield from reader
    except (OSError, pa.ArrowException) as e:
        raise UserError(f"{shard}: cannot read as {'Parquet' if shard.suffix == '.parquet' else 'Arrow'} "
                        f"({str(e).splitlines()[0][:160]})") from None


def _arrow_reader(shard: Path) -> Any:
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(pa.memory_map(str(shard)))
    except pa.ArrowInvalid:
        try:
            return pa.ipc.open_file(pa.memory_map(str(shard)))
        except pa.ArrowInvalid as e:
            raise UserError(f"{shard}: not an Arrow file ({str(e).splitlines()[0][:120]})") from None
