"""``posttrain bench sandbox|train|verify|learn|quickstart|generate|step|gpu|curriculum``: run a benchmark script from bench/ in this checkout.

sandbox, train, verify measure our code and a peer baseline in the same run and print the ratio;
learn compares GRPO learning with TRL's GRPOTrainer from the same SFT checkpoint; quickstart runs
the quickstart recipe on several seeds and prints demonstrator / SFT / RL held-out pass@1 per seed;
repair runs configs/repair.yaml's SFT -> repair RL and SFT -> single-turn RL per seed (issue 10);
curriculum counts RL steps to a held-out target with uniform sampling and with the task pool (issue 24).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

from posttrain.errors import UserError

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
NAMES = ("sandbox", "train", "verify", "learn", "quickstart", "sched", "repair", "generate", "step", "gpu", "curriculum",
         "recall", "adaptive")


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
