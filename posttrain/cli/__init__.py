"""The ``posttrain`` command: every subcommand, the pipeline (``posttrain run``), and the wiring that
opens a sandbox pool and an execution service for a set of domains (``open_service``).

    posttrain quickstart [--out DIR]          SFT -> RLVR -> eval on the embedded default
    posttrain run RECIPE.yaml --out DIR       the same pipeline, driven by a recipe
    posttrain sandbox run|selftest            the isolating sandbox
    posttrain verify ...                      verify responses against tasks
    posttrain tasks validate|decontaminate    check task files; find train/eval overlap
    posttrain eval | report | audit           evaluation, HTML reports, sampled re-verification
    posttrain bench sandbox|train             benchmarks against peers, measured in the same run
    posttrain generate CKPT --prompt TEXT     sample completions from any checkpoint
    posttrain --version

Each subcommand is a module of this package exposing ``register`` (``run``: run and quickstart,
the pipeline in ``pipeline``; ``sandbox``; ``verify``; ``tasks``; ``evaluate``: eval, report and audit,
``posttrain eval``'s driver in ``_eval``; ``bench``; ``generate``); this module wires them together.
This package is the top layer: it may import every other package, and none imports it
(docs/contracts.md, "Layers"). Errors that a user caused exit 2 with one line naming the
file, field or value and what was expected. An environment's own error during episodes
(``sched.StepError``: not bad input) exits 1 with one line naming the task, the environment, the
step and the exception; ``POSTTRAIN_TRACEBACK=1`` prints its traceback first (a plugin author's
view). Ctrl-C prints one line and exits 130 (``run`` and ``quickstart`` name the ``--resume``
command that continues). What third parties print that says nothing to a user is kept out
(``quiet_third_parties``), and posttrain's own warnings are one line each. Every error and warning
line is written as it shows (``posttrain.shown.visible``): a control or bidi character a value
carries (an ESC, a U+202E, a CR from a file name or a task id) is its escape, never a terminal's
command; a message without one prints as it is.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import re
import select
import signal
import sys
import traceback
import warnings
from pathlib import Path
from typing import NoReturn, TextIO

from posttrain import __version__
from posttrain.cli._service import domain_hooks, open_service, pool_for
from posttrain.errors import RunFailure, UserError
from posttrain.sched import StepError
from posttrain.shown import visible

__all__ = ["build_parser", "domain_hooks", "main", "open_service", "pool_for"]

# (module, description): each module has ``register(subparsers) -> None``; every parser it adds
# sets ``func`` via ``set_defaults(func=...)`` and the function returns an exit code.
_COMMAND_MODULES = (
    "posttrain.cli.run",
    "posttrain.cli.sandbox",
    "posttrain.cli.verify",
    "posttrain.cli.tasks",
    "posttrain.cli.evaluate",
    "posttrain.cli.bench",
    "posttrain.cli.generate",
)


def named(text: str) -> str:
    """argparse ``type`` of a path argument: the empty string is refused (``Path("")`` is ".", the current
    directory: ``tasks validate ''`` read it as a dataset of its Parquet files, ``report ''`` as a run)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got ''")
    return text


def named_path(text: str) -> Path:
    """``named``, as a ``Path``."""
    return Path(named(text))


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line, like every other bad input (subcommands inherit it)."""

    def error(self, message: str) -> NoReturn:
        # a value argparse quotes is shown as its first 40 characters and its length: ``--n`` of 5,000 digits
        # ("invalid int value: '999...'") was echoed whole, 5,117 characters on one line
        message = re.sub(r"'([^']{60,})'", lambda m: f"'{m[1][:40]}...' ({len(m[1]):,} characters)", message)
        self.exit(2, f"{self.prog}: error: {visible(message)} (see {self.prog} --help)\n")


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


_NOISE = ("The following generation flags are not valid",)
"""Third-party log lines that say nothing a posttrain user can act on: transformers validates a
model's generation_config.json (``top_k`` without ``do_sample``, ...), which posttrain's samplers
do not read (the run's header names the settings it does not apply)."""
_PACKAGE = os.path.dirname(os.path.abspath(__file__)).rsplit(os.sep, 1)[0]


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_NOISE)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """posttrain's own warnings as one line (``posttrain: warning: ...``), not Python's file:line and
    source; anyone else's as Python shows them."""
    text = f"posttrain: warning: {visible(str(message))}\n" if os.path.abspath(filename).startswith(_PACKAGE + os.sep) \
        else warnings.formatwarning(message, category, filename, lineno, line)
    try:
        (file or sys.stderr).write(text)
    except OSError:  # stderr gone: as Python's own showwarning, say nothing
        pass


def quiet_third_parties() -> None:
    """What the commands do before any work so that what they print is theirs: transformers' progress
    bars off (ours cover each long phase; ``HF_HUB_DISABLE_PROGRESS_BARS``, unless set), its
    generation-flag lines dropped (``_NOISE``), posttrain's warnings on one line."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    if "transformers" in sys.modules and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":  # imported already
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    flags = logging.getLogger("transformers.generation.configuration_utils")
    if not any(isinstance(f, _DropNoise) for f in flags.filters):  # main() may run many times in one process
        flags.addFilter(_DropNoise())
    warnings.showwarning = _show_warning


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (``poll`` says POLLERR): a broken pipe
    of our own (a sandbox's, a worker's) is not ended quietly."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's captured stdout)
        return False


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    quiet_third_parties()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"posttrain: error: {visible(str(e))}", file=sys.stderr)
        return 2
    except (StepError, RunFailure) as e:
        if os.environ.get("POSTTRAIN_TRACEBACK") == "1":
            traceback.print_exception(e)
        print(f"posttrain: error: {visible(str(e))} (POSTTRAIN_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("posttrain: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # ``posttrain tasks list | head -1``: the reader is done, as with any Unix tool
        if not _stdout_gone():
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit fails no more
        return 128 + signal.SIGPIPE
    except OSError as e:  # a path the user named that no filesystem takes: every check of it raises this
        if e.errno in (errno.ENOSPC, errno.EDQUOT):  # a full disk is no bug of ours: one line, not a traceback
            where = f"{visible(str(e.filename))}: " if e.filename else ""
            print(f"posttrain: error: {where}cannot write ({e.strerror}): free space, or write elsewhere", file=sys.stderr)
            return 1
        if e.errno != errno.ENAMETOOLONG:
            raise
        name = str(e.filename)
        print(f"posttrain: error: {visible(name[:60])}...: a file name too long for the filesystem ({len(name)} "
              "characters)", file=sys.stderr)
        return 2

