"""The files domain: agent work on local files, graded on the workspace's final state.

Task fields (docs/tasks.md, "files"): ``prompt`` (the instruction), ``workspace`` (the initial files,
``{path: text | {"text", "encoding"} | {"base64"}}``), ``targets`` (what the finished workspace must
hold: ``{path: {"format": "json", "value"} | {"format": "csv", "rows"} | {"format": "text",
"content"} | {"format": "bytes", "same_as": path} | {"absent": true}}``) and ``inputs`` (optional:
the files the instruction needs read, for the episode's process signal).

The single-response form: the response names the files it writes, ``{path: content | null}``, as one
JSON object (``_check.py``); it is applied to a pristine copy of the workspace and the final state is
graded by ``_grade.grade_final_state`` — the grader phase 2's agent episodes call on the workspace they
read back. Why this form rather than a script run in the sandbox: one grader serves both forms; no
model-written code runs at grading time (the check is host-side, in a CPU-budget worker, a few ms, no
sandbox pool); and a response can do only what it declares, so its attack surface is paths and contents,
each covered by an exploit fixture. Links, fifos and files changed behind the agent's back are episode
attacks; the grader refuses them already (tests build such final states).

Verification (each failure a ``fail``, reward 0; the check runs in a worker under a CPU budget, so a
hostile response can only fail, never hang the host or become an ``infra_error``):
1. ``format``: the response is one strict JSON object of canonical paths (no ``..``, no absolute path,
   no ``./`` or ``//`` spelling, no backslash, NFC) to strings, ``{"base64"}`` or null, writable in the
   tree (not under a file, not over a directory);
2. the final state, by ``grade_final_state``: regular files only (``not_regular``), every target right
   (``missing``, ``wrong_format``, ``wrong_content``), nothing else changed, deleted or created
   (``collateral``). Feedback names the paths and where they depart, never the expected content, and
   only the paths the instruction names as files to write: which files a task moves or deletes is the
   answer (``_grade.named_paths``, ``UNNAMED``).

Not here: partial credit per target; tolerance on numbers (the instruction fixes the form exactly).
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
import sqlite3
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from posttrain.envs import RecordReader, guard, parse_common
from posttrain.envs._workspace_hooks import WorkspaceEpisodes
from posttrain.envs.files._gen import KINDS, LEVELS, Part, make_task_parts
from posttrain.envs.files._grade import grade_final_state, parse_targets
from posttrain.envs.files._workspace import (
    MAX_FILES,
    MAX_WORKSPACE_BYTES,
    decode_workspace,
    encode_file,
    pristine_state,
)
from posttrain.shown import clipped
from posttrain.types import Task, Verdict, Verifier
from posttrain.verify._deadline import shared_pool, verdict_of

NAME = "files"
DOMAIN_KEYS = frozenset({"workspace", "targets", "inputs"})
CPU_BUDGET_S = 5.0
MAX_SHOWN_BYTES = 64 << 10
"""A workspace file longer than this is shown to a single-response model cut, with the cut said."""

FORMAT_RULES = (
    "Reply with one JSON object and nothing else. Its keys are the paths (relative to the workspace, like "
    "reports/out.json) of the files you create or change; each value is the file's whole new content as a "
    'string (UTF-8 text), or {"base64": "..."} for other bytes; null deletes the file. Files you do not name '
    "stay as they are.")
_TICKS_RE = re.compile(r"`+")


def make_files_verifier() -> Verifier:
    """A verifier for files tasks; each check runs in the shared worker pool under a CPU budget."""

    def verify(task: Task, response: str) -> Verdict:
        request = {"workspace": task.fields["workspace"], "targets": task.fields["targets"], "response": response,
                   "instruction": task.prompt}
        checks = shared_pool("posttrain.envs.files._check", cpu_budget_s=CPU_BUDGET_S)
        return verdict_of(checks.run(request), NAME)

    return guard(NAME, verify)


class FilesEnv(WorkspaceEpisodes):
    """The files domain (see the module docstring)."""

    name = NAME
    needs_sandbox = False

    def parse_task(self, record: Mapping[str, Any], source: str) -> Task:
        reader = RecordReader(record, source, NAME)
        reader.check_keys(DOMAIN_KEYS)
        workspace = reader.present("workspace")
        if not isinstance(workspace, Mapping):
            raise reader.fail("workspace", "an object {path: text | {\"text\", \"encoding\"} | {\"base64\"}}", workspace)
        if len(workspace) > MAX_FILES:
            raise reader.fail("workspace", f"at most {MAX_FILES} files", len(workspace))
        try:
            pristine = decode_workspace(workspace)
        except ValueError as e:
            raise reader.fail("workspace", f"valid files ({e})", show_got=False) from None
        if sum(map(len, pristine.values())) > MAX_WORKSPACE_BYTES:
            raise reader.fail("workspace", f"at most {MAX_WORKSPACE_BYTES} bytes in all", show_got=False)
        try:
            targets = parse_targets(reader.present("targets"), pristine)
        except ValueError as e:
            raise reader.fail("targets", f"valid targets ({e})", show_got=False) from None
        if not grade_final_state(targets, pristine, pristine_state(pristine)):
            raise reader.fail("targets", "at least one target the untouched workspace does not meet "
                                         "(else the no-op passes)", show_got=False)
        fields: dict[str, Any] = {"workspace": dict(workspace), "targets": dict(reader.record["targets"])}
        if "inputs" in reader.record:
            inputs = reader.record["inputs"]
            if not isinstance(inputs, list) or not all(isinstance(p, str) and p in pristine for p in inputs):
                raise reader.fail("inputs", "a list of paths of workspace files", inputs)
            fields["inputs"] = list(inputs)
        return parse_common(reader, fields)

    def render_prompt(self, task: Task) -> str:
        return render_files_prompt(task.prompt, decode_workspace(task.fields["workspace"]))

    def make_verifier(self, pool: Any | None = None) -> Verifier:
        return make_files_verifier()

    def noop_response(self, task: Task) -> str:
        return "{}"

    def exploit_fixtures(self) -> list[tuple[str, Task, str]]:
        """``(name, task, response)``: ways to score without doing the work, written as a policy would;
        each must be a ``fail`` (never ``infra_error``). See ``_exploits.py``."""
        from posttrain.envs.files._exploits import exploit_fixtures

        return exploit_fixtures()

    def generate_tasks(self, n: int, seed: int = 0) -> list[Task]:
        """``n`` tasks over every level (task i at level ``1 + i % 5``)."""
        rng = random.Random(seed)
        return [build_task(rng, LEVELS[i % len(LEVELS)], f"files-gen-{seed}-{i}") for i in range(n)]

    def level_range(self) -> tuple[int, int]:
        return LEVELS[0], LEVELS[-1]

    def generate_level(self, n: int, *, level: int, seed: int = 0) -> list[Task]:
        if level not in LEVELS:
            raise ValueError(f"files: level must be in {LEVELS[0]}..{LEVELS[-1]}, got {level!r}")
        rng = random.Random(f"files-{level}-{seed}")
        return [build_task(rng, level, f"files-l{level}-{seed}-{i}") for i in range(n)]

    def capabilities(self) -> tuple[str, ...]:
        return ("agent", "files", "data-cleaning")

    def generate_params(self, n: int, *, seed: int = 0, level: int | None = None,
                        params: Mapping[str, Any] | None = None) -> list[Task]:
        """``n`` tasks at ``level`` (None: levels 1-5 in turn) with the generator's own ``params``:
        ``kinds`` (the kinds of work to draw from: sales, contacts, inventory, notes, merge, sqlite; at
        level 5 two of them share a workspace). A bad level or param is a ``ValueError`` naming it."""
        params = dict(params or {})
        unknown = sorted(set(params) - {"kinds"}, key=str)
        if unknown:
            raise ValueError(f"files: params.{str(unknown[0])[:80]}: unknown generator param; expected kinds")
        if level is not None and level not in LEVELS:
            raise ValueError(f"files: level must be in {LEVELS[0]}..{LEVELS[-1]}, got {level!r}")
        kinds = params.get("kinds")
        if "kinds" in params and (not isinstance(kinds, list) or not kinds or len(kinds) > len(KINDS) * 10
                                  or not all(isinstance(k, str) and k in KINDS for k in kinds)):
            raise ValueError(f"files: params.kinds: expected a non-empty list of {', '.join(KINDS)}, "
                             f"got {clipped(kinds)}")
        rng = random.Random(f"files-params-{level}-{seed}")
        out = []
        for i in range(n):
            lv = level if level is not None else LEVELS[i % len(LEVELS)]
            drawn = rng.sample(kinds, min(len(kinds), 2 if lv == 5 else 1)) if kinds else None
            out.append(build_task(rng, lv, f"files-p{lv}-{seed}-{i}", drawn))
        return out

    def canary_tasks(self, n: int, *, seed: int = 0) -> list[Task]:
        """Tasks no honest response passes: a generated task one of whose text or CSV targets asks for
        one more line than the instruction produces (a pass means the target was not computed from
        the workspace). Tagged ``canary``; no reference."""
        rng = random.Random(f"files-canary-{seed}")
        out = []
        for i in range(n):
            task = build_task(rng, 1 + i % 3, f"files-canary-{seed}-{i}")
            targets = dict(task.fields["targets"])
            path = next(p for p, t in sorted(targets.items()) if t.get("format") in ("text", "csv", "json"))
            target = dict(targets[path])
            if target["format"] == "text":
                target["content"] = target["content"] + "canary\n"
            elif target["format"] == "csv":
                target["rows"] = [*target["rows"], ["canary"]]
            else:
                target["value"] = {"canary": target["value"]}
            targets[path] = target
            out.append(Task(id=task.id, domain=NAME, prompt=task.prompt, fields={**task.fields, "targets": targets},
                            difficulty=task.difficulty, tags=(*task.tags, "canary"), limits=task.limits,
                            metadata={**task.metadata, "canary": f"{path} asks for more than the instruction says"}))
        return out

    # -- agent episodes (the workspace kit: posttrain.envs.workspace; _episode.py, _agents.py) --

    def workspace_spec(self, task: Task) -> Any:
        """The workspace episode of ``task`` (``_episode.workspace_spec``)."""
        from posttrain.envs.files._episode import workspace_spec

        return workspace_spec(task)

    def agents(self) -> ModuleType:
        """The scripted agents (``_agents.py``: ``oracle``, ``CHEATS``, ``probes``)."""
        from posttrain.envs.files import _agents

        return _agents


def build_task(rng: random.Random, level: int, tid: str, kinds: list[str] | None = None) -> Task:
    """One generated task: the drawn kinds' workspace and instruction, targets from the gold's writes."""
    drawn, part = make_task_parts(rng, level, kinds)
    fields = {"workspace": {p: encode_file(d) for p, d in sorted(part.workspace.items())},
              "targets": targets_of(part), "inputs": part.inputs}
    return Task(id=tid, domain=NAME, prompt=part.instruction, fields=fields, reference=reference_of(part),
                difficulty=float(level), tags=("files", *drawn), metadata={"generator": f"files/{'+'.join(drawn)}"})


def targets_of(part: Part) -> dict[str, Any]:
    """The ``targets`` field for the gold's writes (each compared in the format the kind declares)."""
    out: dict[str, Any] = {}
    for path, data in sorted(part.writes.items()):
        fmt = part.formats.get(path)
        if data is None:
            out[path] = {"absent": True}
        elif isinstance(fmt, tuple):
            out[path] = {"format": "bytes", "same_as": fmt[1]}
        elif fmt == "json":
            out[path] = {"format": "json", "value": json.loads(data)}
        elif fmt == "csv":
            out[path] = {"format": "csv", "rows": list(csv.reader(io.StringIO(data.decode(), newline="")))}
        else:
            out[path] = {"format": "text", "content": data.decode()}
    return out


def reference_of(part: Part) -> str:
    """The single response that does the gold's writes."""
    return json.dumps({p: (None if d is None else encode_file(d)) for p, d in sorted(part.writes.items())},
                      ensure_ascii=False, indent=1)


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``."""
    return "`" * max(3, max((len(run) for run in _TICKS_RE.findall(text)), default=0) + 1)


def show_file(data: bytes) -> tuple[str, str]:
    """``(what it is, its content as text)`` for the single-response prompt: UTF-8 text as it is, other
    text with each non-UTF-8 byte as ``\\xNN``, a SQLite database as its SQL dump."""
    if data.startswith(b"SQLite format 3\x00"):
        db = sqlite3.connect(":memory:")
        try:
            db.deserialize(data)
            return "a SQLite 3 database; its SQL dump", "\n".join(db.iterdump())
        except sqlite3.Error:
            return "a damaged SQLite database; its bytes", data.decode("latin-1")
        finally:
            db.close()
    try:
        text = data.decode("utf-8")
        what = "UTF-8 text" + (", starting with a byte-order mark" if text.startswith("\ufeff") else "")
        return what, text
    except UnicodeDecodeError:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            return "UTF-16 text (with a byte-order mark), shown decoded", data.decode("utf-16", "replace")
        return "not valid UTF-8; its bytes that are not UTF-8 are shown as \\xNN", data.decode("utf-8", "backslashreplace")


def render_files_prompt(instruction: str, files: Mapping[str, bytes]) -> str:
    """The single-response prompt: the instruction, every workspace file, then the answer's format."""
    blocks = []
    for path, data in sorted(files.items()):
        what, text = show_file(data)
        cut = ""
        if len(text) > MAX_SHOWN_BYTES:
            text, cut = text[:MAX_SHOWN_BYTES], f"\n[... cut: {len(data)} bytes in all]"
        fence = _fence(text)
        body = text if text.endswith("\n") else text + "\n"
        blocks.append(f"{path} ({len(data)} bytes, {what}):\n{fence}\n{body}{fence}{cut}")
    listing = "\n\n".join(blocks) if blocks else "(the workspace is empty)"
    return f"{instruction}\n\nThe workspace holds {len(files)} file(s):\n\n{listing}\n\n{FORMAT_RULES}"


ENV = FilesEnv()
