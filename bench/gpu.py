"""One prepared GPU run (one H200, inside 8 minutes): posttrain's GRPO step against TRL's on the GPU
baseline's model and workload, and the plain training step's MFU (reference/gpu-baseline.md).

    python bench/gpu.py [--wheels DIR] [--steps 4] [--out gpu.json]     # on the GPU host
    python bench/gpu.py --dry                                           # CPU-sized, the same code path

What it builds and runs (the baseline's method):
  tokenizer  byte-level BPE trained with ``tokenizers`` on generated text, vocabulary 8,192
  model      a random ``Qwen2`` of 119.6M parameters (hidden 768, 12 layers, 12 heads, MLP 3,072,
             tied embeddings), saved with ``save_pretrained`` and loaded from its path by each side
  step       8 prompts x 8 generations = 64 completions of at most 256 tokens per step, beta 0, bf16:
             ``bench/step.py``'s two sides -- posttrain ``train_grpo`` with ``FastSampler`` and TRL's
             ``GRPOTrainer`` (HF generation) -- each in its own process, CUDA synchronized around
             every timed step; completion tokens/s, seconds per step, time split, peak GPU memory
             (``torch.cuda.max_memory_allocated``). Precision: ours holds bf16 weights with fp32 master
             weights and moments in its optimizer (``train._optim``); TRL's ``bf16=True`` holds fp32
             weights under bf16 autocast: both step fp32 weights, compute in bf16
  MFU        ``policy_update`` on a batch of 16 x 1,024 tokens (every token scored, bf16, the trainers'
             optimizer: AdamW on fp32 master weights):
             6 x parameters x tokens / step time / 989 TFLOP/s (dense bf16, H200)

Goals (issue 25): >= 5x TRL's completion tokens/s (24k+ on this workload; stretch 100k) and >= 40% MFU.
``--wheels DIR``: installs the wheels of DIR first, offline (``make gpu-wheels`` downloads them into
.whl/ on a machine with the registry: TRL 1.16, datasets and its pins, math-verify, for CPython 3.12,
~56 MB; the H200 image has CUDA torch 2.11, transformers 5.17 and accelerate). The device run:

    python3 bench/gpu.py --wheels .whl --out $OUT/gpu.json     # with .whl carried beside the checkout ``--dry``: hidden 64, 2
layers, vocabulary 512, 2 prompts x 4 x 16 tokens, batch 2 x 64 for the MFU step, on the CPU in
fp32; tests/core/test_bench_speed.py runs it. No GPU was lent to the session that wrote this: the
figures in README come from the dry mode's shape only, not from an H200.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
PEAK_TFLOPS = 989.0
"""H200 dense bf16, the baseline's denominator."""


def build_model(where: Path, dry: bool) -> tuple[Path, int]:
    hidden, layers, heads = (64, 2, 4) if dry else (768, 12, 12)
    params = _load("step").build_qwen2(where, vocab=512 if dry else 8192, hidden=hidden, layers=layers, heads=heads)
    return where, params


def mfu(model_dir: Path, params: int, args: argparse.Namespace) -> dict[str, Any]:
    """``policy_update`` on a fully scored batch: tokens/s and MFU (6 N T / time / peak)."""
    import torch

    from posttrain.policy import load_policy
    from posttrain.train._optim import adamw
    from posttrain.train._step import LossSpec, PolicyBatch, policy_update

    device, dtype = ("cpu", torch.float32) if args.dry else ("cuda", torch.bfloat16)
    rows, length = (2, 64) if args.dry else (16, 1024)
    model = load_policy(model_dir, device=device, dtype=dtype).model
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, model.config.vocab_size, (rows, length), generator=g).to(device)
    ones = torch.ones(rows, length, device=device)
    batch = PolicyBatch(input_ids=ids, attention_mask=ones.long(), loss_mask=ones, old_logp=-5.0 * ones,
                        adv=torch.randn(rows, generator=g).to(device))
    opt = adamw(model.parameters(), lr=1e-5)  # the trainers' own: fp32 master weights for bf16 (train._optim)

    def step() -> None:
        policy_update(model, opt, batch, LossSpec(), micro_batch_size=rows, max_grad_norm=1.0)
        if device == "cuda":
            torch.cuda.synchronize()

    step()
    n = 2 if args.dry else 10
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    dt = (time.perf_counter() - t0) / n
    tokens = rows * length
    return {"step_s": dt, "tokens_per_s": tokens / dt, "params": params,
            "mfu": 6 * params * tokens / dt / (PEAK_TFLOPS * 1e12)}


def install_wheels(where: Path) -> None:
    """Install every wheel of ``where`` (``make gpu-wheels``: TRL, datasets and its pins, math-verify,
    for CPython 3.12), offline and as they are: the host's image has the rest (CUDA torch,
    transformers, accelerate, numpy, pandas, ...), and no registry to resolve against."""
    wheels = sorted(str(w) for w in where.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"bench gpu: --wheels {where}: no wheels there (make gpu-wheels)")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", *wheels]
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu.py", description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="CPU-sized run of the same code path")
    parser.add_argument("--wheels", type=Path, help="a directory of wheels to install TRL from (offline)")
    parser.add_argument("--steps", type=int, default=4, help="timed GRPO steps per side (after 1 warm-up)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: expected an integer >= 1")
    if args.wheels is not None:
        if not args.wheels.is_dir():
            parser.error(f"--wheels {args.wheels}: not a directory")
        install_wheels(args.wheels)
    step = _load("step")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        model_dir, params = build_model(Path(d) / "model", args.dry)
        shape = ["--prompts=2", "--group=4", "--new=16"] if args.dry else ["--prompts=8", "--group=8", "--new=256"]
        device = ["--device=cpu", "--dtype=fp32"] if args.dry else ["--device=cuda", "--dtype=bf16"]
        common = [f"--steps={args.steps}", "--threads=0", "--sampler=fast", f"--model={model_dir}", *shape, *device]
        sides = {which: step._spawn(which, common) for which in ("ours", "trl")}
        figures = {"params": params, "grpo": sides, "mfu": mfu(model_dir, params, args)}
    figures["wall_s"] = time.perf_counter() - t_start
    ours, trl, m = sides["ours"], sides["trl"], figures["mfu"]
    where = "CPU (dry run: not the baseline's scale)" if args.dry else "GPU"
    print(f"bench gpu on {where}: Qwen2 {params / 1e6:.1f}M parameters; GRPO {' '.join(shape)}, {args.steps} timed steps")
    for name, r in (("posttrain", ours), ("TRL", trl)):
        mem = f"peak GPU {r['gpu_peak_gib']:.1f} GiB" if r["gpu_peak_gib"] is not None else f"peak RSS +{r['peak_delta_mib']:.0f} MiB"
        print(f"  {name:<10} {r['tokens_per_s']:10.0f} completion tok/s  {r['step_s']:6.2f} s/step  "
              f"(generate {r['gen_s'] / r['wall_s']:.0%}, update {r['update_s'] / r['wall_s']:.0%})  {mem}")
    print(f"  ours / TRL = {ours['tokens_per_s'] / max(trl['tokens_per_s'], 1e-9):.2f}x (goal >= 5x)")
    print(f"  training step: {m['tokens_per_s']:.0f} tokens/s, {m['step_s'] * 1000:.1f} ms, MFU {m['mfu']:.1%} "
          f"of {PEAK_TFLOPS:.0f} TFLOP/s (goal >= 40%; meaningful on the H200 only)")
    print(f"  whole run {figures['wall_s']:.0f} s (budget 480 s on the H200)")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))
    return 0


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(main())
