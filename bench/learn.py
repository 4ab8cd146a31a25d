"""Does posttrain's GRPO learn what TRL's GRPOTrainer learns, from the same SFT checkpoint?

    posttrain bench learn [--seeds 0,1] [--runs DIR] [--recipe FILE] [--set KEY=VALUE ...]
                          [--torch-threads N] [--buckets 10]

For each seed:
  ours  the recipe (default: the embedded quickstart) runs as ``posttrain run`` into ``DIR/seed-N``
        (SFT -> GRPO -> held-out eval); a finished run there is reused, so ``--runs`` may point at
        the runs of ``posttrain bench quickstart``.
  TRL   ``trl.GRPOTrainer`` starts from that run's SFT checkpoint (``checkpoints/sft``) on the same
        training tasks, with the same verifiers as the reward (1 pass / 0 fail / None = infra
        error), and the recipe's RL settings mapped one to one: ``prompts_per_step * group_size``
        completions per step, one optimizer step per generation batch, ``group_size`` generations,
        ``max_new_tokens``, temperature, top_k 0 / top_p 1, lr with a constant schedule after a
        ``steps // 20`` warmup, AdamW without weight decay, grad clip, PPO clip ``clip_low`` /
        ``clip_high``, ``loss_type="dapo"`` (= our ``token_mean``), ``scale_rewards="group"``, beta =
        ``kl_coef``, fp32 on the CPU. Prompts are given as ``<bos>`` + prompt text so that TRL's
        tokenization equals ``Policy.encode_prompt`` (checked for every task). Then the TRL model is
        evaluated on the held-out split exactly as the recipe evaluates RL (same samples per task,
        temperature and sampling seeds) into ``DIR/seed-N/trl``.

Printed: the mean training reward per block of steps (the reward curves side by side) and the
fraction of groups with zero reward variance, then held-out pass@1 (95% interval) of SFT, ours and
TRL per seed. Known differences that remain: TRL's first step runs at lr 0 (HF warmup starts at 0,
ours at lr / warmup); its advantage epsilon is 1e-4 (ours 1e-6); it draws prompts with its own
sampler. Each seed takes minutes on a CPU; this is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from posttrain.cli.bench import bench_parser, check_out_dir, load_bench, parse_seeds

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


# --- the TRL side (runs in a subprocess: its own threads, imports and RNG state)


def run_trl(run: Path, threads: int | None, workers: int | None) -> None:
    """GRPOTrainer from ``run``'s SFT checkpoint with ``run``'s recipe; writes ``run/trl``."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from posttrain.cli import open_service
    from posttrain.cli.pipeline import evaluate_policy, make_pools, seed_everything
    from posttrain.evaluate.runner import compact
    from posttrain.policy import load_policy
    from posttrain.sandbox import usable_cpus
    from posttrain.train.recipe import load_recipe

    recipe = load_recipe(run / "config.yaml")
    rl = recipe.rl
    if rl.algorithm != "grpo" or rl.advantage != "grpo" or rl.policy_loss != "ppo_clip" or rl.loss_agg != "token_mean":
        raise SystemExit("bench learn: the TRL mapping covers rl.algorithm grpo, advantage grpo, "
                         "policy_loss ppo_clip, loss_agg token_mean")
    if rl.dynamic_sampling:
        print("bench learn: TRL has no dynamic sampling; its side runs without it", file=sys.stderr)
    threads = threads or recipe.torch_threads
    if threads:
        torch.set_num_threads(threads)
    seed_everything(recipe.seed)
    pools = make_pools(recipe)
    sft = run / "checkpoints" / "sft"
    out = run / "trl"
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(sft))
    policy = load_policy(sft)
    prompts = []
    for t in pools.train:
        text = t.prompt
        if tok(text=[text])["input_ids"][0] != policy.encode_prompt(text):
            text = tok.bos_token + text
        if tok(text=[text])["input_ids"][0] != policy.encode_prompt(t.prompt):
            raise SystemExit(f"bench learn: task {t.id}: cannot make TRL tokenize the prompt as posttrain does")
        prompts.append(text)
    by_id = {t.id: t for t in pools.train}
    workers = workers or recipe.sandbox.workers or usable_cpus()
    log_rows: list[dict[str, Any]] = []
    infra = [0]  # TRL sums rewards with nansum, so a None (infra error) counts as 0 on its side: counted
    with open_service(recipe.tasks.domains, size=workers) as service:

        def reward(completions: list[str], task_id: list[str], **_: Any) -> list[float | None]:
            verdicts = service.verify_pairs([(by_id[i], c) for i, c in zip(task_id, completions, strict=True)])
            infra[0] += sum(v.is_infra_error for v in verdicts)
            return [None if v.is_infra_error else float(v.passed) for v in verdicts]

        config = GRPOConfig(
            output_dir=str(out / "trainer"), per_device_train_batch_size=rl.prompts_per_step * rl.group_size,
            gradient_accumulation_steps=1, num_generations=rl.group_size, max_completion_length=rl.max_new_tokens,
            temperature=rl.temperature, top_k=0, top_p=1.0, learning_rate=rl.lr,
            lr_scheduler_type="constant_with_warmup", warmup_steps=max(1, rl.steps // 20), weight_decay=0.0,
            max_grad_norm=rl.max_grad_norm, epsilon=rl.clip_low, epsilon_high=rl.clip_high, loss_type="dapo",
            scale_rewards="group", beta=rl.kl_coef, max_steps=rl.steps, seed=recipe.seed, use_cpu=True,
            bf16=False, report_to=[], logging_steps=1, save_strategy="no", gradient_checkpointing=False,
            disable_tqdm=True,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = GRPOTrainer(model=str(sft), reward_funcs=[reward], args=config, processing_class=tok,
                                  train_dataset=Dataset.from_dict({"prompt": prompts,
                                                                   "task_id": [t.id for t in pools.train]}))
            trainer.train()
        for entry in trainer.state.log_history:
            if "reward" in entry:
                log_rows.append({"step": int(entry["step"]) - 1, "reward_mean": entry["reward"],
                                 "frac_zero_std": entry.get("frac_reward_zero_std", math.nan),
                                 "entropy": entry.get("entropy", math.nan)})
        trainer.save_model(str(out / "model"))
        tok.save_pretrained(str(out / "model"))
        trained = load_policy(out / "model")
        summary = evaluate_policy("trl", trained, pools.eval, service, recipe, out)
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log_rows))
    (out / "summary.json").write_text(json.dumps({"eval": {"trl": compact(summary) | {
        "pass@1": summary["pass@1"], "ci": summary["ci"]}}, "trl_infra_errors_scored_0": infra[0]}, indent=2))
    if infra[0]:
        print(f"bench learn: {infra[0]} TRL reward(s) were infra errors, which TRL counts as 0", file=sys.stderr)


# --- the driver


def ours_curve(run: Path) -> list[dict[str, float]]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{"step": r["step"], "reward_mean": r["reward_mean"], "frac_zero_std": r["frac_zero_std"]}
            for r in rows if r["stage"] == "rl"]


def trl_curve(run: Path) -> list[dict[str, float]]:
    return [json.loads(x) for x in (run / "trl" / "metrics.jsonl").read_text().splitlines()]


def blocks(curve: list[dict[str, float]], key: str, n: int) -> list[float]:
    """Mean of ``key`` over ``n`` consecutive blocks of steps."""
    size = max(1, math.ceil(len(curve) / n))
    return [sum(r[key] for r in curve[i : i + size]) / len(curve[i : i + size]) for i in range(0, len(curve), size)]


def pass_cell(e: dict[str, Any]) -> str:
    lo, hi = e["ci"]["pass@1"]
    return f"{e['pass@1']:.3f} [{lo:.3f}, {hi:.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("learn", __doc__)
    parser.add_argument("--seeds", default="0,1", help="seeds: 0,1,2 or 0-4 (default 0,1)")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "bench-learn",
                        help="run directories DIR/seed-N (finished runs are reused; "
                             "runs/bench-quickstart works)")
    parser.add_argument("--recipe", type=Path, default=ROOT / "posttrain" / "configs" / "quickstart.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe override for runs this benchmark starts (repeatable)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch threads for both sides (default: the recipe's torch_threads)")
    parser.add_argument("--workers", type=int, default=None, help="sandbox slots for TRL's rewards")
    parser.add_argument("--buckets", type=int, default=10, help="blocks of steps in the printed curves")
    parser.add_argument("--worker-run", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.buckets < 1 or (args.workers is not None and args.workers < 1):
        parser.error("--buckets and --workers must be >= 1")
    if args.worker_run:
        run_trl(args.worker_run, args.torch_threads, args.workers)
        return 0
    qs = load_bench("quickstart")
    try:
        seeds = parse_seeds(args.seeds)
        check_out_dir(args.runs, "--runs")
    except ValueError as e:
        parser.error(str(e))
    if args.torch_threads is not None and args.torch_threads < 1:
        parser.error(f"--torch-threads {args.torch_threads}: expected an integer >= 1")
    if not args.recipe.is_file():
        parser.error(f"--recipe {args.recipe}: file not found")
    results = []
    for seed in seeds:
        run = args.runs / f"seed-{seed}"
        print(f"seed {seed}: ours into {run} ...", file=sys.stderr, flush=True)
        ours = qs.run_seed(args.recipe, run, seed, args.torch_threads, args.overrides)
        if not (run / "trl" / "summary.json").exists():
            print(f"seed {seed}: TRL GRPOTrainer into {run / 'trl'} ...", file=sys.stderr, flush=True)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker-run", str(run)]
            cmd += [f"--torch-threads={args.torch_threads}"] if args.torch_threads else []
            cmd += [f"--workers={args.workers}"] if args.workers else []
            with open(run / "trl.log", "w") as log:
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
            if proc.returncode != 0:
                print(f"bench learn: TRL failed on seed {seed} (exit {proc.returncode}); see {run / 'trl.log'}",
                      file=sys.stderr)
                return 1
        trl = json.loads((run / "trl" / "summary.json").read_text())["eval"]["trl"]
        results.append((seed, ours, trl, ours_curve(run), trl_curve(run)))
    print(f"GRPO from the same SFT checkpoint: posttrain vs TRL {_trl_version()} GRPOTrainer; runs in {args.runs}")
    for seed, _, _, c_ours, c_trl in results:
        n = len(c_ours)
        print(f"\nseed {seed}: mean training reward per block of {max(1, math.ceil(n / args.buckets))} steps "
              f"(frac of groups with zero reward variance)")
        for name, curve in (("posttrain", c_ours), ("TRL", c_trl)):
            r, z = blocks(curve, "reward_mean", args.buckets), blocks(curve, "frac_zero_std", args.buckets)
            print(f"  {name:<9} " + " ".join(f"{a:.2f}({b:.2f})" for a, b in zip(r, z, strict=True)))
    print(f"\nheld-out pass@1 (95% interval), {len(results)} seeds")
    print(f"{'seed':>4}  {'SFT (start)':<22} {'posttrain GRPO':<22} {'TRL GRPOTrainer':<22}")
    for seed, ours, trl, _, _ in results:
        print(f"{seed:>4}  {pass_cell(ours['eval']['sft']):<22} {pass_cell(ours['eval']['rl']):<22} {pass_cell(trl):<22}")
    mean = [sum(x) / len(x) for x in zip(*[(o["eval"]["sft"]["pass@1"], o["eval"]["rl"]["pass@1"], t["pass@1"])
                                          for _, o, t, _, _ in results], strict=True)]
    print(f"mean  {mean[0]:<22.3f} {mean[1]:<22.3f} {mean[2]:<22.3f}")
    return 0


def _trl_version() -> str:
    try:
        import trl
    except ImportError:
        return "(not installed)"
    return trl.__version__


if __name__ == "__main__":
    sys.exit(main())
