"""The repo domain's ``Env``: parse, render, verify, baselines, exploits, generators.

The prompt is the issue text, the constraints and how to answer (a unified diff); the repository
itself reaches the model in an agent episode (its workspace), and in a single-response prompt as
the files the issue concerns when the task is small enough to show (``render_prompt``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from posttrain.envs import RecordReader, guard, parse_common
from posttrain.envs._workspace_hooks import WorkspaceEpisodes
from posttrain.envs.repo._grade import grade
from posttrain.envs.repo._task import DOMAIN_KEYS, constraints_part, initial_tree, parse_repo_fields
from posttrain.types import Task, TaskLimits, Verdict, Verifier

NAME = "repo"
EPISODE_WALL_S = 1800.0
"""An agent episode's wall budget: seconds of its own time in the workspace (tools and gradings), as
Terminal-Bench's global agent timeout; the step that reaches it grades the workspace as it is."""
MAX_SHOWN_CHARS = 24_000
"""The largest repository (in characters of its source files) a single-response prompt shows whole."""


def _sandbox_checked(pool: Any) -> Any:
    if pool is None or not callable(getattr(pool, "exec", None)):
        raise TypeError("the repo verifier needs a sandbox pool with exec (posttrain.sandbox.open_pool)")
    return pool


def make_repo_verifier(pool: Any) -> Verifier:
    """A verifier that grades each response (a unified diff) in its own sandbox job on ``pool``."""
    pool = _sandbox_checked(pool)

    def verify(task: Task, response: str) -> Verdict:
        from posttrain.envs.repo._constraints import check_constraints

        verdict = grade(pool, task, response)
        return check_constraints(pool, task, response, verdict)

    return guard(NAME, verify)


class RepoEnv(WorkspaceEpisodes):
    """The repo domain (the package docstring)."""

    name = NAME
    needs_sandbox = True
    verdict_is_a_draw = True
    """Not a function of (task, response): the candidate's code runs under the tests (its own coin, its timing).
    The service replays a pass only after three in a row (``sched.Service``)."""
    episode_wall_s = EPISODE_WALL_S

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        fields, attempts = parse_repo_fields(reader)
        limits = record.get("limits") if isinstance(record, Mapping) else None
        default = TaskLimits(timeout_s=float(fields["environment"]["timeout_sec"]), memory_mb=1024,
                             max_attempts=attempts or 1)
        task = parse_common(reader, fields, default_limits=default)
        if attempts is not None and isinstance(limits, Mapping) and "max_attempts" in limits and \
                limits["max_attempts"] != attempts:
            raise reader.fail("max_attempts", f"the same value as limits.max_attempts ({limits['max_attempts']})",
                              attempts)
        return task

    def render_prompt(self, task: Task) -> str:
        return render_prompt(task)

    def make_verifier(self, pool: Any | None) -> Verifier:
        return make_repo_verifier(pool)

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: diffs a policy could write that must score 0 as a ``fail``
        (``_hacks.py``)."""
        from posttrain.envs.repo._hacks import exploit_fixtures

        return exploit_fixtures(self)

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        from posttrain.envs.repo._gen import generate_tasks

        return generate_tasks(self, n, seed=seed)

    def level_range(self) -> tuple[int, int]:
        from posttrain.envs.repo._gen import LEVELS

        return LEVELS

    def generate_level(self, n: int, *, level: int, seed: int = 0) -> list[Task]:
        from posttrain.envs.repo._gen import generate_tasks

        return generate_tasks(self, n, seed=seed, level=level)

    def validate_task(self, pool: Any, task: Task) -> list[str]:
        """SWE-bench's validation of a task, beyond its reference passing: on the unchanged repository
        every fail-to-pass test fails and every pass-to-pass test passes (problems, one line each).
        ``posttrain tasks validate`` can call it for repo tasks (the hook is not declared yet)."""
        from posttrain.envs.repo._grade import base_outcomes

        outcomes = base_outcomes(pool, task)
        if not isinstance(outcomes, dict):
            return [f"{task.id}: the unchanged repository's tests could not run: {outcomes.feedback or outcomes.evidence}"]
        problems = [f"{task.id}: fail_to_pass {t} already passes on the unchanged repository"
                    for t in task.fields["fail_to_pass"] if outcomes[t] != "failed"]
        problems += [f"{task.id}: pass_to_pass {t} fails on the unchanged repository"
                     for t in task.fields["pass_to_pass"] if outcomes[t] != "passed"]
        return problems

    def capabilities(self) -> tuple[str, ...]:
        return ("agent", "terminal", "code", "repository")

    # -- agent episodes (the workspace kit: posttrain.envs.workspace; _episode.py, _agents.py) --

    def workspace_spec(self, task: Task) -> Any:
        """The workspace episode of ``task`` (``_episode.workspace_spec``): its repository, tools, grader hand-off."""
        from posttrain.envs.repo._episode import workspace_spec

        return workspace_spec(task)

    def agents(self) -> ModuleType:
        """The scripted agents (``_agents.py``: ``oracle``, ``CHEATS``, ``probes``)."""
        from posttrain.envs.repo import _agents

        return _agents



def _shown_files(task: Task) -> tuple[tuple[str, str], ...]:
    return _shown(json.dumps({k: task.fields[k] for k in ("repo",)}, sort_keys=True))


@functools.lru_cache(maxsize=256)
def _shown(repo_json: str) -> tuple[tuple[str, str], ...]:
    tree = initial_tree(json.loads(repo_json))
    out, total = [], 0
    for path in sorted(tree):
        if not path.endswith((".py", ".md", ".rst", ".txt", ".cfg", ".toml", ".ini")):
            continue
        try:
            text = tree[path].decode("utf-8")
        except UnicodeDecodeError:
            continue
        total += len(text)
        out.append((path, text))
    return tuple(out) if total <= MAX_SHOWN_CHARS else ()


def render_prompt(task: Task) -> str:
    """The issue, the constraints, the files (when small enough to show whole) and the answer format."""
    parts = [task.prompt, *constraints_part(task)]
    env = task.fields["environment"]
    parts.append(f"The tests run with `{env['test_command']}`.")
    files = _shown_files(task)
    if files:
        parts.append("The repository:\n" + "\n".join(f"--- {p}\n{t.rstrip()}\n" for p, t in files))
    parts.append("Answer with a unified diff against the repository (```diff ... ```); changes to test files "
                 "are ignored.")
    return "\n\n".join(parts)


def response_of(diff: str) -> str:
    """A response that submits ``diff`` (how references and fixtures are written)."""
    return f"```diff\n{diff}```\n"


ENV = RepoEnv()
