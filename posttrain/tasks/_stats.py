"""What ``posttrain tasks list`` and ``posttrain tasks stats RUN`` print.

``list_domains()`` is every registered domain (posttrain's own, the 106 ``rg/<generator>``, the
plugins') with its capability labels (``HasCapabilities``), its difficulty range (``HasLevels``),
whether it makes canaries (``HasCanaries``) and needs a sandbox. A domain that fails to load is a
row saying why, so the listing itself never fails. ``format_domains(rows)`` is the table.

``run_stats(run_dir)`` reads a run directory: ``trajectories/rl.jsonl`` (one record per attempt)
gives per domain the episodes, groups (a task at a step), pass rate (of episodes: their last
attempt), zero-variance groups and canary passes; the latest RL checkpoint's sampler state gives
the pool's own estimates when the run used ``kind: pool`` (else each task's pass rate over its
episodes stands in) for the difficulty histogram (ten bins of estimated pass rate, per domain),
and the curricula's levels. ``format_stats(stats)`` is the text. That checkpoint is the one its
``latest`` names as a resume reads it (``checkpoint_name``: a ``step-N`` directory of its own, never a
path into a neighbour run); a ``latest`` that names none is a ``UserError`` naming it.

``checkpoint_name(text)`` is the one reading of a checkpoint directory's ``latest``, here (not in
``posttrain.train.checkpoint``, which uses it) because tasks sit below train.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posttrain.errors import TaskError, UserError
from posttrain.strict_json import finite_number

BINS = 10
CHECKPOINT_NAME = re.compile(r"step-\d{6,}")
"""What a checkpoint directory's ``latest`` may name: a ``step-N`` directory of that directory, never a path."""


def checkpoint_name(text: str) -> str:
    """The checkpoint a ``latest`` file's ``text`` names: JSON ``{"name": "step-000012", ...}`` as
    ``posttrain.train.checkpoint`` writes it, or the bare name as a person writes it. ``ValueError``
    saying what it holds instead (worded to follow the file's name), e.g. a path out of the directory."""
    text = text.strip()
    if CHECKPOINT_NAME.fullmatch(text):
        return text
    try:
        name = json.loads(text)["name"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"is corrupt (expected JSON with a 'name', or a bare step-N name): {e}") from None
    if not isinstance(name, str) or not CHECKPOINT_NAME.fullmatch(name):
        raise ValueError(f"names {name!r}, not a checkpoint of its directory (a step-N name)")
    return name


@dataclass(frozen=True)
class DomainRow:
    name: str
    capabilities: tuple[str, ...] = ()
    levels: tuple[int, int] | None = None
    canaries: bool = False
    sandbox: bool = False
    problem: str | None = None
    """Why the domain could not be read (the row is otherwise empty)."""


def list_domains(names: Iterable[str] | None = None) -> list[DomainRow]:
    """A row per registered domain (or per name of ``names``), in registry order."""
    from posttrain.envs import HasCanaries, HasCapabilities, HasLevels, domain_names, get_domain

    rows = []
    for name in names if names is not None else domain_names():
        try:
            env = get_domain(name)
            rows.append(DomainRow(name, tuple(env.capabilities()) if isinstance(env, HasCapabilities) else (),
                                  tuple(env.level_range()) if isinstance(env, HasLevels) else None,
                                  isinstance(env, HasCanaries), bool(env.needs_sandbox)))
        except (TaskError, Exception) as e:  # noqa: BLE001 - a broken plugin is a row, never a traceback
            rows.append(DomainRow(name, problem=f"{type(e).__name__}: {e}"[:160]))
    return rows


def format_domains(rows: Sequence[DomainRow]) -> str:
    """The listing: name, levels, canaries, sandbox, capabilities; a summary line last."""
    width = max([len(r.name) for r in rows] + [6])
    lines = [f"{'domain':<{width}}  levels  canary  sandbox  capabilities"]
    for r in rows:
        if r.problem is not None:
            lines.append(f"{r.name:<{width}}  (cannot load: {r.problem})")
            continue
        levels = f"{r.levels[0]}-{r.levels[1]}" if r.levels else "-"
        lines.append(f"{r.name:<{width}}  {levels:<6}  {'yes' if r.canaries else '-':<6}  "
                     f"{'yes' if r.sandbox else '-':<7}  {', '.join(r.capabilities) or '-'}")
    with_levels = sum(r.levels is not None for r in rows)
    lines.append(f"{len(rows)} domains, {with_levels} with levels, {sum(r.canaries for r in rows)} with canaries")
    return "\n".join(lines)


@dataclass
class DomainStats:
    episodes: int = 0
    passed: int = 0
    groups: int = 0
    zero_variance: int = 0
    canary_episodes: int = 0
    canary_passed: int = 0
    histogram: list[int] = field(default_factory=lambda: [0] * BINS)
    level: int | None = None

    @property
    def pass_rate(self) -> float:
        return self.passed / self.episodes if self.episodes else float("nan")


@dataclass(frozen=True)
class RunStats:
    run: str
    domains: Mapping[str, DomainStats]
    steps: int
    estimates: str
    """Where the difficulty histogram comes from: "the pool's estimates" or "observed pass rates"."""


def run_stats(run_dir: str | Path) -> RunStats:
    """The stats of an RL run directory (module docstring); ``UserError`` naming what is missing."""
    run = Path(run_dir)
    path = run / "trajectories" / "rl.jsonl"
    if not run.is_dir():
        raise UserError(f"{run}: no such run directory")
    if path.is_dir():
        raise UserError(f"{run}: {path.relative_to(run)} is a directory, expected the RL trajectories file")
    if not path.is_file():
        raise UserError(f"{run}: no RL trajectories ({path.relative_to(run)} is missing: did the run reach RL?)")
    episodes = _last_attempts(path)
    if not episodes:  # a table with no rows and an empty histogram, exit 0, as if the run had trained on nothing
        raise UserError(f"{run}: no RL trajectories ({path.relative_to(run)} holds no records: did the run reach its "
                        "first RL step?)")
    stats: dict[str, DomainStats] = {}
    groups: dict[tuple[int, str], list[bool]] = {}
    per_task: dict[str, list[bool]] = {}
    domain_of: dict[str, str] = {}
    for (step, task_id, _), rec in sorted(episodes.items()):
        domain = rec.get("domain") or "?"  # none given: ``"domain": null`` was a domain "None", a missing one "?"
        d = stats.setdefault(domain, DomainStats())
        ok = rec.get("outcome") == "pass"
        if "canary" in (rec.get("tags") or ()):
            d.canary_episodes += 1
            d.canary_passed += ok
            continue
        if rec.get("outcome") == "infra_error":
            continue
        d.episodes += 1
        d.passed += ok
        groups.setdefault((step, task_id), []).append(ok)
        per_task.setdefault(task_id, []).append(ok)
        domain_of[task_id] = domain
    for (_, task_id), outcomes in groups.items():
        d = stats[domain_of[task_id]]
        d.groups += 1
        d.zero_variance += len(set(outcomes)) == 1
    estimates, source = _estimates(run), "the pool's estimates"
    if estimates is None:
        estimates, source = {t: sum(o) / len(o) for t, o in per_task.items()}, "observed pass rates"
    for task_id, p in estimates.items():
        if task_id in domain_of:
            stats[domain_of[task_id]].histogram[min(int(p * BINS), BINS - 1)] += 1
    for d, level in _levels(run).items():
        stats.setdefault(d, DomainStats()).level = level
    steps = 1 + max((s for s, _, _ in episodes), default=-1)
    return RunStats(str(run), dict(sorted(stats.items())), steps, source)


def _last_attempts(path: Path) -> dict[tuple[int, str, int], dict[str, Any]]:
    """``(step, task, sample) -> its last attempt``, from a trajectories file; ``UserError`` naming a bad line."""
    episodes: dict[tuple[int, str, int], dict[str, Any]] = {}  # (step, task, sample) -> its last attempt
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark, as the task readers take it
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read it as UTF-8 text ({e.__class__.__name__})") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise UserError(f"{path}:{lineno}: not a trajectory record ({e})") from None
        if (problem := _record_problem(rec)) is not None:
            raise UserError(f"{path}:{lineno}: not a trajectory record ({problem})")
        key = (rec.get("step") or 0, rec["task_id"], rec.get("sample_idx") or 0)
        if key not in episodes or (rec.get("attempt") or 0) >= (episodes[key].get("attempt") or 0):
            episodes[key] = rec
    return episodes


_OUTCOMES = ("pass", "fail", "infra_error")
"""A record's ``outcome`` (docs/records.md; ``posttrain.evaluate.records.OUTCOMES``, a layer above)."""


def _record_problem(rec: Any) -> str | None:
    """What makes ``rec`` no trajectory record (docs/records.md) in the fields stats reads, or None: a
    ``task_id`` of NaN was a task of domain "?" (json reads NaN), a step "0" step 0."""
    if not isinstance(rec, dict):
        return f"expected a JSON object, got {type(rec).__name__}"
    if not isinstance(rec.get("task_id"), str):
        return "missing field 'task_id'" if "task_id" not in rec else f"field 'task_id' must be a string, got " \
            f"{_clip(rec['task_id'])}"
    if rec.get("outcome") not in _OUTCOMES:
        return f"field 'outcome' must be one of {'|'.join(_OUTCOMES)}, got {_clip(rec.get('outcome'))}"
    for name in ("step", "sample_idx", "attempt"):
        value = rec.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**63 - 1):
            return f"field {name!r} must be an integer from 0 to 2**63-1, got {_clip(value)}"
    if rec.get("domain") is not None and not isinstance(rec["domain"], str):
        return f"field 'domain' must be a string, got {_clip(rec['domain'])}"
    reward = rec.get("reward")
    if reward is not None and not (finite_number(reward) and 0 <= reward <= 1):
        return f"field 'reward' must be a number in [0, 1] or null, got {_clip(reward)}"
    tags = rec.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        return f"field 'tags' must be a list of strings, got {_clip(tags)}"
    return None


def _clip(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _sampler_state(run: Path) -> Mapping[str, Any] | None:
    """The sampler state of the RL checkpoint ``latest`` names (``checkpoint_name``), or None (no
    checkpoint, or its state.json not readable); ``UserError`` naming ``latest`` when it names none."""
    pointer = run / "checkpoints" / "rl-state" / "latest"
    if not pointer.exists():
        return None
    try:
        text = pointer.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{pointer} is unreadable ({type(e).__name__})") from None
    try:
        name = checkpoint_name(text)
    except ValueError as e:
        raise UserError(f"{pointer} {e}") from None
    try:
        return json.loads((pointer.parent / name / "state.json").read_text()).get("sampler_state")
    except (OSError, ValueError, AttributeError):
        return None


def _estimates(run: Path) -> dict[str, float] | None:
    state = _sampler_state(run)
    if not state or state.get("kind") != "pool":
        return None
    return {t: float(v[0]) for t, v in state["difficulty"]["tasks"].items()}


def _levels(run: Path) -> dict[str, int]:
    state = _sampler_state(run)
    if not state or state.get("kind") != "pool":
        return {}
    return {d: int(s["level"]) for d, s in state.get("streams", {}).items()}


def format_stats(stats: RunStats) -> str:
    """A table per domain, then each domain's difficulty histogram."""
    width = max([len(d) for d in stats.domains] + [6])
    lines = [f"{stats.run}: {stats.steps} RL steps",
             f"{'domain':<{width}}  episodes  pass rate  groups  zero-var  level  canary passes"]
    for d, s in stats.domains.items():
        rate = "-" if math.isnan(s.pass_rate) else f"{s.pass_rate:.3f}"
        zero = f"{s.zero_variance / s.groups:.2f}" if s.groups else "-"
        canary = f"{s.canary_passed}/{s.canary_episodes}" if s.canary_episodes else "-"
        lines.append(f"{d:<{width}}  {s.episodes:>8}  {rate:>9}  {s.groups:>6}  {zero:>8}  "
                     f"{'-' if s.level is None else s.level:>5}  {canary}")
    lines.append(f"difficulty: tasks per estimated pass rate ({stats.estimates}), bins of {1 / BINS:g} from 0 to 1")
    for d, s in stats.domains.items():
        if any(s.histogram):
            lines.append(f"  {d:<{width}}  {' '.join(f'{n:>4}' for n in s.histogram)}")
    alarms = sum(s.canary_passed for s in stats.domains.values())
    if alarms:
        lines.append(f"hack alarm: {alarms} passing attempt(s) on canary tasks")
    return "\n".join(lines)
