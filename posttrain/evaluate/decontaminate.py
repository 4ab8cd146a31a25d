"""Train/eval overlap by normalized n-gram matching; ``posttrain tasks decontaminate TRAIN EVAL``.

    posttrain tasks decontaminate train.jsonl eval.jsonl --n 13 --out clean/

Each task record contributes its prompt and its solutions (``reference``, ``canonical_solution``,
``answer``, ``solution``). Text is folded first (``fold``: a copy written with zero-width characters,
soft hyphens, accents, fullwidth letters or Cyrillic and Greek look-alikes of Latin letters reads as
the text it copies, and a number in one spelling: ``4.0``, ``04``, ``+4`` and Arabic-Indic ``٤`` read
``4``, ``1,000`` and ``1 000`` read ``1000``, while ``0.5`` and ``5`` stay two), then normalized
(lowercased, every run of non-alphanumeric characters becomes one space) and cut into word n-grams,
13 by default as in the GPT-3 paper's decontamination (Brown et al. 2020, appendix C). A prompt
shorter than n words is compared whole (an exact duplicate); a solution shorter than n words is not
compared (different problems share short answers such as "88").
An eval record is contaminated when any of its n-grams occurs in any train record.

``--out DIR`` writes ``DIR/<train>.decontaminated.jsonl`` (train minus every record that overlaps
the eval set: the usual fix, the benchmark stays intact), ``DIR/<eval>.clean.jsonl`` (eval minus
the contaminated records, for when the train set cannot change) and ``DIR/contamination.json``;
an ``--out`` that already holds any of the three (an earlier run's) is refused before any file is read.
Records are copied as they were read (raw JSON objects), whatever their domain.

What it does not do: fuzzy or embedding-based matching (paraphrases pass through), or checking
that the records are valid tasks (``posttrain tasks validate`` does).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from posttrain.errors import UserError, refuse_directory
from posttrain.tasks._decontaminate import fold, ngrams, normalize

__all__ = [
    "TEXT_FIELDS",
    "Overlap",
    "fold",
    "normalize",
    "ngrams",
    "record_grams",
    "find_overlap",
    "read_task_records",
    "cmd_decontaminate",
    "check_clean_split",
]

TEXT_FIELDS = ("prompt", "reference", "canonical_solution", "answer", "solution")
"""The fields of a task record compared across splits: the prompt and its solutions."""


@dataclass(frozen=True)
class Overlap:
    """One contaminated eval record: which train record it shares an n-gram with, and the n-gram."""

    eval_id: str
    train_id: str
    ngram: str
    eval_index: int
    """Position of the eval record in its file (ids need not be unique)."""
    train_index: int


def record_grams(record: Mapping[str, Any], n: int) -> set[str]:
    """The n-grams of a record. A short prompt counts whole (an exact duplicate is contamination);
    a short solution does not (two problems may share the answer "88").

    >>> sorted(record_grams({"prompt": "2+2=", "answer": "4"}, 13))
    ['2 2']
    """
    grams: set[str] = set()
    for key in TEXT_FIELDS:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            grams |= ngrams(value, n, whole_if_short=key == "prompt")  # ngrams reads it folded (normalize)
    return grams


def _record_id(record: Mapping[str, Any], index: int) -> str:
    rid = record.get("id", record.get("task_id"))
    return str(rid) if rid is not None else f"#{index}"


def _index(records: Sequence[Mapping[str, Any]], n: int) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, rec in enumerate(records):
        for g in record_grams(rec, n):
            index.setdefault(g, i)
    return index


def find_overlap(
    train: Sequence[Mapping[str, Any]], eval_: Sequence[Mapping[str, Any]], *, n: int = 13
) -> list[Overlap]:
    """Every eval record that shares a normalized n-gram with a train record (first match each).

    >>> train = [{"id": "t1", "prompt": "What is two plus three?"}]
    >>> find_overlap(train, [{"id": "e1", "prompt": "what is TWO plus three"}], n=13)[0].train_id
    't1'
    """
    index = _index(train, n)
    out = []
    for i, rec in enumerate(eval_):
        hit = next((g for g in sorted(record_grams(rec, n)) if g in index), None)
        if hit is not None:
            j = index[hit]
            out.append(Overlap(_record_id(rec, i), _record_id(train[j], j), hit, i, j))
    return out


def read_task_records(path: str | Path) -> list[dict[str, Any]]:
    """Raw task records of a task file, read as ``posttrain.tasks.load_tasks`` reads them (JSON or
    JSONL, .gz, streamed); errors name the file and line; a file with no record is an error."""
    from posttrain.tasks import iter_task_records

    path = Path(path)
    refuse_directory(path, "a task file")
    if not path.exists() and not path.is_symlink():  # a pipe (``<(...)``) is read too, once; a link to nothing is named
        raise UserError(f"{path}: task file not found")
    out = []
    for where, rec in iter_task_records(path):
        if not isinstance(rec, dict):
            raise UserError(f"{where}: expected a JSON object per line, got {type(rec).__name__}")
        out.append(rec)
    if not out:
        raise UserError(f"no tasks in {path}")
    return out


def _write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    _write_whole(path, (json.dumps(rec, ensure_ascii=False) + "\n" for rec in records))


def _write_whole(path: Path, chunks: Iterable[str]) -> None:
    """``path`` whole or not at all (written beside it, then renamed): a full disk left a cut task file
    that read as a smaller clean split, and OSError's traceback."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.writelines(chunks)
        os.replace(tmp, path)
    except OSError as e:
        raise UserError(f"--out {path.parent}: cannot write {path.name} ({e.strerror or e})") from None
    finally:
        tmp.unlink(missing_ok=True)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name


def _outputs(out_dir: Path, train_path: Path, eval_path: Path) -> tuple[Path, Path, Path]:
    """What ``--out DIR`` gets: the decontaminated train file, the clean eval file, the report."""
    return (out_dir / f"{_stem(train_path)}.decontaminated.jsonl", out_dir / f"{_stem(eval_path)}.clean.jsonl",
            out_dir / "contamination.json")


def check_clean_split(train_path: str | Path, tasks: Sequence[Any], *, n: int = 13) -> None:
    """Raise ``UserError`` if any eval task (a ``posttrain.types.Task``) overlaps the training pool file,
    by the rule the run's pool was built with (``posttrain.tasks.find_contamination``: the same prompt as
    shown, or most of its distinctive n-grams in one training task), so a run's own held-out split
    (RUN/tasks/eval.jsonl) is never refused for what its build judged two problems (the quickstart's
    ``67-x=0. x=`` and ``-67+x=0. x=``, a generator's template text). Both sides are compared as
    ``fold`` reads them (``find_contamination`` folds what each task shows the model, and its
    reference), so a copy re-spelt with zero-width characters, look-alike letters or its numbers written
    otherwise (``4.0`` for ``4``, ``1,000`` for ``1000``) is the task it copies."""
    from posttrain.tasks import find_contamination, load_tasks

    refuse_directory(train_path, "a task file")
    if not Path(train_path).is_file():
        raise UserError(f"{train_path}: task file not found")
    overlaps = find_contamination(load_tasks(train_path), tasks, n=n)
    if overlaps:
        shown = "; ".join(f"{o.eval_id} ~ {o.train_id}" for o in overlaps[:5])
        raise UserError(
            f"{train_path}: {len(overlaps)} of {len(tasks)} eval tasks overlap the run's training pool "
            f"(near-duplicates by normalized {n}-grams: {shown}); refusing to score a contaminated suite. "
            f"Run 'posttrain tasks decontaminate {train_path} EVAL --out DIR' and evaluate on the clean file"
        )


def cmd_decontaminate(args: argparse.Namespace) -> int:
    """``posttrain tasks decontaminate TRAIN EVAL [--n 13] [--out DIR]``; exit 0 clean, 1 overlap found.

    ``args`` has ``train``, ``eval`` (paths), ``n`` (int, default 13) and ``out`` (path or None).
    """
    n = int(args.n)
    train_path, eval_path = Path(args.train), Path(args.eval)
    if args.out:  # before the files are read: an earlier decontamination's files are not written over
        held = [p.name for p in _outputs(Path(args.out), train_path, eval_path) if p.exists() or p.is_symlink()]
        if held:
            raise UserError(f"--out {args.out}: already holds {', '.join(held)} (an earlier decontamination's); "
                            "choose a new or empty directory, or remove them")
    train = read_task_records(train_path)
    eval_ = train if eval_path == train_path else read_task_records(eval_path)  # one pipe given twice reads once
    overlaps = find_overlap(train, eval_, n=n)
    bad_eval = {o.eval_index for o in overlaps}
    # the reverse direction names the train records to drop
    bad_train_overlaps = find_overlap(eval_, train, n=n)
    bad_train = {o.eval_index for o in bad_train_overlaps}
    print(
        f"decontaminate: {len(overlaps)}/{len(eval_)} eval records share a normalized {n}-gram with "
        f"{len(train)} train records; {len(bad_train)} train records overlap the eval set"
    )
    for o in overlaps[:20]:
        print(f"  eval {o.eval_id} ~ train {o.train_id}: {o.ngram[:100]!r}")
    if len(overlaps) > 20:
        print(f"  ... and {len(overlaps) - 20} more")
    out = args.out
    if out:
        out_dir = Path(out)
        out_dir.mkdir(parents=True, exist_ok=True)
        train_out, eval_out, report_out = _outputs(out_dir, train_path, eval_path)
        _write_jsonl(train_out, (r for i, r in enumerate(train) if i not in bad_train))
        _write_jsonl(eval_out, (r for i, r in enumerate(eval_) if i not in bad_eval))
        report = {
            "n": n,
            "train": str(train_path),
            "eval": str(eval_path),
            "train_records": len(train),
            "eval_records": len(eval_),
            "contaminated_eval": [asdict(o) for o in overlaps],
            "overlapping_train": [o.eval_id for o in bad_train_overlaps],
            "written": {"train": str(train_out), "eval": str(eval_out)},
        }
        _write_whole(report_out, [json.dumps(report, indent=2) + "\n"])
        print(f"wrote {train_out} ({len(train) - len(bad_train)} records), {eval_out} ({len(eval_) - len(bad_eval)} records)")
    return 1 if overlaps else 0
