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

import fcntl
import json
import os
import random
import shlex
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from rich.console import Console

from posttrain.cli._header import embedded_spec, run_header
from posttrain.cli._progress import progress_bar
from posttrain.cli._ranks import RankSpec, local_world, ranks
from posttrain.cli._service import domain_hooks, pool_for, sandbox_of
from posttrain.cli._stage_check import stage_checkpoint_problem
from posttrain.config import dump_yaml, parse_config, parse_yaml, to_dict
from posttrain.envs import is_feedback_only, model_prompt, task_to_record
from posttrain.errors import ConfigError, UserError
from posttrain.evaluate.baseline import compare_domains, load_baseline
from posttrain.evaluate.loggers import make_loggers, publish_artifacts
from posttrain.evaluate.records import EvalRecord, write_records
from posttrain.evaluate.runner import Response, compact, noop_baseline, score_responses
from posttrain.evaluate.sources import episode_figures, prompt_format, runner_episodes
from posttrain.evaluate.summary import group_attempts, summarize
from posttrain.evaluate.views import write_views
from posttrain.policy import (
    CHAT_RECORD,
    Policy,
    RayRollout,
    SpecConfig,
    build_char_tokenizer,
    build_embedded_default,
    chat_unusable,
    has_chat_template,
    inspect_model,
    load_policy,
    record_chat,
    recorded_chat,
    resolve_chat,
)
from posttrain.rollout.episodes import (
    MULTI_TURN,
    EpisodeKind,
    agent_chat,
    agent_script,
    attempts_allowed,
    is_multi_turn,
    make_episodes,
    play_scripts,
    protocol_note,
)
from posttrain.sandbox import usable_cpus
from posttrain.sched import LocalBackend, Service, ray_backend
from posttrain.tasks import generators, make_canaries
from posttrain.train._backends import rollout_weights
from posttrain.train._critic import Critic
from posttrain.train._dist import DataParallel
from posttrain.train._lora import apply_lora
from posttrain.train._runlog import JsonlWriter, truncate_after
from posttrain.train.checkpoint import CheckpointError, commit_dir, disk_full, disk_full_error
from posttrain.train.grpo import EpisodeSpec, train_grpo
from posttrain.train.preference import RewardModelScorer, build_pairs, run_dpo, run_rm
from posttrain.train.recipe import (
    Recipe,
    RLConfig,
    check_inputs,
    demonstration_kind,
    rl_sampler,
    sft_demonstrations,
    uses_demonstrator,
    uses_repair_feedback,
)
from posttrain.train.sft import Demonstration, SFTParams, demonstration_episode, train_sft
from posttrain.types import Task, Trajectory

console = Console(stderr=True, soft_wrap=True)  # paths stay on one line
DONE = "DONE"  # marker file written last into a finished stage's checkpoint directory


class StepLog:
    """metrics.jsonl (always) plus the trackers the recipe switched on (TensorBoard, MLflow, W&B)."""

    def __init__(self, out: Path, recipe: Recipe) -> None:
        self.jsonl = JsonlWriter(out / "metrics.jsonl")
        self.trackers = make_loggers(out, tensorboard=recipe.tracking.tensorboard, mlflow=recipe.tracking.mlflow,
                                     wandb=recipe.tracking.wandb)

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


def evaluate_policy(
    name: str,
    policy: Policy,
    tasks: Sequence[Task],
    service: Service,
    recipe: Recipe,
    out: Path,
) -> dict[str, Any]:
    """Sample ``eval.samples_per_task`` episodes of ``eval.episodes`` per held-out task through the
    episode runner (``evaluate.sources.runner_episodes``: one answer each, or multi-turn episodes
    verifying inside their steps through ``service``'s nested lane), write records + summary.

    Multi-turn episodes (repair, agent) give one record per attempt, and the summary adds repair@r,
    mean attempts to success, turns and tokens per episode, the truncation rate and the tool-call
    validity rate."""
    cfg = recipe.eval
    records: list[EvalRecord] = []
    stats: list[dict[str, float]] = []
    chunk = 50
    with progress_bar(f"eval {name}", len(tasks), unit="task") as advance:
        for start in range(0, len(tasks), chunk):
            part = tasks[start : start + chunk]
            part_records, part_stats = runner_episodes(
                policy, part, cfg.episodes, n=cfg.samples_per_task, temperature=cfg.temperature,
                max_new_tokens=cfg.max_new_tokens, seed=recipe.seed + start, stage=f"eval/{name}",
                max_turns=cfg.max_turns, pool=sandbox_of(service), service=service)
            records += part_records
            stats += [part_stats] if is_multi_turn(cfg.episodes) else []
            advance(start + len(part))
    write_records(out / "eval" / f"{name}.jsonl", records)
    write_views(records, tasks, sandbox_of(service), out / "views" / name)  # (cad: renders beside the gold)
    summary = summarize(records, ks=(1,))
    if recipe.tasks.sampler.canary_rate > 0 and cfg.episodes == "single":  # canaries in evaluation too
        summary["canaries"] = evaluate_canaries(name, policy, tasks, service, recipe, out)
    if stats:
        summary["episodes"] = episode_figures(summary, stats, max_attempts=attempts_allowed(cfg.episodes, tasks))
    return summary


def evaluate_canaries(name: str, policy: Policy, tasks: Sequence[Task], service: Service, recipe: Recipe,
                      out: Path) -> dict[str, int]:
    """The canaries of the held-out domains (``tasks.sampler.canaries_per_domain`` each, as RL's),
    sampled like the held-out tasks into RUN/canaries/<name>.jsonl, apart from the eval files (no
    honest response passes a canary: a pass is a hack alarm, never part of pass@1)."""
    cfg = recipe.eval
    canaries = make_canaries(dict.fromkeys(t.domain for t in tasks), recipe.tasks.sampler.canaries_per_domain,
                             seed=recipe.seed)
    if not canaries:
        return {"episodes": 0, "passed": 0}
    records, _ = runner_episodes(policy, canaries, "single", n=cfg.samples_per_task, temperature=cfg.temperature,
                                 max_new_tokens=cfg.max_new_tokens, seed=recipe.seed, stage=f"eval/{name}",
                                 max_turns=None, pool=sandbox_of(service), service=service)
    write_records(out / "canaries" / f"{name}.jsonl", records)
    episodes = group_attempts(records)  # summarize's rule: an episode once, whatever its records (retries, attempts)
    return {"episodes": len(episodes), "passed": sum(ep.first_pass is not None for ep in episodes)}


def eval_metrics_row(name: str, summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metrics.jsonl row of a repair evaluation (stage ``eval/<model>``), or None for single-turn."""
    figures = summary.get("episodes")
    if figures is None:
        return None
    return {"stage": f"eval/{name}", "step": 0,
            **{k: v for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}}


def episode_spec(cfg: RLConfig, policy: Policy, train: Sequence[Task], service: Service) -> EpisodeSpec:
    """The recipe's episode keys (``rl.episodes``, ``rl.max_turns``, ...) -> GRPO's ``EpisodeSpec``: the
    episodes built in one place (``rollout.episodes.make_episodes``) and their credit. ``service``: where
    their steps run and verify (its nested lane), its sandbox pool the one agent environments run in."""
    plan = make_episodes(cfg.episodes, train, policy, service=service, prompt_chat=policy.chat, pool=sandbox_of(service),
                         max_turns=cfg.max_turns, max_tokens=cfg.max_episode_tokens)
    return EpisodeSpec(plan, attempt_discount=cfg.attempt_discount, process_coef=cfg.process_coef)


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
    """``write(tmp)`` fills a fresh temporary directory, which becomes ``stage_dir`` (with DONE) in one rename.
    A full disk on the way is one ``CheckpointError`` naming ``stage_dir`` and quoting the write that failed
    (``_full_disk_line``), the half-written copy removed (it was a traceback, the copy left holding the space
    that ran out); the stages saved before it stay as they were."""
    tmp = stage_dir.with_name(f".tmp-{stage_dir.name}")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted run
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        write(tmp)  # creates tmp when it saves (a stage interrupted while training leaves nothing)
        (tmp / DONE).write_text("ok\n")
        commit_dir(tmp, stage_dir)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if not disk_full(e):
            raise
        raise CheckpointError(f"{stage_dir}: no space left on the device while saving the stage's checkpoint "
                              f"({_full_disk_line(e)}); the half-written copy was removed: free space, then "
                              "--resume") from None


def _full_disk_line(e: BaseException) -> str:
    """``Type: first line`` of the deepest error in ``e``'s chain that says the disk is full
    (``disk_full_error``). An OSError raised at ``open`` names its file in that line; one raised by
    the write itself names none, so the stage's directory is the closest name."""
    full = disk_full_error(e) or e
    text = str(full).splitlines()[0] if str(full) else ""
    return f"{type(full).__name__}: {text}"


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
    return parse_yaml(dump_yaml(full))


def hold_run_dir(out: Path) -> int:
    """Make ``out`` (if need be) and hold an exclusive lock on it for this process's run; returns the fd
    (closing it lets go; the kernel does when the process dies). Two posttrain processes in one run
    directory -- a run started twice at once, a ``--resume`` while the run still goes, two quickstarts
    that picked the same directory -- wrote its checkpoints, records and config over each other's; the
    second is refused in one line, before it writes anything."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:  # an existing file, a path under a file, a read-only parent
        raise UserError(f"--out {out}: cannot create the run directory there ({e.strerror or e})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UserError(f"--out {out}: another posttrain process is running in this run directory; let it finish "
                        "(or stop it), then --resume") from None
    return fd


def prepare_run_dir(out: Path, recipe: Recipe, *, resume: bool) -> Recipe:
    """Create RUN/, save the resolved config; refuse to overwrite another run unless resuming it with the same
    recipe. Returns the recipe to run: on resume, ``model.chat`` as the run's prompts were rendered."""
    cfg_path = out / "config.yaml"
    resolved = to_dict(recipe)
    if cfg_path.exists():
        if not resume:
            raise UserError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
        try:
            saved = parse_yaml(cfg_path.read_text(encoding="utf-8"))  # an alias bomb: refused, not expanded
        except yaml.YAMLError as e:
            raise UserError(f"{cfg_path}: not valid YAML ({str(e).splitlines()[0]}); the run cannot be resumed") from None
        except (OSError, UnicodeDecodeError) as e:  # a file the run did not write (it writes UTF-8 YAML)
            raise UserError(f"{cfg_path}: cannot read it as UTF-8 text ({e.__class__.__name__}); the run cannot be "
                            "resumed") from None
        if not isinstance(saved, dict):
            kind = "empty" if saved is None else f"a YAML {type(saved).__name__}"
            raise UserError(f"{cfg_path}: not a saved recipe ({kind}, expected a mapping of sections); the run cannot "
                            "be resumed")
        as_saved = parse_yaml(dump_yaml(resolved))  # compare like with like
        changed = recipe_changes(_with_defaults(saved), as_saved)
        if _stage_done(out / "checkpoints" / "base"):  # model.chat is judged by the run's record instead
            changed = [c for c in changed if not c.startswith("model.chat ")]
        if recipe.model.name != "embedded":  # sizes record the model's own (an older run saved the embedded's)
            changed = [c for c in changed if not c.startswith(("model.hidden_size ", "model.num_layers ",
                                                               "model.max_positions "))]
        if changed:
            raise UserError(f"{cfg_path}: the run was started with a different recipe (changed: {', '.join(changed)}); "
                            f"--resume needs the same recipe: drop the changes, or start over with another --out")
        check_stage_checkpoints(out, recipe)
        return resumed_recipe(out, recipe)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_atomic(cfg_path, dump_yaml(resolved))
    except OSError as e:  # an existing file, a path under a file, a read-only parent
        raise UserError(f"--out {out}: cannot create the run directory there ({e.strerror or e})") from None
    return recipe


def check_stage_checkpoints(out: Path, recipe: Recipe) -> None:
    """Refuse ``--resume`` of an unfinished run one of whose finished stage checkpoints is not whole (a
    truncated weights or JSON file: ``_stage_check``), naming the file, before anything is re-run or
    rewritten; a finished run is left alone (``--resume`` loads nothing from it)."""
    if is_finished(out):
        return
    order = ["base", *recipe.stages]
    for i, stage in enumerate(order):
        path = out / "checkpoints" / stage
        if not _stage_done(path) or (why := stage_checkpoint_problem(path)) is None:
            continue
        later = [out / "checkpoints" / name for s in order[i:] for name in (s, f"{s}-state")]  # rl-state: RL's resume
        redo = [str(p) for p in later if p.exists()]
        raise UserError(f"{why}; --resume cannot load the {stage} checkpoint: start over with another --out, or "
                        f"remove {shlex.join(redo)} to train {'them' if len(redo) > 1 else 'it'} again")


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


def decide_chat(recipe: Recipe, *, say: bool = True) -> Recipe:
    """``recipe`` with ``model.chat`` decided for the whole run: a bool as given (or as ``--resume``
    kept it), and ``auto`` resolved once here, so that every policy the run loads, every checkpoint's
    record and a later ``--resume`` agree: the model's chat template when it is usable for this recipe
    (``chat_unusable``: end of turn = EOS, and a user turn appends where repair feedback is given),
    else plain prompts, said in one line naming the tokenizer and the check that failed (a model
    without a template is plain silently; ``say=False``: the run's header says it). The parse-time
    check (``check_chat``) decides alike."""
    setting = recipe.model.chat_setting
    if setting != "auto":
        return replace(recipe, model=replace(recipe.model, chat=setting))
    from transformers import AutoTokenizer

    name = recipe.model.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_source(recipe))
    except OSError as e:
        raise UserError(f"cannot load model {name!r}: {e.__class__.__name__}: {str(e).splitlines()[0]}") from None
    why = chat_unusable(tokenizer, repair=uses_repair_feedback(recipe))
    if say and why is not None and has_chat_template(tokenizer):
        console.print(f"model.chat: auto renders plain prompts: the chat template of {name} is not usable for this "
                      f"recipe ({why}); model.chat: true requires it", markup=False, highlight=False)
    return replace(recipe, model=replace(recipe.model, chat=why is None))


def is_finished(out: Path) -> bool:
    """Whether ``out`` holds a run the pipeline finished: RUN/summary.json, and every stage's checkpoint done.

    Only the pipeline writes RUN/summary.json (``posttrain eval --run`` writes under RUN/eval/); the
    stage check also catches directories where an older posttrain let eval write it.
    """
    try:
        stages = parse_yaml((out / "config.yaml").read_text(encoding="utf-8"))["stages"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return False  # not a run's config.yaml: prepare_run_dir names what is wrong with it
    if not isinstance(stages, list) or not all(isinstance(s, str) for s in stages):
        return False
    ckpts = out / "checkpoints"
    return (out / "summary.json").is_file() and all(_stage_done(ckpts / s) for s in ["base", *stages])


def start_over_hint(out: Path) -> str:
    return f"{out} keeps what was done so far; to start over with a changed recipe, pass another --out or remove {out}"


def run_recipe(recipe: Recipe, out: Path, *, resume: bool = False, source: str | None = None) -> dict[str, Any]:
    """Run every stage of ``recipe`` into ``out``; returns the summary (also RUN/summary.json, written last).

    On ``resume`` a finished stage is not redone; a finished run returns its summary. A failure once
    the run directory exists says how to start over. The run starts with its header on stderr
    (``cli._header``; ``source``: the recipe file and overrides, its first line).
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own rich bars cover the long stages
    out = Path(out)
    pools = make_pools(recipe)  # a recipe the task families cannot serve fails before RUN/ is touched
    if recipe.sched.backend == "ray" and recipe.sched.ray_address is not None:
        from posttrain.sched import check_reachable

        check_reachable(recipe.sched.ray_address)  # a cluster nobody answers at: one line, before RUN/
    held = hold_run_dir(out)
    try:
        return _run_held(recipe, out, pools, resume=resume, source=source)
    finally:
        os.close(held)


def _run_held(recipe: Recipe, out: Path, pools: TaskPools, *, resume: bool, source: str | None) -> dict[str, Any]:
    """``run_recipe`` once this process holds ``out`` (``hold_run_dir``)."""
    fresh = resume and not (out / "config.yaml").exists()  # --resume where no run began: a first launch, or a typo
    recipe = prepare_run_dir(out, recipe, resume=resume)
    summary_path = out / "summary.json"
    if resume and is_finished(out):
        console.print(f"[bold]{out} is already finished[/bold]; nothing to do (summary: {summary_path})")
        if not (out / "report.html").exists():  # interrupted between summary.json and the report
            _write_report(out)
        return json.loads(summary_path.read_text())
    try:
        decided = decide_chat(recipe, say=False)
        if fresh:
            console.print(f"--resume: no run in {out} to resume; starting one there", markup=False, highlight=False)
        for line in run_header(recipe, bool(decided.model.chat), out, pools.train, pools.eval,
                               resume=resume and not fresh, source=source):
            console.print(line, markup=False, highlight=False)
        summary = _run_stages(decided, out, pools, resume=resume)
        if recipe.eval.baselines:  # the seesaw gate (eval.baselines): the run's last model, per domain
            summary["regression"] = regression_gate(recipe, summary)
    except UserError as e:
        raise UserError(f"{e} ({start_over_hint(out)})") from None
    except Exception as e:  # a bug or a runtime failure: keep the traceback, add the way out
        e.add_note(start_over_hint(out))
        raise
    _write_atomic(summary_path, json.dumps(summary, indent=2))  # marks the run finished
    _write_report(out)
    publish_artifacts(out, tensorboard=recipe.tracking.tensorboard, mlflow=recipe.tracking.mlflow,
                      wandb=recipe.tracking.wandb)
    return summary


def regression_gate(recipe: Recipe, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The last model's held-out pass@1 per domain against ``eval.baselines`` (``compare_domains``)."""
    last = [s for s in ("base", *recipe.stages) if s != "rm" and s in summary["eval"]][-1]
    protocol = {"eval_protocol": summary["eval_protocol"]} if isinstance(summary.get("eval_protocol"), dict) else {}
    current = {**protocol, **summary["eval"][last]}  # its settings, held to each baseline run's
    gate = compare_domains(current, {p: load_baseline(p) for p in recipe.eval.baselines})
    return {"model": last, **gate}


def _write_report(out: Path) -> None:
    from posttrain.evaluate.report import write_report

    write_report(out)


def _run_stages(recipe: Recipe, out: Path, pools: TaskPools, *, resume: bool) -> dict[str, Any]:
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
        with run_service(recipe, pools) as service:
            summary = _run_models(recipe, out, pools, demo, service, metrics, resume=resume)
    finally:
        metrics.close()
    return {**summary, "wall_s": time.perf_counter() - t_start}


@contextmanager
def run_service(recipe: Recipe, pools: TaskPools) -> Iterator[Service]:
    """The one execution service that verifies everything of the run: a sandbox pool only for
    domains that need one, the recipe's backend (local, or Ray actors on a cluster)."""
    agent = "agent" in (recipe.rl.episodes, recipe.eval.episodes)  # workspace episodes need a pool
    cpus = recipe.sandbox.workers or usable_cpus()
    with pool_for([*pools.train, *pools.eval], size=cpus, episodes=agent) as pool:
        hooks = domain_hooks(pools.domains, pool)
        backend = (ray_backend(recipe.sched.ray_address, pools.domains, num_cpus=cpus, hooks=domain_hooks)
                   if recipe.sched.backend == "ray" else nullcontext(LocalBackend(hooks, pool)))
        with backend as chosen, Service(chosen) as service:
            yield service


def _run_models(recipe: Recipe, out: Path, pools: TaskPools, demo: generators.Demonstrator, service: Service,
                metrics: StepLog, *, resume: bool) -> dict[str, Any]:
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
    evals["base"] = evaluate_policy("base", policy, pools.eval, service, recipe, out)
    if (row := eval_metrics_row("base", evals["base"])) is not None:
        metrics.write(row)
    # --- training stages, in the recipe's order; each policy stage is evaluated
    for stage in recipe.stages:
        stage_dir = ckpts / stage
        if not _stage_done(stage_dir):
            _save_stage(stage_dir, lambda tmp, stage=stage, policy=policy: run_stage(
                stage, policy, pools, demo, service, recipe, out, tmp, metrics, resume=resume))
        if stage != "rm":
            policy = load_model(recipe, stage_dir)
            evals[stage] = evaluate_policy(stage, policy, pools.eval, service, recipe, out)
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
            **({"episodes": note} if (note := protocol_note(recipe.eval.episodes)) is not None else {}),
            # every stage loads with model.chat and the tokenizer saved from base: one rendering, the last's
            "prompt_format": prompt_format(policy, recipe.eval.episodes),
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
        build_embedded_default(path, seed=recipe.seed, spec=embedded_spec(recipe.model))
        record_chat(path, resolve_chat(recipe.model.chat_setting, build_char_tokenizer()))
    else:
        load_policy(model_source(recipe), chat=recipe.model.chat_setting).save(path)


def model_source(recipe: Recipe) -> str:
    """``model.name`` as ``from_pretrained`` takes it: ``~`` expanded, as the recipe's parse expanded it
    when it checked the directory (``ModelConfig``) and as a task source's ``file`` is. Before, a
    ``~/models/x`` that the parse accepted reached ``from_pretrained`` as written, which read it as a
    hub id: "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"."""
    return os.path.expanduser(recipe.model.name)


def run_stage(stage: str, policy: Policy, pools: TaskPools, demo: generators.Demonstrator, service: Service,
              recipe: Recipe, out: Path, save_to: Path, metrics: StepLog,
              *, resume: bool) -> None:
    """Run one training stage in place on ``policy`` and save it into ``save_to`` (the rm stage: the reward model)."""
    if stage in ("sft", "rl"):
        if recipe.model.lora is not None:
            policy.model = apply_lora(policy.model, recipe.model.lora)
        if stage == "sft":
            run_sft(policy, pools.train, demo, recipe, metrics, service)
        else:
            run_rl(policy, pools.train, service, recipe, out, metrics, resume=resume, held=pools.eval)
        if recipe.model.lora is not None:
            policy.model = policy.model.merge_and_unload()  # checkpoints stay plain models
        policy.save(save_to)
    else:  # rm, dpo: pairs judged by the verifiers on the policy's own samples
        pairs = build_pairs(policy, pools.train, service, recipe.pairs, seed=recipe.seed)
        console.print(f"{stage}: {len(pairs)} preference pairs from {min(len(pools.train), recipe.pairs.max_tasks)} tasks")
        if not pairs:
            raise UserError(f"stage {stage}: no preference pairs (the policy passed or failed every sample)")
        cfg = recipe.dpo if stage == "dpo" else recipe.rm
        steps = cfg.epochs * -(-len(pairs) // cfg.batch_size)
        with progress_bar(stage, steps) as advance:  # rate and time left, as SFT's and RL's
            log = _stage_logger(stage, metrics, advance)
            if stage == "dpo":
                run_dpo(policy, pairs, recipe.dpo, log)
            else:
                run_rm(out / "checkpoints" / "base", policy, pairs, recipe.rm, save_to, log)
        if stage == "dpo":
            policy.save(save_to)


def _stage_logger(stage: str, metrics: StepLog, advance: Callable[[int], None]) -> Callable[[dict[str, float]], None]:
    """Each step's metrics into metrics.jsonl as ``stage``, numbered from 0, and the bar moved past it."""
    counter = iter(range(10**9))

    def log(m: dict[str, float]) -> None:
        step = next(counter)
        metrics.write({"stage": stage, "step": step, **m})
        advance(step + 1)

    return log


def run_sft(policy: Policy, train: Sequence[Task], demo: generators.Demonstrator, recipe: Recipe,
            metrics: StepLog, service: Service) -> None:
    """SFT on the recipe's demonstrations. Demonstrations played as episodes (``demonstration_kind``:
    repair for ``sft.demonstrations: repair``, agent for ``references`` when RL or evaluation runs agent
    episodes) go through ``episode_demonstrations``, the others are single answers."""
    cfg = recipe.sft
    kind = demonstration_kind(recipe)
    demos: Sequence[Demonstration]
    if cfg.demonstrations == "demonstrator":
        demos = [(model_prompt(t), demo.respond(t)) for t in train]  # what RL and evaluation show, as elsewhere
    elif kind in MULTI_TURN:
        demos = episode_demonstrations(kind, policy, train, service, demo)
    else:  # held-out tasks were checked against the demonstrations when the recipe was parsed
        demos = sft_demonstrations(recipe, train, ())
    steps = max(1, int(cfg.epochs * len(demos) / cfg.batch_size))
    params = SFTParams(steps=steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup_frac=cfg.warmup_frac,
                       seed=recipe.seed, pack_len=cfg.pack_len)
    with progress_bar("sft", steps) as advance:
        train_sft(policy, demos, params, log=lambda m: metrics.write({"stage": "sft", **m}), progress=advance)


def episode_demonstrations(kind: EpisodeKind, policy: Policy, train: Sequence[Task], service: Service,
                           demo: generators.Demonstrator) -> list[Demonstration]:
    """SFT demonstrations played as episodes of ``kind`` in the environments RL and evaluation run
    (``rollout.episodes.play_scripts``: observations exactly as they see them), then the training
    tasks no script plays as single answers of the demonstrator. Scripts (``_SCRIPTS``): agent: each
    task's reference calls and a final answer (``rollout.episodes.agent_script``); repair: the
    demonstrator's attempts at each feedback-only task (``generators.repair_attempts``). An episode
    that does not play as scripted is a ``UserError`` naming the task; episodes lost to infra errors
    are left out with a warning."""
    scripts = _SCRIPTS[kind](policy, train, demo)
    played = [t for t in train if t.id in scripts]
    def plan(task: Task, steps: int) -> Any:  # as many steps as its script has
        return make_episodes(kind, [task], policy, service=service, prompt_chat=policy.chat, pool=sandbox_of(service),
                             max_turns=steps)

    demos, lost = [], []
    for task, traj in zip(played, play_scripts(plan, played, scripts, service, workers=service.workers), strict=True):
        if traj is None:
            lost.append(task.id)
            continue
        if (why := _SCRIPT_CHECKS[kind](traj, len(scripts[task.id]))) is not None:
            raise UserError(f"sft.demonstrations: {kind}: task {task.id!r}: {why}")
        demos.append(demonstration_episode(task.id, [(t.observation_ids, t.action_ids) for t in traj.turns]))
    return [*_kept(demos, lost, len(played), kind), *((model_prompt(t), demo.respond(t)) for t in train
                                                    if t.id not in scripts)]


def _agent_scripts(policy: Policy, train: Sequence[Task], demo: generators.Demonstrator) -> dict[str, Any]:
    chat = agent_chat(policy.tokenizer)
    try:
        return {t.id: agent_script(chat, t) for t in train}
    except ValueError as e:
        raise UserError(f"sft.demonstrations: {e}") from None


def _repair_scripts(policy: Policy, train: Sequence[Task], demo: generators.Demonstrator) -> dict[str, Any]:
    return {t.id: [(tuple(policy.encode_completion(text)), text) for text in generators.repair_attempts(t, demo)]
            for t in train if is_feedback_only(t)}


_SCRIPTS: Mapping[str, Callable[[Policy, Sequence[Task], generators.Demonstrator], dict[str, Any]]] = {
    "agent": _agent_scripts, "repair": _repair_scripts}
"""Each multi-turn kind's scripted demonstrations: {task id: the actions, as (ids, text)}."""


def _agent_played(traj: Trajectory, steps: int) -> str | None:
    last = traj.verdicts[-1] if traj.verdicts else None
    if len(traj.turns) != steps or last is None or not last.passed:
        why = "no verdict" if last is None else f"{last.outcome}: {last.feedback[:200]}"
        return f"its demonstration does not pass ({why})"
    return None


def _repair_played(traj: Trajectory, steps: int) -> str | None:
    if len(traj.turns) != steps or any(v.passed for v in traj.verdicts[:-1]):
        first = traj.verdicts[0] if traj.verdicts else None
        return (f"the guess did not fail ({first.outcome if first else 'no verdict'}); the task is not of the "
                f"feedback-only family")
    return None


_SCRIPT_CHECKS: Mapping[str, Callable[[Trajectory, int], str | None]] = {"agent": _agent_played,
                                                                         "repair": _repair_played}
"""Whether a scripted episode played as its script says: an agent's ends with a pass; a repair's uses
every scripted attempt (the guess fails)."""


def _kept(demos: list[Trajectory], lost: list[str], n: int, kind: str) -> list[Trajectory]:
    if lost:
        warnings.warn(f"sft.demonstrations: {kind}: {len(lost)} of {n} demonstration episodes were lost to infra "
                      f"errors (first: task {lost[0]!r}); SFT runs without them", stacklevel=3)
    if not demos:
        raise UserError(f"sft.demonstrations: {kind}: every demonstration episode was lost to infra errors")
    return demos


def run_rl(policy: Policy, train: Sequence[Task], service: Service, recipe: Recipe,
           out: Path, metrics: StepLog | None, *, resume: bool, held: Sequence[Task] = (),
           dp: DataParallel | None = None) -> None:
    """The RL stage on ``policy``, in place. ``rl.data_parallel`` N > 1: this process is rank 0 and
    starts the others (``cli._ranks``); ``dp`` (and no ``metrics``): one of those others, which
    writes nothing."""
    if recipe.rl.data_parallel > 1 and dp is None:
        spec = RankSpec(out, recipe, train, held, start=Path(policy.path), resume=resume)
        threads = torch.get_num_threads()
        torch.set_num_threads(recipe.torch_threads or max(1, usable_cpus() // local_world(recipe.rl.data_parallel)))
        try:
            with ranks(spec) as rank0:
                run_rl(policy, train, service, recipe, out, metrics, resume=resume, held=held, dp=rank0)
        finally:
            torch.set_num_threads(threads)
        return
    scorer = None
    if recipe.rl.reward_model_weight > 0:
        scorer = RewardModelScorer(out / "checkpoints" / "rm", pad_id=policy.tokenizer.pad_token_id)
    critic = None
    if recipe.rl.algorithm == "ppo":  # the value head starts from the backbone RL starts from
        critic = Critic(Path(policy.path), policy.tokenizer.pad_token_id, lr=recipe.rl.critic_lr, lam=recipe.rl.gae_lambda,
                        device=recipe.model.device, dtype=getattr(torch, recipe.model.dtype))
    with progress_bar(f"rl ({recipe.rl.algorithm})", recipe.rl.steps) if metrics is not None \
            else nullcontext(lambda done: None) as advance:
        advance(_rl_start(out) if resume else 0)
        train_grpo(policy, train, service, recipe.rl, reward_weights=recipe.reward_weights, reward_model=scorer,
                   critic=critic, out=out, seed=recipe.seed, resume=resume,
                   rollout=(RayRollout(policy, workers=recipe.sched.rollout_workers, seed=recipe.seed)
                            if recipe.sched.backend == "ray" else rollout_weights(
                                policy, recipe.rl.sampler, max_staleness=recipe.rl.max_staleness,
                                speculation=SpecConfig() if recipe.rl.speculative else None,
                                reuse=recipe.rl.rollout_reuse, copy=dp is not None)),
                   episodes=episode_spec(recipe.rl, policy, train, service),
                   log=(lambda m: None) if metrics is None else lambda m: metrics.write({"stage": "rl", **m}),
                   progress=advance, dp=dp,
                   sampler=rl_sampler(recipe, train, held, fits=fits_model(policy, recipe.rl.most_new_tokens)))


def fits_model(policy: Policy, completion: int) -> Callable[[Task], bool]:
    """Whether a task's prompt plus ``completion`` tokens fit the model's positions (what a
    curriculum may make at its higher levels; fixed tasks were checked when the recipe was parsed)."""
    positions = inspect_model(policy.path).positions
    return lambda task: positions is None or len(policy.encode_prompt(model_prompt(task))) + completion <= positions


__all__ = ["TaskPools", "is_finished", "make_pools", "recipe_changes", "run_recipe"]
