"""Long episodes: what context management buys at a fixed token budget (issue 25, "Long episodes").

    posttrain bench recall [--seeds 0-2] [--budget 256] [--levels 2,8,32] [--steps 1500]
                           [--train-per-level 100] [--eval-per-level 32] [--loss all|action]
                           [--arms plain,managed] [--threads 1] [--out FILE]

The recall domain (posttrain/envs/recall), its ``fact_first`` family: a fact is given as the first
observation of an episode, L notes follow (each with a distractor number), then the question about
the fact (the domain's other generated tasks also state other keys' codes, before the fact and after). Two arms, the
same everything but the context policy (``posttrain.rollout.ContextPolicy``), at the same budget
of ``--budget`` tokens the model sees per turn:

  plain    no management: the pinned prompt, then the most recent turns that fit (oldest dropped)
  managed  the prompt pinned, the last 2 turns in full, older turns folded into a rule summary
           (48 characters per older observation, the earliest kept longest) and a bm25s index

Per seed and arm: the embedded default (built with that seed) is fine-tuned (``train_sft``) on
demonstration episodes run under the arm's own context policy -- what the model sees at each turn is
what the arm's context gives it, the demonstrator's actions are "ok" to a note and the fact's value
to the question (an oracle: the same actions in both arms, so only the context differs) -- then
evaluated on held-out episodes (other seeds of the generator) at each ``--levels`` L, greedy, under
the same context policy: success = the verifier passes the answer. Printed: success per level and
arm with the mean over seeds, and the largest context either arm showed the model.

What this shows and what it does not: the plain arm can only answer from a window that still holds
the fact (short episodes); the managed arm keeps the fact in its summary, so its success measures
whether the model learned to read it there. A trained model (not a scripted reader: tests/rollout/
test_context.py has that) on the embedded default, CPU, minutes per seed and arm.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OK_ROWS = 2
""""ok" rows kept per demonstration episode beside its answer row (the rest say the same)."""


def context_policy(arm: str, budget: int):
    from posttrain.rollout._context import ContextPolicy

    if arm == "managed":
        return ContextPolicy(budget=budget, keep_recent=2, summarize="rule", summary_chars=48, retrieval=True)
    return ContextPolicy(budget=budget, manage=False)


class Oracle:
    """The demonstrator: "ok" to every note, the fact's value to the question (it knows the task)."""

    def __init__(self, tokenizer, answers: dict[str, str]) -> None:
        self.tok, self.answers = tokenizer, answers
        self.current: list[str] = []  # the task id of each row of the next call (set by the caller)

    def generate(self, prompt_ids, params):
        from posttrain.types import Generation

        out = []
        for ids, task_id in zip(prompt_ids, self.current, strict=True):
            text = self.tok.decode(list(ids), skip_special_tokens=True)
            reply = self.answers[task_id] if text.rstrip().endswith("Answer:") else "ok"
            action = self.tok(reply, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append(Generation(tuple(ids), tuple(action), (0.0,) * len(action), reply, "eos"))
        return out


def run_episodes(sampler, tasks, policy, cp, *, oracle: Oracle | None = None):
    from posttrain.envs.recall import RecallEpisode
    from posttrain.policy import SamplingParams
    from posttrain.rollout._context import run_managed

    encode = lambda text: policy.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    out = []
    for task in tasks:  # one at a time: the oracle answers per task
        if oracle is not None:
            oracle.current = [task.id]
        eps = [(task, RecallEpisode(policy.encode_prompt, encode), task.id, 0)]
        out += run_managed(sampler, eps, SamplingParams(temperature=0.0, max_new_tokens=8), cp, encode,
                           max_turns=len(task.fields["notes"]) + 3)
    return out


def demonstrations(policy, tasks, cp, seed: int, loss: str = "all"):
    """SFT rows from the oracle's episodes under ``cp``: each answer row and ``OK_ROWS`` "ok" rows
    per episode, the context exactly as the arm showed it. ``loss``: "all" trains every token after
    BOS (the transcript, then the action), "action" only the action (what a policy is trained on)."""
    from posttrain.train.sft import demonstration_episode

    oracle = Oracle(policy.tokenizer, {t.id: t.fields["value"] for t in tasks})
    rng = random.Random(seed)
    demos = []
    for ep in run_episodes(oracle, tasks, policy, cp, oracle=oracle):
        answer = [r for r in ep.rows if r.text.isdigit()]
        oks = [r for r in ep.rows if r.text == "ok"]
        for r in answer + rng.sample(oks, min(OK_ROWS, len(oks))):
            if loss == "action":
                demos.append(demonstration_episode(ep.task.id, [(r.context_ids, r.action_ids)]))
                continue
            ids = [*r.context_ids, *r.action_ids]
            demos.append(demonstration_episode(ep.task.id, [(ids[:1], ids[1:])]))
    return demos


def one_run(seed: int, arm: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from posttrain.envs.recall import ENV
    from posttrain.policy import FastSampler, build_embedded_default, load_policy
    from posttrain.train.sft import SFTParams, train_sft

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        policy = load_policy(build_embedded_default(Path(d) / "m", seed=seed))
    cp = context_policy(arm, args.budget)
    train = [t for level in args.train_levels
             for t in ENV.generate_level(args.train_per_level, level=level, seed=seed, fact_first=True)]
    demos = demonstrations(policy, train, cp, seed, args.loss)
    losses: list[float] = []
    train_sft(policy, demos, SFTParams(steps=args.steps, batch_size=32, lr=args.lr, seed=seed),
              log=lambda m: losses.append(m["loss"]))
    sampler = FastSampler(policy.model, policy.tokenizer)
    success, peak = {}, 0
    for level in args.levels:
        tasks = ENV.generate_level(args.eval_per_level, level=level, seed=1000 + seed, fact_first=True)
        eps = run_episodes(sampler, tasks, policy, cp)
        success[level] = sum(e.reward for e in eps) / len(eps)
        peak = max(peak, *(e.peak_context for e in eps))
    return {"seed": seed, "arm": arm, "success": success, "peak_context": peak, "demos": len(demos),
            "final_loss": statistics.mean(losses[-20:]), "wall_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    from posttrain.cli.bench import bench_parser, check_out_file, parse_seeds

    parser = bench_parser("recall", __doc__)
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--budget", type=int, default=256, help="tokens the model sees per turn (both arms)")
    parser.add_argument("--levels", default="2,8,32", help="notes between the fact and the question")
    parser.add_argument("--steps", type=int, default=1500, help="SFT steps per seed and arm (batch 32)")
    parser.add_argument("--train-levels", default="1,2,3,4,6,8,12,16,24", help="notes of the training episodes")
    parser.add_argument("--train-per-level", type=int, default=100)
    parser.add_argument("--eval-per-level", type=int, default=32)
    parser.add_argument("--loss", choices=("all", "action"), default="all",
                        help="SFT loss on every token of a row (all) or on its action only")
    parser.add_argument("--lr", type=float, default=3e-3, help="SFT learning rate")
    parser.add_argument("--arms", default="plain,managed", help="which arms (default both)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write every run's figures here (JSON lines, appended)")
    args = parser.parse_args(argv)
    try:
        seeds, args.levels = parse_seeds(args.seeds), parse_seeds(args.levels, "--levels")
        args.train_levels = parse_seeds(args.train_levels, "--train-levels")
    except ValueError as e:  # (the lists' flags named together as before: tests/core/test_bench_speed.py)
        parser.error(f"{e} (--seeds/--levels/--train-levels each take distinct integers)")
    try:
        if args.out:
            check_out_file(args.out, "--out")
    except ValueError as e:
        parser.error(str(e))
    if args.budget < 64 or min(args.steps, args.train_per_level, args.eval_per_level, args.threads) < 1 \
            or not 0 < args.lr < float("inf"):
        parser.error("--budget must be >= 64, --steps, --train-per-level, --eval-per-level, --threads >= 1 and --lr > 0")
    arms = [a.strip() for a in args.arms.split(",")]
    if not set(arms) <= {"plain", "managed"} or len(set(arms)) < len(arms):
        parser.error(f"--arms {args.arms}: expected plain, managed or both (plain,managed)")
    runs = []
    for seed in seeds:
        for arm in arms:
            r = one_run(seed, arm, args)
            runs.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(r) + "\n")
    print(f"recall: success at a budget of {args.budget} tokens per turn, the embedded default fine-tuned "
          f"{args.steps} steps per arm, greedy, {args.eval_per_level} held-out episodes per level; seeds {seeds}")
    print(f"  {'notes L':<10}" + "".join(f"{arm:>14}" for arm in arms))
    for level in args.levels:
        cells = {arm: [r["success"][level] for r in runs if r["arm"] == arm] for arm in arms}
        show = {arm: f"{statistics.mean(v):.2f}" + (f"±{statistics.stdev(v):.2f}" if len(v) > 1 else "")
                for arm, v in cells.items()}
        print(f"  {level:<10}" + "".join(f"{show[arm]:>14}" for arm in arms))
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        print(f"  {arm}: largest context {max(r['peak_context'] for r in mine)} tokens, "
              f"{statistics.mean(r['wall_s'] for r in mine):.0f} s per run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
