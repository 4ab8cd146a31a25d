"""cad episodes on the workspace kit: a specification and an empty work directory in a ``Workspace``,
OpenSCAD in the sandbox, and ``submit`` rendering ``part.scad`` again in a fresh sandbox job.

- The workspace holds ``spec.md`` (the part in words, as the prompt states it) and nothing else: the
  agent writes ``part.scad``. ``openscad`` (Debian's, the grader's) runs in the workspace's jobs;
  the ``render`` tool renders ``part.scad`` to ``/tmp/part.stl`` (the job's own, gone after) and shows
  OpenSCAD's messages, so the agent sees what builds before it submits.
- ``submit``: ``take_script`` reads ``part.scad`` from the workspace's merged view on the host (a
  regular file of at most ``MAX_SCRIPT_BYTES``, refused by its size before it is read; a link, a
  directory or nothing there fails with the reason) and hands the script alone to the cad verifier
  (as a response without a fence: the whole text is the script): its static check (no ``include``,
  ``use``, ``import``, ``surface``, ``file =``), a render in a fresh sandbox job of its own (only the
  script: nothing of the workspace, no STL the agent made), the mesh gate and the specification
  (``_verify.py``). Other files of the workspace are never graded.
- Repair: a failed attempt's feedback (what differs and by how much) is the submit call's result,
  ``MAX_ATTEMPTS`` attempts in all.

Not here: the scripted agents (``_agents.py``), the checks (``_mesh.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posttrain.envs._base import fail
from posttrain.envs.cad._script import MAX_SCRIPT_CHARS
from posttrain.envs.workspace import Tool, WorkspaceSpec, command_tool, default_tools
from posttrain.sandbox import Limits, Workspace, WorkspaceError, WorkspaceFileMissing, WorkspaceFileTooLarge
from posttrain.types import Task, Verdict

MAX_ATTEMPTS = 3
SCRIPT = "part.scad"
MAX_SCRIPT_BYTES = 4 * MAX_SCRIPT_CHARS
"""Most bytes of ``part.scad`` read (UTF-8: at most 4 a character). A larger file is refused by its size,
never read: a workspace job may write 64 MiB (its RLIMIT_FSIZE), and many episodes submit at once."""
SYSTEM = ("You are a CAD engineer working in a workspace (the current directory, /work) with the tools. Write the "
          f"part as one OpenSCAD script, {SCRIPT}; render it to check that it builds and matches the "
          "specification; call submit when it does.")
RENDER_ARGV = ["openscad", "--export-format", "binstl", "-o", "/tmp/part.stl", SCRIPT]


def render_tool() -> Tool:
    """``render()``: ``openscad -o /tmp/part.stl part.scad`` in the workspace (its messages, its exit status)."""
    return command_tool("render", f"Render {SCRIPT} with OpenSCAD (`openscad -o /tmp/part.stl {SCRIPT}`): shows "
                        "OpenSCAD's messages and whether it built a mesh.", lambda arguments: RENDER_ARGV)


def episode_prompt(task: Task) -> str:
    """The first user message: the specification, then where the script goes and how it is graded."""
    return (f"{task.prompt.rstrip()}\n\nThe specification is also in spec.md. Write an OpenSCAD script that builds "
            f"this part to {SCRIPT} in the workspace. Units are millimetres. Build it from primitives in that one "
            "file: do not include, use or import any file (the grader renders the script alone, in a clean "
            f"sandbox). Use $fn = 48 to 128 for round features. The render tool renders {SCRIPT} with OpenSCAD "
            "2021; call submit when it builds the part.")


def take_script(ws: Workspace, arguments: Mapping[str, Any]) -> str | Verdict:
    """The cad domain's ``take``: ``part.scad``, fenced, as the response the cad verifier reads."""
    try:
        data = ws.read_file(SCRIPT, max_bytes=MAX_SCRIPT_BYTES)
    except WorkspaceFileTooLarge as e:
        return fail(f"{SCRIPT} is too large ({e}); at most {MAX_SCRIPT_CHARS} characters are rendered.",
                    "format", {"take": str(e)})
    except WorkspaceError as e:
        missing = isinstance(e, WorkspaceFileMissing)
        why = f"{SCRIPT} was not written" if missing else f"{SCRIPT} is not a regular file ({e})"
        return fail(f"Nothing to grade: {why}. Write the script to {SCRIPT}, then submit.",
                    "format" if missing else "not_regular", {"take": why})
    try:
        script = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return fail(f"{SCRIPT} is not UTF-8 text (byte {e.start}).", "format", {"take": "not utf-8"})
    if "```" in script:  # the verifier would pick a fenced block out of it: grade the file as it is, or nothing
        return fail(f"{SCRIPT} contains ``` (a Markdown fence): write the OpenSCAD script alone.", "format",
                    {"take": "fence in the script"})
    return script  # the whole response is the script: exactly the file, never a block picked from it


def workspace_spec(task: Task) -> WorkspaceSpec:
    """The kit's description of a cad task's episode (module docstring)."""
    memory = max(1024, task.limits.memory_mb or 1024)
    return WorkspaceSpec(
        initial={"spec.md": (task.prompt.rstrip() + "\n").encode()}, prompt=episode_prompt(task), system=SYSTEM,
        tools=default_tools(render_tool()), take=take_script, max_attempts=max(task.limits.max_attempts, MAX_ATTEMPTS),
        feedback=True, keep_submission=True, command_limits=Limits(memory_mb=memory, pids=128, tmp_mb=256, output_bytes=1 << 18),
        command_timeout_s=max(60.0, task.limits.timeout_s or 20.0))
