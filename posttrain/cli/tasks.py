"""``posttrain tasks validate|decontaminate|list|stats``: check task files and domains; find train/eval
overlap; list the domains; a run's task statistics.

    posttrain tasks validate FILE [FILE ...] [--no-run] [--domain code] [--split NAME]
        schema-check every task of every file (JSON, JSONL, Parquet, Arrow, a datasets directory;
        every malformed record is named, file/line or row/field, up to 20 a file with the count, and
        then exit 2 before any verifier runs), then run each task's reference response (expect pass;
        a failure says what ``posttrain verify`` says) and its domain's no-op response
        (expect fail) through the real verifier (the execution service, ``posttrain.sched``, one per
        command); prints one line per problem and a summary;
        exit 0 when all is well, 1 when a reference fails or a no-op passes.
    posttrain tasks validate --all-domains [--no-run] [--only PREFIX]
        the domain conformance suite (``posttrain.envs.conformance``) over every registered domain
        (the 106 rg/<generator> among them; the test suite runs a sample): generated references
        pass, no-ops and exploit fixtures fail, parse errors name the field, generators round-trip;
        a line per domain; exit 1 when any domain has a problem.
    posttrain tasks decontaminate TRAIN EVAL [--n 13] [--out DIR]
        n-gram overlap between a training and an evaluation task file (posttrain.evaluate).
    posttrain tasks list
        every registered domain: difficulty levels, canaries, sandbox, capability labels.
    posttrain tasks stats RUN
        per domain: episodes, pass rate, groups, zero-variance share, level, canary passes; each
        domain's difficulty histogram (``posttrain.tasks.run_stats``).

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
    from posttrain.cli import named_path

    p = subparsers.add_parser("tasks", help="check task files; find train/eval overlap")
    sub = p.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND")
    v = sub.add_parser("validate", help="schema-check task files and run references (pass) and no-ops (fail)")
    v.add_argument("files", nargs="*", type=named_path, metavar="FILE",
                   help="task files: JSON, JSONL, Parquet, Arrow or a datasets directory")
    v.add_argument("--no-run", action="store_true", help="only check the schemas; run no verifier")
    v.add_argument("--domain", default=None, metavar="DOMAIN",
                   help="domain of records that name none (code for raw HumanEval files)")
    v.add_argument("--split", default=None, metavar="NAME", help="the split of a DatasetDict directory")
    v.add_argument("--all-domains", action="store_true",
                   help="run the domain conformance suite over every registered domain instead")
    v.add_argument("--only", default=None, metavar="PREFIX", help="with --all-domains: the domains starting so")
    v.set_defaults(func=cmd_validate)
    ls = sub.add_parser("list", help="every registered domain with its levels and capability labels")
    ls.set_defaults(func=cmd_list)
    st = sub.add_parser("stats", help="a run's task statistics: pass rates, zero variance, difficulty")
    st.add_argument("run", type=named_path, metavar="RUN", help="a run directory (posttrain run --out RUN)")
    st.set_defaults(func=cmd_stats)
    d = sub.add_parser("decontaminate", help="n-gram overlap between a train and an eval task file")
    d.add_argument("train", type=named_path, help="training task file")
    d.add_argument("eval", type=named_path, help="evaluation task file")
    d.add_argument("--n", type=int, default=13, help=f"n-gram length in words, 1 to {MAX_NGRAM} (default 13)")
    d.add_argument("--out", default=None, help="directory for the overlap report")
    d.set_defaults(func=_cmd_decontaminate)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


MAX_NGRAM = 1000
"""The longest n-gram ``--n`` takes, in words (13, the default, is GPT-3's). A prompt shorter than n
words is compared whole and a shorter solution not at all, so ``--n 10**21`` (taken before) quietly
checked exact duplicates of prompts only."""


def _cmd_decontaminate(args: argparse.Namespace) -> int:
    from posttrain.config import check_out_dir
    from posttrain.errors import UserError
    from posttrain.evaluate.decontaminate import cmd_decontaminate

    if not 1 <= args.n <= MAX_NGRAM:  # before the files are read (a pipe reads once), not at the first n-gram
        got = args.n if len(str(args.n)) <= 40 else f"an integer of {len(str(args.n))} digits"
        raise UserError(f"tasks decontaminate: --n must be >= 1 (words per n-gram) and at most {MAX_NGRAM}, got {got}")
    if args.out is not None:
        check_out_dir(args.out)

    return cmd_decontaminate(args)


def check_tasks(tasks: list[Task], service: Service) -> list[str]:
    """Problems found by running each task's reference (expect pass) and no-op (expect fail)."""
    from posttrain.envs import get_domain

    pairs: list[tuple[Task, str]] = []
    kinds: list[str] = []
    for t in tasks:
        if t.reference is not None:
            pairs.append((t, t.reference))
            kinds.append("reference")
        pairs.append((t, get_domain(t.domain).noop_response(t)))
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
        return f"reference response does not pass: {v.error_class}: {feedback_detail(v.feedback)}"
    if kind == "noop" and v.passed:
        return "the do-nothing response passes: the task cannot tell a no-op from a solution"
    return None


def feedback_detail(feedback: str, limit: int = 400) -> str:
    """A verdict's feedback on one line, as ``posttrain verify`` gives it, less its hints.

    >>> feedback_detail("SyntaxError in your code\\nIndentationError: expected an indented block (candidate.py, line 2)\\n"
    ...                 "Hint: Fix the syntax error.")
    'SyntaxError in your code: IndentationError: expected an indented block (candidate.py, line 2)'
    """
    lines = [line.strip() for line in feedback.splitlines() if line.strip() and not line.startswith("Hint:")]
    text = ": ".join(lines)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cmd_list(args: argparse.Namespace) -> int:
    from posttrain.tasks import format_domains, list_domains

    print(format_domains(list_domains()))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from posttrain.config import check_run_dir, check_run_files
    from posttrain.tasks import format_stats, run_stats

    check_run_dir(args.run)
    if not (args.run / "trajectories" / "rl.jsonl").is_dir():  # run_stats says that one; a pipe or link was "missing"
        check_run_files(args.run, {"trajectories/rl.jsonl": "the RL trajectories file"})
    print(format_stats(run_stats(args.run)))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from posttrain.cli._service import open_service
    from posttrain.errors import UserError

    if args.all_domains:
        if args.files:
            raise UserError("tasks validate: give task files or --all-domains, not both")
        return validate_domains(args.only, run=not args.no_run)
    if args.only is not None:
        raise UserError("tasks validate: --only is for --all-domains")
    if not args.files:
        raise UserError("tasks validate: give one or more task files, or --all-domains")
    check_domain_flag(args.domain)
    loaded = _scan(args.files, domain=args.domain, split=args.split)
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


def check_domain_flag(domain: str | None) -> None:
    """``--domain NAME`` names a registered domain, or is refused in one line (also when every record
    names its own, where a misspelt name would otherwise pass unnoticed)."""
    from posttrain.envs import get_domain, is_registered
    from posttrain.errors import TaskError, UserError

    if domain is not None and not is_registered(domain):
        try:
            get_domain(domain)
        except TaskError as e:
            raise UserError(f"--domain {domain}: {e}") from None


SHOWN_BAD_RECORDS = 20
"""``tasks validate`` lists at most this many bad records per file, then says how many more there are."""


def _scan(files: list[Path], *, domain: str | None, split: str | None) -> list[tuple[Path, list[Task]]]:
    """Every file's tasks. Bad records: one is a ``TaskError`` naming it; several are each a line on
    stderr (``SHOWN_BAD_RECORDS`` a file, then how many more), and then a ``TaskError`` with the
    counts. Either before any verifier runs."""
    from posttrain.errors import TaskError
    from posttrain.tasks import scan_tasks

    scanned = [(path, *scan_tasks(path, domain=domain, split=split)) for path in files]
    found = [problem for _, _, problems in scanned for problem in problems]
    if len(found) == 1:  # one bad record: one line, as every other bad input
        raise TaskError(found[0])
    bad = []
    for path, tasks, problems in scanned:
        for problem in problems[:SHOWN_BAD_RECORDS]:
            print(problem, file=sys.stderr)
        if len(problems) > SHOWN_BAD_RECORDS:
            print(f"{path}: ... and {len(problems) - SHOWN_BAD_RECORDS} more bad records", file=sys.stderr)
        if problems:
            bad.append(f"{path}: {len(problems)} bad records of {len(tasks) + len(problems)}")
    if bad:
        raise TaskError(f"{'; '.join(bad)} (named above, at most {SHOWN_BAD_RECORDS} a file); no verifier was run")
    return [(path, tasks) for path, tasks, _ in scanned]


def validate_domains(prefix: str | None, *, run: bool = True) -> int:
    """The conformance suite over every registered domain (or those starting with ``prefix``)."""
    import time

    from posttrain.cli._service import open_service
    from posttrain.envs import domain_names, get_domain
    from posttrain.envs.conformance import (
        check_exploits,
        check_generated,
        check_parse_errors,
        check_round_trip,
        check_surface,
    )
    from posttrain.errors import UserError

    names = [d for d in domain_names() if prefix is None or d.startswith(prefix)]
    if not names:
        raise UserError(f"tasks validate --only {prefix}: no registered domain starts so")
    failed = 0
    with open_service(names if run else ()) as service:
        for name in names:
            t0 = time.perf_counter()
            try:
                problems = check_surface(name)
                env = get_domain(name)
                problems += check_parse_errors(env) + check_round_trip(env)
                if run:
                    problems += check_generated(env, service.verify_pairs) + check_exploits(env, service.verify_pairs)
            except Exception as e:  # noqa: BLE001 - a domain that breaks is its problem, said in one line
                problems = [f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"]
            failed += bool(problems)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            print(f"{name}: {'ok' if not problems else f'{len(problems)} problem(s)'} ({time.perf_counter() - t0:.1f}s)")
    print(f"{len(names)} domains, {failed} with problems")
    return 1 if failed else 0
