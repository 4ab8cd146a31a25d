"""A multi-turn domain from outside posttrain: shell commands in a copy-on-write workspace.

The acceptance plugin of issue 20: a package that posttrain does not name anywhere, installed by
entry point (``posttrain.domains``: ``wsdomain = wsdomain:ENV``), whose tasks run as ``agent``
episodes in a ``posttrain.sandbox.Workspace`` with ``snapshot``/``restore``/``close``. It uses only
posttrain's public surface (``posttrain.envs``, ``posttrain.sandbox``, ``posttrain.policy``,
``posttrain.types``).

A task: files in a workspace (``files``), and a file to produce (``target``: its path and the content
it must have), e.g. "put the lines of in.txt, sorted, in out.txt". An episode: each action calls the
tool ``run`` with a shell command (run in the workspace; its output and its wall time come back as
the tool message: never the same twice), until an answer with no call; the episode's commands, as
one script, are then verified through the run's service (``EpisodeContext.verify``: a fresh
workspace runs the script and the target is read). As a single response, the response is that
script. ``generate_tasks`` draws tasks; the reference is the one command that does it.

Test hooks (environment variables, read when an episode is built): ``WSDOMAIN_FAIL_DIR``: a
directory; the first episode step that finds no ``failed`` file there creates it and raises an
infra exception (``ConnectionResetError``) after its command ran, so the runner must restore the
snapshot taken before the step (the command's writes undone) and step it again; ``WSDOMAIN_LOG``: a
file each workspace's creation and close are appended to (``open <pid>:<id>``, ``close <pid>:<id>``).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from typing import Any

from posttrain.envs import (
    ChatTurns,
    EpisodeContext,
    RecordReader,
    Verifier,
    fail,
    guard,
    parse_common,
    passed,
)
from posttrain.sandbox.workspace import Workspace
from posttrain.types import Generation, Observation, StepResult, Task, Verdict

NAME = "wsdomain"
RUN_TOOL = {"type": "function", "function": {
    "name": "run", "description": "Run a shell command in the workspace; its output comes back.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}
OUTPUT_CHARS = 200


def _log(event: str, ws: Workspace) -> None:
    path = os.environ.get("WSDOMAIN_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{event} {os.getpid()}:{id(ws)}\n")


def _workspace(pool: Any, task: Task) -> Workspace:
    ws = Workspace(pool, dict(task.fields["files"]), storage_mb=16)
    _log("open", ws)
    return ws


def check_state(ws: Workspace, task: Task) -> Verdict:
    """The target file's content, against the task's."""
    target = task.fields["target"]
    try:
        got = ws.read_file(target["path"]).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - no such file, a directory, a link: the goal is not met
        return fail(f"{target['path']} was not written.", "wrong_answer")
    if got != target["content"]:
        return fail(f"{target['path']} does not hold what was asked.", "wrong_answer", {"format": 1.0})
    return passed("Correct.")


class ShellEpisode:
    """One episode: commands in a workspace of the task's files (module docstring)."""

    def __init__(self, ctx: EpisodeContext) -> None:
        if ctx.pool is None:
            raise ValueError("wsdomain episodes run in a Workspace: episode_env needs the sandbox pool")
        self.ctx = ctx
        self.ws: Workspace | None = None
        self.fail_dir = os.environ.get("WSDOMAIN_FAIL_DIR")

    def reset(self, task: Task) -> Observation:
        self.task, self.commands, self.steps = task, [], 0
        self.ws = _workspace(self.ctx.pool, task)
        self.turns = ChatTurns(self.ctx.chat, [{"role": "user", "content": task.prompt}], tools=[RUN_TOOL])
        return Observation(tuple(self.turns.prompt_ids()), task.prompt)

    def step(self, action: Generation) -> StepResult:
        assert self.ws is not None, "ShellEpisode.step before reset"
        self.steps += 1
        parse = self.ctx.chat.parse_tool_calls(action.text)
        self.turns.act(action, self.ctx.chat.assistant_message(parse))
        calls = [c for c in parse.calls if c.name == "run" and isinstance(c.arguments.get("cmd"), str)] if parse.ok else []
        if not calls or self.steps >= self.ctx.max_steps:
            if calls:
                self._run(calls)
            return StepResult(Observation(()), self.ctx.verify(self.task, "\n".join(self.commands)), True)
        results = self._run(calls)
        self._inject()
        new = [{"role": "tool", "tool_call_id": f"call_{i}", "name": "run", "content": r} for i, r in enumerate(results)]
        ids = self.turns.observe(new)
        return StepResult(Observation(tuple(ids), "\n".join(results)), None, False)

    def _run(self, calls: list[Any]) -> list[str]:
        out = []
        for call in calls:
            cmd = call.arguments["cmd"]
            self.commands.append(cmd)
            t0 = time.perf_counter()
            ex = self.ws.exec(["sh", "-c", cmd], timeout=5.0)
            if ex.outcome == "infra_error":
                raise OSError(f"the sandbox failed: {ex.infra_detail}")
            text = (ex.stdout + ex.stderr).decode("utf-8", "replace")[:OUTPUT_CHARS]
            out.append(f"exit {ex.exit_code}, {time.perf_counter() - t0:.6f}s\n{text}")
        return out

    def _inject(self) -> None:
        """The test's infra error: once per ``WSDOMAIN_FAIL_DIR``, after the command wrote its files."""
        if self.fail_dir and self.steps == 1:
            marker = os.path.join(self.fail_dir, "failed")
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            raise ConnectionResetError("the sandbox job's pipe broke (injected by the test)")

    def snapshot(self) -> object:
        assert self.ws is not None
        return self.ws.snapshot(), len(self.commands), self.steps, self.turns.snapshot()

    def restore(self, snapshot: object) -> None:
        assert self.ws is not None
        handle, n, steps, turns = snapshot  # type: ignore[misc]
        self.ws.rollback(to=handle)
        del self.commands[n:]
        self.steps = steps
        self.turns.restore(turns)

    def close(self) -> None:
        if self.ws is not None:
            ws, self.ws = self.ws, None
            ws.close()
            _log("close", ws)


class WsDomain:
    name = NAME
    needs_sandbox = True

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(frozenset({"files", "target"}))
        files, target = reader.present("files"), reader.present("target")
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise reader.fail("files", "an object of path: text", files)
        if not isinstance(target, dict) or set(target) != {"path", "content"}:
            raise reader.fail("target", "an object {path, content}", target)
        return parse_common(reader, {"files": files, "target": target})

    def render_prompt(self, task: Task) -> str:
        return f"{task.prompt}\nFiles: {', '.join(sorted(task.fields['files']))}. Answer with one shell command."

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        if pool is None:
            raise ValueError("wsdomain verifies in a Workspace: make_verifier needs the sandbox pool")

        def verify(task: Task, response: str) -> Verdict:
            ws = _workspace(pool, task)
            try:
                if response.strip():
                    ex = ws.exec(["sh", "-c", response], timeout=5.0)
                    if ex.outcome == "infra_error":
                        return Verdict.infra(f"the sandbox failed: {ex.infra_detail}")
                return check_state(ws, task)
            finally:
                ws.close()
                _log("close", ws)

        return guard(NAME, verify)

    def noop_response(self, task: Task) -> str:
        return ""

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        [task] = self.generate_tasks(1, seed=99)
        return [("the input copied", task, "cp in.txt out.txt"),
                ("another file written", task, "sort in.txt > other.txt")]

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        rng = random.Random(f"{NAME}-{seed}")
        out = []
        for i in range(n):
            lines = [f"{rng.choice('abcdefgh')}{rng.randrange(100)}" for _ in range(4)]
            while sorted(lines) == lines:
                rng.shuffle(lines)
            out.append(self.parse_task({
                "id": f"ws-{seed}-{i}", "prompt": "Write the lines of in.txt, sorted, to out.txt.",
                "files": {"in.txt": "\n".join(lines) + "\n"},
                "target": {"path": "out.txt", "content": "\n".join(sorted(lines)) + "\n"},
                "reference": "sort in.txt > out.txt",
                "limits": {"timeout_s": 10.0, "max_attempts": 1}}, f"generator {NAME}"))
        return out

    def episode_env(self, task: Task, ctx: EpisodeContext) -> ShellEpisode:
        return ShellEpisode(ctx)

    def demonstration_steps(self, task: Task) -> list[list[Mapping[str, Any]]]:
        return [[{"name": "run", "arguments": {"cmd": str(task.reference)}}], []]


ENV = WsDomain()
