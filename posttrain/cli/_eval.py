"""The body of ``posttrain eval``: pick tasks, get responses, verify, summarize, compare, write.

Kept apart from ``evaluate.py`` (the parsers) so the parser stays readable; ``run_eval(args)`` returns the summary
dict that ``--json`` prints. Every verification goes through one execution service per command
(``posttrain.cli.open_service``: a sandbox pool of ``--workers`` slots when a domain needs one);
its counters and breaker states are the summary's ``sched``. See ``posttrain.cli.evaluate`` for the
command lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from posttrain.cli._service import open_service, sandbox_of
from posttrain.config import MAX_TEMPERATURE, check_run_files
from posttrain.errors import RunFailure, UserError, refuse_directory, user_path
from posttrain.evaluate.baseline import compare, load_baseline
from posttrain.evaluate.decontaminate import check_clean_split
from posttrain.evaluate.records import EvalRecord, fingerprint_model_dir, write_records
from posttrain.evaluate.runner import (
    MAX_SAMPLES_PER_TASK,
    Response,
    compact,
    load_suite,
    noop_baseline,
    read_responses,
    score_responses,
)
from posttrain.evaluate.summary import summarize
from posttrain.evaluate.views import write_views
from posttrain.policy import MIN_TEMPERATURE
from posttrain.rollout import episodes as kinds
from posttrain.rollout.episodes import (
    EpisodeKind,
    attempts_allowed,
    chat_problem,
    episode_tokens,
    episode_turns,
    gives_feedback,
    is_multi_turn,
    limits_problem,
    protocol_fields,
    tasks_problem,
)
from posttrain.sandbox import MAX_POOL_SIZE
from posttrain.sched import Service
from posttrain.strict_json import StrictJSONError, loads_strict
from posttrain.types import CANARY, Task

__all__ = ["run_eval", "checkpoints_of"]


DEFAULT_MAX_NEW_TOKENS = 512
"""``--max-new-tokens`` when neither it nor a run's recipe gives one."""


def _resolve_length(args: argparse.Namespace) -> str:
    """Set ``args.max_new_tokens`` when not given: with ``--run``, the recipe's ``eval.max_new_tokens``
    (RUN/config.yaml), else ``DEFAULT_MAX_NEW_TOKENS``. Returns how messages name the value and where
    it came from (``--max-new-tokens 512 (the default)``)."""
    if args.max_new_tokens is not None:
        return f"--max-new-tokens {args.max_new_tokens}"
    config = Path(args.run) / "config.yaml" if args.run else None
    if config is not None and config.is_file():
        import yaml

        # a config.yaml that does not read is refused: before, the run's length was dropped for the
        # default, silently (a run of eval.max_new_tokens 24 evaluated at 512)
        try:
            recipe = yaml.safe_load(config.read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError) as e:  # ValueError: UnicodeDecodeError
            raise UserError(f"{config}: cannot read the run's recipe ({type(e).__name__}); it gives eval.max_new_tokens: "
                            "pass --max-new-tokens N, or restore the file") from None
        section = recipe.get("eval") if isinstance(recipe, dict) else None
        value = section.get("max_new_tokens") if isinstance(section, dict) else None
        if not isinstance(recipe, dict) or (value is not None and not (
                isinstance(value, int) and not isinstance(value, bool) and value >= 1)):
            where = "expected a mapping (the resolved recipe)" if not isinstance(recipe, dict) else \
                f"eval.max_new_tokens is {value!r}, expected an integer >= 1"
            raise UserError(f"{config}: {where}; pass --max-new-tokens N, or restore the file")
        if value is not None:
            args.max_new_tokens = value
            return f"--max-new-tokens {value} (the recipe's eval.max_new_tokens, {config})"
    args.max_new_tokens = DEFAULT_MAX_NEW_TOKENS
    return f"--max-new-tokens {DEFAULT_MAX_NEW_TOKENS} (the default)"


def _check_lengths(args: argparse.Namespace, tasks: list[Task], length: str, *, given: bool) -> None:
    """The position check of ``posttrain run`` (``recipe.check_model``), before any work: the longest
    prompt, as each local model to evaluate renders it, plus what an episode may add after it
    (``rollout.episodes.episode_tokens``: ``--max-new-tokens`` per attempt, observations between attempts)
    must fit the model's positions. A ``--max-new-tokens`` given that does not fit is a ``UserError``
    naming it and the fix; one not ``given`` (the default, or the recipe's with ``--run``) is lowered
    to what fits, said in one line, or refused alike when nothing does."""
    if args.responses or args.endpoint or args.agent:  # already sampled; an endpoint's or a script's own
        return
    from posttrain.envs import model_prompt
    from posttrain.policy import measure_prompts  # imports torch: not for the three above

    models = [args.model] if args.model else [str(c) for c in _policies_of(args.run, quiet=True)] if args.run else []
    if not models or not user_path(models[0], "--model").is_dir():  # a hub name: checked as it loads
        return
    kind = episode_kind(args)
    multi = is_multi_turn(kind)
    turns = episode_turns(kind, tasks, max_turns=args.max_turns,
                          max_attempts=args.max_attempts if args.max_attempts > 1 else None)

    def added(n: int) -> int:  # tokens an episode may add after its prompt, at n new tokens per attempt
        return episode_tokens(kind, turns, n)

    prompts = [model_prompt(t) for t in tasks]
    for model in models:
        m = measure_prompts(user_path(model, "--model"), prompts, chat=args.chat)
        if m.positions is None or m.longest + added(args.max_new_tokens) <= m.positions:
            continue
        fits = _most_that_fits(added, m.positions - m.longest, args.max_new_tokens)
        per = " per attempt" if multi else ""
        if fits and not given:
            print(f"note: --max-new-tokens {fits}: the most the model's {m.positions:,} positions leave after the "
                  f"longest prompt ({m.longest} tokens){per}; {length} does not fit", file=sys.stderr)
            args.max_new_tokens = fits
            continue
        flag = f"--max-new-tokens {args.max_new_tokens}"
        what = f"{added(args.max_new_tokens)} for a {kind} episode ({flag} per attempt, observations between)" \
            if multi else flag
        fix = f"lower --max-new-tokens (at most {fits} fits{per})" if fits else "lower --max-new-tokens"
        raise UserError(f"{length}: the model has {m.positions:,} positions ({m.positions_key}), the evaluation "
                        f"needs {m.longest + added(args.max_new_tokens):,}: the longest prompt ({m.prompt!r:.40}) is "
                        f"{m.longest} tokens + {what}; {fix}, or use a model with more positions")


def _most_that_fits(added: Any, room: int, upto: int) -> int | None:
    """The largest n in [1, upto) with ``added(n) <= room`` (``added`` grows with n), None if none."""
    lo, hi = 0, upto  # added(lo) fits (or lo == 0), added(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if added(mid) <= room else (lo, mid)
    return lo or None


_NAMED = (("responses", "a responses file"), ("model", "a model directory"), ("endpoint", "a URL"),
          ("agent", "an agent's name"), ("model_name", "a model name"), ("tokenizer", "a tokenizer path or name"),
          ("run", "a run directory"), ("tasks", "a task file"), ("domain", "a domain name"),
          ("baseline", "a run or results directory, summary.json or records .jsonl"), ("out", "a directory name"))
"""Flags whose empty value (``--out ''``) was read as not given: no output, no overlap check, the default suite."""


def _check_not_empty(args: argparse.Namespace) -> None:
    """Refuse a flag of ``_NAMED`` given as the empty string."""
    empty = next((f"--{name.replace('_', '-')} '': expected {what}" for name, what in _NAMED
                  if getattr(args, name, None) == ""), None)
    if empty:
        raise UserError(empty)
    for name in ("responses", "model", "tokenizer", "run", "tasks", "baseline"):
        value = getattr(args, name, None)
        if value and Path(value).is_symlink() and not Path(value).exists():  # else "not found", or a hub name
            raise UserError(f"--{name} {value}: a symbolic link to nothing (or a loop); expected {dict(_NAMED)[name]}")
    base = Path(args.baseline) if getattr(args, "baseline", None) else None
    if base is not None and base.exists() and not (base.is_file() or base.is_dir()):  # was "not found"
        raise UserError(f"--baseline {base}: a pipe, device or socket, not a file; expected {dict(_NAMED)['baseline']}")


def _validate(args: argparse.Namespace) -> None:
    from posttrain.cli.tasks import check_domain_flag

    _check_not_empty(args)
    check_domain_flag(args.domain)  # also when every record names its own, as verify and tasks validate
    given = [f"--{name.replace('_', '-')}" for name in ("responses", "model", "endpoint", "agent") if getattr(args, name)]
    if len(given) > 1:
        raise UserError(f"posttrain eval: give one of --responses, --model, --endpoint, --agent; got {', '.join(given)}")
    if not given and not args.run:
        raise UserError("posttrain eval: nothing to evaluate; give --responses FILE, --model PATH, --endpoint URL, "
                        "--agent NAME or --run DIR")
    _validate_sampling(args)
    if args.suite and args.tasks:
        raise UserError("posttrain eval: give --suite or --tasks, not both")
    for name in ("n", "max_attempts", "limit", "max_new_tokens", "workers", "max_turns"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UserError(f"posttrain eval: --{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.workers is not None and args.workers > MAX_POOL_SIZE:
        raise UserError(f"posttrain eval: --workers must be <= {MAX_POOL_SIZE} (sandbox slots), got {args.workers}")
    if args.n is not None and args.n > MAX_SAMPLES_PER_TASK:
        raise UserError(f"posttrain eval: --n must be <= {MAX_SAMPLES_PER_TASK} (samples per task), got {args.n}")
    if args.responses and (args.max_attempts > 1 or args.episodes):
        raise UserError("posttrain eval: --max-attempts and --episodes need a model or endpoint (responses cannot be "
                        "re-asked)")
    if args.fail_on_regression and not args.baseline:
        raise UserError("posttrain eval: --fail-on-regression needs --baseline RUN_OR_RESULTS")
    if args.run and not Path(args.run).is_dir():
        raise UserError(f"--run: {args.run} is not a directory")
    _check_temperature(args)
    if not 0 <= args.seed < 2**32:  # generate's and a recipe's range; torch's manual_seed overflowed after the load
        raise UserError(f"posttrain eval: --seed must be an integer in [0, 4294967296), got {args.seed}")
    if args.model:
        _check_model_dir(args.model)
    if args.out:
        _check_eval_out(args.out)


def _check_temperature(args: argparse.Namespace) -> None:
    """``--temperature``: 0 (greedy) or in the samplers' range, as a recipe's ``eval.temperature``; and
    not 0 with ``--n`` above 1: one greedy answer drawn n times is no i.i.d. sample (its pass@k read as
    pass@1, and a one-task domain's 10 copies of one flipped answer were judged as 10 draws apart)."""
    t = args.temperature
    if t is not None and not (t == 0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE):
        raise UserError(f"posttrain eval: --temperature must be 0 (greedy) or a number >= {MIN_TEMPERATURE:g} (the "
                        f"samplers' least) and <= {MAX_TEMPERATURE:g} (past it, logits are near uniform), got {t}")
    if not args.responses and t == 0 and args.n > 1:
        raise UserError(f"posttrain eval: --n {args.n} with --temperature 0 asks for one greedy answer {args.n} times, "
                        "not i.i.d. samples (pass@k would be pass@1 and a gate would count one answer as "
                        f"{args.n} draws); give --n 1, or a temperature >= {MIN_TEMPERATURE:g}")


ENDPOINT_CONNECT_S = 10.0
"""How long ``check_endpoint`` waits for the server (or its proxy) to accept a connection."""


def check_endpoint(url: str, *, timeout: float = ENDPOINT_CONNECT_S) -> None:
    """Connect once to ``--endpoint``'s server, or to the proxy urllib would send its requests through,
    before any work: a dead server failed at the first request, after the tokenizer and the tasks had
    loaded and the progress bar had started. Only a connection (no request: the API is the first
    request's to judge); ``UserError`` in one line naming the URL, the address and why."""
    import socket
    import urllib.parse
    import urllib.request

    from posttrain.policy import EndpointSampler

    EndpointSampler(url, "")  # its checks of the URL, one line each
    parts = urllib.parse.urlsplit(url)
    host, port, via = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), ""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host or ""):
        hop = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port, via = hop.hostname, hop.port or 80, f" (its proxy, {proxy})"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except TimeoutError:
        raise UserError(f"--endpoint {url}: no connection to {host}:{port}{via} within {timeout:g} s; start the "
                        "server, or check the URL") from None
    except OSError as e:
        raise UserError(f"--endpoint {url}: cannot connect to {host}:{port}{via} ({e.strerror or e}); start the "
                        "server, or check the URL") from None


EVAL_OUT_FILES = ("records.jsonl", "noop.jsonl", "summary.json")
"""What ``eval --out DIR`` writes (and ``views/eval/``): an earlier evaluation's are not written over."""


def _check_eval_out(out: str) -> None:
    """Refuse, before any work, an ``--out`` that would write over what is there: a run directory
    (its summary.json is the pipeline's; ``--run`` evaluates a run into ``RUN/eval/``) or an earlier
    evaluation's files."""
    from posttrain.config import check_out_dir

    path = check_out_dir(out)
    if (path / "config.yaml").is_file():
        raise UserError(f"--out {out}: is a posttrain run (config.yaml), whose summary.json this would replace; "
                        f"evaluate it with --run {out} (results go to its eval/), or choose a new directory")
    run = next((os.path.relpath(p) for p in path.absolute().parents if _is_run(p)), None)
    if run is not None:  # RUN/eval/records.jsonl would be a model named "records" in its report and audit
        raise UserError(f"--out {out}: is inside the posttrain run {run}, whose report and audit read the files in "
                        f"it; evaluate the run with --run {run} (results go to its eval/), or choose a directory "
                        f"outside it")
    held = [name for name in (*EVAL_OUT_FILES, "views/eval") if (path / name).exists()]
    if held:
        raise UserError(f"--out {out}: already holds {', '.join(held)} (an earlier evaluation's); choose a new or "
                        f"empty directory, or remove them")


def _is_run(path: Path) -> bool:
    """A posttrain run directory: the pipeline's config.yaml and what it writes beside it (a folder of
    someone's project with a config.yaml of its own is not one)."""
    return (path / "config.yaml").is_file() and any((path / name).exists() for name in ("checkpoints", "tasks",
                                                                                         "summary.json"))


def _validate_sampling(args: argparse.Namespace) -> None:
    """What the sampling flags need: an endpoint's name and tokenizer, tool episodes' step limit; and
    ``--n`` resolved to 1 where a model samples and none was given (with ``--responses`` it stays None
    unless given: then it is the count per task the file must hold, ``_check_sample_counts``)."""
    if args.n is None and not args.responses:
        args.n = 1
    if args.endpoint and not args.model_name:
        raise UserError("posttrain eval: --endpoint needs --model-name NAME")
    if args.endpoint and not args.tokenizer:
        raise UserError("posttrain eval: --endpoint needs --tokenizer PATH_OR_NAME (the served model's tokenizer: "
                        "prompts are sent as its token ids)")
    if args.endpoint_timeout is not None and not args.endpoint:
        raise UserError("posttrain eval: --endpoint-timeout is for --endpoint")
    if args.endpoint_timeout is not None and not 0 < args.endpoint_timeout <= 86400:
        raise UserError(f"posttrain eval: --endpoint-timeout must be seconds in (0, 86400], got {args.endpoint_timeout}")
    if args.tokenizer and not (args.endpoint or args.agent):
        raise UserError("posttrain eval: --tokenizer is for --endpoint or --agent (a --model brings its own)")
    if args.chat is not None and args.responses:
        raise UserError(f"posttrain eval: --{'' if args.chat else 'no-'}chat renders prompts for a model to sample "
                        "from; --responses are already sampled")
    kind = args.kind = episode_kind(args)
    if (why := limits_problem(kind, max_turns=args.max_turns)) is not None:
        raise UserError(f"posttrain eval: --max-turns {args.max_turns}: {why} (--episodes)")
    if args.max_attempts > 1 and not gives_feedback(kind):
        raise UserError(f"posttrain eval: --episodes {kind} and --max-attempts are two kinds of episodes; give one")
    if args.agent and kind != "agent":
        raise UserError("posttrain eval: --agent plays agent episodes; give --episodes agent")


def episode_kind(args: argparse.Namespace) -> EpisodeKind:
    """The episodes ``posttrain eval`` runs: ``--episodes`` (``tool``: agent's former name, said once),
    else repair with ``--max-attempts`` > 1, else single."""
    if args.episodes is None:
        return "repair" if args.max_attempts > 1 else "single"
    return kinds.episode_kind(args.episodes, where="--episodes")


def _check_model_dir(model: str) -> None:
    """A ``--model`` that names a path must be a checkpoint directory (``org/name`` goes to the hub loader)."""
    path = user_path(model, "--model")
    if not (model.startswith(("/", ".", "~")) or model.count("/") > 1 or path.exists()):
        return
    if not path.exists():
        raise UserError(f"--model {model}: no such model directory")
    if not (path / "config.json").is_file():
        raise UserError(f"--model {model}: not a model directory (no config.json; expected a transformers checkpoint)")


def _tasks(args: argparse.Namespace) -> list[Task]:
    from posttrain.tasks import load_tasks

    if args.run:  # a directory: the held-out one fell back to humaneval silently, the train one was "not found"
        refuse_directory(Path(args.run) / "tasks" / "train.jsonl", "the run's training task file (the overlap "
                         "check reads it)")
        if not (args.tasks or args.suite):
            refuse_directory(Path(args.run) / "tasks" / "eval.jsonl", "the run's held-out task file")
    if args.tasks:
        tasks = load_tasks(args.tasks, domain=args.domain)
    elif args.suite:
        tasks = load_suite(args.suite)
    elif args.run and (Path(args.run) / "tasks" / "eval.jsonl").is_file():
        tasks = load_tasks(Path(args.run) / "tasks" / "eval.jsonl")
    else:
        tasks = load_suite("humaneval")
    if args.responses:  # refused or warned about now, before the sandbox starts
        from posttrain.tasks import warn_unanswered

        # read once, scored from here: a pipe (--responses <(...)) reads only once ("no responses" the second time)
        args.responses_read = read_responses(args.responses)
        answered = {r.task_id for r in args.responses_read}
        unknown = sorted(answered - {t.id for t in tasks})
        if unknown:
            shown = ", ".join(repr(u) for u in unknown[:5])
            raise UserError(f"{args.responses}: {len(unknown)} task_id(s) not in the suite, e.g. {shown}")
        if args.n is not None:  # refused in one line, before the warning of an evaluation that will not run
            _check_sample_counts(args.responses, args.responses_read, args.n)
        warn_unanswered([t.id for t in tasks[: args.limit or None]], answered, args.responses)
    tasks = tasks[: args.limit] if args.limit else tasks
    if tasks and all(CANARY in t.tags for t in tasks):  # before any work: summarize would refuse after it
        raise UserError(f"{args.tasks or args.suite or 'tasks'}: all {len(tasks)} tasks are canaries (tag {CANARY!r}: "
                        "no honest response passes one); they are kept out of the rates, so there is nothing to score")
    return tasks


def _check_sample_counts(path: str, responses: list[Response], n: int) -> None:
    """``--n N`` with ``--responses``: each task the file answers has exactly N responses (a task left
    unanswered is ``warn_unanswered``'s). Without it a file of other counts was scored as given, pass@k
    over whatever each task held, and ``--n`` was read by nothing; one line naming the first task off
    (in file order) and how many are, before any work."""
    counts = Counter(r.task_id for r in responses)
    off = [(task_id, c) for task_id, c in counts.items() if c != n]
    if off:
        (task_id, c), more = off[0], f" ({len(off)} of the {len(counts)} tasks answered are off)" if len(off) > 1 else ""
        raise UserError(f"{path}: task {task_id!r} has {c} response(s), --n {n} expects exactly {n} for each task "
                        f"answered{more}; give the file's count as --n, or fix the file")


def checkpoints_of(run_dir: str | Path) -> list[Path]:
    """The checkpoint folders of a run (``RUN/checkpoints/<name>/config.json``), base first, rl last."""
    root = Path(run_dir) / "checkpoints"
    found = [p for p in sorted(root.glob("*")) if (p / "config.json").is_file()]
    order = {"base": 0, "sft": 1, "rl": 3}
    return sorted(found, key=lambda p: (order.get(p.name, 2), p.name))


def _policies_of(run_dir: str | Path, *, quiet: bool = False) -> list[Path]:
    """``checkpoints_of`` without reward models and other heads that cannot sample (each skip is said
    unless ``quiet``)."""
    from posttrain.cli.generate import why_not_a_policy

    keep = []
    for ckpt in checkpoints_of(run_dir):
        if why := why_not_a_policy(ckpt):
            if not quiet:
                print(f"note: skipping {ckpt}: {why}", file=sys.stderr)
        else:
            keep.append(ckpt)
    return keep


def _protocol(args: argparse.Namespace, tasks: list[Task]) -> dict[str, Any]:
    """What makes two evaluations comparable; ``eval --run`` files are named after it, never mixed.
    How the prompts were rendered (``prompt_format``) is known once a model has loaded: ``_score`` adds
    it to each evaluation's own ``eval_protocol`` (``chat`` here is only the flag given)."""
    if args.tasks:
        source = str(args.tasks)
    elif args.suite or not args.run or not (Path(args.run) / "tasks" / "eval.jsonl").is_file():
        source = args.suite or "humaneval"
    else:
        source = "RUN/tasks/eval.jsonl"
    return {"tasks": source, "n_tasks": len(tasks), "samples_per_task": args.n, "temperature": _temperature(args),
            "max_new_tokens": args.max_new_tokens, "seed": args.seed, "max_attempts": args.max_attempts,
            **protocol_fields(args.kind, max_turns=args.max_turns),
            **({"chat": args.chat} if args.chat is not None else {})}


def _protocol_tag(p: dict[str, Any]) -> str:
    """e.g. ``heldout20-n1-t0-len512-seed0``: readable, and one file name per protocol.

    >>> _protocol_tag({"tasks": "RUN/tasks/eval.jsonl", "n_tasks": 20, "samples_per_task": 1, "temperature": 0.0,
    ...                "max_new_tokens": 512, "seed": 0, "max_attempts": 1})
    'heldout20-n1-t0-len512-seed0'
    """
    source = "heldout" if p["tasks"] == "RUN/tasks/eval.jsonl" else Path(p["tasks"]).name.split(".")[0]
    tag = f"{source}{p['n_tasks']}-n{p['samples_per_task']}-t{p['temperature']:g}-len{p['max_new_tokens']}-seed{p['seed']}"
    tag += f"-{p['episodes']}{p['max_turns'] or ''}" if "episodes" in p else ""
    tag += {True: "-chat", False: "-plain"}.get(p.get("chat"), "")  # given on the command line, else as trained
    return tag + (f"-r{p['max_attempts']}" if p["max_attempts"] > 1 else "")


def _temperature(args: argparse.Namespace) -> float:
    if args.temperature is not None:
        return args.temperature
    return 0.0 if args.n == 1 else 0.8


def _model(args: argparse.Namespace, model: str | None) -> Any:
    """What samples: a local ``Policy`` (prompts as its checkpoint records, ``--chat``/``--no-chat``
    override), or the ``--endpoint`` as an ``EndpointModel`` (ids out and in, with ``--tokenizer``'s
    tokenizer; ``--chat``: prompts through its chat template)."""
    if args.agent:  # a scripted agent (posttrain.envs.workspace.ScriptedModel): the embedded default's template
        from posttrain.envs.workspace import ScriptedModel

        return ScriptedModel.build(args.agent, args.agent_tasks, _tokenizer(args) if args.tokenizer else None)
    if args.endpoint:
        from posttrain.evaluate.sources import EndpointModel
        from posttrain.policy import EndpointSampler

        timeout = {} if args.endpoint_timeout is None else {"timeout": args.endpoint_timeout}
        tokenizer = _tokenizer(args)  # the sampler's too: posttrain's stop-string rule on the server's ids
        return EndpointModel(EndpointSampler(args.endpoint, args.model_name, tokenizer=tokenizer, **timeout),
                             tokenizer, chat=bool(args.chat))
    from posttrain.policy import load_policy

    return load_policy(model, chat=args.chat)


def _tokenizer(args: argparse.Namespace) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(args.tokenizer)
    except (OSError, ValueError) as e:
        raise UserError(f"--tokenizer {args.tokenizer}: cannot load a tokenizer ({str(e).splitlines()[0]})") from None


CHUNK_PROMPTS = 256
"""``posttrain eval`` samples and verifies this many prompts at a time (one batch of the local
sampler), its progress bar advancing after each chunk; chunk k is seeded ``--seed`` + its first
task's index, as the pipeline's evaluations are."""


def _records(args: argparse.Namespace, tasks: list[Task], service: Service, model: str | None, stage: str
             ) -> tuple[list[EvalRecord], list[dict[str, float]] | None, dict[str, float] | None, str | None]:
    """The records of one evaluation (``--responses`` scored as given; a model's samples through the
    episode runner, single answers and episodes alike, records derived from the trajectories), in
    chunks of ``CHUNK_PROMPTS`` prompts, the episodes' statistics (one per chunk) when they were
    multi-turn (repair: ``--max-attempts`` > 1; agent), an ``--endpoint``'s cost
    (``EndpointSampler.usage``: its requests, the seconds waited on them, the ids it returned), and how
    the sampled model's prompts were rendered (``sources.prompt_format``; None for ``--responses``:
    already sampled, by a rendering this command never saw)."""
    from posttrain.cli._progress import progress_bar

    if args.responses:
        ids = {t.id for t in tasks}
        responses = args.responses_read  # as _tasks read them
        if args.limit:
            responses = [r for r in responses if r.task_id in ids]
        records = []
        with progress_bar(f"verify {stage}", len(responses), unit="response") as advance:
            for start in range(0, len(responses), CHUNK_PROMPTS):
                part = responses[start : start + CHUNK_PROMPTS]
                records += score_responses(tasks, part, service, stage=stage, source=args.responses)
                advance(start + len(part))
        return records, None, None, None
    from posttrain.evaluate.sources import prompt_chat, prompt_format, runner_episodes

    if (why := tasks_problem(args.kind, tasks)) is not None:  # before the model loads
        raise UserError(f"--episodes {args.kind}: {why}")
    args.agent_tasks = tasks  # a scripted agent knows the tasks it plays (by their prompts)
    sampled = _model(args, model)
    if (why := chat_problem(args.kind, sampled.tokenizer, prompt_chat(sampled))) is not None:
        # before any episode: an error here is the user's, not an infra error mid-episode
        flag = f"--max-attempts {args.max_attempts}" if args.episodes is None else f"--episodes {args.episodes}"
        raise UserError(f"{flag}: {why}")
    pool = sandbox_of(service)
    records, stats = [], []
    chunk = max(1, CHUNK_PROMPTS // args.n)
    with progress_bar(f"eval {stage}", len(tasks), unit="task") as advance:
        for start in range(0, len(tasks), chunk):
            part, seed = tasks[start : start + chunk], args.seed + start
            part_records, part_stats = runner_episodes(
                sampled, part, args.kind, n=args.n, temperature=_temperature(args), max_new_tokens=args.max_new_tokens,
                seed=seed, stage=stage, max_attempts=args.max_attempts if args.max_attempts > 1 else None,
                max_turns=args.max_turns, pool=pool, service=service)
            records += part_records
            stats += [part_stats] if is_multi_turn(args.kind) else []
            advance(start + len(part))
    return (records, stats or None, sampled.endpoint.usage() if args.endpoint else None,
            prompt_format(sampled, args.kind))


def _score(
    args: argparse.Namespace, tasks: list[Task], service: Service, model: str | None, stage: str
) -> tuple[dict, list[EvalRecord], list[EvalRecord]]:
    before = service.stats()
    records, stats, cost, rendering = _records(args, tasks, service, model, stage)
    records = _stamped(args, model, records)
    used = {r.task_id for r in records}
    summary = summarize(records, ks=args.k)
    if args.responses:  # a file that answers only what it gets right reads 1.0 over those: the count it left out
        summary["unanswered_tasks"] = len({t.id for t in tasks} - used)
        if args.n is not None:  # the count each answered task was held to (its records state it too)
            summary["samples_per_task"] = args.n
    else:  # how it was sampled (the prompts as the sampler rendered them): --baseline compares only those alike
        summary["eval_protocol"] = {**_protocol(args, tasks), "prompt_format": rendering}
    if stats is not None:
        from posttrain.evaluate.sources import episode_figures

        allowed = attempts_allowed(args.kind, tasks, max_attempts=args.max_attempts if args.max_attempts > 1 else None)
        summary["episodes"] = episode_figures(summary, stats, max_attempts=allowed)
    if cost is not None:  # the records' wall_s holds no generation time: a server's is seen only here
        summary["endpoint"] = cost
    noop = noop_baseline([t for t in tasks if t.id in used], service)
    summary["noop"] = compact(summarize(noop, ks=(1,)))
    summary["sched"] = _sched_summary(service, before)
    return summary, records, noop


def _stamped(args: argparse.Namespace, model: str | None, records: list[EvalRecord]) -> list[EvalRecord]:
    """``records`` with what answered (``model_fingerprint``) and how many samples per task
    (``samples_per_task``: ``--n``; for a responses file only where given): ``summarize`` refuses the
    records of two models read as one (both stage ``eval``, step null) and a task whose last samples'
    records were left out."""
    fingerprint = _model_fingerprint(args, model)
    # a responses file's count per task: --n where given (each task held to it, _check_sample_counts), else None
    return [dataclasses.replace(r, model_fingerprint=fingerprint, samples_per_task=args.n) for r in records]


def _model_fingerprint(args: argparse.Namespace, model: str | None) -> str:
    """``model_fingerprint`` of the records (docs/records.md): a model directory's ``sha256:<16 hex>``
    (``fingerprint_model_dir``, read once per evaluation), ``hub:<name>`` for a name the hub loader
    resolves, ``endpoint:<model name>@<url>`` (any user:password@ left out), ``agent:<name>``, and
    ``responses:<16 hex>`` of the responses as read (task, sample, text)."""
    if args.responses:
        rows = [[r.task_id, r.sample_idx, r.completion] for r in args.responses_read]
        return "responses:" + hashlib.sha256(json.dumps(rows).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if args.agent:
        return f"agent:{args.agent}"
    if args.endpoint:  # the URL requests go to (http://h:8000 and http://h:8000/v1/ are one server)
        from posttrain.policy import EndpointSampler

        url = urlsplit(EndpointSampler(args.endpoint, args.model_name).url)
        return f"endpoint:{args.model_name}@{url.scheme}://{url.netloc.rpartition('@')[2]}{url.path}"
    path = user_path(str(model), "--model")
    return fingerprint_model_dir(path) if path.is_dir() else f"hub:{model}"


def _sched_summary(service: Service, before: dict[str, Any]) -> dict[str, Any]:
    """The service's counters during one evaluation (no-op floor included) and its breaker states after."""
    now = service.stats()
    return {k: v - before.get(k, 0) if isinstance(v, int) else v for k, v in now.items()}


def _run_summary(run_dir: Path, protocol: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """``RUN/eval/summary@<protocol>.json`` and what it holds; refuses one written with another protocol."""
    path = run_dir / "eval" / f"summary@{_protocol_tag(protocol)}.json"
    check_run_files(run_dir, {f"eval/{path.name}": "the run's evaluations under this protocol (a JSON file)"})
    if not path.is_file():
        return path, {"eval_protocol": protocol, "eval": {}}
    try:  # strict, as report reads it (a NaN was written back as NaN); a byte-order mark as summary.json's
        data = loads_strict(path.read_text(encoding="utf-8-sig"), max_chars=None, max_depth=None)
    except (OSError, UnicodeDecodeError, StrictJSONError) as e:
        raise UserError(f"{path}: not valid JSON ({e}); fix or remove it") from None
    found = data.get("eval_protocol") if isinstance(data, dict) else None
    if found != protocol or not isinstance(data.get("eval"), dict):
        raise UserError(f"{path} holds an evaluation with another protocol ({found}); "
                        f"this one would mix with it: remove that file or evaluate with its settings")
    return path, data


def _write_run(run_dir: Path, name: str, summary: dict, records: list[EvalRecord], protocol: dict[str, Any]) -> Path:
    """Write ``RUN/eval/<name>@<protocol>.jsonl`` and its entry in ``RUN/eval/summary@<protocol>.json``.

    Never RUN/summary.json or the pipeline's RUN/eval/<name>.jsonl: only the pipeline marks a run
    finished, and its records keep the protocol its summary states. Returns the records' path.
    """
    path, data = _run_summary(run_dir, protocol)
    records_path = run_dir / "eval" / f"{name}@{_protocol_tag(protocol)}.jsonl"
    write_records(records_path, records)
    data["eval"][name] = summary
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return records_path


def _eval_run(args: argparse.Namespace, tasks: list[Task], baseline: Any) -> dict[str, Any]:
    """``eval --run RUN`` alone: every policy checkpoint of the run, into ``RUN/eval/<name>@<protocol>.jsonl``."""
    run = Path(args.run)
    protocol = _protocol(args, tasks)
    _run_summary(run, protocol)  # refuse to mix protocols before any work
    ckpts = _policies_of(run)
    result: dict[str, Any] = {"eval": {}, "eval_protocol": protocol}
    with open_service((t.domain for t in tasks), size=args.workers, episodes=args.kind == "agent") as service:
        for ckpt in ckpts:
            summary, records, _ = _score(args, tasks, service, str(ckpt), stage=ckpt.name)
            if baseline is not None:
                summary["baseline"] = compare(summary, baseline, evaluations=len(ckpts))  # one gate over all
            written = _write_run(run, ckpt.name, summary, records, protocol)
            write_views(records, tasks, sandbox_of(service), run / "views" / f"{ckpt.name}@{_protocol_tag(protocol)}")
            print(f"wrote {written}", file=sys.stderr)
            result["eval"][ckpt.name] = summary
    return result


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    """Everything ``posttrain eval`` does; returns the summary (``{"eval": {...}}`` for a whole run)."""
    given = args.max_new_tokens is not None
    length = _resolve_length(args)
    _validate(args)
    if args.endpoint:  # the flags first (no connection for a command refused anyway), then the server, then work
        check_endpoint(args.endpoint, timeout=min(ENDPOINT_CONNECT_S, args.endpoint_timeout or ENDPOINT_CONNECT_S))
    tasks = _tasks(args)
    _check_lengths(args, tasks, length, given=given)
    whole_run = args.run and not (args.responses or args.model or args.endpoint)
    if whole_run and not _policies_of(Path(args.run), quiet=True):
        raise UserError(f"--run: no policy checkpoints under {Path(args.run) / 'checkpoints'} (folders with config.json)")
    if "(the recipe's" in length and length.startswith(f"--max-new-tokens {args.max_new_tokens} "):
        print(f"note: {length}", file=sys.stderr)  # as the recipe says (not lowered to fit)
    if args.run:
        train = Path(args.run) / "tasks" / "train.jsonl"
        if train.is_file():
            check_clean_split(train, tasks)
        else:
            print(f"note: {train} not found; train/eval overlap not checked", file=sys.stderr)
    baseline = load_baseline(args.baseline) if args.baseline else None
    if whole_run:
        return _eval_run(args, tasks, baseline)
    with open_service((t.domain for t in tasks), size=args.workers, episodes=args.kind == "agent") as service:
        summary, records, noop = _score(args, tasks, service, args.model, stage="eval")
        if args.out:  # (cad: renders beside the gold)
            write_views(records, tasks, sandbox_of(service), Path(args.out) / "views" / "eval")
    if baseline is not None:
        summary["baseline"] = compare(summary, baseline)
    if args.out:
        _write_results(Path(args.out), summary, records, noop)
    return summary


def _write_results(out: Path, summary: dict[str, Any], records: list[EvalRecord], noop: list[EvalRecord]) -> None:
    """``EVAL_OUT_FILES`` under ``out``, all or none: a full disk left a cut records.jsonl (which read as an
    evaluation of fewer tasks, and made the next ``--out`` there "already holds records.jsonl") and
    OSError's traceback. ``_check_eval_out`` made sure none of them was there before, so what is removed
    here is this command's own."""
    try:
        write_records(out / "records.jsonl", records)
        write_records(out / "noop.jsonl", noop)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        for name in EVAL_OUT_FILES:
            (out / name).unlink(missing_ok=True)
        score = summary.get("pass@1")
        shown = f"; pass@1 was {score:.3f}" if isinstance(score, int | float) else ""
        raise RunFailure(f"--out {out}: cannot write the results ({e.strerror or e}); none were kept{shown}") from None
