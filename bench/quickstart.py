"""The quickstart's claim on several seeds: demonstrator, SFT and RL held-out pass@1 per seed.

    posttrain bench quickstart --seeds 0,1,2,3,4 [--torch-threads 2] [--out DIR] [--recipe FILE]
                               [--set KEY=VALUE ...]

Runs the recipe (default: the embedded quickstart recipe, what ``make quickstart`` runs) once per
seed, each in its own ``posttrain run`` subprocess into ``DIR/seed-N`` (``--resume``: a finished
seed is read back, an interrupted one continues), then prints one row per seed and the mean,
standard deviation and range over seeds:

    seed  demonstrator  SFT  RL  (held-out pass@1, 95% interval clustered by task)  RL-SFT  wall

and whether the quickstart's claim holds on every seed: RL >= SFT + 10 points and RL above the
demonstrator (point estimates). ``--torch-threads 2`` changes the order of float reductions in
torch's CPU kernels, so it stands in for another machine's rounding (issue 13). Each run takes
minutes: this is a benchmark, not a test. Exit code 0 when every seed holds, 1 when one does not.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from posttrain.cli.bench import parse_seeds  # noqa: F401  (bench learn, repair, tests: qs.parse_seeds)

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED = ROOT / "posttrain" / "configs" / "quickstart.yaml"
MARGIN = 0.10  # RL must beat SFT by this much (pass@1 points / 100)


def run_seed(recipe: Path, out: Path, seed: int, threads: int | None, overrides: list[str]) -> dict[str, Any]:
    """One ``posttrain run`` subprocess for ``seed``; returns its summary.json plus the wall time."""
    summary = out / "summary.json"
    t0 = time.perf_counter()
    sets = [f"seed={seed}", *(["torch_threads=" + str(threads)] if threads else []), *overrides]
    if summary.exists():
        same_recipe_or_exit(recipe, sets, out)
    else:
        cmd = [sys.executable, "-m", "posttrain.cli", "run", str(recipe), "--out", str(out),
               *(["--resume"] if (out / "config.yaml").exists() else [])]
        for s in sets:
            cmd += ["--set", s]
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out.parent / f"{out.name}.log", "w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"bench quickstart: seed {seed} failed (exit {proc.returncode}); see {out.parent / out.name}.log")
    data = json.loads(summary.read_text())
    data["bench_wall_s"] = time.perf_counter() - t0
    return data


def same_recipe_or_exit(recipe: Path, sets: list[str], out: Path) -> None:
    """A finished seed is reused only when it ran the recipe asked for now (same file, seed, threads
    and overrides): otherwise exit 2 naming the keys that differ, as ``posttrain run --resume`` does."""
    from posttrain.cli.pipeline import prepare_run_dir
    from posttrain.errors import UserError
    from posttrain.train.recipe import load_recipe

    try:
        prepare_run_dir(out, load_recipe(recipe, sets), resume=True)  # compares; writes nothing when it exists
    except UserError as e:
        print(f"posttrain bench quickstart: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def cell(e: dict[str, Any]) -> str:
    lo, hi = e["ci"]["pass@1"]
    return f"{e['pass@1']:.3f} [{lo:.3f}, {hi:.3f}]"


def row_of(seed: int, s: dict[str, Any]) -> dict[str, Any]:
    ev = s["eval"]
    demo, sft, rl = (ev[k]["pass@1"] for k in ("demonstrator", "sft", "rl"))
    return {"seed": seed, "demo": demo, "sft": sft, "rl": rl, "gain": rl - sft, "wall_s": s["wall_s"],
            "holds": rl >= sft + MARGIN - 1e-12 and rl > demo,
            "cells": [cell(ev[k]) for k in ("demonstrator", "sft", "rl")]}


def print_table(rows: list[dict[str, Any]], title: str) -> None:
    print(title)
    head = f"{'seed':>4}  {'demonstrator':<22} {'SFT':<22} {'RL':<22} {'RL-SFT':>7} {'wall':>6}  claim"
    print(head)
    print("-" * len(head))
    for r in rows:
        mark = "holds" if r["holds"] else "FAILS"
        print(f"{r['seed']:>4}  {r['cells'][0]:<22} {r['cells'][1]:<22} {r['cells'][2]:<22} "
              f"{r['gain']:>+7.3f} {r['wall_s']:>5.0f}s  {mark}")
    print("-" * len(head))
    for stat in ("mean", "std", "min", "max"):
        vals = []
        for key in ("demo", "sft", "rl", "gain"):
            xs = [r[key] for r in rows]
            v = {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
                 "min": min(xs), "max": max(xs)}[stat]
            vals.append(v)
        print(f"{stat:>4}  {vals[0]:<22.3f} {vals[1]:<22.3f} {vals[2]:<22.3f} {vals[3]:>+7.3f}")
    held = sum(r["holds"] for r in rows)
    print(f"claim (RL >= SFT + {MARGIN * 100:.0f} points and RL > demonstrator, held-out pass@1): "
          f"holds on {held}/{len(rows)} seeds")


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser, check_out_dir

    parser = bench_parser("quickstart", __doc__)
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds to run: 0,1,2 or 0-4 (default 0,1,2,3,4)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="set the recipe's torch_threads (2 stands in for another CPU's rounding)")
    parser.add_argument("--recipe", type=Path, default=EMBEDDED, help="recipe file (default: the embedded quickstart)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the runs go (default: runs/bench-quickstart[-tN]); finished seeds are reused")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe override passed to every run (repeatable)")
    args = parser.parse_args(argv)
    suffix = f"-t{args.torch_threads}" if args.torch_threads else ""
    out = args.out or ROOT / "runs" / f"bench-quickstart{suffix}"
    try:
        seeds = parse_seeds(args.seeds)
        check_out_dir(out, "--out")
    except ValueError as e:
        parser.error(str(e))  # exit 2
    if args.torch_threads is not None and args.torch_threads < 1:
        parser.error(f"--torch-threads {args.torch_threads}: expected an integer >= 1")
    if not args.recipe.is_file():
        parser.error(f"--recipe {args.recipe}: file not found")
    rows = []
    for seed in seeds:
        print(f"seed {seed}: running into {out / f'seed-{seed}'} ...", file=sys.stderr, flush=True)
        rows.append(row_of(seed, run_seed(args.recipe, out / f"seed-{seed}", seed, args.torch_threads,
                                          args.overrides)))
    threads = args.torch_threads or "recipe's"
    print_table(rows, f"{args.recipe.name}, torch_threads={threads}, held-out pass@1 (95% interval, "
                      f"clustered by task), {len(seeds)} seeds; runs in {out}")
    return 0 if all(r["holds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
