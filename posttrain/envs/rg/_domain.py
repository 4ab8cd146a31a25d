"""One reasoning-gym generator as a posttrain domain: ``rg/<name>``.

Task fields (docs/tasks.md): ``prompt`` (the generator's question, shown with one line asking for
``<answer>...</answer>``), ``answer`` (the stored answer, or null for the five generators that
keep none and check with their verifier: boxnet, graph_color, propositional_logic, rubiks_cube,
rush_hour), ``rg_metadata`` (the generator's metadata for the entry, which its scorer reads) and
``config`` (``{"level": L, "params": {...}}``: how the generator was configured, ``_config.py``).
The reference response is the stored answer in an answer block; for the five without one, an
example answer the generator keeps (graph_color, rubiks_cube) or one our solver finds (boxnet,
rush_hour: ``_solvers.py``; propositional_logic: the shortest clause that follows from its premises
only together, ``_hardened._inferred_clause``), which the verifier checks like any answer.
Generation keeps only entries whose reference passes that check (``_generate._kept``).

Verification is ``_check.py`` in a worker process under a CPU budget: strict extraction of one
answer block, the generator's own scorer (hardened where it passes what it should not,
``_hardened.py``), reward 1 only for a full score.

Levels: the generator's curriculum (``HasLevels``; ``_names.GENERATORS`` says how many build);
``generate_params`` takes a recipe's ``params`` on top of a level. Canaries (``HasCanaries``, 81
of the 106: ``RgCanaryDomain``): a generated task's question with another task's stored answer
and metadata, kept only when the first task's own reference fails against them, and only for
generators whose answers are varied enough that a guess rarely lands on the planted one.

Not here: which generators a recipe mixes or how often (``posttrain.tasks``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from posttrain.envs._base import RecordReader, guard, parse_common
from posttrain.envs.rg._check import CLOSE, OPEN
from posttrain.envs.rg._names import GENERATORS, LOWEST_LEVEL, NO_CANARIES
from posttrain.errors import TaskError
from posttrain.types import Task, Verdict, Verifier

DOMAIN_KEYS = frozenset({"answer", "rg_metadata", "config"})
CPU_BUDGET_S = 5.0
INSTRUCTION = f"Give only your final answer, between {OPEN} and {CLOSE}."
NOOP = "I do not know."
VARIED = 0.75
"""Canaries only where at least this fraction of 32 generated answers are distinct: a Yes/No or
small-number generator's planted answer is a guess away (a 50% false alarm is no alarm);
``_names.NO_CANARIES`` lists the generators below it."""

CAPABILITIES = {
    "algebra": ("reasoning", "math", "algebra"),
    "algorithmic": ("reasoning", "algorithmic"),
    "arc": ("reasoning", "induction", "visual"),
    "arithmetic": ("reasoning", "math", "arithmetic"),
    "code": ("reasoning", "code"),
    "cognition": ("reasoning", "cognition"),
    "composite": ("reasoning", "mixed"),
    "games": ("reasoning", "planning", "games"),
    "geometry": ("reasoning", "math", "geometry"),
    "graphs": ("reasoning", "graphs"),
    "induction": ("reasoning", "induction"),
    "logic": ("reasoning", "logic"),
    "probability": ("reasoning", "math", "probability"),
}
"""rg category -> the capability labels its domains carry (``posttrain tasks list``)."""


class RgDomain:
    """The domain ``rg/<generator>`` (module docstring). Building one imports nothing heavy."""

    needs_sandbox = False

    def __init__(self, generator: str) -> None:
        if generator not in GENERATORS:
            raise TaskError(f"unknown reasoning-gym generator {generator!r}")
        self.generator = generator
        self.name = f"rg/{generator}"
        self.category, self.levels = GENERATORS[generator]

    # --- parsing and rendering

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, self.name)
        reader.check_keys(DOMAIN_KEYS)
        answer = reader.present("answer")
        if answer is not None and not isinstance(answer, str):
            raise reader.fail("answer", "a string, or null for a generator checked by its verifier", answer)
        meta = reader.present("rg_metadata")
        if not isinstance(meta, Mapping):
            raise reader.fail("rg_metadata", "an object (the generator's metadata of the entry)", meta)
        spec = reader.record.get("config", {})
        problem = self._spec_problem(spec)
        if problem:
            raise reader.fail("config", problem, spec)
        fields = {"answer": answer, "rg_metadata": dict(meta), "config": dict(spec)}
        canary = "canary" in reader.tags()  # its stored answer is planted: no reference
        return parse_common(reader, fields, reference=None if answer is None or canary else respond(answer))

    def _spec_problem(self, spec: Any) -> str | None:
        if not isinstance(spec, Mapping) or set(spec) - {"level", "params"}:
            return "an object with optional keys level and params"
        level = spec.get("level")
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)
                                  or not self.level_range()[0] <= level <= self.level_range()[1]):
            return "level: an integer in [{}, {}]".format(*self.level_range())
        if not isinstance(spec.get("params", {}), Mapping):
            return "params: an object of generator fields"
        return None

    def render_prompt(self, task: Task) -> str:
        return f"{task.prompt}\n\n{INSTRUCTION}"

    # --- verification

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return make_rg_verifier(self.generator)

    def noop_response(self, task: Task) -> str:
        return NOOP

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        from posttrain.envs.rg._fixtures import exploit_fixtures

        return exploit_fixtures(self)

    # --- generators

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        """``n`` tasks of the generator's default configuration."""
        return self.generate_params(n, seed=seed)

    def level_range(self) -> tuple[int, int]:
        """(lowest, top): the curriculum's global levels that build and make tasks posttrain keeps (0
        only: no usable curriculum; ``LOWEST_LEVEL``)."""
        return LOWEST_LEVEL.get(self.generator, 0), max(self.levels - 1, 0)

    def generate_level(self, n: int, *, level: int, seed: int = 0) -> list[Task]:
        return self.generate_params(n, seed=seed, level=level)

    def generate_params(self, n: int, *, seed: int = 0, level: int | None = None,
                        params: Mapping[str, Any] | None = None) -> list[Task]:
        """``n`` tasks at ``level`` (None: the default configuration) with ``params`` on top.

        Raises ``ValueError`` in one line naming the generator, the level or field, and why; a
        param's type and bounds are checked before anything is made (``_config.check_params``)."""
        from posttrain.envs.rg._config import check_params
        from posttrain.envs.rg._generate import generate

        spec: dict[str, Any] = {}
        if level is not None:
            spec["level"] = level
        if params:
            check_params(self.generator, params, level=level)
            spec["params"] = json.loads(json.dumps(dict(params)))
        return [self._task(e, spec, f"rg-{self.generator}-{_variant(spec)}-{seed}-{i}", ())
                for i, e in enumerate(generate(self.generator, spec, n=n, seed=seed))]

    def _task(self, entry: Mapping[str, Any], spec: Mapping[str, Any], tid: str, tags: tuple[str, ...]) -> Task:
        level = spec.get("level")
        return Task(id=tid, domain=self.name, prompt=entry["question"],
                    fields={"answer": entry["answer"], "rg_metadata": entry["metadata"], "config": dict(spec)},
                    reference=None if entry["reference"] is None else respond(entry["reference"]), difficulty=None if level is None else float(level),
                    tags=("rg", self.category, *tags), metadata={"generator": self.name})

    def capabilities(self) -> tuple[str, ...]:
        return CAPABILITIES[self.category]


class RgCanaryDomain(RgDomain):
    """An rg domain whose answers are varied enough for canaries (``HasCanaries``)."""

    def canary_tasks(self, n: int, *, seed: int = 0) -> list[Task]:
        """Up to ``n`` canaries (module docstring), fewer where too few pairs contradict."""
        from posttrain.envs.rg._generate import canary_entries

        return [self._task(e, {}, f"rg-{self.generator}-canary-{seed}-{i}", ("canary",))
                for i, e in enumerate(canary_entries(self.generator, n, seed=seed, varied=VARIED))]


def rg_domain(generator: str) -> RgDomain:
    """The domain of ``generator``: with canaries unless its answers are too few (``NO_CANARIES``)."""
    return RgDomain(generator) if generator in NO_CANARIES else RgCanaryDomain(generator)


def respond(answer: str) -> str:
    """The response that gives ``answer``: ``<answer>ANSWER</answer>``."""
    return f"{OPEN}{answer}{CLOSE}"


def _variant(spec: Mapping[str, Any]) -> str:
    level = f"l{spec['level']}" if spec.get("level") is not None else ""
    params = ("p" + hashlib.sha256(json.dumps(spec["params"], sort_keys=True).encode()).hexdigest()[:8]
              if spec.get("params") else "")
    return level + params or "d"


def make_rg_verifier(generator: str) -> Verifier:
    """The verifier of ``rg/<generator>``: ``_check.handle_check`` in the shared rg check pool."""
    from posttrain.envs.rg import _check
    from posttrain.verify._deadline import shared_pool, verdict_of

    name = f"rg/{generator}"

    def verify(task: Task, response: str) -> Verdict:
        request = {"generator": generator, "spec": task.fields["config"], "question": task.prompt,
                   "answer": task.fields["answer"], "metadata": task.fields["rg_metadata"], "response": response}
        return verdict_of(shared_pool(_check.__name__, cpu_budget_s=CPU_BUDGET_S).run(request), name)

    return guard(name, verify)
