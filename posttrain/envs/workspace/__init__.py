"""The workspace agent kit: episodes in a copy-on-write ``Workspace``, shared by every workspace domain.

A kit, not a domain: repo builds its episodes on it (``posttrain.envs.repo``), and so can doc, files
and cad. A domain gives, per task, a ``WorkspaceSpec``; the kit does the rest.

    spec = WorkspaceSpec(
        initial={path: bytes},                       # the workspace's initial state (never modified)
        prompt="the task, as the first user message",
        tools=default_tools(my_tool),                # bash, read_file, write_file, edit, list_dir, +yours, submit
        take=take,                                   # take(workspace, submit_args) -> response text | fail Verdict
        max_attempts=3, feedback=True,               # repair: a failed attempt's feedback, then go on
        process=None,                                # optional: calls so far -> components merged into verdicts
    )
    env = WorkspaceEnv(spec, chat=ctx.chat, pool=ctx.pool, verify=ctx.verify,
                       limits=AgentLimits(max_steps=ctx.max_steps))      # the Env of lifecycle.md

How a domain builds on it (``HasEpisodes.episode_env(task, ctx)`` returns the env above):

1. ``initial``: the task's files. For a Python project, ``python_environment(python_path,
   wheelhouse=)`` adds ``python``/``pip`` as typed, user-site installs in ``.local`` and an offline
   wheelhouse at ``.wheelhouse/`` (its files and the commands' variables: ``spec.env``).
2. ``tools``: ``default_tools(*extra)``; a tool of your own is ``Tool(name, description, schema,
   run)`` with ``run(ctx, arguments) -> str`` over ``ctx.workspace`` (``read_file`` and
   ``write_file`` on the host, ``run_command(ctx, argv, timeout)`` in a sandbox job); a command tool
   (``run_tests``) is ``command_tool(name, description, argv_of_arguments)``. Arguments are checked
   against the schema before ``run``; an error of the agent's is a result text (``Error: ...``),
   a sandbox failure ``ToolInfraError``.
3. ``take``: what your grader grades, taken host-side from the workspace, as the response text your
   ``Verifier`` reads. ``workspace_changes(ws, initial, keep=)`` gives ``{path: bytes | None |
   SPECIAL}`` from the layers (no command the agent controls); leave out ``ENV_DIRS``, which then
   count toward no limit of paths, only the host's bound on its walk (``changed_paths``).
   ``mode_changes(ws, keep=)`` gives what a diff cannot carry: each mode that is not as it was, and
   each new entry's (``ModeChange``: path, both modes, ``reason``, ``is_sane``); what your grader
   does with them is your rule. The kit then calls ``verify(task, response)`` (the service's nested
   lane): the verifier must judge it on a fresh pristine copy of its own, never in this workspace.
4. Scripted agents (optional): ``HasWorkspaceEpisodes.workspace_spec(task)`` and
   ``HasScriptedAgents`` (``scripted_agents()``: ``oracle`` and cheats as ``script(task) ->
   [call, ...]``; ``agent_probes(task)``) make ``ScriptedAgent(chat, tasks, name)``, a ``Sampler``
   that ``posttrain eval --episodes agent --agent NAME`` plays through the same runner as a model.
   ``posttrain.envs._workspace_hooks.WorkspaceEpisodes`` gives a domain class these hooks and
   ``episode_env``/``demonstration_steps`` from its ``workspace_spec(task)`` and ``agents()``.

Every call is recorded (``ToolCallRecord``: name, arguments, result, valid, seconds) in
``StepResult.calls`` and so in ``Turn.calls``, the records and the report's per-turn viewer.
Budgets (``AgentLimits``): steps, tokens after the prompt, and wall seconds of the episode's own
time in the environment; the step that reaches one grades the workspace as it is.

Modules: ``_env.py`` (the environment, budgets, grading, snapshot/restore), ``_tools.py`` (the tools
and argument checks), ``_normalize.py`` (what tool output looks like), ``_changes.py`` (what changed,
from the layers), ``_python.py`` (a Python project's environment), ``_agents.py`` (scripted agents).
Not here: any domain's grader, the episode runner (``posttrain.rollout``).
"""

from posttrain.envs.workspace._agents import (
    SUBMIT,
    AgentScript,
    Call,
    HasScriptedAgents,
    HasWorkspaceEpisodes,
    ScriptedAgent,
    ScriptedModel,
    agent_names,
    noop_script,
)
from posttrain.envs.workspace._changes import (
    SPECIAL,
    ModeChange,
    changed_paths,
    mode_changes,
    named,
    workspace_changes,
)
from posttrain.envs.workspace._env import (
    MAX_STEPS,
    AgentLimits,
    Take,
    WorkspaceEnv,
    WorkspaceSpec,
    prompt_ids,
)
from posttrain.envs.workspace._normalize import cut_middle, normalize_output
from posttrain.envs.workspace._python import ENV_DIRS, WHEELHOUSE, python_argv, python_environment
from posttrain.envs.workspace._tools import (
    TOOL_DIRS,
    Tool,
    ToolContext,
    ToolInfraError,
    bash_tool,
    check_arguments,
    command_tool,
    default_tools,
    edit_tool,
    list_dir_tool,
    read_file_tool,
    repo_path,
    run_command,
    submit_tool,
    write_file_tool,
)

__all__ = [
    "ENV_DIRS",
    "MAX_STEPS",
    "SPECIAL",
    "SUBMIT",
    "TOOL_DIRS",
    "WHEELHOUSE",
    "AgentLimits",
    "AgentScript",
    "Call",
    "HasScriptedAgents",
    "HasWorkspaceEpisodes",
    "ModeChange",
    "ScriptedAgent",
    "ScriptedModel",
    "Take",
    "Tool",
    "ToolContext",
    "ToolInfraError",
    "WorkspaceEnv",
    "WorkspaceSpec",
    "agent_names",
    "bash_tool",
    "changed_paths",
    "check_arguments",
    "command_tool",
    "cut_middle",
    "default_tools",
    "edit_tool",
    "list_dir_tool",
    "mode_changes",
    "named",
    "noop_script",
    "normalize_output",
    "prompt_ids",
    "python_argv",
    "python_environment",
    "read_file_tool",
    "repo_path",
    "run_command",
    "submit_tool",
    "workspace_changes",
    "write_file_tool",
]
