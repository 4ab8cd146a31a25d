"""``posttrain generate``: sample completions from any checkpoint, the way training and eval sample.

    posttrain generate runs/q/checkpoints/rl --prompt "What is 2+3? Answer: "
    posttrain generate runs/q/checkpoints/sft --prompt "def add(a, b):" --prompt "x = " --n 3 --temperature 0.8
    posttrain generate runs/q/checkpoints/rl --tasks runs/q/tasks/eval.jsonl --json > samples.jsonl

Prompts are encoded by ``Policy.encode_prompt`` (the same ids the trainer and ``posttrain eval``
use): through the chat template when the checkpoint was trained so (its posttrain.json), or as
``--chat``/``--no-chat`` says. ``--json`` prints one object per line with ``task_id`` and ``completion``, the responses
format ``posttrain eval --responses`` reads. Bad input is one line, exit 2.
Not here: multi-turn chats, stop strings, batching across processes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from posttrain.config import MAX_TEMPERATURE
from posttrain.errors import UserError, refuse_directory
from posttrain.policy import MIN_TEMPERATURE

__all__ = ["register", "cmd_generate", "why_not_a_policy"]


def register(subparsers: Any) -> None:
    """Add ``generate`` to the ``posttrain`` command."""
    from posttrain.cli import named

    p = subparsers.add_parser("generate", help="sample completions from a checkpoint for prompts or a task file")
    p.add_argument("checkpoint", metavar="CKPT", type=named, help="a causal-LM checkpoint directory (e.g. RUN/checkpoints/rl)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", action="append", default=[], metavar="TEXT", help="a prompt (repeatable)")
    src.add_argument("--tasks", metavar="FILE", type=named, help="a task file (JSON/JSONL): one prompt per task")
    p.add_argument("--n", type=int, default=1, help="samples per prompt (default 1)")
    p.add_argument("--temperature", type=float, help="default 0 (greedy) when --n 1, else 0.8")
    p.add_argument("--max-new-tokens", type=int, default=128, help="default 128")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="render each prompt as one user message with the tokenizer's chat template; --no-chat: "
                   "plain text. Default: as the checkpoint was trained (posttrain.json; plain without one)")
    p.add_argument("--json", action="store_true", help="one JSON object per completion and line")
    p.set_defaults(func=cmd_generate)


def why_not_a_policy(path: str | Path) -> str | None:
    """None when ``path`` holds a causal LM to sample from; else why not (also used by ``eval --run``,
    which skips a reward model). A config.json that does not read is a ``UserError`` naming it, never
    a checkpoint to skip: ``eval --run`` skipped a cut one with a note and exited 0 without it."""
    cfg_path = Path(path) / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        detail = (getattr(e, "strerror", None) or str(e).splitlines()[0]) if str(e) else ""
        raise UserError(f"{cfg_path}: not readable JSON ({e.__class__.__name__}: {detail}); expected the model's "
                        "config") from None
    archs = [str(a) for a in cfg.get("architectures") or []] if isinstance(cfg, dict) else []
    if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        kind = "a reward model" if any(a.endswith("ForSequenceClassification") for a in archs) else "not a causal LM"
        return f"{kind} ({archs[0]}), not a policy to sample from"
    return None


def _check(args: argparse.Namespace) -> None:
    ckpt = Path(args.checkpoint)
    if ckpt.is_symlink() and not ckpt.exists():
        raise UserError(f"generate: {ckpt}: a symbolic link to nothing (or a loop); expected a model directory")
    if not ckpt.exists():
        raise UserError(f"generate: no such model directory: {ckpt}")
    if not ckpt.is_dir() or not (ckpt / "config.json").is_file():
        raise UserError(f"generate: {ckpt} is not a model directory (expected config.json inside)")
    if why := why_not_a_policy(ckpt):
        raise UserError(f"generate: {ckpt} is {why}")
    if not args.prompt and not args.tasks:
        raise UserError("generate: nothing to complete; give --prompt TEXT (repeatable) or --tasks FILE")
    for i, prompt in enumerate(args.prompt):  # bytes that are not UTF-8 reach argv as lone surrogates
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as e:  # the tokenizer's TypeError was a traceback
            byte = f"byte 0x{ord(prompt[e.start]) - 0xDC00:02x}" if "\udc80" <= prompt[e.start] <= "\udcff" else \
                f"{prompt[e.start]!r}"
            raise UserError(f"generate: --prompt #{i + 1}: not UTF-8 text ({byte} at character {e.start + 1})") from None
    from posttrain.evaluate.runner import MAX_SAMPLES_PER_TASK

    for flag, value in (("--n", args.n), ("--max-new-tokens", args.max_new_tokens)):
        if value < 1:
            raise UserError(f"generate: {flag} must be >= 1, got {value}")
    if args.n > MAX_SAMPLES_PER_TASK:  # as posttrain eval --n: a mistyped 10**8 sampled for hours
        raise UserError(f"generate: --n must be <= {MAX_SAMPLES_PER_TASK} (samples per prompt), got {args.n}")
    if not 0 <= args.seed < 2**32:  # a recipe's seed range; torch's manual_seed overflowed (a traceback) past 2**64
        raise UserError(f"generate: --seed must be an integer in [0, 4294967296), got {args.seed}")
    t = args.temperature
    if t is not None and not (t == 0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE):  # a recipe's range
        raise UserError(f"generate: --temperature must be 0 (greedy) or a number >= {MIN_TEMPERATURE:g} (the "
                        f"samplers' least) and <= {MAX_TEMPERATURE:g} (past it, logits are near uniform), got {t}")


def _prompts(args: argparse.Namespace) -> list[tuple[str | None, str]]:
    """(task id or None, prompt text) per prompt."""
    if args.prompt:
        return [(None, p) for p in args.prompt]
    from posttrain.tasks import load_tasks

    refuse_directory(args.tasks, "a task file (--tasks)")
    if not Path(args.tasks).exists() and not Path(args.tasks).is_symlink():
        raise UserError(f"generate: --tasks {args.tasks}: no such file; expected a task file (JSON/JSONL)")
    tasks = load_tasks(args.tasks)  # a pipe too (--tasks <(...)), read once; a device is refused there
    if not tasks:
        raise UserError(f"generate: no tasks in {args.tasks}")
    from posttrain.envs import model_prompt

    return [(t.id, model_prompt(t)) for t in tasks]


def cmd_generate(args: argparse.Namespace) -> int:
    _check(args)
    prompts = _prompts(args)
    from transformers.utils import logging as hf_logging

    from posttrain.policy import load_policy

    hf_logging.disable_progress_bar()  # stdout and stderr carry only completions and errors
    hf_logging.set_verbosity_error()
    policy = load_policy(args.checkpoint, chat=args.chat)
    limit = getattr(policy.model.config, "max_position_embeddings", None)
    longest = max(len(policy.encode_prompt(p)) for _, p in prompts)
    if limit is not None and longest + args.max_new_tokens > limit:
        raise UserError(f"generate: the longest prompt ({longest} tokens) plus --max-new-tokens {args.max_new_tokens} "
                        f"exceeds the model's {limit} positions; lower --max-new-tokens")
    temperature = args.temperature if args.temperature is not None else (0.0 if args.n == 1 else 0.8)
    gens = policy.generate([p for _, p in prompts], n=args.n, temperature=temperature,
                           max_new_tokens=args.max_new_tokens, seed=args.seed)
    for i, ((task_id, prompt), samples) in enumerate(zip(prompts, gens, strict=True)):
        for j, g in enumerate(samples):
            if args.json:
                print(json.dumps({"task_id": task_id, "prompt": prompt, "sample_idx": j, "completion": g.text,
                                  "completion_ids": list(g.completion_ids), "finish_reason": g.finish_reason}))
            else:
                name = f"task {task_id}" if task_id else f"prompt {i + 1}"
                print(f"=== {name}, sample {j + 1}/{args.n} ({len(g.completion_ids)} tokens, {g.finish_reason})")
                print(prompt + g.text)
    return 0
