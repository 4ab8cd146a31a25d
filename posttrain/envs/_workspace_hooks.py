"""``WorkspaceEpisodes``: the episode hooks of a domain whose agent episodes run on the workspace kit,
written once (repo, doc, files and cad mix it in).

A domain class that mixes it in gives two methods, ``workspace_spec(task)`` (the kit's
``WorkspaceSpec`` of a task) and ``agents()`` (its module of scripted agents: ``oracle(task)``,
``CHEATS`` and ``probes(task)``), and may set ``episode_wall_s``; it then has ``episode_env``
(``HasEpisodes``), ``scripted_agents`` and ``agent_probes`` (``HasScriptedAgents``) and
``demonstration_steps`` (SFT on the oracle's episodes, one call an action).

The kit (``posttrain.envs.workspace``, which imports the sandbox) is imported when an episode is
made, not when the domain registers.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

from posttrain.types import Task


class WorkspaceEpisodes:
    """The ``HasEpisodes``, ``HasScriptedAgents`` and ``HasDemonstrationSteps`` hooks on the workspace kit."""

    episode_wall_s: ClassVar[float | None] = 900.0
    """The wall budget of an episode's own time in the environment (None: no wall budget). Without one,
    a step's 64 calls of ``sleep 300`` each within its own timeout held an episode 5 hours a step; the
    step that spends it grades the workspace as it is (the agent's verdict, never infra)."""

    def workspace_spec(self, task: Task) -> Any:
        """The workspace episode of ``task`` (a ``posttrain.envs.workspace.WorkspaceSpec``)."""
        raise NotImplementedError

    def agents(self) -> ModuleType:
        """The domain's module of scripted agents: ``oracle``, ``CHEATS``, ``probes``."""
        raise NotImplementedError

    def episode_env(self, task: Task, ctx: Any) -> Any:
        """An episode of ``task`` on the workspace kit: ``ctx`` (an ``EpisodeContext``) gives the chat
        template, the local sandbox pool, the step and token limits and the verifier a submission goes to."""
        from posttrain.envs.workspace import AgentLimits, WorkspaceEnv

        return WorkspaceEnv(self.workspace_spec(task), chat=ctx.chat, pool=ctx.pool, verify=ctx.verify,
                            limits=AgentLimits(max_steps=ctx.max_steps, max_tokens=ctx.max_tokens,
                                               wall_s=self.episode_wall_s))

    def scripted_agents(self) -> Mapping[str, Any]:
        """``oracle`` and the cheats, for ``ScriptedAgent`` (``posttrain eval --agent NAME``)."""
        agents = self.agents()
        return {"oracle": agents.oracle, **agents.CHEATS}

    def agent_probes(self, task: Task) -> list[tuple[Mapping[str, Any], str]]:
        """The calls a scripted agent makes first, to tell same-prompt tasks apart."""
        return self.agents().probes(task)

    def demonstration_steps(self, task: Task) -> list[list[Mapping[str, Any]]]:
        """The oracle's calls, one action each (SFT on the oracle's episodes)."""
        return [[call] for call in self.agents().oracle(task)]
