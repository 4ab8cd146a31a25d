"""``posttrain sandbox run|selftest``.

posttrain sandbox run [--timeout S] [--memory-mb N] [--workspace DIR] -- CMD...
    Run CMD in a fresh sandbox; print the Execution as JSON. Exit 0 when the sandbox worked,
    whatever the program did; 2 on bad arguments or a host that cannot isolate (the message
    says what is missing and how to fix it); 1 on an infra error. With --workspace, CMD
    starts in a copy-on-write view of DIR at /work (DIR itself is never modified).
posttrain sandbox selftest
    Run the escape probes inside the real sandbox, one line each, exit 1 if any escaped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from posttrain.errors import UserError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sandbox", help="run commands in the isolating sandbox; escape selftest")
    sub = p.add_subparsers(dest="sandbox_command", metavar="{run,selftest}")
    run = sub.add_parser("run", help="run CMD in a fresh sandbox and print the Execution as JSON")
    run.add_argument("--timeout", type=float, default=10.0, help="wall-clock limit in seconds (default 10)")
    run.add_argument("--memory-mb", type=int, default=512, help="memory limit with swap, MiB (default 512)")
    run.add_argument(
        "--workspace", default=None, help="directory whose files the job starts with (copy-on-write)"
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    run.set_defaults(func=_run)
    st = sub.add_parser("selftest", help="run escape probes in the real sandbox")
    st.set_defaults(func=_selftest)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run(args: argparse.Namespace) -> int:
    from posttrain.sandbox import Limits, open_pool
    from posttrain.sandbox._types import LimitsError, check_timeout
    from posttrain.sandbox.workspace import Workspace

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UserError("sandbox run: no command given; usage: posttrain sandbox run [options] -- CMD...")
    if args.workspace is not None and not os.path.isdir(args.workspace):
        raise UserError(f"sandbox run: --workspace {args.workspace!r} is not a directory")
    try:  # checked before the pool starts, naming the option
        timeout = check_timeout(args.timeout)
    except LimitsError as e:
        raise UserError(f"sandbox run: --timeout: {e}") from None
    try:
        limits = Limits(memory_mb=args.memory_mb)
    except LimitsError as e:
        raise UserError(f"sandbox run: --memory-mb: {e}") from None
    with open_pool(size=1) as pool:
        if args.workspace is not None:
            with Workspace(pool, args.workspace) as ws:
                ex = ws.exec(cmd, timeout=timeout, limits=limits)
        else:
            ex = pool.exec(cmd, timeout=timeout, limits=limits)
    print(json.dumps(ex.to_json(), indent=2))
    return 1 if ex.outcome == "infra_error" else 0


def _selftest(args: argparse.Namespace) -> int:
    from posttrain.sandbox import open_pool
    from posttrain.sandbox._probes import run_probes

    def show(name: str, leak: str | None) -> None:
        print(f"{name:<26} {'contained' if leak is None else 'NOT CONTAINED: ' + leak}", flush=True)

    with open_pool(size=1) as pool:
        results = run_probes(pool, show)
    escaped = [k for k, v in results.items() if v is not None]
    print(f"{len(results) - len(escaped)}/{len(results)} probes contained", file=sys.stderr)
    return 1 if escaped else 0
