"""A recipe's task sources: task files and generators by name, loaded and checked before any work.

A recipe names its training and evaluation tasks apart, each a list of sources::

    tasks:
      train:
        - file: data/my-math.jsonl                 # any domain(s), JSON or JSONL, optionally .gz
        - {file: data/HumanEval.jsonl.gz, domain: code}   # raw HumanEval: records carry no domain
        - {generator: json, n: 200, seed: 1}       # get_domain("json").generate_tasks(200, seed=1)
        - {generator: rg/countdown, n: 200, level: 1}      # a level of a generator with levels
        - {generator: rg/basic_arithmetic, n: 50, params: {min_terms: 2, max_terms: 3}}
        - file: data/gsm.parquet                   # Parquet, Arrow, a datasets directory (+ split)
          domain: math
          columns: {id: uid, prompt: question, answer: final}   # task field: column
      eval:
        - {file: data/held-out.jsonl}
        - {generator: quickstart-math, n: 50}      # a domain's named task family (Env.task_families)

``load_pools(train, eval, seed=...)`` loads every source and checks it: the file exists and parses,
every record fits its domain's schema (``posttrain.envs``), the domain is known, no task id appears
twice in a split or in both splits, and no training task overlaps an evaluation task
(``posttrain.tasks._decontaminate``: refused with the count and an example, or those training
tasks dropped). Every error is one ``ConfigError`` line naming the recipe key (``tasks.train[1]``)
and the file, line (or row, and the column a field was mapped from) and task id. Loads are cached
per process (keyed by the file's size and mtime), so the parse-time check and the run read each
file once.

A columnar source (Parquet, Arrow, a ``datasets`` directory) maps task fields to its columns with
``columns: {field: column}``; only the mapped columns are read. Rows without an ``id`` (none mapped,
no such column) get ``<file stem>-<row>``.

``load_demonstrations(path, train, eval)`` reads an SFT demonstrations file: JSONL, one
``{"prompt": ..., "response": ...}`` or ``{"task_id": ..., "response": ...}`` per line.

Not here: the quickstart's ``tasks.domains`` shorthand (``posttrain.train.recipe.recipe_tasks``).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from posttrain.config import NonNegativeInt, PositiveInt, Seed
from posttrain.envs import (
    HasGeneratorParams,
    HasLevels,
    domain_families,
    domain_listing,
    domain_names,
    find_task_family,
    get_domain,
    is_registered,
    model_prompt,
)
from posttrain.envs._defaults import defaults_key
from posttrain.errors import ConfigError, TaskError, UserError, refuse_directory, user_path
from posttrain.tasks._columnar import is_columnar, map_columns
from posttrain.tasks._decontaminate import check_pools
from posttrain.tasks._load import is_pipe, iter_task_records, parse_record
from posttrain.types import Task


def _family(name: str) -> Callable[..., list[Task]]:
    family = task_family(name)
    if family is None:
        raise UserError(f"generator: unknown task family {name!r}")
    return family


def task_family(name: str) -> Callable[..., list[Task]] | None:
    """The task family ``name`` (a registered domain's ``task_families``), or None. Imports only the
    domain that offers it when it is one of posttrain's own (``posttrain.envs.find_task_family``)."""
    found = find_task_family(name)
    return None if found is None else found[1]


def family_names() -> list[str]:
    """Every registered domain's task families (imports every domain; a domain whose families cannot
    be read is named in the list, as ``<domain>: <why>``, so that the list itself never fails)."""
    out: list[str] = []
    for domain in domain_names():
        try:
            out += domain_families(domain)
        except TaskError as e:
            out.append(f"{domain}: {e}")
    return out


MAX_GENERATED = 1_000_000
"""The most tasks one generator source makes (``n`` + ``skip``; about 10 s for math): they are made
when the recipe is parsed, and a mistyped n of 10**9 held the parse for hours on its way to
filling memory."""


@dataclass(frozen=True)
class TaskSource:
    """One source of tasks: a task file, or a generator by name (exactly one of ``file``, ``generator``)."""

    file: str | None = None
    """A task file: .json or .jsonl (optionally .gz), .parquet, .arrow, or a Hugging Face ``datasets``
    directory (``save_to_disk``, or a directory of Parquet shards); any mix of domains
    (docs/tasks.md). A relative path is relative to the directory ``posttrain`` runs in."""
    domain: str | None = None
    """File only: the domain of records that carry none (a raw HumanEval file: code)."""
    columns: Mapping[str, str] | None = None
    """File only: task field -> the column (or key) holding it (``{prompt: question, reference:
    answer}``); only these are read. None: every column is a field."""
    split: str | None = None
    """File only: the split of a ``DatasetDict`` directory, or the prefix of a Parquet directory's
    shards (``train`` for ``train-00000-of-00002.parquet``)."""
    generator: str | None = None
    """A generator by name: a registered domain (that domain's ``generate_tasks``) or a task family
    a domain offers (quickstart-math, quickstart-code, repair: ``Env.task_families``)."""
    n: PositiveInt | None = None
    """How many tasks: required for a domain generator; else the first n (default: all)."""
    skip: NonNegativeInt = 0
    """Drop the first ``skip`` tasks first, so that train and eval can take apart one file or family."""
    seed: Seed | None = None
    """Generator only: its seed (null = the recipe's seed)."""
    level: NonNegativeInt | None = None
    """Generator only, for a domain with levels (``HasLevels``): the difficulty level to generate at
    (``posttrain tasks list`` shows each domain's range)."""
    params: Mapping[str, Any] | None = None
    """Generator only, for a domain whose generator takes parameters (``HasGeneratorParams``, the
    rg domains): its configuration fields, on top of ``level`` (or its defaults)."""
    curriculum: bool = False
    """Generator only, training only, for a domain with levels: no fixed tasks; the pool sampler
    (``tasks.sampler.kind: pool``) makes them as it goes, at a level that follows the policy,
    starting at ``level`` (default: the easiest)."""

    def __post_init__(self) -> None:
        if (self.file is None) == (self.generator is None):
            raise ConfigError("expected exactly one of 'file' (a task file) or 'generator' (a generator by name)")
        if self.file is not None:
            self._check_file_knobs()
        else:
            if self.domain is not None:
                raise ConfigError("domain: only a task file takes a default domain (a generator knows its own)")
            if self.curriculum:
                self._check_curriculum()
            for key in ("columns", "split"):
                if getattr(self, key) is not None:
                    raise ConfigError(f"{key}: only a task file takes {key} (a generator makes its own fields)")
            self._check_generator_knobs()
            if is_registered(str(self.generator)):
                if self.n is None and not self.curriculum:
                    raise ConfigError(f"n: the {self.generator} generator needs n, the number of tasks to make")
                if (self.n or 0) + self.skip > MAX_GENERATED:
                    raise ConfigError(f"n: expected at most {MAX_GENERATED:,} tasks from a generator (n + skip), "
                                      f"got {(self.n or 0) + self.skip:,}")
            elif _find_family(str(self.generator)) is None:
                raise ConfigError(f"generator: unknown generator {self.generator!r}; expected a domain "
                                  f"({domain_listing()}) or a task family ({', '.join(family_names())})")

    def _check_file_knobs(self) -> None:
        if not str(self.file).strip():  # Path("") is ".": the current directory was read as a dataset of its *.parquet
            raise ConfigError(f"file: expected a task file name, got {self.file!r}")
        for key in ("seed", "level", "params"):
            if getattr(self, key) is not None:
                raise ConfigError(f"{key}: only a generator takes a {key} (a task file is read as it is)")
        if self.domain is not None:
            _known_domain(self.domain, "domain")
        if self.columns is not None and not self.columns:
            raise ConfigError("columns: expected at least one {field: column}, or no columns key")

    def _check_curriculum(self) -> None:
        name = str(self.generator)
        if not is_registered(name) or not isinstance(get_domain(name), HasLevels):
            raise ConfigError(f"curriculum: the {name} generator has no levels to follow")
        for key in ("n", "params"):
            if getattr(self, key) is not None:
                raise ConfigError(f"{key}: a curriculum source makes tasks as it goes at its own level; "
                                  f"it takes no {key}")
        if self.skip:
            raise ConfigError("skip: a curriculum source takes no skip")

    def _check_generator_knobs(self) -> None:
        if self.level is None and self.params is None:
            return
        name = str(self.generator)
        if not is_registered(name):
            raise ConfigError(f"{'level' if self.level is not None else 'params'}: generator {name!r} is a task "
                              f"family; only a domain's generator takes a level or params")
        env = get_domain(name)
        if self.params is not None and not isinstance(env, HasGeneratorParams):
            raise ConfigError(f"params: the {name} generator takes no params")
        if self.level is not None:
            if not isinstance(env, HasLevels):
                raise ConfigError(f"level: the {name} generator has no levels")
            lo, hi = env.level_range()
            if not lo <= self.level <= hi:
                raise ConfigError(f"level: the {name} generator's levels are {lo}..{hi}, got {self.level}")

    def describe(self) -> str:
        if self.file is not None:
            return f"file {self.file}"
        return f"generator {self.generator}{' (curriculum)' if self.curriculum else ''}"


def _find_family(name: str) -> Callable[..., list[Task]] | None:
    """``task_family``, where a plugin that fails while it is searched counts as not offering
    ``name``: the unknown-generator error's listing names that plugin and why (``family_names``)."""
    try:
        return task_family(name)
    except TaskError:
        return None


def _known_domain(name: str | None, key: str) -> None:
    if not is_registered(str(name)):
        raise ConfigError(f"{key}: unknown {key} {name!r}; expected one of {domain_listing()}")


@dataclass(frozen=True)
class _Loaded:
    tasks: tuple[Task, ...]
    where: Mapping[str, str]
    """task id -> where it came from (``file:line``, ``file[index]``, ``generator json #3``)."""


_CACHE: dict[tuple, _Loaded] = {}


def load_source(source: TaskSource, *, seed: int, key: str) -> tuple[list[Task], Mapping[str, str]]:
    """The tasks of one source (after ``skip`` and ``n``) and where each came from.

    Raises ``ConfigError`` naming ``key`` and the file, line and task id.
    """
    try:
        loaded = _load_cached(source, seed)
    except UserError as e:
        raise ConfigError(f"{key}: {e}") from None
    tasks = list(loaded.tasks[source.skip :])
    if source.n is not None:
        if len(tasks) < source.n:
            raise ConfigError(f"{key}: n: {source.n} tasks asked, {source.describe()} has "
                              f"{len(loaded.tasks)}{f' ({len(tasks)} after skip {source.skip})' if source.skip else ''}")
        tasks = tasks[: source.n]
    if not tasks:
        raise ConfigError(f"{key}: skip: {source.skip} leaves no task ({source.describe()} has {len(loaded.tasks)})")
    return tasks, loaded.where


def _load_cached(source: TaskSource, seed: int) -> _Loaded:
    if source.file is not None:
        path = user_path(source.file, "file")
        try:
            st = path.stat()
        except OSError:
            if path.is_symlink():
                raise UserError(f"file: {source.file}: a symbolic link to nothing (or a loop)") from None
            raise UserError(f"file: no such task file {source.file}") from None
        if is_pipe(path):  # read at parse time, by the run, and again by --resume: a pipe only once
            raise UserError(f"file: {source.file}: a FIFO or pipe, which reads only once; a recipe's task file is "
                            f"read again by the run and by --resume, expected a regular file")
        # a run's record defaults (a recipe's reward function) are part of how records parse
        cache_key: tuple = ("file", str(path.resolve()), st.st_size, st.st_mtime_ns, source.domain,
                            _key(source.columns), source.split, defaults_key())
    else:
        gen_seed = seed if source.seed is None else source.seed
        cache_key = ("gen", source.generator, gen_seed, (source.n or 0) + source.skip, source.level, _key(source.params))
    if cache_key not in _CACHE:
        _CACHE[cache_key] = _read_file(path, source) if source.file is not None else _generate(source, seed)
    return _CACHE[cache_key]


def _key(mapping: Mapping[str, Any] | None) -> str | None:
    return None if mapping is None else json.dumps(mapping, sort_keys=True, default=str)


def _read_file(path: Path, source: TaskSource) -> _Loaded:
    tasks: list[Task] = []
    where: dict[str, str] = {}
    columnar = is_columnar(path)
    if source.columns and not columnar:  # else ignored: a JSON record's keys are its task's fields as written
        raise UserError(f"{source.file}: columns: only a columnar file (Parquet, Arrow or a datasets directory) "
                        "has columns to map; a JSON task file's keys are the task fields (rename them in the file)")
    for row, (at, raw) in enumerate(iter_task_records(path, split=source.split)):
        record = map_columns(raw, source.columns, at) if columnar else raw
        if columnar and isinstance(record, dict) and "id" not in record:
            record["id"] = f"{_stem(path)}-{row}"
        try:
            task = parse_record(record, at, domain=source.domain)
        except TaskError as e:
            raise TaskError(_name_column(str(e), source.columns)) from None
        if task.id in where:
            raise UserError(f"{at}: duplicate task id {task.id!r} (first at {where[task.id]})")
        where[task.id] = at
        tasks.append(task)
    if not tasks:
        raise UserError(f"file: no tasks in {path}")
    return _Loaded(tuple(tasks), where)


def _name_column(message: str, columns: Mapping[str, str] | None) -> str:
    """A domain's error names the task field; say which column it was read from."""
    if not columns:
        return message
    return re.sub(r"field '([A-Za-z_][\w.]*)'",
                  lambda m: m.group(0) + (f" (column {columns[m.group(1)]!r})" if m.group(1) in columns else ""),
                  message, count=1)


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json", ".parquet", ".arrow"):
        name = name.removesuffix(suffix)
    return name


def _generate(source: TaskSource, seed: int) -> _Loaded:
    gen_seed = seed if source.seed is None else source.seed
    name = str(source.generator)
    count = (source.n or 0) + source.skip
    if is_registered(name):
        env = get_domain(name)
        try:
            if source.params is not None and isinstance(env, HasGeneratorParams):
                tasks = env.generate_params(count, seed=gen_seed, level=source.level, params=source.params)
            elif source.level is not None and isinstance(env, HasLevels):
                tasks = env.generate_level(count, level=source.level, seed=gen_seed)
            else:
                tasks = env.generate_tasks(count, seed=gen_seed)
        except ValueError as e:  # a level or param the generator refuses, said by the generator
            raise UserError(str(e)) from None
    else:
        tasks = _family(name)(seed=gen_seed)
    where: dict[str, str] = {}
    for i, t in enumerate(tasks):
        if t.id in where:  # a generator's own bug; said here rather than as a confusing overlap later
            raise UserError(f"generator {name} (seed {gen_seed}) made task id {t.id!r} twice")
        where[t.id] = f"generator {name} (seed {gen_seed}) #{i}"
    return _Loaded(tuple(tasks), where)


def load_split(sources: Sequence[TaskSource], *, seed: int,
               key: str) -> tuple[list[Task], dict[str, tuple[str, str]]]:
    """All tasks of one split's sources, in order, and ``{task id: (source key, where)}``. No id may repeat."""
    tasks: list[Task] = []
    origin: dict[str, tuple[str, str]] = {}
    for i, source in enumerate(sources):
        if source.curriculum:  # no fixed tasks: the pool sampler makes them (posttrain.tasks.make_sampler)
            continue
        part, where = load_source(source, seed=seed, key=f"{key}[{i}]")
        for t in part:
            if t.id in origin:
                first_key, first_at = origin[t.id]
                raise ConfigError(f"{key}[{i}]: task {t.id!r} ({where[t.id]}) is already in {first_key} "
                                  f"({first_at}); task ids must be unique")
            origin[t.id] = (f"{key}[{i}]", where[t.id])
        tasks += part
    return tasks, origin


def load_pools(train: Sequence[TaskSource], eval: Sequence[TaskSource], *, seed: int,
               key: str = "tasks", contamination: Literal["refuse", "drop"] | None = None,
               ) -> tuple[list[Task], list[Task]]:
    """``(train tasks, eval tasks)`` of a recipe's sources; refuses an id shared between the splits.
    ``contamination``: a training task that overlaps an evaluation task (``_decontaminate``) is
    refused (``ConfigError``: the count and the first pair) or dropped (one line on stderr says
    how many); None checks nothing (the recipe's ``tasks.contamination`` chooses).

    >>> tr, ev = load_pools([TaskSource(generator="quickstart-math", skip=10)],
    ...                     [TaskSource(generator="quickstart-math", n=10)], seed=0)
    >>> len(tr), len(ev)
    (710, 10)
    """
    if not train:
        raise ConfigError(f"{key}.train: expected at least one task source (a file or a generator)")
    if not eval:
        raise ConfigError(f"{key}.eval: expected at least one task source: every run is evaluated on held-out tasks")
    curricula = [i for i, s in enumerate(eval) if s.curriculum]
    if curricula:
        raise ConfigError(f"{key}.eval[{curricula[0]}]: curriculum: evaluation tasks are fixed; a curriculum "
                          f"source is for training")
    train_tasks, train_at = load_split(train, seed=seed, key=f"{key}.train")
    eval_tasks, eval_at = load_split(eval, seed=seed, key=f"{key}.eval")
    for t in eval_tasks:
        if t.id in train_at:
            (eval_key, eval_where), (train_key, train_where) = eval_at[t.id], train_at[t.id]
            raise ConfigError(f"{eval_key}: task {t.id!r} ({eval_where}) is also a training task, in {train_key} "
                              f"({train_where}); train and eval must share no task id")
    if contamination is not None:
        where = {tid: f"{k}, {at}" for tid, (k, at) in (train_at | eval_at).items()}
        train_tasks, dropped = check_pools(train_tasks, eval_tasks, mode=contamination, origin=where, key=key)
        if dropped:
            print(f"posttrain: {key}: left out {dropped} training task(s) that overlap an evaluation task "
                  f"({key}.contamination: drop)", file=sys.stderr)
    return train_tasks, eval_tasks


def load_demonstrations(path: str | Path, train: Sequence[Task], eval: Sequence[Task], *,
                        key: str = "sft.demonstrations") -> list[tuple[str, str]]:
    """``(prompt, response)`` pairs of a demonstrations file (module docstring), in file order.

    A ``task_id`` line must name a training task (its prompt is used); a line naming an evaluation
    task, or whose prompt is an evaluation task's, is refused: SFT on held-out tasks would leak them.
    """
    by_id = {t.id: t for t in train}
    eval_ids = {t.id for t in eval}
    eval_prompts = {t.prompt: t.id for t in eval}
    out = []
    try:
        for lineno, rec in _records(Path(path)):
            at = f"{path}:{lineno}"
            response = rec.get("response")
            if not isinstance(response, str):
                raise UserError(f"{at}: field 'response': expected a string, got {response!r:.60}")
            if set(rec) == {"task_id", "response"}:
                tid = rec["task_id"]
                if tid in eval_ids:
                    raise UserError(f"{at}: task_id {tid!r} is an evaluation task (tasks.eval); demonstrations "
                                    f"must come from training tasks")
                if tid not in by_id:
                    raise UserError(f"{at}: task_id {tid!r} is not a training task of this recipe (tasks.train)")
                prompt = model_prompt(by_id[tid])
            elif set(rec) == {"prompt", "response"}:
                prompt = rec["prompt"]
                if not isinstance(prompt, str) or not prompt:
                    raise UserError(f"{at}: field 'prompt': expected a non-empty string, got {prompt!r:.60}")
                if prompt in eval_prompts:
                    raise UserError(f"{at}: the prompt is that of evaluation task {eval_prompts[prompt]!r}; "
                                    f"demonstrations must not contain held-out tasks")
            else:
                raise UserError(f'{at}: expected {{"prompt", "response"}} or {{"task_id", "response"}}, '
                                f"got keys {sorted(rec)}")
            out.append((prompt, response))
    except UserError as e:
        raise ConfigError(f"{key}: {e}") from None
    return out


def _records(path: Path) -> Iterator[tuple[int, Mapping]]:
    """``(line, object)`` of each line of a JSONL file (strict JSON; same reader as task files)."""
    refuse_directory(path, "a .jsonl demonstrations file")
    if is_pipe(path):
        raise UserError(f"{path}: a FIFO or pipe, which reads only once; a recipe's demonstrations file is read "
                        f"again by the run and by --resume, expected a regular .jsonl file")
    if not path.is_file():
        if path.is_symlink() and not path.exists():
            raise UserError(f"{path}: a symbolic link to nothing (or a loop); expected a .jsonl demonstrations file")
        if path.exists():  # /dev/null was "no such demonstrations file"
            raise UserError(f"{path}: a device or socket, not a file; expected a .jsonl demonstrations file")
        raise UserError(f"no such demonstrations file {path}")
    if not path.name.removesuffix(".gz").endswith(".jsonl"):
        raise UserError(f"{path}: expected a .jsonl (or .jsonl.gz) demonstrations file")
    n = 0
    for at, rec in iter_task_records(path):
        n += 1
        if not isinstance(rec, Mapping):
            raise UserError(f"{at}: expected a JSON object per line, got {type(rec).__name__}")
        yield int(at.rsplit(":", 1)[1]), rec
    if not n:
        raise UserError(f"no demonstrations in {path}")


__all__ = ["TaskSource", "family_names", "task_family", "load_demonstrations", "load_pools", "load_source", "load_split"]
