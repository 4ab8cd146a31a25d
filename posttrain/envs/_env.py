"""``Env``: the one episode protocol, token level, with a lifecycle. One instance per episode, never shared.

    observation = env.reset(task)          # Observation: the prompt, as token ids
    result = env.step(generation)          # StepResult(observation, verdict, done), after each action
    env.close()                            # always, on every path out of the episode (idempotent)

Observations are token ids the environment inserts into the context; the episode runner
(``posttrain.rollout.run_batch``) appends them to what was sampled as ids, never decoding and
re-encoding the context. ``result.verdict`` is the verdict on the action when it was an attempt
at the task (a repair episode's every answer), ``None`` for other steps (a tool call);
``result.done`` ends the episode. ``step`` may be called from a worker thread (the service's).

Lifecycle: ``close()`` releases what the environment holds (a ``Workspace``'s tmpfs, cgroups and
uid claim; threads). The runner calls it on every path out of an episode: done, cut by its limits,
its group dropped, an error of the environment (``StepError``), an exception of the sampler, and
on every environment a restart replaces. A second ``close()`` does nothing.

``Restorable`` (optional): an environment whose state can be saved and put back cheaply
(``Workspace.snapshot``/``rollback(to=)``: O(1)). The runner takes a snapshot after ``reset`` and
after every step that did not end the episode; on an infra error of a step it ``restore``s the
last one on the same environment and steps the failed action again, instead of building a fresh
environment and replaying every action (which demands byte-identical observations: command output
in a repository is not deterministic).

``EpisodeContext``: what a domain gets to build its episodes' environments
(``HasEpisodes.episode_env(task, ctx)``, ``_hooks.py``).

The protocols live with the domains because a domain builds its own episodes (``HasEpisodes``);
the runner that drives them is a layer above (``posttrain.rollout``). ``Domain`` (``_base.py``)
is the other protocol of this package: how a domain's tasks are parsed, shown and verified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from posttrain.types import Generation, Observation, StepResult, Task, Verifier

if TYPE_CHECKING:
    from posttrain.policy import ChatTemplate
    from posttrain.sandbox import SandboxPool


class Env(Protocol):
    """One episode's environment (module docstring)."""

    def reset(self, task: Task) -> Observation: ...

    def step(self, action: Generation) -> StepResult: ...

    def close(self) -> None: ...


@runtime_checkable
class Restorable(Protocol):
    """An environment whose state the runner can save and put back (module docstring).

    ``snapshot()``: the state now, opaque to the runner, cheap; ``restore(s)``: back to the state of
    snapshot ``s`` (later snapshots may be forgotten). An infra exception from ``restore`` (the
    runner's ``INFRA_EXCEPTIONS``) makes the runner fall back to a fresh environment and a replay."""

    def snapshot(self) -> object: ...

    def restore(self, snapshot: object) -> None: ...


@dataclass(frozen=True)
class EpisodeContext:
    """What a domain's ``episode_env(task, ctx)`` builds an environment with (``HasEpisodes``)."""

    chat: ChatTemplate
    """The model's chat template: renders the conversation, tool calls and observations as ids."""
    pool: SandboxPool | None
    """The sandbox pool environments run in (a ``LocalSandboxPool`` where ``Workspace``s are needed);
    None where the run has none."""
    max_steps: int
    """The step limit of the recipe or command (``rl.max_turns``, ``eval.max_turns``, ``--max-turns``)."""
    verify: Verifier
    """Verifies a response to a task of any domain the run serves (``verify(task, response)``): through
    the execution service on a lane of its own, so a step may wait on it; directly in unit tests."""
    max_tokens: int | None = None
    """The episode's token budget after its prompt (the runner cuts at it), None: none; for
    environments that size what they show by it."""
