"""The whole RL step -- generate, verify, update -- of posttrain's GRPO against TRL's GRPOTrainer, on
the same model, tasks, verifiers and batch, in one run.

    posttrain bench step [--steps 3] [--prompts 8] [--group 8] [--new 64] [--threads 1]
                         [--sampler fast|local|vllm] [--repeats 1] [--stops | --start MODEL | --qwen2]
                         [--skip-zero-advantage]

Both sides start from the same embedded default model (saved once, loaded by each from its path;
``--stops``: with EOS about as likely as a space, so that completions end at varied lengths as a
trained policy's do -- random weights alone run every completion to ``--new``)
(or both from ``--start``: a model directory, e.g. the quickstart's SFT checkpoint, which passes
some tasks and fails others as a policy in training does; or ``--qwen2``: a random Qwen2 of hidden
256 and 4 layers with an 8,192-token byte-level BPE (``build_qwen2``, ``build_tokenizer``: the GPU
baseline's vocabulary size, and what bench/gpu.py builds its model with), a real vocabulary where
the embedded default's is 101 tokens), and train on the quickstart math tasks
(``quickstart-math``), rewarded by the math domain's verifier
(1 pass / 0 fail) through posttrain's execution service; one optimizer step per generation batch of
``--prompts`` x ``--group`` completions of at most ``--new`` tokens, temperature 1, top-k 0 / top-p 1,
AdamW lr 1e-5 without weight decay, clip 0.2 / 0.28, grad clip 1, beta 0 (no reference model),
``loss_type="dapo"`` (= our ``token_mean``), fp32 on the CPU, the same torch threads.

  ours  ``train_grpo`` with ``--sampler``: ``fast`` (``FastSampler``: prefix sharing, rows leave the
        batch), ``local`` (``LocalSampler``, transformers' generate) or ``vllm`` (the engine in its
        own process; weights pushed and checked every step)
  TRL   ``GRPOTrainer.train()`` (its own generate loop on the same transformers model)

``--skip-zero-advantage``: ours with ``rl.skip_zero_advantage`` (the rows of a group whose rewards are
all equal left out of the update: the same step without their compute; TRL computes them). Each
side reports the fraction of its timed groups whose rewards were all equal, which that option saves.

Timed: steps 2.. (step 1 is a warm-up on both sides). Split: generation (the sampler's calls /
TRL's ``_generate``), verification (the reward function's calls), update (the rest of the step:
log-probs, loss, backward, optimizer). Completion tokens/s = completion tokens generated in the timed
steps / their wall time (and per CPU-second of the side's process, steadier when other jobs share the
cores). Peak memory = growth of ``ru_maxrss`` over the run of the side's own process
(the model, imports and trainer set-up excluded). Each side runs in its own process, one after the
other; best of ``--repeats``. Absolute numbers depend on the machine and its load: compare ratios.
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
from pathlib import Path
from typing import Any


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _tasks(n: int):
    from posttrain.envs.math._quickstart import quickstart_tasks

    return quickstart_tasks(seed=0)[:n]


class _Clock:
    def __init__(self) -> None:
        self.gen, self.verify, self.tokens = [], [], []
        self.gen_cpu: list[float] = []  # CPU seconds of the process while generating
        self.cpu: list[float] = []  # CPU seconds of the process per step (all its threads)
        self.zero_std: list[float] = []  # fraction of the step's groups whose rewards are all equal

    def step(self) -> None:
        self.gen.append(0.0)
        self.gen_cpu.append(0.0)
        self.verify.append(0.0)
        self.tokens.append(0)


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from posttrain.envs import get_domain
    from posttrain.policy import FastSampler, load_policy
    from posttrain.sched import DomainHooks, LocalBackend, Service
    from posttrain.train._overlap import SharedWeights
    from posttrain.train.grpo import train_grpo
    from posttrain.train.recipe import RLConfig
    from posttrain.verify.rewards import RewardWeights

    policy = load_policy(args.model, device=args.device, dtype=_dtype(args))
    clock = _Clock()
    verifier = get_domain("math").make_verifier(None)

    def timed_verify(task, response):
        t0 = time.perf_counter()
        v = verifier(task, response)
        clock.verify[-1] += time.perf_counter() - t0
        return v

    class Timed:
        def __init__(self, inner) -> None:
            self.inner = inner

        def generate(self, prompt_ids, params, **kw):
            _sync(args)
            t0, c0 = time.perf_counter(), time.process_time()
            out = self.inner.generate(prompt_ids, params, **kw)
            _sync(args)
            clock.gen[-1] += time.perf_counter() - t0
            clock.gen_cpu[-1] += time.process_time() - c0
            clock.tokens[-1] += sum(len(g.completion_ids) for g in out)
            return out

    if args.sampler == "vllm":
        from posttrain.policy._vllm import VllmWeights

        class VllmTimed(VllmWeights):
            def sampler(self, step: int):
                return Timed(self.engine)

        rollout = VllmTimed(policy)
    else:
        class FastShared(SharedWeights):
            def sampler(self, step: int):
                inner = FastSampler(policy.model, policy.tokenizer) if args.sampler == "fast" else policy.sampler()
                return Timed(inner)

        rollout = FastShared(policy)
    cfg = RLConfig(steps=args.steps + 1, prompts_per_step=args.prompts, group_size=args.group,
                   max_new_tokens=args.new, lr=1e-5, clip_low=0.2, clip_high=0.28, micro_batch_size=args.prompts * args.group,
                   checkpoint_every=10**6, skip_zero_advantage=args.skip_zero_advantage)
    step_walls: list[float] = []
    base = _rss_mib()
    marks = [(time.perf_counter(), time.process_time())]

    def progress(done: int) -> None:
        _sync(args)
        now = (time.perf_counter(), time.process_time())
        step_walls.append(now[0] - marks[-1][0])
        clock.cpu.append(now[1] - marks[-1][1])
        marks.append(now)
        clock.step()

    clock.step()
    with tempfile.TemporaryDirectory() as out, Service(LocalBackend({"math": DomainHooks(timed_verify)})) as svc:
        train_grpo(policy, _tasks(256), svc, cfg, reward_weights=RewardWeights(), out=Path(out), seed=0,
                   progress=progress, rollout=rollout, log=lambda m: clock.zero_std.append(m["frac_zero_std"]))
    return _summary(step_walls, clock, base, torch.get_num_threads(), args)


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from posttrain.cli import open_service
    from posttrain.policy import load_policy

    tok = AutoTokenizer.from_pretrained(args.model)
    policy = load_policy(args.model)
    tasks = _tasks(256)
    prompts = []
    for t in tasks:  # TRL tokenizes text: make it give exactly posttrain's prompt ids
        text = t.prompt if tok(text=[t.prompt])["input_ids"][0] == policy.encode_prompt(t.prompt) else tok.bos_token + t.prompt
        if tok(text=[text])["input_ids"][0] != policy.encode_prompt(t.prompt):
            raise SystemExit(f"bench step: task {t.id}: TRL cannot tokenize the prompt as posttrain does")
        prompts.append(text)
    by_id = {t.id: t for t in tasks}
    del policy
    clock = _Clock()
    step_walls: list[float] = []
    with open_service(["math"]) as service, tempfile.TemporaryDirectory() as out:

        def reward(completions: list[str], task_id: list[str], **_: Any) -> list[float | None]:
            t0 = time.perf_counter()
            verdicts = service.verify_pairs([(by_id[i], c) for i, c in zip(task_id, completions, strict=True)])
            clock.verify[-1] += time.perf_counter() - t0
            rewards = [None if v.is_infra_error else float(v.passed) for v in verdicts]
            groups = [rewards[i:i + args.group] for i in range(0, len(rewards), args.group)]  # TRL repeats each prompt G times in a row
            clock.zero_std.append(sum(len(set(g)) == 1 for g in groups) / max(len(groups), 1))
            return rewards

        config = GRPOConfig(
            output_dir=out, per_device_train_batch_size=args.prompts * args.group, gradient_accumulation_steps=1,
            num_generations=args.group, max_completion_length=args.new, temperature=1.0, top_k=0, top_p=1.0,
            learning_rate=1e-5, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0, epsilon=0.2,
            epsilon_high=0.28, loss_type="dapo", scale_rewards="group", beta=0.0, max_steps=args.steps + 1, seed=0,
            use_cpu=args.device == "cpu", bf16=args.dtype == "bf16", report_to=[], logging_steps=1, save_strategy="no",
            gradient_checkpointing=False, disable_tqdm=True,
        )

        class Steps(TrainerCallback):
            def on_step_begin(self, *a: Any, **k: Any) -> None:
                _sync(args)
                self.t0, self.c0 = time.perf_counter(), time.process_time()

            def on_step_end(self, *a: Any, **k: Any) -> None:
                _sync(args)
                step_walls.append(time.perf_counter() - self.t0)
                clock.cpu.append(time.process_time() - self.c0)
                clock.step()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = GRPOTrainer(model=args.model, reward_funcs=[reward], args=config, processing_class=tok,
                                  train_dataset=Dataset.from_dict({"prompt": prompts, "task_id": [t.id for t in tasks]}),
                                  callbacks=[Steps()])
            inner = trainer._generate

            def timed_generate(prompts_: list) -> Any:
                _sync(args)
                t0, c0 = time.perf_counter(), time.process_time()
                result = inner(prompts_)
                _sync(args)
                clock.gen[-1] += time.perf_counter() - t0
                clock.gen_cpu[-1] += time.process_time() - c0
                completion_ids = result[1] if isinstance(result, tuple) else None
                clock.tokens[-1] += sum(len(c) for c in completion_ids) if completion_ids is not None else 0
                return result

            trainer._generate = timed_generate
            clock.step()
            base = _rss_mib()
            trainer.train()
    return _summary(step_walls, clock, base, torch.get_num_threads(), args)


def _dtype(args: argparse.Namespace):
    import torch

    return torch.bfloat16 if args.dtype == "bf16" else torch.float32


def _sync(args: argparse.Namespace) -> None:
    if args.device == "cuda":
        import torch

        torch.cuda.synchronize()


def _summary(step_walls: list[float], clock: _Clock, base: float, threads: int,
             args: argparse.Namespace) -> dict[str, Any]:
    timed = slice(1, len(step_walls))  # step 1 is the warm-up
    wall = sum(step_walls[timed])
    gen, ver, tokens = sum(clock.gen[timed]), sum(clock.verify[timed]), sum(clock.tokens[timed])
    cpu, gen_cpu = sum(clock.cpu[timed]), sum(clock.gen_cpu[timed])
    return {"steps": len(step_walls) - 1, "wall_s": wall, "cpu_s": cpu, "gen_cpu_s": gen_cpu,
            "tokens_per_cpu_s": tokens / cpu if cpu else 0.0, "step_s": wall / max(1, len(step_walls) - 1),
            "gen_s": gen, "verify_s": ver, "update_s": wall - gen - ver, "tokens": tokens,
            "tokens_per_s": tokens / wall if wall else 0.0, "peak_delta_mib": _rss_mib() - base,
            "peak_abs_mib": _rss_mib(), "threads": threads, "gpu_peak_gib": _gpu_peak(args),
            "frac_zero_std": sum(clock.zero_std[timed]) / max(len(clock.zero_std[timed]), 1)}


def _gpu_peak(args: argparse.Namespace) -> float | None:
    if args.device != "cuda":
        return None
    import torch

    return torch.cuda.max_memory_allocated() / 2**30


def _model(path: Path, stops: bool) -> Path:
    """The embedded default; with ``stops``, its EOS row of the (tied) LM head is set to 1.02 x the
    space's, so that EOS is sampled about as often as a space and completions end at varied lengths,
    as a trained policy's do (random weights alone almost never stop)."""
    import torch

    from posttrain.policy import build_embedded_default, load_policy

    build_embedded_default(path)
    if stops:
        policy = load_policy(path)
        tok, head = policy.tokenizer, policy.model.get_output_embeddings().weight
        [space] = tok(" ", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            head[tok.eos_token_id] = 1.02 * head[space]
        policy.model.save_pretrained(path)
    return path


def build_tokenizer(vocab: int):
    """A byte-level BPE of ``vocab`` tokens trained with ``tokenizers`` on generated arithmetic text
    (the GPU baseline's vocabulary size is 8,192); pad and EOS are its two special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    words = ["what", "is", "plus", "minus", "times", "the", "answer", "number", "sum", "of", "and", "="]
    text = [f"{words[i % 12]} {i} {words[(i * 7) % 12]} {i * 13 % 997} {words[(i * 3) % 12]}?" for i in range(20000)]
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|pad|>", "<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|pad|>", eos_token="<|endoftext|>")


def build_qwen2(where: Path, vocab: int, hidden: int, layers: int, heads: int) -> int:
    """A random Qwen2 (seed 0, tied embeddings) with ``build_tokenizer(vocab)``, saved at ``where``;
    its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(vocab)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=2048,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(where)
    tok.save_pretrained(where)
    return sum(p.numel() for p in model.parameters())


def _spawn(which: str, argv: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", which, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"bench step: worker {which} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser

    parser = bench_parser("step", __doc__)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (after 1 warm-up)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--new", type=int, default=64, help="max completion tokens")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per side (0: torch's default)")
    parser.add_argument("--sampler", choices=["fast", "local", "vllm"], default="fast", help="posttrain's sampler")
    parser.add_argument("--repeats", type=int, default=1, help="alternating rounds per side; best kept")
    parser.add_argument("--stops", action="store_true",
                        help="a model that stops: EOS as likely as a space (completions of varied length)")
    parser.add_argument("--start", metavar="MODEL", help="a model directory both sides start from (e.g. "
                        "runs/quickstart/checkpoints/sft); default: the embedded default")
    parser.add_argument("--qwen2", action="store_true",
                        help="a random Qwen2 (hidden 256, 4 layers) with an 8,192-token BPE: a real vocabulary")
    parser.add_argument("--skip-zero-advantage", action="store_true",
                        help="ours with rl.skip_zero_advantage (groups whose rewards are all equal left out of the update)")
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=["ours", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.steps, args.prompts, args.group, args.new, args.repeats) < 1 or args.group < 2 or args.threads < 0:
        parser.error("--steps, --prompts, --new, --repeats must be >= 1, --group >= 2 and --threads >= 0")
    if args.model and not args.worker:  # (the workers' argument: a user's would be ignored)
        parser.error(f"--model {args.model}: name the model both sides start from with --start")
    if sum(map(bool, (args.start, args.stops, args.qwen2))) > 1:
        parser.error("--stops, --start and --qwen2 each name the model: give one")
    if args.start and not (Path(args.start) / "config.json").is_file():
        parser.error(f"--start {args.start}: expected a model directory with a config.json")
    if args.worker:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        print(json.dumps((run_ours if args.worker == "ours" else run_trl)(args)))
        return 0
    with tempfile.TemporaryDirectory() as d:
        if args.start:
            model = Path(args.start).resolve()
        elif args.qwen2:
            model = Path(d) / "model"
            build_qwen2(model, vocab=8192, hidden=256, layers=4, heads=4)
        else:
            model = _model(Path(d) / "model", args.stops)
        passthrough = [f"--steps={args.steps}", f"--prompts={args.prompts}", f"--group={args.group}",
                       f"--new={args.new}", f"--threads={args.threads}", f"--sampler={args.sampler}",
                       f"--model={model}", *(["--skip-zero-advantage"] if args.skip_zero_advantage else [])]
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeats):
            for which in ("ours", "trl"):
                r = _spawn(which, passthrough)
                if which not in best or r["tokens_per_s"] > best[which]["tokens_per_s"]:
                    best[which] = r
    ours, trl = best["ours"], best["trl"]
    start = args.start or ("a random Qwen2 (hidden 256, 4 layers, 8,192-token BPE)" if args.qwen2 else
                           f"embedded default{' (EOS as likely as a space)' if args.stops else ''}")
    print(f"GRPO step (generate + verify + update), {args.device.upper()} {args.dtype}, {start}, quickstart math tasks, "
          f"{args.prompts} prompts x G={args.group}, <= {args.new} new tokens, {args.steps} timed steps, "
          f"{ours['threads']} thread(s), posttrain sampler: {args.sampler}"
          f"{', rl.skip_zero_advantage' if args.skip_zero_advantage else ''}")
    print(f"  groups whose rewards are all equal (no gradient): ours {ours['frac_zero_std']:.0%}, TRL {trl['frac_zero_std']:.0%}")
    for name, r in (("posttrain", ours), ("TRL GRPOTrainer", trl)):
        print(f"  {name:<16} {r['tokens_per_s']:8.1f} completion tok/s  {r['step_s']:6.2f} s/step  "
              f"(generate {r['gen_s'] / r['wall_s']:.0%}, verify {r['verify_s'] / r['wall_s']:.0%}, "
              f"update {r['update_s'] / r['wall_s']:.0%})  peak RSS +{r['peak_delta_mib']:.0f} MiB "
              f"(abs {r['peak_abs_mib']:.0f} MiB)  {r['tokens']} tokens")
    print(f"  per CPU-second of the side's process (steadier on a shared machine; the vLLM engine's own "
          f"process not counted): ours {ours['tokens_per_cpu_s']:.1f}, TRL {trl['tokens_per_cpu_s']:.1f} tok/cpu-s = "
          f"{ours['tokens_per_cpu_s'] / max(trl['tokens_per_cpu_s'], 1e-9):.2f}x")
    for name, r in (("posttrain", ours), ("TRL", trl)):
        steps = max(r["steps"], 1)
        print(f"  CPU seconds per step, {name}: {r['cpu_s'] / steps:.3f} (generate {r['gen_cpu_s'] / steps:.3f}, "
              f"verify + update {(r['cpu_s'] - r['gen_cpu_s']) / steps:.3f})")
    print(f"  completion tokens/s ours / TRL = {ours['tokens_per_s'] / max(trl['tokens_per_s'], 1e-9):.2f}x "
          f"(goal >= 3x); step time TRL / ours = {trl['step_s'] / max(ours['step_s'], 1e-9):.2f}x; "
          f"peak memory growth ours / TRL = {ours['peak_delta_mib'] / max(trl['peak_delta_mib'], 1e-9):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
