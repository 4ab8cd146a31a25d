"""What a run says before it works: a short header instead of the resolved recipe.

    recipe     recipe.yaml --set rl.steps=4
    model      qwen: qwen2, 2 layers, hidden 64, 2,048 positions, 80.9K parameters; float32 on cpu
    tokenizer  PreTrainedTokenizerFast, 103 tokens, EOS '<|im_end|>', no BOS
    prompts    the chat template of qwen (model.chat: auto: it ends an assistant turn with the EOS)
    sampling   softmax(logits / temperature); qwen/generation_config.json's top_k, repetition_penalty are not used
    tasks      train 20 (code 8, function 12); eval 8 (code 4, function 4)
    stages     sft (references, 2 epochs) -> rl (grpo, 4 steps); every model evaluated: 1 sample per task, ...
    run        runs/a; the full resolved recipe: runs/a/config.yaml
    resumed at stage rl step 2 (runs/a/checkpoints/rl-state/step-000002)

Each line is read from what the run will use (the model directory's config.json and tokenizer, the
recipe's tasks, ``model.chat`` as ``pipeline.decide_chat`` decided it), without loading weights.
The whole recipe is in RUN/config.yaml; the header says where.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posttrain.policy import (
    CHAT_RECORD,
    EmbeddedModelSpec,
    build_char_tokenizer,
    chat_unusable,
    count_parameters,
    embedded_config,
    has_chat_template,
    read_architecture,
    recorded_chat,
)
from posttrain.rollout.episodes import is_multi_turn
from posttrain.train.recipe import ModelConfig, Recipe, uses_repair_feedback
from posttrain.types import Task

__all__ = ["embedded_spec", "resume_point", "run_header"]

SAMPLING_KEYS = ("top_k", "top_p", "min_p", "typical_p", "repetition_penalty", "no_repeat_ngram_size")
"""generation_config.json keys that change how transformers' ``generate`` samples; posttrain's
samplers draw from softmax(logits / temperature) (token-exact logprobs), so the header names them."""


def embedded_spec(cfg: ModelConfig) -> EmbeddedModelSpec:
    """The embedded default's size for ``model`` (``pipeline.build_base`` builds it)."""
    assert cfg.hidden_size is not None and cfg.num_layers is not None and cfg.max_positions is not None
    return EmbeddedModelSpec(hidden_size=cfg.hidden_size, num_layers=cfg.num_layers,
                             intermediate_size=3 * cfg.hidden_size, max_positions=cfg.max_positions)


def run_header(given: Recipe, chat: bool, out: Path, train: Sequence[Task], held: Sequence[Task], *,
               resume: bool, source: str | None = None) -> list[str]:
    """The header's lines (module docstring). ``given``: the recipe as parsed (``model.chat`` as the
    user set it, or as ``--resume`` kept it); ``chat``: what the run decided; ``source``: the recipe
    file and its overrides (the first line, when given)."""
    cfg = given.model
    embedded = cfg.name == "embedded"
    tokenizer = build_char_tokenizer() if embedded else _tokenizer(str(Path(cfg.name).expanduser()))
    lines = [] if source is None else [f"recipe     {source}"]
    lines += [f"model      {_model(cfg)}",
             f"tokenizer  {_tokenizer_words(tokenizer, embedded)}",
             f"prompts    {chat_words(given, chat, tokenizer, out, resume=resume)}"]
    if (unused := _unused_sampling(cfg.name)) is not None:
        lines.append(f"sampling   softmax(logits / temperature); {unused}")
    lines += [f"tasks      train {_count(train)}; eval {_count(held)}",
              f"stages     {_stages(given)}",
              f"run        {out}; the full resolved recipe: {out / 'config.yaml'}"]
    if resume and (point := resume_point(given, out)) is not None:
        lines.append(point)
    return lines


def _tokenizer(name: str) -> Any | None:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError):  # loaded (and refused in one line) by the run itself
        return None


def _model(cfg: ModelConfig) -> str:
    """``name: type, layers, width, positions, parameters; dtype on device`` (+ LoRA)."""
    if cfg.name == "embedded":
        spec = embedded_spec(cfg)
        head = "the embedded default, built from the recipe: llama"
        sizes = (spec.num_layers, spec.hidden_size, spec.max_positions)
        params = count_parameters(embedded_config(spec))
    else:
        path = Path(cfg.name).expanduser()
        if path.is_dir():
            arch = read_architecture(path)
            head = f"{cfg.name}: {arch.model_type}"
            sizes = (arch.num_layers, arch.hidden_size, arch.positions)
            params = count_parameters(path)
        else:
            head, sizes, params = f"{cfg.name} (from the hub cache)", (None, None, None), None
    layers, hidden, positions = sizes
    parts = [head]
    parts += [] if layers is None else [f"{layers} layers"]
    parts += [] if hidden is None else [f"hidden {hidden}"]
    parts += [] if positions is None else [f"{positions:,} positions"]
    parts += [] if params is None else [f"{_si(params)} parameters"]
    tail = f"; {cfg.dtype} on {cfg.device}"
    if cfg.lora is not None:
        modules = "the architecture's default modules" if cfg.lora.target_modules is None else \
            ", ".join(cfg.lora.target_modules)
        tail += f"; LoRA rank {cfg.lora.r} on {modules}"
    return ", ".join(parts) + tail


def _si(n: int) -> str:
    """A count in three significant digits.

    >>> _si(80896), _si(494_032_768), _si(999)
    ('80.9K', '494M', '999')
    """
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return str(n)


def _tokenizer_words(tokenizer: Any | None, embedded: bool) -> str:
    if tokenizer is None:
        return "(loaded when the run starts)"
    kind = "character-level, built in" if embedded else type(tokenizer).__name__
    bos = f"BOS {tokenizer.bos_token!r}" if tokenizer.bos_token is not None else "no BOS"
    return f"{kind}, {len(tokenizer):,} tokens, EOS {tokenizer.eos_token!r}, {bos}"


def chat_words(given: Recipe, chat: bool, tokenizer: Any | None, out: Path, *, resume: bool) -> str:
    """How the run's prompts are rendered, and why (``model.chat``, ``pipeline.decide_chat``)."""
    cfg = given.model
    base = out / "checkpoints" / "base"
    rendered = f"the chat template of {cfg.name}" if chat else "plain text"
    if resume and recorded_chat(base) is not None:
        return f"{rendered}, as the run was started ({base / CHAT_RECORD})"
    if cfg.chat is not True and cfg.chat is not False:  # auto
        path = Path(cfg.name).expanduser()
        if cfg.name == "embedded":
            return f"{rendered}: the embedded default is trained from scratch on plain prompts (model.chat: auto)"
        if path.is_dir() and recorded_chat(path) is not None:
            return f"{rendered}, as {path / CHAT_RECORD} records (model.chat: auto)"
        if chat:
            extra = ", and appends a user turn for repair feedback" if uses_repair_feedback(given) else ""
            return f"{rendered} (model.chat: auto: it ends an assistant turn with the EOS{extra})"
        if tokenizer is None or not has_chat_template(tokenizer):
            return f"{rendered}: {cfg.name} has no chat template (model.chat: auto)"
        why = chat_unusable(tokenizer, repair=uses_repair_feedback(given))
        return (f"{rendered}: model.chat: auto renders plain prompts: the chat template of {cfg.name} is not usable "
                f"for this recipe ({why}); model.chat: true requires it")
    return f"{rendered} (model.chat: {str(cfg.chat).lower()})"


def _unused_sampling(name: str) -> str | None:
    """Which of the model's generation_config.json sampling settings posttrain does not apply, or None."""
    path = Path(name).expanduser() / "generation_config.json"
    if name == "embedded" or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    keys = [k for k in SAMPLING_KEYS if isinstance(config, dict) and config.get(k) not in (None, 1, 1.0, 0)]
    return f"{path}'s {', '.join(keys)} {'is' if len(keys) == 1 else 'are'} not used" if keys else None


def _count(tasks: Sequence[Task]) -> str:
    """``20 (code 8, function 12)``."""
    per = Counter(t.domain for t in tasks)
    return f"{len(tasks)} ({', '.join(f'{d} {n}' for d, n in per.items())})" if tasks else "0"


def _stages(r: Recipe) -> str:
    words = []
    for stage in r.stages:
        if stage == "sft":
            words.append(f"sft ({r.sft.demonstrations}, {r.sft.epochs:g} epochs)")
        elif stage == "rl":
            episodes = f", {r.rl.episodes} episodes" if is_multi_turn(r.rl.episodes) else ""
            words.append(f"rl ({r.rl.algorithm}, {r.rl.steps} steps x {r.rl.prompts_per_step} prompts x "
                         f"{r.rl.group_size} samples{episodes})")
        else:
            words.append(stage)
    evaluated = ", ".join(["base", *(s for s in r.stages if s != "rm")])
    e = r.eval
    return (f"{' -> '.join(words) or 'none'}; evaluated: {evaluated} ({e.samples_per_task} sample(s) per task at "
            f"temperature {e.temperature:g}, {e.max_new_tokens} new tokens{', ' + e.episodes + ' episodes' if is_multi_turn(e.episodes) else ''})")


def resume_point(r: Recipe, out: Path) -> str | None:
    """``resumed at stage X step N`` for a run that is resumed in ``out``; None when it had not started.
    RL state whose task sampler another seed drew (another run's, copied in) is a ``CheckpointError``
    here, before the stages before RL are evaluated again (``train_grpo`` would refuse it only then)."""
    from posttrain.train.checkpoint import CheckpointError, load_latest

    ckpts = out / "checkpoints"
    for stage in ["base", *r.stages]:
        if (ckpts / stage / "DONE").exists():  # pipeline.DONE: the stage's checkpoint is whole
            continue
        if stage == "base":
            return "resumed at stage base step 0 (nothing was finished yet)"
        if stage == "rl":
            latest = load_latest(ckpts / "rl-state")
            if latest is not None:
                seed = latest.sampler_state.get("seed")
                if seed is not None and seed != r.seed:  # RL state copied in from another run: before any work
                    raise CheckpointError(f"{latest.path / 'state.json'}: its task sampler was seeded {seed}, this "
                                          f"run's seed is {r.seed}: it is another run's RL state; resume the run "
                                          "that wrote it, or start over with another --out")
                return f"resumed at stage rl step {latest.step} ({latest.path})"
        return f"resumed at stage {stage} step 0 ({stage} is checkpointed at its end only)"
    return "resumed at stage eval (every training stage was finished)"
