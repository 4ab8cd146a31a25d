"""One prepared GPU run (one H200, ~3 minutes): posttrain's GRPO step against TRL's on the GPU
baseline's model and workload, generation alone on its batch, and the plain training step's MFU
(reference/gpu-baseline.md).

    python bench/gpu.py [--wheels DIR] [--steps 4] [--cb] [--out gpu.json]     # on the GPU host
    python bench/gpu.py --dry                                                  # CPU-sized, the same code path

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
Measured on one H200, 2026-12-04 (README): ours 18,169 vs TRL 3,733 completion tok/s (4.87x),
generation alone 31,856 tok/s (6.38x transformers' ``generate``), MFU 15.9%.
``--wheels DIR``: installs the wheels of DIR first, offline (``make gpu-wheels`` downloads them into
.whl/ on a machine with the registry: TRL 1.16, datasets and its pins, math-verify, for CPython 3.12,
~56 MB; the H200 image has CUDA torch 2.11, transformers 5.17 and accelerate; posttrain itself is
imported from this checkout). The device run, with .whl carried beside the checkout:

    python3 bench/gpu.py --wheels .whl --out $OUT/gpu.json

Each part (MFU, generation, the GRPO step) runs on its own: one that fails is printed and recorded
and the others still run (exit 1), and the figures so far are written after each. ``--dry``: hidden
64, 2 layers, vocabulary 512, 2 prompts x 4 x 16 tokens, batch 2 x 64 for the MFU step, on the CPU in
fp32; tests/core/test_bench_speed.py runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
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
    opt_s = None
    try:  # the optimizer's share: its step alone, on zero gradients of the dtype backward gives it
        for p in model.parameters():
            p.grad = torch.zeros_like(p, dtype=getattr(p, "grad_dtype", None) or p.dtype)
        t0 = time.perf_counter()
        for _ in range(n):
            opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        opt_s = (time.perf_counter() - t0) / n
    except RuntimeError as e:
        print(f"bench gpu: the optimizer alone could not be timed: {e}", file=sys.stderr)
    tokens = rows * length
    return {"step_s": dt, "optimizer_s": opt_s, "tokens_per_s": tokens / dt, "params": params,
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


def generation(model_dir: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """``bench generate``'s backends on the baseline's model and batch (8 prompts x 8, 256 new tokens,
    temperature 1): transformers' ``generate`` (the baseline's 845 tokens/s at batch 64), FastSampler
    as training runs it (on a GPU: a CUDA graph per decode step), the same decoding eagerly
    (``static=False``), with prompt-lookup speculation, with rollout reuse, and (``--cb``)
    transformers' continuous batching (770 tokens/s on the H200, 2026-12-04: 0.17x ``generate``,
    with 118 GiB of KV cache reserved). One warm-up call each, then one timed call, CUDA
    synchronized; peak GPU memory per backend."""
    import torch

    from posttrain.policy import FastSampler, LocalSampler, SamplingParams, SpecConfig, load_policy

    gen = _load("generate")
    device, dtype = ("cpu", torch.float32) if args.dry else ("cuda", torch.bfloat16)
    policy = load_policy(model_dir, device=device, dtype=dtype)
    model, tok = policy.model, policy.tokenizer
    n, group, new = (2, 4, 16) if args.dry else (8, 8, 256)
    prompts = gen.prompts_of(policy, n, group)
    params = SamplingParams(temperature=1.0, max_new_tokens=new, seed=0)
    previous = [g.completion_ids for g in FastSampler(model, tok).generate(
        prompts, SamplingParams(temperature=1.0, max_new_tokens=new, seed=1))]
    fast, eager = FastSampler(model, tok), FastSampler(model, tok, static=False)
    ngram, reuse = FastSampler(model, tok, speculation=SpecConfig()), FastSampler(model, tok)
    backends = {
        "local": lambda: LocalSampler(model, tok).generate(prompts, params),
        "fast": lambda: fast.generate(prompts, params),
        "fast-eager": lambda: eager.generate(prompts, params),
        "fast+ngram": lambda: ngram.generate(prompts, params),
        "fast+reuse": lambda: reuse.generate(prompts, params, previous=previous),
    }
    if args.cb:
        backends["hf-cb"] = lambda: gen.continuous_batching(model, tok, prompts, params)
    stats = {"fast+ngram": ngram.stats, "fast+reuse": reuse.stats}
    rows = []
    for name, call in backends.items():
        try:
            call()  # warm-up: kernels, allocator, caches
            _sync(device)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            gens = call()
            _sync(device)
            wall = time.perf_counter() - t0
        except Exception as e:  # one backend's failure is its own row, never the others'
            rows.append({"backend": name, "error": f"{type(e).__name__}: {e}"[:500]})
            continue
        tokens = sum(len(g.completion_ids) for g in gens)
        st = stats.get(name)
        rows.append({"backend": name, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                     "acceptance": st.acceptance if st is not None and st.drafted else None,
                     "gpu_peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    _put_checkout_on_path()  # (before posttrain's first import: the GPU host has no install of it)
    from posttrain.cli.bench import bench_parser, check_out_file

    parser = bench_parser("gpu", __doc__)
    parser.add_argument("--dry", action="store_true", help="CPU-sized run of the same code path")
    parser.add_argument("--wheels", type=Path, help="a directory of wheels to install TRL from (offline)")
    parser.add_argument("--steps", type=int, default=4, help="timed GRPO steps per side (after 1 warm-up)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--cb", action="store_true", help="also time transformers' continuous batching")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: expected an integer >= 1")
    if args.out:
        try:
            check_out_file(args.out, "--out")
        except ValueError as e:
            parser.error(str(e))
    if args.wheels is not None:
        if not args.wheels.is_dir():
            parser.error(f"--wheels {args.wheels}: not a directory")
        install_wheels(args.wheels)
    step = _load("step")
    t_start = time.perf_counter()
    figures: dict[str, Any] = {}
    failed: list[str] = []

    def section(name: str, fn) -> Any:
        """Each part on its own: a failure is printed and recorded, the other parts still run, and
        the figures so far are written after each (a run cut short keeps what it measured)."""
        t0 = time.perf_counter()
        try:
            figures[name] = fn()
        except BaseException as e:  # SystemExit too: a side's worker that failed
            failed.append(name)
            figures[name] = {"error": f"{type(e).__name__}: {e}"[-3000:]}
            print(f"bench gpu: {name} failed: {figures[name]['error']}", file=sys.stderr)
        figures.setdefault("section_s", {})[name] = time.perf_counter() - t0
        if args.out:
            args.out.write_text(json.dumps(figures, indent=2))
        return figures[name]

    with tempfile.TemporaryDirectory() as d:
        model_dir, params = build_model(Path(d) / "model", args.dry)
        figures["params"] = params
        shape = ["--prompts=2", "--group=4", "--new=16"] if args.dry else ["--prompts=8", "--group=8", "--new=256"]
        device = ["--device=cpu", "--dtype=fp32"] if args.dry else ["--device=cuda", "--dtype=bf16"]
        common = [f"--steps={args.steps}", "--threads=0", "--sampler=fast", f"--model={model_dir}", *shape, *device]
        section("mfu", lambda: mfu(model_dir, params, args))
        section("generate", lambda: generation(model_dir, args))
        section("grpo", lambda: {which: step._spawn(which, common) for which in ("ours", "trl")})
    figures["wall_s"] = time.perf_counter() - t_start
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))
    report(figures, params, shape, args)
    return 1 if failed else 0


def report(figures: dict[str, Any], params: int, shape: list[str], args: argparse.Namespace) -> None:
    where = "CPU (dry run: not the baseline's scale)" if args.dry else "GPU"
    print(f"bench gpu on {where}: Qwen2 {params / 1e6:.1f}M parameters; GRPO {' '.join(shape)}, {args.steps} timed steps")
    grpo = figures.get("grpo", {})
    if "ours" in grpo:
        ours, trl = grpo["ours"], grpo["trl"]
        for name, r in (("posttrain", ours), ("TRL", trl)):
            mem = f"peak GPU {r['gpu_peak_gib']:.1f} GiB" if r["gpu_peak_gib"] is not None else f"peak RSS +{r['peak_delta_mib']:.0f} MiB"
            print(f"  {name:<10} {r['tokens_per_s']:10.0f} completion tok/s  {r['step_s']:6.2f} s/step  "
                  f"(generate {r['gen_s'] / r['wall_s']:.0%}, verify {r['verify_s'] / r['wall_s']:.0%}, "
                  f"update {r['update_s'] / r['wall_s']:.0%})  {mem}")
        print(f"  ours / TRL = {ours['tokens_per_s'] / max(trl['tokens_per_s'], 1e-9):.2f}x (goal >= 5x)")
    rows = figures.get("generate")
    if isinstance(rows, list):
        base = next((r["tokens_per_s"] for r in rows if r["backend"] == "local" and "error" not in r), None)
        print("  generation alone (the same batch):")
        for r in rows:
            if "error" in r:
                print(f"    {r['backend']:<11} failed: {r['error']}")
                continue
            acc = f", acceptance {r['acceptance']:.0%}" if r["acceptance"] is not None else ""
            ratio = f"  x{r['tokens_per_s'] / base:.2f} vs local" if base else ""
            mem = f", peak GPU {r['gpu_peak_gib']:.1f} GiB" if r["gpu_peak_gib"] is not None else ""
            print(f"    {r['backend']:<11} {r['tokens_per_s']:10.0f} tok/s{ratio}{acc}{mem}")
    m = figures.get("mfu", {})
    if "mfu" in m:
        opt = f" (optimizer {m['optimizer_s'] * 1000:.1f} ms)" if m.get("optimizer_s") is not None else ""
        print(f"  training step: {m['tokens_per_s']:.0f} tokens/s, {m['step_s'] * 1000:.1f} ms{opt}, MFU {m['mfu']:.1%} of {PEAK_TFLOPS:.0f} TFLOP/s (goal >= 40%; "
              f"meaningful on the H200 only)")
    print(f"  whole run {figures['wall_s']:.0f} s (budget 480 s on the H200)")


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _put_checkout_on_path() -> None:
    """The GPU host has posttrain's checkout but no install of it: this process and the two sides'
    workers import it from the checkout."""
    sys.path.insert(0, str(ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(main())
