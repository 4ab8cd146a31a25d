"""The ``posttrain`` command.

    posttrain quickstart [--out DIR]          SFT -> RLVR -> eval on the embedded default
    posttrain run RECIPE.yaml --out DIR       the same pipeline, driven by a recipe
    posttrain sandbox run|selftest            the isolating sandbox
    posttrain verify ...                      verify responses against tasks
    posttrain tasks validate|decontaminate    check task files; find train/eval overlap
    posttrain eval | report | audit           evaluation, HTML reports, sampled re-verification
    posttrain bench sandbox|train             benchmarks against peers, measured in the same run
    posttrain generate CKPT --prompt TEXT     sample completions from any checkpoint
    posttrain --version

Each subcommand lives in its own package (``<package>/cli.py`` exposes ``register``); this
module only wires them together. Errors that a user caused exit 2 with one line naming the
file, field or value and what was expected. An environment's own error during episodes
(``sched.StepError``: not bad input) exits 1 with one line naming the task, the environment, the
step and the exception; ``POSTTRAIN_TRACEBACK=1`` prints its traceback first (a plugin author's
view). Ctrl-C prints one line and exits 130 (``run`` and ``quickstart`` name the ``--resume``
command that continues).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from typing import NoReturn

from posttrain import __version__
from posttrain.errors import UserError
from posttrain.sched import StepError

# (module, description): each module has ``register(subparsers) -> None``; every parser it adds
# sets ``func`` via ``set_defaults(func=...)`` and the function returns an exit code.
_COMMAND_MODULES = (
    "posttrain.train.cli",
    "posttrain.sandbox.cli",
    "posttrain.verify.cli",
    "posttrain.tasks.cli",
    "posttrain.evaluate.cli",
    "posttrain.bench_cli",
    "posttrain.generate",
)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line, like every other bad input (subcommands inherit it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="posttrain",
        description="Post-training for causal LMs: SFT, RLVR (GRPO/PPO), DPO/RM, and evaluation on verified tasks.",
    )
    parser.add_argument("--version", action="version", version=f"posttrain {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"posttrain: error: {e}", file=sys.stderr)
        return 2
    except StepError as e:
        if os.environ.get("POSTTRAIN_TRACEBACK") == "1":
            traceback.print_exception(e)
        print(f"posttrain: error: {e} (POSTTRAIN_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("posttrain: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
