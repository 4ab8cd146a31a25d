"""``posttrain tasks validate|decontaminate``: check task files; find train/eval overlap.

    posttrain tasks validate FILE [FILE ...] [--no-run] [--domain code]
        schema-check every task of every file (exit 2 on the first malformed record, naming
        file/line/field, before any verifier runs), then run each task's reference response (expect pass) and its domain's no-op response
        (expect fail) through the real verifier (the execution service, ``posttrain.sched``, one per
        command); prints one line per problem and a summary;
        exit 0 when all is well, 1 when a reference fails or a no-op passes.
    posttrain tasks decontaminate TRAIN EVAL [--n 13] [--out DIR]
        n-gram overlap between a training and an evaluation task file (posttrain.evaluate).

Not here: generating tasks (``posttrain.tasks.generators``, ``env.generate_tasks``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posttrain.types import Task, Verdict

if TYPE_CHECKING:
    from posttrain.sched import Service


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("tasks", help="check task files; find train/eval overlap")
    sub = p.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND")
    v = sub.add_parser("validate", help="schema-check task files and run references (pass) and no-ops (fail)")
    v.add_argument("files", nargs="+", type=Path, metavar="FILE", help="JSON / JSONL task files")
    v.add_argument("--no-run", action="store_true", help="only check the schemas; run no verifier")
    v.add_argument("--domain", default=None, metavar="DOMAIN",
                   help="domain of records that name none (code for raw HumanEval files)")
    v.set_defaults(func=cmd_validate)
    d = sub.add_parser("decontaminate", help="n-gram overlap between a train and an eval task file")
    d.add_argument("train", type=Path, help="training task file")
    d.add_argument("eval", type=Path, help="evaluation task file")
    d.add_argument("--n", type=int, default=13, help="n-gram length in words (default 13)")
    d.add_argument("--out", type=Path, default=None, help="directory for the overlap report")
    d.set_defaults(func=_cmd_decontaminate)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _cmd_decontaminate(args: argparse.Namespace) -> int:
    from posttrain.config import check_out_dir
    from posttrain.evaluate.decontaminate import cmd_decontaminate

    if args.out is not None:
        check_out_dir(args.out)

    return cmd_decontaminate(args)


def check_tasks(tasks: list[Task], service: Service) -> list[str]:
    """Problems found by running each task's reference (expect pass) and no-op (expect fail)."""
    from posttrain.envs import get_env

    pairs: list[tuple[Task, str]] = []
    kinds: list[str] = []
    for t in tasks:
        if t.reference is not None:
            pairs.append((t, t.reference))
            kinds.append("reference")
        pairs.append((t, get_env(t.domain).noop_response(t)))
        kinds.append("noop")
    verdicts = service.verify_pairs(pairs)
    problems = []
    for (task, _), kind, v in zip(pairs, kinds, verdicts, strict=True):
        problem = _judge(kind, v)
        if problem:
            problems.append(f"{task.id}: {problem}")
    return problems


def _judge(kind: str, v: Verdict) -> str | None:
    if v.is_infra_error:
        return f"{kind}: infra_error ({v.evidence.get('detail', v.error_class)})"
    if kind == "reference" and not v.passed:
        return f"reference response does not pass: {v.error_class}: {v.feedback.splitlines()[0] if v.feedback else ''}"
    if kind == "noop" and v.passed:
        return "the do-nothing response passes: the task cannot tell a no-op from a solution"
    return None


def cmd_validate(args: argparse.Namespace) -> int:
    from posttrain.sched import open_service
    from posttrain.tasks import load_tasks

    loaded = [(path, load_tasks(path, domain=args.domain)) for path in args.files]
    if args.no_run:
        for path, tasks in loaded:
            print(f"{path}: {len(tasks)} tasks, schema ok")
        return 0
    status = 0
    with open_service(t.domain for _, tasks in loaded for t in tasks) as service:
        for path, tasks in loaded:
            no_ref = sum(t.reference is None for t in tasks)
            problems = check_tasks(tasks, service)
            for problem in problems:
                print(f"{path}: {problem}", file=sys.stderr)
            note = f" ({no_ref} without a reference)" if no_ref else ""
            print(f"{path}: {len(tasks)} tasks{note}, {len(problems)} problem(s)")
            status = status or (1 if problems else 0)
    return status
