"""Sampling that keeps the signal alive: a temperature per task from its groups' diversity against a
fixed temperature, and a token budget per task from its difficulty against a fixed budget, on a
trained policy (issue 25, "Sampling that keeps the signal alive").

    posttrain bench adaptive [--run DIR] [--seed 0] [--stage sft] [--tasks 64] [--group 8]
                             [--rounds 6] [--budget 24] [--threads 1]

The policy: a checkpoint of the quickstart recipe (``--run DIR`` of ``posttrain run
posttrain/configs/quickstart.yaml``, ``--stage sft`` or ``rl``; without ``--run`` its SFT stage is run
first, a few minutes). Tasks: ``--tasks`` of the quickstart math family (the recipe's training
family), verified by the math domain's verifier. Each arm samples ``--group`` completions per task
for ``--rounds`` rounds over the same tasks (as epochs of RL would meet them again), the same seeds in
every arm, the policy fixed (what a controller does to sampling, apart from what training does):

  diversity  fixed: temperature 1 every round.  per task: ``TemperatureController`` (from 1, x1.1 a
             round while a task's group repeats itself -- duplicate rate > 0.25 -- up to 1.5, back
             towards 1 otherwise). Printed over rounds 2.. (round 1 is the same in both): the
             fraction of zero-variance groups (every reward equal: no gradient), the duplicate rate,
             distinct completions per group, pass rate; and what dedup does (``rl.dedup``): rows
             that repeat a completion of their group (counted once in its baseline), and that it does not change
             zero variance.
  budget     fixed: ``--budget`` new tokens every round.  per task: ``BudgetController`` (from
             ``--budget``; solved reliably -- pass rate >= 0.8 -- 1.25 x its longest pass, at least
             8; hard -- <= 0.2 -- x1.5, at most 4 x ``--budget``). Printed over rounds 2..: completion
             tokens per round, pass rate, completions cut by their cap.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent


def checkpoint(args: argparse.Namespace, scratch: Path) -> Path:
    if args.run is not None:
        path = args.run / "checkpoints" / args.stage
        if not (path / "config.json").exists():
            raise SystemExit(f"bench adaptive: --run {args.run}: no {args.stage} checkpoint at {path}")
        return path
    out = scratch / "run"
    cmd = [sys.executable, "-m", "posttrain.cli", "run", str(ROOT / "posttrain" / "configs" / "quickstart.yaml"),
           "--out", str(out), "--set", f"seed={args.seed}", "--set", "stages=[sft]"]
    print(f"bench adaptive: running the quickstart's SFT stage (seed {args.seed}) ...", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out / "checkpoints" / "sft"


class Round(NamedTuple):  # a NamedTuple: bench modules load outside sys.modules (no dataclass)
    zero_var: float
    dup_rate: float
    distinct: float
    pass_rate: float
    tokens: int
    cut: float
    mean_temp: float
    mean_cap: float


def sample_round(policy, sampler, tasks, verify, *, group: int, seed: int,
                 temp_of: Callable[[str], float], cap_of: Callable[[str], int]) -> tuple[list[list[Any]], Round]:
    """G completions per task (one generate call per distinct (temperature, cap)), verified."""
    from posttrain.policy import SamplingParams
    from posttrain.rollout import diversity
    from posttrain.types import Trajectory, Turn

    settings: dict[tuple[float, int], list[int]] = {}
    for k, t in enumerate(tasks):
        settings.setdefault((round(temp_of(t.id), 6), cap_of(t.id)), []).append(k)
    gens: list[list[Any]] = [[] for _ in tasks]
    for n, ((temp, cap), ks) in enumerate(sorted(settings.items())):
        prompts = [policy.encode_prompt(tasks[k].prompt) for k in ks for _ in range(group)]
        out = sampler.generate(prompts, SamplingParams(temperature=temp, max_new_tokens=cap, seed=seed * 100 + n))
        for j, k in enumerate(ks):
            gens[k] = out[j * group : (j + 1) * group]
    groups = []
    for t, gs in zip(tasks, gens, strict=True):
        rewards = [verify(t, g.text).reward for g in gs]
        groups.append([Trajectory(t.id, t.id, i, (Turn(g.prompt_ids, g.completion_ids, g.logprobs, g.stop_reason),), r)
                       for i, (g, r) in enumerate(zip(gs, rewards, strict=True))])
    div = [diversity([x.turns[0].action_ids for x in g]) for g in groups]
    flat = [x for g in groups for x in g]
    return groups, Round(
        zero_var=sum(len({x.reward for x in g}) == 1 for g in groups) / len(groups),
        dup_rate=statistics.mean(d["dup_rate"] for d in div),
        distinct=statistics.mean(len({x.turns[0].action_ids for x in g}) for g in groups),
        pass_rate=sum(x.reward >= 1.0 for x in flat) / len(flat),
        tokens=sum(len(x.turns[0].action_ids) for x in flat),
        cut=sum(x.turns[0].stop_reason == "length" for x in flat) / len(flat),
        mean_temp=statistics.mean(temp_of(t.id) for t in tasks),
        mean_cap=statistics.mean(cap_of(t.id) for t in tasks),
    )


def run_arm(policy, tasks, verify, args, *, temperature=None, budget=None) -> list[Round]:
    import torch

    from posttrain.policy import FastSampler

    sampler = FastSampler(policy.model, policy.tokenizer)
    rounds = []
    for r in range(args.rounds):
        torch.manual_seed(args.seed * 1000 + r)
        groups, stats = sample_round(
            policy, sampler, tasks, verify, group=args.group, seed=args.seed * 1000 + r,
            temp_of=temperature.temperature if temperature else (lambda _: 1.0),
            cap_of=budget.cap if budget else (lambda _: args.budget))
        rounds.append(stats)
        for t, g in zip(tasks, groups, strict=True):
            if temperature:
                temperature.observe(t.id, g)
            if budget:
                budget.observe(t.id, g)
    return rounds


def summary(rounds: list[Round], field: str) -> str:
    values = [getattr(r, field) for r in rounds[1:]]
    mean = statistics.mean(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.3f}±{spread:.3f}" if isinstance(values[0], float) else f"{mean:.0f}±{spread:.0f}"


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    parser = bench_parser("adaptive", __doc__)
    parser.add_argument("--run", type=Path, help="a quickstart run directory (default: run its SFT stage now)")
    parser.add_argument("--stage", choices=["sft", "rl"], default="sft", help="which checkpoint of --run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--budget", type=int, default=24, help="the fixed budget (the quickstart's max_new_tokens)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if min(args.tasks, args.rounds - 1, args.budget, args.threads) < 1 or args.group < 2 or args.seed < 0:
        parser.error("--tasks, --budget, --threads must be >= 1, --rounds >= 2, --group >= 2 and --seed >= 0")
    import torch

    from posttrain.envs import get_domain
    from posttrain.envs.math._quickstart import quickstart_tasks
    from posttrain.policy import load_policy
    from posttrain.rollout import BudgetController, TemperatureController

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as d:
        policy = load_policy(checkpoint(args, Path(d)))
    tasks = quickstart_tasks(seed=args.seed)[: args.tasks]
    verify = get_domain("math").make_verifier(None)
    arms = {
        "T fixed 1.0": run_arm(policy, tasks, verify, args),
        "T per task": run_arm(policy, tasks, verify, args, temperature=TemperatureController(base=1.0, high=1.5)),
        f"budget fixed {args.budget}": None,
        "budget per task": run_arm(policy, tasks, verify, args, budget=BudgetController(
            base=args.budget, low=min(8, args.budget), high=4 * args.budget)),
    }
    arms[f"budget fixed {args.budget}"] = arms["T fixed 1.0"]  # the same arm: T 1, the fixed budget
    where = f"{args.run}/checkpoints/{args.stage}" if args.run else f"quickstart SFT, seed {args.seed}"
    print(f"adaptive sampling: {where}; {args.tasks} quickstart math tasks x G={args.group}, {args.rounds} rounds "
          f"(figures: mean±sd over rounds 2..{args.rounds}), the policy fixed, the same seeds in every arm")
    print(f"  {'diversity':<18}{'zero-var groups':>16}{'dup rate':>14}{'distinct/G':>14}{'pass rate':>14}{'mean T':>14}")
    for name in ("T fixed 1.0", "T per task"):
        r = arms[name]
        print(f"  {name:<18}{summary(r, 'zero_var'):>16}{summary(r, 'dup_rate'):>14}{summary(r, 'distinct'):>14}"
              f"{summary(r, 'pass_rate'):>14}{summary(r, 'mean_temp'):>14}")
    fixed = arms["T fixed 1.0"]
    print(f"  dedup (rl.dedup) at T 1: {summary(fixed, 'dup_rate')} of rows are repeats of a completion of their "
          f"group, counted once in its baseline; zero-variance groups stay {summary(fixed, 'zero_var')} "
          f"(a group of one completion repeated is zero-variance with or without it)")
    print(f"  {'budget':<18}{'tokens/round':>16}{'pass rate':>14}{'cut at cap':>14}{'mean cap':>14}")
    for name in (f"budget fixed {args.budget}", "budget per task"):
        r = arms[name]
        print(f"  {name:<18}{summary(r, 'tokens'):>16}{summary(r, 'pass_rate'):>14}{summary(r, 'cut'):>14}"
              f"{summary(r, 'mean_cap'):>14}")
    a, b = arms[f"budget fixed {args.budget}"][1:], arms["budget per task"][1:]
    print(f"  per task / fixed: tokens x{sum(x.tokens for x in b) / max(sum(x.tokens for x in a), 1):.2f}, "
          f"pass rate {statistics.mean(x.pass_rate for x in b) - statistics.mean(x.pass_rate for x in a):+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
