"""GRPO update-step throughput and peak memory: posttrain's ``policy_update`` vs TRL's GRPOTrainer.

    python bench/train.py [--steps 5] [--batch 16] [--group 8] [--prompt-len 64] [--completion-len 64]
                          [--hidden 64] [--layers 2] [--vocab 4096] [--repeats 1] [--threads 1]

Both sides train the same randomly initialized Qwen2 model (same seed) on the same fixed
GRPO-shaped batch (``batch / group`` prompts, each with ``group`` completions; random token ids,
random advantages, behaviour and reference log-probs), on the CPU, in fp32, fused AdamW (TRL's
default optimizer), grad-norm clip 1.0, KL coefficient 0.04 (k3), TRL's default
``loss_type="dapo"`` (= our ``token_mean`` with a global token count), one micro-batch.

What is timed, per optimizer step (one warm-up step excluded):
  (a) ours: ``posttrain.train._step.policy_update(model, opt, batch, spec, ...)``: forward,
      loss, backward, clip, ``optimizer.step()``; it computes each group's shared prompt once
      (one packed row per group, exact) -- the main source of its speed on GRPO batches;
  (b) TRL:  ``trainer.training_step(model, inputs, num_items)`` (its ``compute_loss`` =
      ``_compute_loss`` + accelerate backward) + ``accelerator.clip_grad_norm_`` +
      ``optimizer.step()`` + ``lr_scheduler.step()`` + ``zero_grad``, i.e. the body of
      ``Trainer``'s inner loop. Generation is bypassed: ``_prepare_inputs`` returns the fixed
      batch. Generation, rewards and reference log-probs are *not* timed on either side.

TRL runs twice: with GRPOConfig's default ``gradient_checkpointing=True`` (recomputes activations:
less memory, more time) and with it off; the ratios compare us with the *faster* TRL for
throughput and with the *leaner* TRL for memory. Each run is its own subprocess, one after the
other (``--repeats`` alternating rounds, best throughput kept). Peak memory is the growth of
``ru_maxrss`` from just before the first step to the end (weights, imports and the trainer object
are excluded; gradients, optimizer states and activations are included); the absolute
``ru_maxrss`` is printed too. Tokens = completion tokens trained on; tok/cpu-s divides by the
process's CPU time instead of wall time (steadier when other jobs share the machine).
``--threads 1`` (default) keeps OpenMP spin-waiting from distorting both sides when other jobs
share the cores; 0 uses torch's default. Absolute numbers depend on the machine and its load:
compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _model_and_batch(args: argparse.Namespace):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 3,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=args.prompt_len + args.completion_len + 8,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    g = torch.Generator().manual_seed(1)
    b, p, c = args.batch, args.prompt_len, args.completion_len
    if b % args.group:
        raise SystemExit(f"--batch {b} must be a multiple of --group {args.group}")
    # GRPO shape: b // group prompts, each with `group` sampled completions
    prompt_ids = torch.randint(4, args.vocab, (b // args.group, p), generator=g).repeat_interleave(
        args.group, 0
    )
    completion_ids = torch.randint(4, args.vocab, (b, c), generator=g)
    lengths = torch.randint(c // 2, c + 1, (b,), generator=g)
    completion_mask = (torch.arange(c)[None] < lengths[:, None]).long()
    completion_ids = completion_ids * completion_mask
    old = -5.0 + 0.3 * torch.randn(b, c, generator=g)
    ref = old + 0.1 * torch.randn(b, c, generator=g)
    adv = torch.randn(b, generator=g)
    return (
        model,
        prompt_ids,
        completion_ids,
        completion_mask,
        old * completion_mask,
        ref * completion_mask,
        adv,
    )


def _run_ours(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from posttrain.train._step import LossSpec, PolicyBatch, policy_update

    model, p_ids, c_ids, c_mask, old, ref, adv = _model_and_batch(args)
    zeros = torch.zeros_like(p_ids, dtype=torch.float32)
    batch = PolicyBatch(
        input_ids=torch.cat([p_ids, c_ids], 1),
        attention_mask=torch.cat([torch.ones_like(p_ids), c_mask], 1),
        loss_mask=torch.cat([zeros, c_mask.float()], 1),
        old_logp=torch.cat([zeros, old], 1),
        adv=adv,
        ref_logp=torch.cat([zeros, ref], 1),
        group=torch.arange(p_ids.shape[0]) // args.group,  # rows of one prompt, as GRPO carries them
    )
    spec = LossSpec(clip_low=0.2, clip_high=0.2, agg="token_mean", kl_coef=0.04, kl_kind="k3")
    # TRL's default optimizer (transformers "adamw_torch_fused", weight decay 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0, fused=True)

    def step() -> None:
        policy_update(model, opt, batch, spec, micro_batch_size=args.batch, max_grad_norm=1.0)

    return _measure(step, float(c_mask.sum()), args.steps)


def _run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from posttrain.policy import build_char_tokenizer

    model, p_ids, c_ids, c_mask, old, ref, adv = _model_and_batch(args)
    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=args.batch,
            num_generations=args.batch,
            max_completion_length=args.completion_len,
            beta=0.04,
            loss_type="dapo",
            learning_rate=1e-5,
            max_grad_norm=1.0,
            use_cpu=True,
            bf16=False,
            report_to=[],
            max_steps=args.steps + 1,
            gradient_checkpointing=not args.trl_no_gc,
        )
        model.save_pretrained(out)  # TRL loads the policy and (beta > 0) its reference model from a path
        del model
        trainer = GRPOTrainer(
            model=out,
            reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            args=config,
            train_dataset=Dataset.from_dict({"prompt": ["a"] * args.batch}),
            processing_class=build_char_tokenizer(),
        )
        trainer.create_optimizer_and_scheduler(num_training_steps=args.steps + 1)
        trainer.current_gradient_accumulation_steps = 1
        num_items = c_mask.sum()
        inputs = {
            "prompt_ids": p_ids,
            "prompt_mask": torch.ones_like(p_ids),
            "completion_ids": c_ids,
            "completion_mask": c_mask,
            "advantages": adv,
            "old_per_token_logps": old,
            "ref_per_token_logps": ref,
            "num_items_in_batch": num_items,
        }
        trainer._prepare_inputs = lambda batch: batch  # bypass generation: train on the fixed batch
        tmodel = trainer.model
        tmodel.train()

        def step() -> None:
            trainer.training_step(tmodel, inputs, num_items)
            trainer.accelerator.clip_grad_norm_(tmodel.parameters(), 1.0)
            trainer.optimizer.step()
            trainer.lr_scheduler.step()
            tmodel.zero_grad()

        return _measure(step, float(num_items), args.steps)


def _measure(step, tokens_per_step: float, steps: int) -> dict[str, Any]:
    import torch

    base = _maxrss_mib()
    step()  # warm-up: allocates gradients and optimizer states (counted in the peak, not in the time)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "tokens_per_s": tokens_per_step * steps / wall,
        "tokens_per_cpu_s": tokens_per_step * steps / cpu,
        "step_s": wall / steps,
        "peak_delta_mib": _maxrss_mib() - base,
        "peak_abs_mib": _maxrss_mib(),
        "threads": torch.get_num_threads(),
    }


def _spawn(which: str, argv: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", which, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench worker {which} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    parser = bench_parser("train", __doc__)
    parser.add_argument(
        "--steps", type=int, default=5, help="timed optimizer steps per side (after 1 warm-up)"
    )
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (GRPO group size G)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--completion-len", type=int, default=64, help="max completion tokens (lengths vary)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=1, help="alternating rounds per side; best kept")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads per side (0: torch's default)"
    )
    parser.add_argument("--worker", choices=["ours", "trl", "trl_no_gc"], help=argparse.SUPPRESS)
    parser.add_argument("--trl-no-gc", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.steps, args.batch, args.prompt_len, args.completion_len, args.layers, args.repeats) < 1 \
            or args.group < 2 or args.hidden < 8 or args.vocab < 16 or args.threads < 0:
        parser.error("--steps, --batch, --prompt-len, --completion-len, --layers and --repeats must be >= 1, "
                     "--group >= 2, --hidden >= 8, --vocab >= 16 and --threads >= 0")
    if args.worker:
        args.trl_no_gc = args.worker == "trl_no_gc"
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        result = (_run_ours if args.worker == "ours" else _run_trl)(args)
        print(json.dumps(result))
        return 0
    passthrough = [
        f"--steps={args.steps}",
        f"--batch={args.batch}",
        f"--group={args.group}",
        f"--prompt-len={args.prompt_len}",
        f"--completion-len={args.completion_len}",
        f"--hidden={args.hidden}",
        f"--layers={args.layers}",
        f"--vocab={args.vocab}",
        f"--threads={args.threads}",
    ]
    best: dict[str, dict[str, Any]] = {}
    for _ in range(args.repeats):
        for which in ("ours", "trl", "trl_no_gc"):
            r = _spawn(which, passthrough)
            if which not in best or r["tokens_per_s"] > best[which]["tokens_per_s"]:
                best[which] = r
    ours = best["ours"]
    print(
        f"GRPO update step, CPU fp32, Qwen2 hidden={args.hidden} layers={args.layers} vocab={args.vocab}, "
        f"batch {args.batch} = {args.batch // args.group} prompts x G={args.group} "
        f"({args.prompt_len} prompt + {args.completion_len // 2}..{args.completion_len} completion tokens), "
        f"{args.steps} timed steps, {ours['threads']} threads, best of {args.repeats}"
    )
    names = {
        "ours": "posttrain policy_update",
        "trl": "TRL (default: grad ckpt)",
        "trl_no_gc": "TRL (grad ckpt off)",
    }
    for which, r in best.items():
        print(
            f"  {names[which]:25s} {r['tokens_per_s']:8.1f} tok/s {r['tokens_per_cpu_s']:8.1f} tok/cpu-s "
            f"{r['step_s'] * 1000:8.1f} ms/step  "
            f"peak RSS +{r['peak_delta_mib']:.1f} MiB (abs {r['peak_abs_mib']:.0f} MiB)"
        )
    fastest = max(best["trl"]["tokens_per_s"], best["trl_no_gc"]["tokens_per_s"])
    leanest = min(best["trl"]["peak_delta_mib"], best["trl_no_gc"]["peak_delta_mib"])
    fastest_cpu = max(best["trl"]["tokens_per_cpu_s"], best["trl_no_gc"]["tokens_per_cpu_s"])
    print(
        f"  throughput ours / fastest TRL = {ours['tokens_per_s'] / fastest:.2f}x (target >= 1.5x); "
        f"peak-memory growth ours / leanest TRL = {ours['peak_delta_mib'] / max(leanest, 1e-9):.2f}x (target <= 1)"
    )
    print(
        f"  per CPU-second (less sensitive to other load on a shared machine): ours / best TRL = "
        f"{ours['tokens_per_cpu_s'] / fastest_cpu:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
