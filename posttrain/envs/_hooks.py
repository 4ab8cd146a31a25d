"""Every optional hook a ``Domain`` may offer, each declared here as a typed, runtime-checked Protocol.

A caller asks ``isinstance(domain, HasX)`` and then calls the hook; nothing is discovered by
``getattr`` on a name. A domain implements a hook by having the method (no base class, no
registration): the registry and the conformance suite read the same Protocols.

| hook | Protocol | read by |
|---|---|---|
| ``make_batch_verifier(pool)`` | ``HasBatchVerifier`` | the wiring (``posttrain.cli.domain_hooks``): the service's batching |
| ``task_families()`` | ``HasTaskFamilies`` | the registry (``{generator: NAME}`` sources) |
| ``demonstration_mistake(task)`` | ``HasDemonstrationMistakes`` | the scripted demonstrator |
| ``demonstration_shortcut(task)`` | ``HasDemonstrationShortcuts`` | the demonstrator's repair episodes |
| ``level_range()``, ``generate_level(n, level=, seed=)`` | ``HasLevels`` | the task pool's curriculum |
| ``capabilities()`` | ``HasCapabilities`` | ``posttrain tasks list`` |
| ``canary_tasks(n, seed=)`` | ``HasCanaries`` | the task pool's hack alarm |
| ``episode_env(task, ctx)`` | ``HasEpisodes`` | ``agent`` episodes (``posttrain.rollout.episodes``) |
| ``demonstration_steps(task)`` | ``HasDemonstrationSteps`` | SFT on scripted episodes |
| ``episode_actions(task, max_steps)`` | ``HasEpisodeActions`` | the runner's cap on an episode's actions |
| ``render_views(pool, task, response, out_dir)`` | ``HasViews`` | the evaluation's pictures for the report (``posttrain.evaluate.views``) |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from posttrain.types import BatchVerifier, Task

if TYPE_CHECKING:
    from posttrain.envs._env import Env, EpisodeContext

TaskFamily = Callable[..., list[Task]]
"""A named family of tasks: ``family(*, seed) -> list[Task]`` (all of them, shuffled by ``seed``)."""


@runtime_checkable
class HasBatchVerifier(Protocol):
    """A domain that verifies many (task, response) pairs in one call (code: one sandbox job per
    batch, each candidate still in its own fresh process); the service batches its jobs."""

    def make_batch_verifier(self, pool: Any | None) -> BatchVerifier: ...


@runtime_checkable
class HasTaskFamilies(Protocol):
    """A domain that also offers named task families (a recipe's ``{generator: NAME}``; the
    quickstart shorthand ``tasks.domains: [d]`` takes the family ``quickstart-<d>`` of domain d)."""

    def task_families(self) -> Mapping[str, TaskFamily]: ...


@runtime_checkable
class HasDemonstrationMistakes(Protocol):
    """A domain whose tasks the scripted demonstrator (``posttrain.tasks.generators.Demonstrator``)
    can demonstrate: ``demonstration_mistake(task)`` is the plausible wrong response it gives when
    it errs, or None for a task it does not know."""

    def demonstration_mistake(self, task: Task) -> str | None: ...


@runtime_checkable
class HasDemonstrationShortcuts(Protocol):
    """A domain whose repair tasks the scripted demonstrator can get wrong after reading the
    feedback: ``demonstration_shortcut(task)`` special-cases what the feedback showed (it passes the
    visible tests, not the hidden ones), or None for a task it has no shortcut for."""

    def demonstration_shortcut(self, task: Task) -> str | None: ...


@runtime_checkable
class HasLevels(Protocol):
    """A domain whose generator has difficulty levels (the task pool's curriculum raises and lowers
    them): ``level_range()`` is (easiest, hardest), inclusive; ``generate_level(n, level=, seed=)``
    builds ``n`` tasks at ``level``, each with ``difficulty=float(level)`` and a reference."""

    def level_range(self) -> tuple[int, int]: ...

    def generate_level(self, n: int, *, level: int, seed: int = 0) -> list[Task]: ...


@runtime_checkable
class HasGeneratorParams(Protocol):
    """A domain whose generator takes a recipe's parameters (``{generator: D, level: 2, params:
    {...}}``): ``generate_params(n, seed=, level=, params=)`` builds ``n`` tasks at ``level`` (None:
    the generator's default configuration) with ``params`` (the generator's own fields) on top; a
    bad level or param is a ``ValueError`` in one line naming it."""

    def generate_params(self, n: int, *, seed: int = 0, level: int | None = None,
                        params: Mapping[str, Any] | None = None) -> list[Task]: ...


@runtime_checkable
class HasCapabilities(Protocol):
    """A domain labelled by the capability dimensions its tasks exercise (``posttrain tasks list``):
    for example ``("reasoning", "arithmetic")`` or ``("agent", "terminal", "code")``."""

    def capabilities(self) -> tuple[str, ...]: ...


@runtime_checkable
class HasCanaries(Protocol):
    """A domain that can build canary tasks: tasks no honest response passes (statement and tests
    contradict, or the reference is deliberately wrong), mixed into RL and evaluation so that any
    pass raises a hack alarm. ``canary_tasks(n, seed=)``; each carries the tag ``"canary"``."""

    def canary_tasks(self, n: int, *, seed: int = 0) -> list[Task]: ...


@runtime_checkable
class HasEpisodes(Protocol):
    """A domain whose tasks run as multi-turn episodes of its own environment (``agent`` episodes:
    the tool domain's ``ToolEpisodeEnv``, BFCL's ``BfclEnv``, a workspace domain's): ``episode_env(task,
    ctx)`` builds a fresh one for ``task`` (``ctx``: ``EpisodeContext``, the chat template, the sandbox
    pool, the step limit, the verifier through the service). The runner closes it (``Env.close``)."""

    def episode_env(self, task: Task, ctx: EpisodeContext) -> Env: ...


@runtime_checkable
class HasDemonstrationSteps(Protocol):
    """A domain whose episodes can be demonstrated for SFT: the calls of each action of a
    demonstration episode (``{"name", "arguments"}`` each; an empty list is a final answer)."""

    def demonstration_steps(self, task: Task) -> list[list[Mapping[str, Any]]]: ...


@runtime_checkable
class HasEpisodeActions(Protocol):
    """A domain whose episodes take more actions than the step limit: how many an episode of a task
    takes at most (bfcl: user turns x (its per-turn step cap + 1)). Without it a domain's episodes
    take at most ``max_steps`` actions (the tool domain's step limit)."""

    def episode_actions(self, task: Task, max_steps: int) -> int: ...


@runtime_checkable
class HasViews(Protocol):
    """A domain whose answers people judge by eye: ``render_views(pool, task, response, out_dir)``
    writes pictures of ``response`` (a single-turn completion, or a workspace episode's kept
    ``submission``) beside the task's gold into ``out_dir`` in ``pool`` (the sandbox: the response is
    model output) and returns ``{"gold": path, "candidate": path}``, None where nothing could be
    drawn (cad: OpenSCAD renders seen by one camera). Never part of a verdict."""

    def render_views(self, pool: Any, task: Task, response: str, out_dir: Path) -> Mapping[str, Path | None]: ...
