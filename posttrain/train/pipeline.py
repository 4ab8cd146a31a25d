"""``posttrain run``: base model -> SFT on demonstrations -> GRPO against verifiers -> evaluation.

One function per stage, called in order by ``run_recipe``; each writes into the run directory
(docs/contracts.md "Run directory"). Every verification of the run goes through one execution
service (``posttrain.sched.Service``, sized from the sandbox pool: ``sandbox.workers``), opened
here and passed down. A stage that already finished is not redone on ``--resume``
(its checkpoint is loaded); RL resumes from its last checkpoint, bit-exactly. Each stage's checkpoint
directory is written aside and renamed into place whole, so a run stopped at any moment (Ctrl-C,
SIGTERM, kill -9) can be resumed. RUN/summary.json is written last, and only here: it marks the run
finished (``posttrain eval --run`` writes under RUN/eval/). ``--resume`` refuses a changed recipe,
naming the keys that changed, and keeps the prompts the run was started with (``resumed_recipe``).

    posttrain quickstart --out runs/quickstart          # the embedded recipe
    posttrain run configs/tiny-grpo.yaml --out runs/t   # any recipe
    posttrain run configs/tiny-grpo.yaml --out runs/t --resume

Not here: multi-node scale-out (Ray), generation servers (vLLM).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from posttrain.config import parse_config, to_dict
from posttrain.envs import model_prompt, task_to_record
from posttrain.envs.tool import action_limit, tool_episode_envs
from posttrain.errors import ConfigError, UserError
from posttrain.evaluate.loggers import make_loggers
from posttrain.evaluate.records import EvalRecord, write_records
from posttrain.evaluate.runner import Response, compact, noop_baseline, score_responses
from posttrain.evaluate.sources import TOOL_STEPS, episode_figures, runner_episodes
from posttrain.evaluate.summary import summarize
from posttrain.policy import (
    CHAT_RECORD,
    ChatTemplate,
    EmbeddedModelSpec,
    Generation,
    Policy,
    SamplingParams,
    build_char_tokenizer,
    build_embedded_default,
    chat_unusable,
    has_chat_template,
    load_policy,
    record_chat,
    recorded_chat,
    resolve_chat,
)
from posttrain.rollout import Episode, VerdictCache, Verifier, repair_envs, run_batch, run_episodes
from posttrain.sandbox import usable_cpus
from posttrain.sched import LocalBackend, RayRollout, Service, hooks_from_envs, ray_backend
from posttrain.tasks import generators
from posttrain.train._critic import Critic
from posttrain.train._runlog import JsonlWriter, rollout_record, truncate_after
from posttrain.train._step import apply_lora
from posttrain.train.checkpoint import commit_dir
from posttrain.train.grpo import EpisodeSpec, train_grpo
from posttrain.train.preference import RewardModelScorer, build_pairs, run_dpo, run_rm
from posttrain.train.recipe import (
    Recipe,
    RLConfig,
    check_inputs,
    is_feedback_only,
    sft_demonstrations,
    uses_demonstrator,
    uses_repair_feedback,
)
from posttrain.train.sft import Demonstration, SFTParams, demonstration_episode, train_sft
from posttrain.types import Task, Trajectory

console = Console(stderr=True, soft_wrap=True)  # paths stay on one line
DONE = "DONE"  # marker file written last into a finished stage's checkpoint directory


class StepLog:
    """metrics.jsonl (always) plus the trackers the recipe switched on (TensorBoard, MLflow)."""

    def __init__(self, out: Path, recipe: Recipe) -> None:
        self.jsonl = JsonlWriter(out / "metrics.jsonl")
        self.trackers = make_loggers(out, tensorboard=recipe.tracking.tensorboard, mlflow=recipe.tracking.mlflow)

    def write(self, row: dict[str, Any]) -> None:
        self.jsonl.write(row)
        stage = row["stage"]
        self.trackers.log(int(row["step"]), {f"{stage}/{k}": v for k, v in row.items() if k not in ("stage", "step")})

    def close(self) -> None:
        self.jsonl.close()
        self.trackers.close()


@dataclass(frozen=True)
class TaskPools:
    train: list[Task]
    eval: list[Task]

    @property
    def domains(self) -> list[str]:
        """The domains of the tasks, in order of first appearance (train, then eval)."""
        return list(dict.fromkeys(t.domain for t in [*self.train, *self.eval]))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_pools(recipe: Recipe) -> TaskPools:
    """The recipe's train and held-out tasks (its sources, or the quickstart shorthand), checked
    with everything else the run reads (``recipe.check_inputs``: demonstrations, model)."""
    train, held = check_inputs(recipe)
    overlap = {t.id for t in train} & {t.id for t in held}
    assert not overlap, f"train and eval share tasks: {sorted(overlap)[:3]}"
    return TaskPools(train=train, eval=held)


def write_tasks(path: Path, tasks: Sequence[Task]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, "".join(json.dumps(task_to_record(t)) + "\n" for t in tasks))


def _write_atomic(path: Path, text: str) -> None:
    """Write-then-rename: an interrupted run leaves the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar; yields ``advance_to(done)``."""
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=console, transient=False) as bar:
        tid = bar.add_task(description, total=total)
        yield lambda done: bar.update(tid, completed=done)


def evaluate_policy(
    name: str,
    policy: Policy,
    tasks: Sequence[Task],
    service: Service,
    verifiers: Mapping[str, Verifier],
    recipe: Recipe,
    out: Path,
) -> dict[str, Any]:
    """Sample ``eval.samples_per_task`` completions per held-out task, verify through ``service``,
    write records + summary (``verifiers``: what repair episodes verify with inside their steps).

    With ``eval.episodes: repair`` each sample is a repair episode (``RepairEnv``) through the
    episode runner (``tool``: a tool-calling episode, ``ToolEpisodeEnv``): one record per attempt,
    and the summary adds repair@r, mean attempts to success, turns and tokens per episode, the
    truncation rate and the tool-call validity rate."""
    cfg = recipe.eval
    records: list[EvalRecord] = []
    stats: list[dict[str, float]] = []
    chunk = 50
    with progress_bar(f"eval {name:<12}", len(tasks)) as advance:
        for start in range(0, len(tasks), chunk):
            part = tasks[start : start + chunk]
            if cfg.episodes != "single":
                part_records, part_stats = runner_episodes(
                    policy, part, verifiers, n=cfg.samples_per_task, temperature=cfg.temperature,
                    max_new_tokens=cfg.max_new_tokens, seed=recipe.seed + start, stage=f"eval/{name}",
                    episodes=cfg.episodes, max_turns=cfg.max_turns, pool=sandbox_of(service), service=service)
                records += part_records
                stats.append(part_stats)
            else:
                groups = run_episodes(
                    policy, part, service, n=cfg.samples_per_task, temperature=cfg.temperature,
                    max_new_tokens=cfg.max_new_tokens, seed=recipe.seed + start,
                )
                records += [rollout_record(t, r, stage=f"eval/{name}", step=None, wall_s=0.0)
                            for t, g in zip(part, groups, strict=True) for r in g]
            advance(start + len(part))
    write_records(out / "eval" / f"{name}.jsonl", records)
    summary = summarize(records, ks=(1,))
    if stats:
        allowed = max(t.limits.max_attempts for t in tasks) if cfg.episodes == "repair" else None
        summary["episodes"] = episode_figures(summary, stats, max_attempts=allowed)
    return summary


def eval_metrics_row(name: str, summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metrics.jsonl row of a repair evaluation (stage ``eval/<model>``), or None for single-turn."""
    figures = summary.get("episodes")
    if figures is None:
        return None
    return {"stage": f"eval/{name}", "step": 0,
            **{k: v for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}}


def episode_spec(cfg: RLConfig, policy: Policy, verifiers: Mapping[str, Verifier], train: Sequence[Task],
                 pool: Any | None = None) -> EpisodeSpec:
    """The recipe's episode keys (``rl.episodes``, ``rl.max_turns``, ...) -> GRPO's ``EpisodeSpec``.
    Single-turn episodes with no other key set are the default spec (today's RL, bit-identical).
    ``pool``: the sandbox pool tool episodes run in (BFCL's backends)."""
    make_env = None
    max_turns = cfg.max_turns or 1
    if cfg.episodes == "repair":
        make_env = repair_envs(policy, verifiers, VerdictCache(), chat=policy.chat, infra_retries=0)  # GRPO's service restarts
        max_turns = cfg.max_turns or max(t.limits.max_attempts for t in train)
    elif cfg.episodes == "tool":  # rl.max_turns: a tool task's step limit, a BFCL task's per-user-turn cap
        steps = cfg.max_turns or TOOL_STEPS
        make_env = tool_episode_envs(ChatTemplate(policy.tokenizer), max_steps=steps, pool=pool)
        max_turns = action_limit(train, steps)  # the runner's cap follows from the tasks
    return EpisodeSpec(make_env=make_env, max_turns=max_turns, max_tokens=cfg.max_episode_tokens,
                       attempt_discount=cfg.attempt_discount, process_coef=cfg.process_coef, cut=cfg.cut_episodes)


def sandbox_of(service: Service) -> Any | None:
    """The sandbox pool of a local service (tool episodes run BFCL's backends in it), else None."""
    return service.backend.pool if isinstance(service.backend, LocalBackend) else None


def evaluate_demonstrator(
    demo: generators.Demonstrator, tasks: Sequence[Task], service: Service, out: Path
) -> dict[str, Any]:
    """The demonstrator's own accuracy on the held-out split, through the same service."""
    responses = [Response(t.id, demo.respond(t)) for t in tasks]
    records = score_responses(tasks, responses, service, stage="eval/demonstrator", source="demonstrator")
    write_records(out / "eval" / "demonstrator.jsonl", records)
    return summarize(records, ks=(1,))


def _stage_done(path: Path) -> bool:
    return (path / DONE).exists()


def _save_stage(stage_dir: Path, write: Callable[[Path], Any]) -> None:
    """``write(tmp)`` fills a fresh temporary directory, which becomes ``stage_dir`` (with DONE) in one rename."""
    tmp = stage_dir.with_name(f".tmp-{stage_dir.name}")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted run
    tmp.parent.mkdir(parents=True, exist_ok=True)
    write(tmp)  # creates tmp when it saves (a stage interrupted while training leaves nothing)
    (tmp / DONE).write_text("ok\n")
    commit_dir(tmp, stage_dir)


def recipe_changes(saved: Mapping[str, Any], recipe: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``key (old -> new)`` for every recipe key whose value differs, as dotted keys in the recipe's order.

    >>> recipe_changes({"rl": {"steps": 12, "lr": 0.001}}, {"rl": {"steps": 50, "lr": 0.001}})
    ['rl.steps (12 -> 50)']
    """
    missing = "(not set)"
    changes = []
    for k in [*recipe, *(k for k in saved if k not in recipe)]:
        old, new = saved.get(k, missing), recipe.get(k, missing)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changes += recipe_changes(old, new, f"{prefix}{k}.")
        elif old != new:
            changes.append(f"{prefix}{k} ({old} -> {new})")
    return changes


def _with_defaults(saved: Any) -> dict[str, Any]:
    """A saved config.yaml with the keys it predates filled in with their defaults, so that a run
    started before a key existed resumes when the recipe leaves that key at its default."""
    if not isinstance(saved, dict):
        return {}
    try:
        full = to_dict(parse_config(Recipe, saved))
    except (ConfigError, TypeError, ValueError):  # a key since removed or renamed: compare as saved
        return saved
    return yaml.safe_load(yaml.safe_dump(full, sort_keys=False))


def prepare_run_dir(out: Path, recipe: Recipe, *, resume: bool) -> Recipe:
    """Create RUN/, save the resolved config; refuse to overwrite another run unless resuming it with the same
    recipe. Returns the recipe to run: on resume, ``model.chat`` as the run's prompts were rendered."""
    cfg_path = out / "config.yaml"
    resolved = to_dict(recipe)
    if cfg_path.exists():
        if not resume:
            raise UserError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
        try:
            saved = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise UserError(f"{cfg_path}: not valid YAML ({str(e).splitlines()[0]}); the run cannot be resumed") from None
        as_saved = yaml.safe_load(yaml.safe_dump(resolved, sort_keys=False))  # compare like with like
        changed = recipe_changes(_with_defaults(saved), as_saved)
        if _stage_done(out / "checkpoints" / "base"):  # model.chat is judged by the run's record instead
            changed = [c for c in changed if not c.startswith("model.chat ")]
        if changed:
            raise UserError(f"{cfg_path}: the run was started with a different recipe (changed: {', '.join(changed)}); "
                            f"--resume needs the same recipe: drop the changes, or start over with another --out")
        return resumed_recipe(out, recipe)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_atomic(cfg_path, yaml.safe_dump(resolved, sort_keys=False))
    except OSError as e:  # an existing file, a path under a file, a read-only parent
        raise UserError(f"--out {out}: cannot create the run directory there ({e.strerror or e})") from None
    return recipe


def resumed_recipe(out: Path, recipe: Recipe) -> Recipe:
    """``recipe`` with ``model.chat`` set to how the prompts of the run in ``out`` were rendered (``--resume``).

    The run's base checkpoint records it (``CHAT_RECORD``). One without the record was made before
    ``model.chat`` existed, on plain prompts, and ``auto`` resumes it on plain prompts (said in one line
    where the template would have switched them). Any other difference from what the recipe resolves to
    (a ``true``/``false`` given, or ``auto`` resolving otherwise now) is a ``UserError`` naming
    ``model.chat``, the run and both values, before any work; so is a later stage checkpoint recording
    otherwise than the base (a resume that switched them). Before the base checkpoint is done nothing
    was sampled: the recipe stands.
    """
    base = out / "checkpoints" / "base"
    if not _stage_done(base):
        return recipe
    from transformers import AutoTokenizer

    def shown(chat: bool) -> str:
        return "chat-rendered prompts" if chat else "plain prompts"

    recorded = recorded_chat(base)
    ran = bool(recorded)
    why = f"{base / CHAT_RECORD}" if recorded is not None else f"{base} has no {CHAT_RECORD}: it predates model.chat"
    for stage in recipe.stages:  # a resume by a posttrain that switched them mid-run left a mixed run
        if _stage_done(done := out / "checkpoints" / stage) and recorded_chat(done) not in (None, ran):
            raise UserError(f"model.chat: {out} was started with {shown(ran)} ({why}), but {done / CHAT_RECORD} "
                            f"records {shown(not ran)}: its stages were trained on both; start over with another --out")
    try:
        tokenizer = build_char_tokenizer() if recipe.model.name == "embedded" else AutoTokenizer.from_pretrained(base)
    except OSError as e:
        raise UserError(f"{base}: cannot load its tokenizer ({str(e).splitlines()[0]}); the run cannot be resumed") from None
    now = resolve_chat(recipe.model.chat_setting, tokenizer, repair=uses_repair_feedback(recipe))
    if recorded is None and recipe.model.chat_setting == "auto":
        if now:
            console.print(f"{out}: resuming on plain prompts, as the run was started ({why}); "
                          f"model.chat: auto would render the chat template")
        now = False
    if now != ran:
        raise UserError(f"model.chat: {out} was started with {shown(ran)} ({why}), the recipe now gives "
                        f"{shown(now)} (model.chat: {str(recipe.model.chat).lower()}); --resume keeps a run's prompts: "
                        f"set model.chat: {str(ran).lower()}, or start over with another --out")
    return replace(recipe, model=replace(recipe.model, chat=ran))


def decide_chat(recipe: Recipe) -> Recipe:
    """``recipe`` with ``model.chat`` decided for the whole run: a bool as given (or as ``--resume``
    kept it), and ``auto`` resolved once here, so that every policy the run loads, every checkpoint's
    record and a later ``--resume`` agree: the model's chat template when it is usable for this recipe
    (``chat_unusable``: end of turn = EOS, and a user turn appends where repair feedback is given),
    else plain prompts, said in one line naming the tokenizer and the check that failed (a model
    without a template is plain silently). The parse-time check (``check_chat``) decides alike."""
    setting = recipe.model.chat_setting
    if setting != "auto":
        return replace(recipe, model=replace(recipe.model, chat=setting))
    from transformers import AutoTokenizer

    name = recipe.model.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except OSError as e:
        raise UserError(f"cannot load model {name!r}: {e.__class__.__name__}: {str(e).splitlines()[0]}") from None
    why = chat_unusable(tokenizer, repair=uses_repair_feedback(recipe))
    if why is not None and has_chat_template(tokenizer):
        console.print(f"model.chat: auto renders plain prompts: the chat template of {name} is not usable for this "
                      f"recipe ({why}); model.chat: true requires it", markup=False, highlight=False)
    return replace(recipe, model=replace(recipe.model, chat=why is None))


def is_finished(out: Path) -> bool:
    """Whether ``out`` holds a run the pipeline finished: RUN/summary.json, and every stage's checkpoint done.

    Only the pipeline writes RUN/summary.json (``posttrain eval --run`` writes under RUN/eval/); the
    stage check also catches directories where an older posttrain let eval write it.
    """
    try:
        stages = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))["stages"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return False
    ckpts = out / "checkpoints"
    return (out / "summary.json").is_file() and all(_stage_done(ckpts / s) for s in ["base", *stages])


def start_over_hint(out: Path) -> str:
    return f"{out} keeps what was done so far; to start over with a changed recipe, pass another --out or remove {out}"


def run_recipe(recipe: Recipe, out: Path, *, resume: bool = False) -> dict[str, Any]:
    """Run every stage of ``recipe`` into ``out``; returns the summary (also RUN/summary.json, written last).

    On ``resume`` a finished stage is not redone; a finished run returns its summary. A failure once
    the run directory exists says how to start over.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own rich bars cover the long stages
    out = Path(out)
    pools = make_pools(recipe)  # a recipe the task families cannot serve fails before RUN/ is touched
    recipe = prepare_run_dir(out, recipe, resume=resume)
    summary_path = out / "summary.json"
    if resume and is_finished(out):
        console.print(f"[bold]{out} is already finished[/bold]; nothing to do (summary: {summary_path})")
        if not (out / "report.html").exists():  # interrupted between summary.json and the report
            _write_report(out)
        return json.loads(summary_path.read_text())
    try:
        recipe = decide_chat(recipe)
        summary = _run_stages(recipe, out, pools, resume=resume)
    except UserError as e:
        raise UserError(f"{e} ({start_over_hint(out)})") from None
    except Exception as e:  # a bug or a runtime failure: keep the traceback, add the way out
        e.add_note(start_over_hint(out))
        raise
    _write_atomic(summary_path, json.dumps(summary, indent=2))  # marks the run finished
    _write_report(out)
    return summary


def _write_report(out: Path) -> None:
    from posttrain.evaluate.report import write_report

    write_report(out)


def _run_stages(recipe: Recipe, out: Path, pools: TaskPools, *, resume: bool) -> dict[str, Any]:
    from posttrain.verify import pool_for

    if recipe.torch_threads is not None:
        torch.set_num_threads(recipe.torch_threads)
    seed_everything(recipe.seed)
    t_start = time.perf_counter()
    write_tasks(out / "tasks" / "train.jsonl", pools.train)
    write_tasks(out / "tasks" / "eval.jsonl", pools.eval)
    demo = generators.Demonstrator(error_rate=recipe.demonstrator.error_rate, seed=recipe.seed)
    drop_unfinished_logs(out, resume=resume)
    metrics = StepLog(out, recipe)
    try:
        # a sandbox only for domains that need one; one service verifies everything of the run
        with pool_for([*pools.train, *pools.eval], size=recipe.sandbox.workers or usable_cpus()) as pool:
            hooks = hooks_from_envs(pools.domains, pool)
            verifiers = {d: h.verify for d, h in hooks.items()}  # for episodes that verify in their steps
            cpus = recipe.sandbox.workers or usable_cpus()  # sched.backend ray: actors on a cluster instead
            backend = (ray_backend(recipe.sched.ray_address, pools.domains, num_cpus=cpus)
                       if recipe.sched.backend == "ray" else nullcontext(LocalBackend(hooks, pool)))
            with backend as chosen, Service(chosen) as service:
                summary = _run_models(recipe, out, pools, demo, service, verifiers, metrics, resume=resume)
    finally:
        metrics.close()
    return {**summary, "wall_s": time.perf_counter() - t_start}


def _run_models(recipe: Recipe, out: Path, pools: TaskPools, demo: generators.Demonstrator, service: Service,
                verifiers: Mapping[str, Verifier], metrics: StepLog, *, resume: bool) -> dict[str, Any]:
    """The base model, then each stage in the recipe's order, each policy evaluated: the summary."""
    ckpts = out / "checkpoints"
    evals: dict[str, Any] = {}
    # --- base model
    base_dir = ckpts / "base"
    if not _stage_done(base_dir):
        _save_stage(base_dir, lambda tmp: build_base(recipe, tmp))
    policy = load_model(recipe, base_dir)
    noop = summarize(noop_baseline(pools.eval, service), ks=(1,))
    if uses_demonstrator(recipe, pools.eval):
        evals["demonstrator"] = evaluate_demonstrator(demo, pools.eval, service, out)
    evals["base"] = evaluate_policy("base", policy, pools.eval, service, verifiers, recipe, out)
    if (row := eval_metrics_row("base", evals["base"])) is not None:
        metrics.write(row)
    # --- training stages, in the recipe's order; each policy stage is evaluated
    for stage in recipe.stages:
        stage_dir = ckpts / stage
        if not _stage_done(stage_dir):
            _save_stage(stage_dir, lambda tmp, stage=stage, policy=policy: run_stage(
                stage, policy, pools, demo, service, verifiers, recipe, out, tmp, metrics, resume=resume))
        if stage != "rm":
            policy = load_model(recipe, stage_dir)
            evals[stage] = evaluate_policy(stage, policy, pools.eval, service, verifiers, recipe, out)
            if (row := eval_metrics_row(stage, evals[stage])) is not None:
                metrics.write(row)
    return {
        "eval": evals,
        "noop": compact(noop),
        "eval_protocol": {
            "split": "held-out (tasks/eval.jsonl), no task shared with tasks/train.jsonl",
            "samples_per_task": recipe.eval.samples_per_task,
            "temperature": recipe.eval.temperature,
            "max_new_tokens": recipe.eval.max_new_tokens,
            "pass@1": "mean success of i.i.d. samples per task, averaged over tasks",
            **({"episodes": "repair: up to each task's limits.max_attempts attempts, feedback between them; "
                            "pass@1 is the first attempt's"} if recipe.eval.episodes == "repair" else {}),
        },
        "sched": service.stats(),
    }


def _rl_start(out: Path) -> int:
    from posttrain.train.checkpoint import load_latest

    ckpt = load_latest(out / "checkpoints" / "rl-state")
    return ckpt.step if ckpt else 0


def drop_unfinished_logs(out: Path, *, resume: bool) -> None:
    """Before any log is opened: drop lines an interrupted run wrote past its last checkpoint."""
    for stage in ("sft", "rm", "dpo"):
        if not _stage_done(out / "checkpoints" / stage):
            truncate_after(out / "metrics.jsonl", stage=stage, step=0)
    for name in ("base", "sft", "dpo", "rl"):  # evaluations run again on resume
        truncate_after(out / "metrics.jsonl", stage=f"eval/{name}", step=0)
    start = _rl_start(out) if resume else 0
    truncate_after(out / "metrics.jsonl", stage="rl", step=start)
    truncate_after(out / "trajectories" / "rl.jsonl", stage="rl", step=start)


def load_model(recipe: Recipe, path: Path) -> Policy:
    """Load a stage's policy with the recipe's dtype, device, memory options and prompts (``model.chat``)."""
    policy = load_policy(path, device=recipe.model.device, dtype=getattr(torch, recipe.model.dtype),
                         chat=recipe.model.chat_setting)
    if recipe.model.gradient_checkpointing:
        policy.model.gradient_checkpointing_enable()
        policy.model.config.use_cache = False  # generate() turns the cache back on when it samples
    return policy


def build_base(recipe: Recipe, path: Path) -> None:
    """The starting model: the embedded default built from a config, or a user's model copied in;
    either records the recipe's prompt rendering (``model.chat``) like every later checkpoint."""
    if recipe.model.name == "embedded":
        spec = EmbeddedModelSpec(
            hidden_size=recipe.model.hidden_size,
            num_layers=recipe.model.num_layers,
            intermediate_size=3 * recipe.model.hidden_size,
            max_positions=recipe.model.max_positions,
        )
        build_embedded_default(path, seed=recipe.seed, spec=spec)
        record_chat(path, resolve_chat(recipe.model.chat_setting, build_char_tokenizer()))
    else:
        load_policy(recipe.model.name, chat=recipe.model.chat_setting).save(path)


def run_stage(stage: str, policy: Policy, pools: TaskPools, demo: generators.Demonstrator, service: Service,
              verifiers: Mapping[str, Verifier], recipe: Recipe, out: Path, save_to: Path, metrics: StepLog,
              *, resume: bool) -> None:
    """Run one training stage in place on ``policy`` and save it into ``save_to`` (the rm stage: the reward model)."""
    if stage in ("sft", "rl"):
        if recipe.model.lora is not None:
            policy.model = apply_lora(policy.model, recipe.model.lora)
        if stage == "sft":
            run_sft(policy, pools.train, demo, recipe, metrics, service, verifiers)
        else:
            run_rl(policy, pools.train, service, verifiers, recipe, out, metrics, resume=resume)
        if recipe.model.lora is not None:
            policy.model = policy.model.merge_and_unload()  # checkpoints stay plain models
        policy.save(save_to)
    else:  # rm, dpo: pairs judged by the verifiers on the policy's own samples
        pairs = build_pairs(policy, pools.train, service, recipe.pairs, seed=recipe.seed)
        console.print(f"{stage}: {len(pairs)} preference pairs from {min(len(pools.train), recipe.pairs.max_tasks)} tasks")
        if not pairs:
            raise UserError(f"stage {stage}: no preference pairs (the policy passed or failed every sample)")
        log = _stage_logger(stage, metrics)
        if stage == "dpo":
            run_dpo(policy, pairs, recipe.dpo, log)
            policy.save(save_to)
        else:
            run_rm(out / "checkpoints" / "base", policy, pairs, recipe.rm, save_to, log)


def _stage_logger(stage: str, metrics: StepLog) -> Callable[[dict[str, float]], None]:
    counter = iter(range(10**9))
    return lambda m: metrics.write({"stage": stage, "step": next(counter), **m})


def run_sft(policy: Policy, train: Sequence[Task], demo: generators.Demonstrator, recipe: Recipe,
            metrics: StepLog, service: Service, verifiers: Mapping[str, Verifier]) -> None:
    """SFT on the recipe's demonstrations. With tool episodes (``rl.episodes`` or ``eval.episodes``:
    tool), ``references`` are demonstrated as tool-calling episodes (``tool_demonstrations``)."""
    cfg = recipe.sft
    demos: Sequence[Demonstration]
    if cfg.demonstrations == "demonstrator":
        demos = [(t.prompt, demo.respond(t)) for t in train]
    elif cfg.demonstrations == "repair":  # the feedback-only tasks as episodes, the others as single answers
        episodes = [t for t in train if is_feedback_only(t)]
        demos = [*repair_demonstrations(policy, episodes, service, verifiers, demo),
                 *((model_prompt(t), demo.respond(t)) for t in train if not is_feedback_only(t))]
    elif cfg.demonstrations == "references" and "tool" in (recipe.rl.episodes, recipe.eval.episodes):
        demos = tool_demonstrations(policy, train, service, sandbox_of(service))
    else:  # held-out tasks were checked against the demonstrations when the recipe was parsed
        demos = sft_demonstrations(recipe, train, ())
    steps = max(1, int(cfg.epochs * len(demos) / cfg.batch_size))
    params = SFTParams(steps=steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup_frac=cfg.warmup_frac,
                       seed=recipe.seed, pack_len=cfg.pack_len)
    with progress_bar("sft", steps) as advance:
        train_sft(policy, demos, params, log=lambda m: metrics.write({"stage": "sft", **m}), progress=advance)


def tool_demonstrations(policy: Policy, train: Sequence[Task], service: Service, pool: Any | None) -> list[Trajectory]:
    """Each training task's reference as a tool-calling episode in the model's chat template (its calls,
    their results as the environment returns them, a final answer): what RL and evaluation run. A
    demonstration that does not end with a pass is a ``UserError`` naming the task."""
    from posttrain.envs import get_env
    from posttrain.envs.tool._episode import FINAL_ANSWER

    chat = ChatTemplate(policy.tokenizer)
    scripts = {}
    for t in train:
        texts = [chat.write_tool_calls(calls) if calls else FINAL_ANSWER for calls in get_env(t.domain).demonstration_steps(t)]
        scripts[t.id] = [((*chat.encode(text), chat.eos_token_id), text) for text in texts]

    def make(task: Task) -> Any:  # as many steps as its demonstration has
        return get_env(task.domain).episode_env(chat, pool=pool, max_steps=len(scripts[task.id]))

    demos, lost = [], []
    for task, traj in zip(train, play_scripts(train, make, scripts, service), strict=True):
        if traj is None:
            lost.append(task.id)
            continue
        last = traj.verdicts[-1] if traj.verdicts else None
        if len(traj.turns) != len(scripts[task.id]) or last is None or not last.passed:
            why = "no verdict" if last is None else f"{last.outcome}: {last.feedback[:200]}"
            raise UserError(f"sft.demonstrations: task {task.id!r}: its tool-calling demonstration does not pass ({why})")
        demos.append(demonstration_episode(task.id, [(t.observation_ids, t.action_ids) for t in traj.turns]))
    return _kept(demos, lost, len(train), "tool")


class _ScriptedSampler:
    """A ``Sampler`` for one scripted episode: its k-th request gets the k-th (action ids, text)."""

    def __init__(self, script: Sequence[tuple[tuple[int, ...], str]]) -> None:
        self.script, self.k = script, 0

    def generate(self, prompt_ids: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        (context,) = prompt_ids
        ids, text = self.script[self.k]  # IndexError: the runner asked past the script (a bug)
        self.k += 1
        return [Generation(tuple(context), ids, (0.0,) * len(ids), text, "eos")]


def play_scripts(tasks: Sequence[Task], make_env: Callable[[Task], Any],
                 scripts: Mapping[str, Sequence[tuple[tuple[int, ...], str]]], service: Service) -> list[Trajectory | None]:
    """Scripted demonstration episodes (``scripts[task.id]``: the actions, as ids and text), each played
    by the episode runner through the execution service like RL's episodes: every step is a job of
    the service and an infra error restarts the episode in a fresh environment. None: an episode lost
    to infra errors (its tries ran out)."""
    def one(task: Task) -> Trajectory | None:
        script = scripts[task.id]
        params = SamplingParams(temperature=1.0, max_new_tokens=max(len(ids) for ids, _ in script))
        traj = run_batch(_ScriptedSampler(script), [Episode(task, make_env(task), f"demo/{task.id}", 0, make_env=make_env)],
                         params, max_turns=len(script), service=service)[0]
        return None if any(v.is_infra_error for v in traj.verdicts) else traj

    with ThreadPoolExecutor(max_workers=max(1, service.workers)) as ex:  # each waits on its steps' jobs
        return list(ex.map(one, tasks))


def _kept(demos: list[Trajectory], lost: list[str], n: int, kind: str) -> list[Trajectory]:
    if lost:
        warnings.warn(f"sft.demonstrations: {kind}: {len(lost)} of {n} demonstration episodes were lost to infra "
                      f"errors (first: task {lost[0]!r}); SFT runs without them", stacklevel=3)
    if not demos:
        raise UserError(f"sft.demonstrations: {kind}: every demonstration episode was lost to infra errors")
    return demos


def repair_demonstrations(policy: Policy, train: Sequence[Task], service: Service, verifiers: Mapping[str, Verifier],
                          demo: generators.Demonstrator) -> list[Trajectory]:
    """Repair episodes of the scripted demonstrator (``generators.repair_attempts``: a guess, then the
    fix, or the guess again on the tasks it errs on), each attempt after the ``RepairEnv``'s own
    observation (its feedback, ids exactly as RL and evaluation see them), played by
    ``play_scripts``. A guess that does not fail is a ``UserError``: the task is not of the
    feedback-only family."""
    scripts = {t.id: [(tuple(policy.encode_completion(text)), text) for text in generators.repair_attempts(t, demo)]
               for t in train}
    make = repair_envs(policy, verifiers, VerdictCache(), chat=policy.chat, infra_retries=0)  # the runner restarts
    demos, lost = [], []
    for task, traj in zip(train, play_scripts(train, make, scripts, service), strict=True):
        if traj is None:
            lost.append(task.id)
            continue
        if len(traj.turns) != len(scripts[task.id]) or any(v.passed for v in traj.verdicts[:-1]):
            first = traj.verdicts[0] if traj.verdicts else None
            raise UserError(f"sft.demonstrations: repair: the guess on task {task.id!r} did not fail "
                            f"({first.outcome if first else 'no verdict'}); the task is not of the feedback-only family")
        demos.append(demonstration_episode(task.id, [(t.observation_ids, t.action_ids) for t in traj.turns]))
    return _kept(demos, lost, len(train), "repair")


def run_rl(policy: Policy, train: Sequence[Task], service: Service, verifiers: Mapping[str, Verifier], recipe: Recipe,
           out: Path, metrics: StepLog, *, resume: bool) -> None:
    scorer = None
    if recipe.rl.reward_model_weight > 0:
        scorer = RewardModelScorer(out / "checkpoints" / "rm", pad_id=policy.tokenizer.pad_token_id)
    critic = None
    if recipe.rl.algorithm == "ppo":  # the value head starts from the backbone RL starts from
        critic = Critic(Path(policy.path), policy.tokenizer.pad_token_id, lr=recipe.rl.critic_lr, lam=recipe.rl.gae_lambda,
                        device=recipe.model.device, dtype=getattr(torch, recipe.model.dtype))
    with progress_bar(f"rl ({recipe.rl.algorithm})", recipe.rl.steps) as advance:
        advance(_rl_start(out) if resume else 0)
        train_grpo(policy, train, service, recipe.rl, reward_weights=recipe.reward, reward_model=scorer,
                   critic=critic, out=out, seed=recipe.seed, resume=resume,
                   rollout=(RayRollout(policy, workers=recipe.sched.rollout_workers, seed=recipe.seed)
                            if recipe.sched.backend == "ray" else None),
                   episodes=episode_spec(recipe.rl, policy, verifiers, train, sandbox_of(service)), log=lambda m: metrics.write({"stage": "rl", **m}), progress=advance)


__all__ = ["TaskPools", "VerdictCache", "is_finished", "make_pools", "recipe_changes", "run_recipe"]
