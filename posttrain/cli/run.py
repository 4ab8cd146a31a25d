"""``posttrain run`` and ``posttrain quickstart``.

    posttrain quickstart [--out runs/quickstart]              the embedded recipe, end to end
    posttrain run RECIPE.yaml --out DIR [--resume] [--set rl.steps=50 ...] [--backend ray [--ray-address H:P]]

The recipe is parsed (unknown keys, wrong types and invalid combinations fail here, before any
work); the run says what it does in a short header on stderr (model, parameters, tokenizer, how the
prompts are rendered and why, tasks per split and domain, stages; ``cli/_header.py``) and saves the
whole resolved recipe as DIR/config.yaml, which the header names. Each long phase has a progress
bar with its rate and time left; the held-out pass@1 table goes to stdout.

Ctrl-C (or SIGTERM) stops a run with one line naming the exact ``--resume`` command, exit 130;
what was written stays (checkpoints are atomic). ``posttrain quickstart --resume`` without
``--out`` continues the latest unfinished ``runs/quickstart*`` (the one an interrupted quickstart made).
``--resume`` where no run began in ``--out`` starts one there and says so first (a job script that
always passes it; a mistyped ``--out`` shows in that line).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from posttrain.config import check_out_dir
from posttrain.errors import UserError

if TYPE_CHECKING:
    from posttrain.cli._ranks import Torchrun


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="run a recipe (SFT -> RL -> eval) into a run directory",
                                epilog="Every recipe key, its type, range, default and meaning: docs/recipe.md.")
    run.add_argument("recipe", help="recipe YAML file (every key: docs/recipe.md; examples: configs/)")
    _common(run, default_out=None)
    run.set_defaults(func=cmd_run)
    qs = subparsers.add_parser("quickstart", help="run the embedded default recipe end to end (no hub, no GPU)")
    _common(qs, default_out=QUICKSTART_OUT)
    qs.set_defaults(func=cmd_quickstart)


QUICKSTART_OUT = "runs/quickstart"


def _common(p: argparse.ArgumentParser, *, default_out: str | None) -> None:
    p.add_argument("--out", required=default_out is None, default=None,
                   help=f"run directory (default: {default_out})" if default_out else "run directory")  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe value, e.g. --set rl.steps=50 (repeatable)")
    p.add_argument("--backend", choices=["local", "ray"], default=None,
                   help="where rollouts and verification run (recipe key sched.backend): ray = rollout "
                        "actors that receive each policy version and a sandbox-pool actor per node")
    p.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                   help="with --backend ray: the cluster to join (ray start --head); default: a one-node "
                        "cluster of the run's own on this machine")


def cmd_run(args: argparse.Namespace) -> int:
    if not args.recipe:  # Path("") is the current directory
        raise UserError("run: the recipe path is empty; expected a recipe YAML file")
    return _run(Path(args.recipe), args, ["run", args.recipe])


def cmd_quickstart(args: argparse.Namespace) -> int:
    from posttrain.train.recipe import EMBEDDED_RECIPE

    if args.out is None:  # the default directory: a second quickstart gets a new one, not an error
        args.out = str(_resume_dir(Path(QUICKSTART_OUT)) if args.resume else _unused_dir(Path(QUICKSTART_OUT)))
        if args.resume:
            held = (Path(args.out) / "config.yaml").exists()
            note = f"resuming {args.out}" if held else f"no quickstart run to resume; starting {args.out}"
            Console(stderr=True).print(note, highlight=False)
    return _run(EMBEDDED_RECIPE, args, ["quickstart"])


def _runs_of(base: Path) -> list[Path]:
    """``base``, ``base-2``, ``base-3``, ... that hold a run (a config.yaml), in the order quickstart made them."""
    found = [(1, base)] if (base / "config.yaml").exists() else []
    for p in base.parent.glob(f"{base.name}-*"):
        n = p.name[len(base.name) + 1 :]
        if n.isdigit() and (p / "config.yaml").exists():
            found.append((int(n), p))
    return [p for _, p in sorted(found)]


def _unused_dir(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``, ... : the one after the last that holds a run."""
    runs = _runs_of(base)
    if not runs:
        return base
    n = 1 if runs[-1] == base else int(runs[-1].name[len(base.name) + 1 :])
    return base.with_name(f"{base.name}-{n + 1}")


def _resume_dir(base: Path) -> Path:
    """The latest unfinished run among ``base``, ``base-N``; else the latest run; else ``base``."""
    from posttrain.cli.pipeline import is_finished

    runs = _runs_of(base)
    unfinished = [p for p in runs if not is_finished(p)]
    return (unfinished or runs or [base])[-1]


def resume_command(command: list[str], args: argparse.Namespace) -> str:
    """The exact command line that continues this run.

    >>> ns = argparse.Namespace(out="runs/my run", overrides=["rl.steps=50"])
    >>> resume_command(["run", "configs/tiny-grpo.yaml"], ns)
    "posttrain run configs/tiny-grpo.yaml --out 'runs/my run' --resume --set rl.steps=50"
    """
    words = ["posttrain", *command, "--out", str(args.out), "--resume"]
    for o in args.overrides:
        words += ["--set", o]
    return shlex.join(words)


def backend_overrides(args: argparse.Namespace) -> list[str]:
    """``--backend`` and ``--ray-address`` as the recipe overrides they stand for (so the saved
    config.yaml and the resume command say them too).

    >>> backend_overrides(argparse.Namespace(backend="ray", ray_address="10.0.0.1:6379"))
    ['sched.backend=ray', 'sched.ray_address=10.0.0.1:6379']
    """
    if args.ray_address is not None and args.backend != "ray":
        raise UserError(f"--ray-address {args.ray_address}: a cluster address is for --backend ray")
    out = [] if args.backend is None else [f"sched.backend={args.backend}"]
    return out + ([] if args.ray_address is None else [f"sched.ray_address={args.ray_address}"])


@contextmanager
def _sigterm_as_interrupt(message: str) -> Iterator[None]:
    """SIGTERM stops a run the way Ctrl-C does; a second signal while it unwinds exits at once."""

    def now(signum: int, frame: object) -> None:
        print(message, file=sys.stderr, flush=True)
        os._exit(130)  # checkpoints and stage directories are renamed into place whole: nothing half-written

    def stop(signum: int, frame: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, now)
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _run(recipe_path: Path, args: argparse.Namespace, command: list[str]) -> int:
    from posttrain.cli._ranks import check_torchrun, torchrun, torchrun_rank0
    from posttrain.cli.pipeline import run_recipe
    from posttrain.train.recipe import load_recipe

    console = Console()
    args.overrides = [*args.overrides, *backend_overrides(args)]
    recipe = load_recipe(recipe_path, args.overrides)
    check_out_dir(args.out)  # a file, a path under a file, an unwritable folder: one line, before any work
    tr = torchrun()
    if tr is not None:  # one of torchrun's processes: rank 0 runs the run, the others its RL stage
        check_torchrun(recipe, tr)
        if tr.rank > 0:
            return _follow(tr)
    check_holds_no_other_files(Path(args.out))
    source = f"{recipe_path}" + "".join(f" --set {o}" for o in args.overrides)
    out = Path(args.out)
    message = f"posttrain: interrupted; continue with: {resume_command(command, args)}"
    try:
        with _sigterm_as_interrupt(message), torchrun_rank0(tr) if tr is not None else nullcontext():
            summary = run_recipe(recipe, out, resume=args.resume, source=source)
    except KeyboardInterrupt:
        print(message, file=sys.stderr)
        return 130
    print_summary(console, summary, out)
    line = gate_line(summary.get("regression") or {})
    if line:  # the seesaw gate (eval.baselines): one line, exit 1
        print(line, file=sys.stderr)
        return 1
    return 0


def gate_line(gate: dict[str, Any]) -> str | None:
    """The seesaw gate's one line (``compare_domains``' result), or None when it passed.

    >>> gate_line({"regressions": ["math (a)", "code (b) (different task sets)", "json (b) (different settings)"],
    ...            "not_comparable": ["code (b)", "json (b)"]})  # doctest: +NORMALIZE_WHITESPACE
    'posttrain: regression: math (a) dropped below its baseline beyond both 95% intervals;
     code (b) was evaluated on other tasks than its baseline (not judged);
     json (b) was sampled with other settings than its baseline (not judged) (summary.json: regression)'
    """
    if not gate.get("regressions"):
        return None
    apart = list(gate.get("not_comparable") or [])
    why = {name: entry[len(name) + 2:-1] for name in apart for entry in gate["regressions"]
           if entry.startswith(f"{name} (") and entry.endswith(")") and entry[len(name) + 2:-1] in _APART}
    dropped = [name for name in gate["regressions"] if not any(name == f"{a} ({w})" for a, w in why.items())]
    said = [f"{', '.join(dropped)} dropped below its baseline beyond both 95% intervals"] if dropped else []
    for reason, words in _APART.items():
        names = [a for a in apart if why.get(a, "different task sets") == reason]
        said += [f"{', '.join(names)} was {words} than its baseline (not judged)"] if names else []
    return f"posttrain: regression: {'; '.join(said)} (summary.json: regression)"


_APART = {"different task sets": "evaluated on other tasks", "different task prompts": "asked other prompts",
          "different settings": "sampled with other settings"}
"""``compare_domains``' reasons for a row it did not judge, as ``gate_line`` says them."""


def check_holds_no_other_files(out: Path) -> None:
    """Refuse, before any work, an ``--out`` that already holds files but no run (no config.yaml): the run
    would write its config.yaml, summary.json, report.html, checkpoints/ and eval/ among them, over any
    of the same name. A run of its own (``--resume``, or refused by the pipeline without it) and an empty
    directory are fine."""
    if not out.is_dir() or (out / "config.yaml").exists():
        return
    try:  # an interrupted run's half-written config.yaml (``pipeline._write_atomic``) is the run's own
        names = sorted(p.name for p in out.iterdir() if not p.name.startswith(".config.yaml.tmp-"))
    except OSError as e:
        raise UserError(f"--out {out}: cannot list the directory ({e.strerror or e})") from None
    if names:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise UserError(f"--out {out}: holds {len(names)} file(s) but no run ({shown}); a run writes config.yaml, "
                        "summary.json, checkpoints/ and more into it: choose a new or empty directory")


def _follow(tr: Torchrun) -> int:
    """Ranks 1..N-1 under torchrun: rank 0's RL stage, once it starts (``cli._ranks.follow``)."""
    from posttrain.cli._rank_main import run_rank
    from posttrain.cli._ranks import end_rank, follow

    spec, store = follow(tr)
    if spec is not None:
        run_rank(spec, tr.rank, tr.world, local_rank=tr.local_rank, local_world=tr.local_world, store=store)
        end_rank(0)
    return 0


def print_summary(console: Console, summary: dict[str, Any], out: Path) -> None:
    """The held-out pass@1 table, per model and domain, and where the report is. Names and paths are shown
    as text (``Text`` of ``_progress.plain``): never read as rich markup, never with a control character."""
    from rich.text import Text

    from posttrain.cli._progress import plain

    evals = summary["eval"]
    domains = sorted({d for e in evals.values() for d in e.get("per_domain", {})})
    if len(domains) > 6:  # many domains: a row each (as columns they do not fit a terminal)
        table = Table(title="held-out pass@1 (passed / attempts)")
        table.add_column("domain")
        for name in evals:
            table.add_column(Text(plain(name)), justify="right")
        table.add_row("overall", *(f"{e['pass@1']:.3f}" for e in evals.values()))
        for d in domains:
            cells = [e["per_domain"].get(d) for e in evals.values()]
            table.add_row(Text(plain(d)), *(f"{c['pass@1']:.3f} ({c['passed']}/{c['n_samples']})" if c else "-" for c in cells))
        console.print(table)
        console.print(f"run directory: {out}\nsummary: {out / 'summary.json'}\nreport: {out / 'report.html'}",
                      soft_wrap=True, markup=False, highlight=False)
        return
    table = Table(title="held-out pass@1 (passed / attempts)")
    table.add_column("model")
    table.add_column("overall", justify="right")
    for d in domains:
        table.add_column(Text(plain(d)), justify="right")
    for name, e in evals.items():
        cells = [f"{e['pass@1']:.3f}"]
        for d in domains:
            pd = e["per_domain"].get(d)
            cells.append(f"{pd['pass@1']:.3f} ({pd['passed']}/{pd['n_samples']})" if pd else "-")
        table.add_row(Text(plain(name)), *cells)
    console.print(table)
    console.print(f"run directory: {out}\nsummary: {out / 'summary.json'}\nreport: {out / 'report.html'}",
                  soft_wrap=True, markup=False, highlight=False)
