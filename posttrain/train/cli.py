"""``posttrain run`` and ``posttrain quickstart``.

    posttrain quickstart [--out runs/quickstart]              the embedded recipe, end to end
    posttrain run RECIPE.yaml --out DIR [--resume] [--set rl.steps=50 ...]

The recipe is parsed (unknown keys, wrong types and invalid combinations fail here, before any
work) and printed; the resolved recipe is saved as DIR/config.yaml.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from posttrain.config import check_out_dir, to_dict


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="run a recipe (SFT -> RL -> eval) into a run directory")
    run.add_argument("recipe", help="recipe YAML file (see configs/)")
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


def cmd_run(args: argparse.Namespace) -> int:
    return _run(Path(args.recipe), args)


def cmd_quickstart(args: argparse.Namespace) -> int:
    from posttrain.train.recipe import EMBEDDED_RECIPE

    if args.out is None:  # the default directory: a second quickstart gets a new one, not an error
        args.out = QUICKSTART_OUT if args.resume else str(_unused_dir(Path(QUICKSTART_OUT)))
    return _run(EMBEDDED_RECIPE, args)


def _unused_dir(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``, ... : the first that holds no run."""
    n, path = 1, base
    while (path / "config.yaml").exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _run(recipe_path: Path, args: argparse.Namespace) -> int:
    import yaml

    from posttrain.train.pipeline import run_recipe
    from posttrain.train.recipe import load_recipe

    console = Console()
    recipe = load_recipe(recipe_path, args.overrides)
    check_out_dir(args.out)  # a file, a path under a file, an unwritable folder: one line, before any work
    console.print(f"[bold]recipe[/bold] {recipe_path}")
    console.print(yaml.safe_dump(to_dict(recipe), sort_keys=False).rstrip(), highlight=False)
    out = Path(args.out)
    summary = run_recipe(recipe, out, resume=args.resume)
    print_summary(console, summary, out)
    return 0


def print_summary(console: Console, summary: dict[str, Any], out: Path) -> None:
    """The held-out pass@1 table, per model and domain, and where the report is."""
    evals = summary["eval"]
    domains = sorted({d for e in evals.values() for d in e.get("per_domain", {})})
    table = Table(title="held-out pass@1 (passed / attempts)")
    table.add_column("model")
    table.add_column("overall", justify="right")
    for d in domains:
        table.add_column(d, justify="right")
    for name, e in evals.items():
        cells = [f"{e['pass@1']:.3f}"]
        for d in domains:
            pd = e["per_domain"].get(d)
            cells.append(f"{pd['pass@1']:.3f} ({pd['passed']}/{pd['n_samples']})" if pd else "-")
        table.add_row(name, *cells)
    console.print(table)
    console.print(f"run directory: {out}\nsummary: {out / 'summary.json'}\nreport: {out / 'report.html'}",
                  soft_wrap=True)
