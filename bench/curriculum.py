"""RL steps to a held-out target: uniform sampling against the task pool, on a mix where uniform wastes most groups.

    posttrain bench curriculum [--seeds 0,1,2] [--out DIR] [--max-steps 300] [--eval-every 10]
                               [--target 0.40] [--hold 2] [--eval-samples 8] [--torch-threads N]

The mix (22 domains): the quickstart's two families (quickstart-math, quickstart-code: small
algebra and small Python functions, which the embedded default learns) and twenty reasoning-gym
generators at level 0 that it does not (``RG``: arithmetic, counting, sequences, dates, family
relations, ...; the model was never shown their answer format, and none of its answers to them
passes), 600 training tasks each. Uniform sampling gives each domain its share, so about 20 of 22
groups carry no reward variance: no gradient. Per seed:

1. SFT once: ``posttrain run`` of the seed's uniform recipe with ``stages: [sft]`` into ``DIR/seed-N/sft``
   (the quickstart's SFT: 40 epochs on the scripted demonstrator's answers to the math and code
   training tasks, wrong on 40% of them; the held-out evaluation of that run is the start);
2. from that same checkpoint, two RL runs, each in a subprocess of its own (``DIR/seed-N/<arm>``),
   with the quickstart's RL settings (16 tasks a step, 8 samples each, lr 5e-4):
   - **uniform**: ``tasks.sampler.kind: uniform`` over fixed tasks, 600 per domain as math and code
     have (level 0), so that each domain is 1/22 of the draws;
   - **pool**: ``kind: pool``: easy / normal / hard pools across the mix (10% of each batch easy,
     10% hard, the rest normal), saturated and impossible tasks filtered (after 2 groups, back
     after 20 steps), the reasoning-gym domains as curricula starting at level 0 (window 8,
     raised at a 0.7 pass rate, lowered at 0.1);
3. every ``--eval-every`` steps each run samples the held-out tasks (``--eval-samples`` per task,
   8, at temperature 1, the same sampling seed for both arms, the training RNG set aside and
   restored): 40 math, 40 code, 4 per reasoning-gym domain (other seeds: held out). A run reaches
   the target at the first evaluation from which ``--hold`` evaluations in a row (2) have pass@1 at
   least ``--target``, and stops there, or after ``--max-steps``. (One evaluation is noisy: with 4
   samples per task, consecutive evaluations 10 steps apart moved by 0.048 on average, half the
   distance to the target, and one lucky evaluation counted as reaching it; the held target and
   twice the samples make a step count that says where the policy is, not where one draw was.)

Printed per seed: the start, each arm's RL steps and training wall time (the steps' own time, not
the evaluations') to the target, the ratios uniform / pool, and each run's zero-variance fraction
(groups drawn with no reward variance, of all drawn); then the mean and standard deviation over
seeds. The issue's target: at least 1.5x fewer steps with the pool, on every seed (exit 0 then,
else 1). A run that never reaches the target is shown as "> max-steps", its ratio as a lower
bound. Wall times are measured under whatever else runs on the machine (``uptime`` is printed).
This is a benchmark, not a test: a seed takes tens of minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("uniform", "pool")
RG = ("basic_arithmetic", "number_sequence", "spell_backward", "simple_equations", "complex_arithmetic", "lcm",
      "chain_sum", "count_primes", "count_bits", "coin_flip", "decimal_chain_sum", "products", "aiw",
      "calendar_arithmetic", "gcd", "fraction_simplification", "letter_counting", "prime_factorization",
      "decimal_arithmetic", "family_relationships")
"""Twenty reasoning-gym generators whose level-0 prompts are short (at most ~220 characters)."""
TARGET = 0.40
"""Held-out pass@1 over the mix's 160 tasks (40 math, 40 code, 80 reasoning-gym): math and code at
~0.80 with every reasoning-gym task failed. SFT starts near 0.29 (math and code ~0.58, as the
quickstart's SFT); the quickstart's RL takes math and code to ~0.98, a mix of ~0.49."""
EVAL_SAMPLES = 8
HOLD = 2


def recipe_text(seed: int, arm: str, demos: Path) -> str:
    """The seed's recipe for ``arm`` (the SFT run uses the uniform one)."""
    if arm == "pool":
        rg_train = "".join(f"    - {{generator: rg/{g}, curriculum: true, level: 0}}\n" for g in RG)
        sampler = ("  sampler:\n    kind: pool\n"
                   "    stratify: {easy_above: 0.9, hard_below: 0.1, easy_fraction: 0.1, hard_fraction: 0.1}\n"
                   "    filter: {after: 2, revisit_every: 20}\n"
                   "    curriculum: {window: 8, raise_above: 0.7, lower_below: 0.1, chunk: 32}\n")
    else:
        rg_train = "".join(f"    - {{generator: rg/{g}, n: 600, level: 0}}\n" for g in RG)
        sampler = "  sampler: {kind: uniform}\n"
    rg_eval = "".join(f"    - {{generator: rg/{g}, n: 4, level: 0, seed: {1000 + seed}}}\n" for g in RG)
    return f"""# posttrain bench curriculum, seed {seed}, {arm} (bench/curriculum.py)
seed: {seed}
stages: [sft, rl]
model: {{name: embedded, max_positions: 512}}
tasks:
  train:
    - {{generator: quickstart-math, n: 600}}
    - {{generator: quickstart-code, n: 600}}
{rg_train}  eval:
    - {{generator: quickstart-math, skip: 600, n: 40}}
    - {{generator: quickstart-code, skip: 600, n: 40}}
{rg_eval}  contamination: drop
{sampler}sft: {{demonstrations: {demos}, epochs: 40, batch_size: 32, lr: 0.003}}
rl: {{steps: 200, prompts_per_step: 16, group_size: 8, temperature: 1.0, max_new_tokens: 24, lr: 0.0005,
     checkpoint_every: 100000}}
eval: {{samples_per_task: {EVAL_SAMPLES}, temperature: 1.0, max_new_tokens: 24}}
"""


def prepare(seed_dir: Path, seed: int) -> None:
    """The seed's recipes and SFT demonstrations file (the scripted demonstrator's answers to the
    math and code training tasks, ``{"task_id", "response"}`` lines)."""
    from posttrain.config import load_yaml, parse_config
    from posttrain.tasks import generators, load_pools
    from posttrain.train.recipe import TasksConfig

    seed_dir.mkdir(parents=True, exist_ok=True)
    demos = seed_dir / "demos.jsonl"
    text = recipe_text(seed, "uniform", demos)
    if not demos.exists():
        (seed_dir / "probe.yaml").write_text(text)
        tasks = parse_config(TasksConfig, load_yaml(seed_dir / "probe.yaml")["tasks"], where="tasks")
        train, _ = load_pools(tasks.train, tasks.eval, seed=seed, contamination="drop")
        demo = generators.Demonstrator(error_rate=0.4, seed=seed)
        lines = [json.dumps({"task_id": t.id, "response": demo.respond(t)}) for t in train if demo.knows(t)]
        demos.write_text("".join(line + "\n" for line in lines))
        (seed_dir / "probe.yaml").unlink()
    for arm in ARMS:
        (seed_dir / f"recipe-{arm}.yaml").write_text(recipe_text(seed, arm, demos))


def run_sft(seed_dir: Path, threads: int | None) -> dict[str, Any]:
    """``posttrain run`` of the uniform recipe's SFT stage into ``seed_dir/sft`` (reused when finished)."""
    out = seed_dir / "sft"
    if not (out / "summary.json").exists():
        cmd = [sys.executable, "-m", "posttrain.cli", "run", str(seed_dir / "recipe-uniform.yaml"), "--out", str(out),
               "--set", "stages=[sft]", *(["--set", f"torch_threads={threads}"] if threads else []),
               *(["--resume"] if (out / "config.yaml").exists() else [])]
        with open(seed_dir / "sft.log", "w") as log:
            if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode:
                raise SystemExit(f"bench curriculum: SFT failed; see {seed_dir / 'sft.log'}")
    return json.loads((out / "summary.json").read_text())


class _Reached(Exception):
    """The held-out target was reached at this step (stops the RL loop)."""


def run_arm(seed_dir: Path, arm: str, *, max_steps: int, every: int, target: float, threads: int | None,
            hold: int = HOLD, samples: int = EVAL_SAMPLES) -> None:
    """One RL run from the seed's SFT checkpoint (in this process); writes ``seed_dir/arm/result.json``."""
    import torch

    from posttrain.cli import open_service
    from posttrain.cli.pipeline import fits_model, load_model, make_pools, sandbox_of, seed_everything
    from posttrain.evaluate.sources import runner_episodes
    from posttrain.train.grpo import train_grpo
    from posttrain.train.recipe import load_recipe, rl_sampler

    recipe = load_recipe(seed_dir / f"recipe-{arm}.yaml", [f"rl.steps={max_steps}"])
    torch.set_num_threads(threads or recipe.torch_threads or 1)
    seed_everything(recipe.seed)
    pools = make_pools(recipe)
    policy = load_model(recipe, seed_dir / "sft" / "checkpoints" / "sft")
    out = seed_dir / arm
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []

    def evaluate(step: int) -> float:
        with torch.random.fork_rng():  # the training RNG goes on as if nothing was sampled here
            records, _ = runner_episodes(policy, pools.eval, "single", n=samples, temperature=1.0,
                                         max_new_tokens=24, seed=10_000 + recipe.seed, stage="eval", max_turns=None,
                                         pool=sandbox_of(service), service=service)
        rates = {t.id: sum(r.outcome == "pass" for r in records if r.task_id == t.id) / samples for t in pools.eval}
        parts = {d: [rates[t.id] for t in pools.eval if (t.domain if not t.domain.startswith("rg/") else "rg") == d]
                 for d in ("math", "code", "rg")}
        row = {"step": step, "pass@1": sum(rates.values()) / len(rates),
               **{d: sum(v) / len(v) for d, v in parts.items() if v}}
        evals.append(row)
        print(f"{arm} step {step}: held-out pass@1 {row['pass@1']:.3f}", file=sys.stderr, flush=True)
        return row["pass@1"]

    above: list[int] = []  # the steps of the evaluations in a row at the target so far

    def held(step: int, rate: float) -> int | None:
        above[:] = [*above, step] if rate >= target else []
        return above[0] if len(above) >= hold else None

    def log(m: dict[str, float]) -> None:
        rows.append(m)
        done = int(m["step"]) + 1
        if done % every == 0 and (first := held(done, evaluate(done))) is not None:
            raise _Reached(first)

    reached = None
    with open_service(pools.domains) as service:
        sampler = rl_sampler(recipe, pools.train, pools.eval, fits=fits_model(policy, recipe.rl.max_new_tokens))
        reached = held(0, evaluate(0))
        if reached is None:
            try:
                train_grpo(policy, pools.train, service, recipe.rl, reward_weights=recipe.reward_weights, out=out,
                           seed=recipe.seed, log=log, sampler=sampler)
            except _Reached as e:
                reached = int(e.args[0])
    steps = reached if reached is not None else len(rows)
    result = {
        "arm": arm, "seed": recipe.seed, "target": target, "max_steps": max_steps, "eval_every": every,
        "hold": hold, "eval_samples": samples,
        "reached": reached, "steps_run": len(rows),
        "train_wall_s": sum(r["step_s"] for r in rows[:steps]),
        "zero_variance": (sum(r["zero_variance_drawn"] for r in rows[:steps]) / steps) if steps else None,
        "evals": evals, "load": os.getloadavg(),
    }
    (out / "result.json").write_text(json.dumps(result, indent=2))


def arm_result(seed_dir: Path, arm: str, args: argparse.Namespace) -> dict[str, Any]:
    path = seed_dir / arm / "result.json"
    if not path.exists():
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(seed_dir), "--arm", arm,
               f"--max-steps={args.max_steps}", f"--eval-every={args.eval_every}", f"--target={args.target}",
               f"--hold={args.hold}", f"--eval-samples={args.eval_samples}",
               *([f"--torch-threads={args.torch_threads}"] if args.torch_threads else [])]
        print(f"{seed_dir.name}: {arm} ...", file=sys.stderr, flush=True)
        with open(seed_dir / f"{arm}.log", "w") as log:
            if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode:
                raise SystemExit(f"bench curriculum: the {arm} run failed; see {seed_dir / f'{arm}.log'}")
    result = json.loads(path.read_text())
    ran = (result["target"], result["max_steps"], result["eval_every"], result.get("hold", 1), result.get("eval_samples", 4))
    if ran != (args.target, args.max_steps, args.eval_every, args.hold, args.eval_samples):
        raise SystemExit(f"bench curriculum: {path} was run with another --target, --max-steps, --eval-every, --hold "
                         f"or --eval-samples; remove it or pass the same values")
    return result


def _steps(r: dict[str, Any]) -> str:
    return str(r["reached"]) if r["reached"] is not None else f"> {r['steps_run']}"


def _ratio(u: dict[str, Any], p: dict[str, Any], key: str) -> tuple[float, str]:
    """uniform / pool of ``key`` ("steps" or "wall"); a lower bound (">") when uniform never reached."""
    if p["reached"] is None:
        return math.nan, "n/a (pool did not reach)"
    if key == "steps":
        a, b = (u["reached"] or u["steps_run"]), max(p["reached"], 1)
    else:
        a, b = u["train_wall_s"], max(p["train_wall_s"], 1e-9)
    value = a / b
    return value, f"{'> ' if u['reached'] is None else ''}{value:.2f}x"


def _mean_sd(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {sd:.2f}"


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser, check_out_dir, parse_seeds

    parser = bench_parser("curriculum", __doc__)
    parser.add_argument("--seeds", default="0,1,2", help="seeds: 0,1,2 or 0-4 (default 0,1,2)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-curriculum",
                        help="DIR/seed-N/{sft,uniform,pool} (finished parts are reused)")
    parser.add_argument("--max-steps", type=int, default=300, help="RL steps at most per run (default 300)")
    parser.add_argument("--eval-every", type=int, default=10, help="held-out evaluation every N steps (default 10)")
    parser.add_argument("--target", type=float, default=TARGET, help=f"held-out pass@1 target (default {TARGET})")
    parser.add_argument("--hold", type=int, default=HOLD,
                        help=f"evaluations in a row at the target that count as reaching it (default {HOLD})")
    parser.add_argument("--eval-samples", type=int, default=EVAL_SAMPLES,
                        help=f"samples per held-out task (default {EVAL_SAMPLES})")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch threads (default: the recipe's, 1)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_arm(args.worker, args.arm, max_steps=args.max_steps, every=args.eval_every, target=args.target,
                threads=args.torch_threads, hold=args.hold, samples=args.eval_samples)
        return 0
    try:
        seeds = parse_seeds(args.seeds)
        check_out_dir(args.out, "--out")
    except ValueError as e:
        parser.error(str(e))
    if min(args.max_steps, args.eval_every, args.hold, args.eval_samples, 1 if args.torch_threads is None else args.torch_threads) < 1 \
            or not 0 < args.target <= 1:
        parser.error("--max-steps, --eval-every, --hold, --eval-samples and --torch-threads must be >= 1, "
                     "--target in (0, 1]")
    t0 = time.perf_counter()
    rows = []
    for seed in seeds:
        seed_dir = args.out / f"seed-{seed}"
        prepare(seed_dir, seed)
        print(f"seed {seed}: SFT into {seed_dir / 'sft'} ...", file=sys.stderr, flush=True)
        sft = run_sft(seed_dir, args.torch_threads)
        u, p = (arm_result(seed_dir, arm, args) for arm in ARMS)
        rows.append((seed, sft["eval"]["sft"]["pass@1"], u, p))
    print(f"RL steps to held-out pass@1 >= {args.target} on {args.hold} evaluations in a row ({args.eval_samples} "
          f"samples a task; 22 domains: quickstart math + code, 20 reasoning-gym), "
          f"from the same SFT checkpoint per seed; runs in {args.out}")
    print("| seed | start (SFT eval; RL eval at 0) | uniform: steps, wall | pool: steps, wall | steps ratio | "
          "wall ratio | zero-variance uniform | zero-variance pool |")
    print("|---|---|---|---|---|---|---|---|")
    ratios, walls, holds = [], [], True
    for seed, start, u, p in rows:
        sr, st = _ratio(u, p, "steps")
        wr, wt = _ratio(u, p, "wall")
        ratios.append(sr)
        walls.append(wr)
        holds &= not math.isnan(sr) and sr >= 1.5
        print(f"| {seed} | {start:.3f}; {u['evals'][0]['pass@1']:.3f} | {_steps(u)}, {u['train_wall_s']:.0f} s | "
              f"{_steps(p)}, {p['train_wall_s']:.0f} s | {st} | {wt} | {u['zero_variance']:.2f} | "
              f"{p['zero_variance']:.2f} |")
    print(f"| mean ± sd | | | | {_mean_sd(ratios)} | {_mean_sd(walls)} | "
          f"{_mean_sd([u['zero_variance'] for _, _, u, _ in rows])} | {_mean_sd([p['zero_variance'] for *_, p in rows])} |")
    print(f"target (>= 1.5x fewer steps with the pool on every seed): {'holds' if holds else 'does NOT hold'}; "
          f"load average now {os.getloadavg()[0]:.1f}; {time.perf_counter() - t0:.0f} s")
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
