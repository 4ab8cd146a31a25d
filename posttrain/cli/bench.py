"""``posttrain bench NAME`` (``NAMES``): run a benchmark script from bench/ in this checkout.

sandbox, train, verify measure our code and a peer baseline in the same run and print the ratio;
learn compares GRPO learning with TRL's GRPOTrainer from the same SFT checkpoint; quickstart runs
the quickstart recipe on several seeds and prints demonstrator / SFT / RL held-out pass@1 per seed;
repair runs configs/repair.yaml's SFT -> repair RL and SFT -> single-turn RL per seed (issue 10);
curriculum counts RL steps to a held-out target with uniform sampling and with the task pool (issue 24);
cad prices the cad verifier against bare OpenSCAD; repo_agents and domain_agents play the oracle, the no-op
and every cheat agent through ``posttrain eval`` (README's agent tables).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

from posttrain.cli import _Parser
from posttrain.errors import UserError

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
NAMES = ("sandbox", "train", "verify", "learn", "quickstart", "sched", "repair", "generate", "step", "gpu", "curriculum",
         "recall", "adaptive", "cad", "domain_agents", "repo_agents")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="benchmarks against peers, measured in the same run")
    p.add_argument("name", choices=NAMES, help="which benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the benchmark script")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    return int(load_bench(args.name).main(args.args) or 0)


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py as a module (the scripts are files of the checkout, not a package; one bench
    reuses another's pieces through this too)."""
    script = BENCH_DIR / f"{name}.py"
    if not script.is_file():
        raise UserError(f"{script}: benchmark script not found (run from a source checkout: pip install -e .)")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The scripts' shared checks of their flags, so that each refuses bad input the same way as the main
# CLI: one line, exit 2, before any work (a script calls ``parser.error`` with the ValueError's text).

def bench_parser(name: str, doc: str) -> argparse.ArgumentParser:
    """The parser of ``posttrain bench NAME``: argparse with its errors on one line (the main CLI's)."""
    return _Parser(prog=f"posttrain bench {name}", description=doc.splitlines()[0])


def parse_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """"0,1,2" or "0-2,7" -> [0, 1, 2] / [0, 1, 2, 7]; ValueError naming ``flag`` for anything else,
    an empty or reversed range, and a value given twice (the same seed run twice says nothing new)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"{flag} {text!r}: expected integers like 0,1,2 or 0-4")
        if hi and int(hi) < int(lo):
            raise ValueError(f"{flag} {text!r}: range {part.strip()} is empty (expected LOW-HIGH with LOW <= HIGH)")
        for seed in range(int(lo), int(hi or lo) + 1):
            if seed in seeds:
                raise ValueError(f"{flag} {text!r}: {seed} is given twice (expected distinct values)")
            seeds.append(seed)
    return seeds


def check_out_dir(path: Path, flag: str) -> None:
    """``posttrain.config.check_out_dir`` (what the main CLI's ``--out`` takes) as a ValueError naming
    ``flag``: ``path`` is a directory, or one can be made and written there."""
    from posttrain.config import check_out_dir as check

    try:
        check(path, flag)
    except UserError as e:
        raise ValueError(str(e)) from None


def check_out_file(path: Path, flag: str) -> None:
    """ValueError naming ``flag`` unless ``path`` can be written as a file: not a directory, and its
    directory exists (checked before the work whose figures it keeps)."""
    if path.is_dir():
        raise ValueError(f"{flag} {path}: is a directory (expected a file to write)")
    if not path.parent.is_dir():
        raise ValueError(f"{flag} {path}: directory {path.parent} not found (expected an existing directory)")
