"""``WorkspaceEnv``: one agent episode in a copy-on-write ``Workspace``, through the model's chat template.

    env = WorkspaceEnv(spec, chat=chat, pool=pool, verify=verify, limits=AgentLimits(max_steps=20))
    obs = env.reset(task)                  # a fresh Workspace of spec.initial; the prompt and tools, as ids
    result = env.step(generation)          # the action's tool calls run; their results come back as ids
    env.close()                            # the workspace's tmpfs, cgroups and uid go (idempotent)

Each action is parsed in the template's tool-call family (``ChatTemplate.parse_tool_calls``); its
calls run in order (``_tools.py``), each recorded with its result and its time
(``StepResult.calls`` -> ``Turn.calls``); the results come back as ``role: tool`` messages appended
as ids (``ChatTurns``: ``ChatTemplate.observation_ids``), never re-tokenized. A response whose calls cannot be
decoded, a call to an unknown tool or with arguments its schema refuses is an invalid call (an
error result, nothing runs); a response with no call gets a reminder to use the tools.

``submit`` grades: the domain's ``spec.take(workspace, arguments)`` takes, host-side, only what the
domain grades (repo: the source diff against the initial state, from the workspace's layers) as the
response text its verifier reads, and ``verify(task, response)`` judges it elsewhere: a fresh
pristine copy in a sandbox job of its own (the service's nested lane). Nothing of the agent's
workspace -- processes, caches, configuration, environment -- reaches the verifier but that text.
A failed attempt on a task that allows repair (``spec.feedback``, ``spec.max_attempts``) returns
the verifier's feedback as the submit call's result (its normalized failure: test names, assertion
and location; never a withheld test's text or the gold) and the episode goes on; the same
submission again is not graded again (the earlier verdict stands, and is said). A failed attempt
whose feedback would give the answer away (``Verdict.ends_repair``: a yes/no question answered
wrong) ends the episode.

Budgets (``AgentLimits``): ``max_steps`` actions, ``max_tokens`` tokens after the prompt (actions and
observations, counted as the runner counts them) and ``wall_s`` seconds of the episode's own time in
the environment (its steps: tools and gradings; never the time its steps waited for a worker
behind other episodes', or an infra failure's, which a restore takes back); the step that reaches one
of them grades the workspace as it is (a forced attempt, ``ended`` names the budget) and ends the
episode, so an episode always ends with a verdict. Within a step, a command's timeout is at most what
is left of ``wall_s``, and once it is spent only ``submit`` runs (an error result for the other calls).
``max_steps`` is at most ``MAX_STEPS`` (the workspace's layers). Each verdict's evidence has the calls since the
previous one (``tool_calls``: ``{"total", "valid"}``; the validity rate), ``invalid_actions``,
``ended`` (``submit``, ``max_steps``, ``max_tokens``, ``wall_s``), ``attempt``, ``verify_s`` and
``episode_s``.

Lifecycle (docs/contracts.md, "Env"): ``close()`` on every path out; ``snapshot()`` / ``restore()``
(``Restorable``): the workspace's O(1) snapshot and its rollback, with the conversation's state, so
that after an infra error the runner steps the failed action again from the last snapshot. A
sandbox failure under a tool, or an infra verdict of the verifier, is an ``infra_error`` step result
(never scored); an ``OSError`` of what the agent named or wrote (``AGENT_ERRNOS``: a name too long,
a full workspace) is the agent's error result, never infra.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from posttrain.envs._base import fail
from posttrain.envs._turns import ChatTurns
from posttrain.envs.workspace._tools import (
    Tool,
    ToolContext,
    ToolInfraError,
    check_arguments,
    plain_arguments,
)
from posttrain.policy import ChatTemplate, ToolCall, tool_result_message
from posttrain.sandbox import Limits, Workspace, WorkspaceError
from posttrain.strict_json import as_text, to_plain
from posttrain.types import (
    CANARY,
    Generation,
    Observation,
    StepResult,
    Task,
    ToolCallRecord,
    Verdict,
    Verifier,
)

Take = Callable[[Workspace, Mapping[str, Any]], "str | Verdict"]
"""``take(workspace, submit_arguments) -> response`` (or a ``fail`` verdict when there is nothing to
grade): what the domain grades, taken host-side from the workspace, as its verifier's response text."""

RESULT_CHARS = 2000
"""A tool result keeps its first this many characters in records (the model saw it whole)..."""
RESULT_TAIL_CHARS = 200
"""...and its last this many: where the kit says how a command ended (``[exit status 1]``, a timeout, a
memory kill). Kept by its head alone, a failed command whose output passed ``RESULT_CHARS`` read as a
success in the records that a domain's process signals read: files' ``process.recovered`` never saw
the failure, so a failure said loudly (3,000 characters printed first) earned the credit that the same
failure said quietly lost (40 of 40 generated files tasks, process 1.0 against 0.5)."""
SUBMISSION_CHARS = 20000
"""A kept submission (``WorkspaceSpec.keep_submission``) keeps this many characters."""
MAX_STEPS = 400
"""The most steps an episode may have: each step that changes files freezes a workspace layer, and
overlayfs stacks at most 500 (a 501st made every later command's mount fail: an infra error of the
agent's making, every step after it, in every retry)."""
AGENT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.ENOSPC, errno.EDQUOT, errno.EFBIG,
                          errno.EMLINK})
"""``OSError``s a tool meets because of what the agent named or wrote (a 300-character file name, a
link loop, a workspace filled past its storage): the agent's error result. Raised on, any of them
would be infra to the runner, restarted until its tries ran out and the group dropped: a call that
fails that way would escape its verdict and take the group's with it. Any other ``OSError`` stays
what the runner makes of it (infra; a missing file or a directory where a file was, repeated, the
environment's bug)."""


SAID_CHARS = 400
"""The most of a grading error's text the agent reads (its start and end kept)."""


@dataclass(frozen=True)
class WorkspaceSpec:
    """What a domain gives the kit for one task (module docstring)."""

    initial: Mapping[str, bytes]
    """The workspace's initial state, ``{path: bytes}`` (never modified)."""
    prompt: str
    """The first user message: the task, and what the tools are for."""
    tools: tuple[Tool, ...]
    """The tools the model sees, ``submit`` among them (``_tools.default_tools``)."""
    take: Take
    system: str | None = None
    """A system message before the prompt (None: none)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of every command run in the workspace."""
    max_attempts: int = 1
    feedback: bool = False
    """Whether a failed attempt gets the verifier's feedback and the episode goes on (repair)."""
    storage_mb: int = 512
    command_limits: Limits = field(default_factory=lambda: Limits(memory_mb=1024, pids=128, tmp_mb=256,
                                                                  output_bytes=1 << 18))
    command_timeout_s: float = 60.0
    max_command_timeout_s: float = 300.0
    output_chars: int = 4000
    keep_submission: bool = False
    """Whether each graded submission (at most ``SUBMISSION_CHARS`` of it) goes into its verdict's
    evidence as ``submission``: the episode's records carry it (``extra["submission"]``) for the
    report's pictures of it (cad: renders beside the gold, ``HasViews``)."""
    hide: tuple[str, ...] = ()
    """Importable names whose copies under the host's /usr the commands do not see (a repository
    task's packages: an installed or vendored copy holds the code a mutation broke; ``sandbox._hide``)."""
    process: Callable[[Sequence[ToolCallRecord], Verdict], Mapping[str, float]] | None = None
    """Optional: reward components from the episode's calls so far (what was read before the first
    write, recovery after an error, ...) and the attempt's verdict (a domain pays no process credit to
    an attempt its grader caught cheating), merged into each verdict's ``components`` (logged apart;
    the reward stays the verifier's)."""

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if "submit" not in names or len(set(names)) != len(names):
            raise ValueError(f"WorkspaceSpec.tools: one submit and unique names, got {names}")
        if self.max_attempts < 1:
            raise ValueError(f"WorkspaceSpec.max_attempts must be >= 1, got {self.max_attempts}")

    def messages(self) -> list[dict[str, Any]]:
        """The conversation an episode starts from."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, {"role": "user", "content": self.prompt}]

    def tool_specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self.tools]


@dataclass(frozen=True)
class AgentLimits:
    """An episode's budgets (module docstring)."""

    max_steps: int = 20
    max_tokens: int | None = None
    wall_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_steps < 1 or (self.max_tokens is not None and self.max_tokens < 1) or \
                (self.wall_s is not None and not self.wall_s > 0):
            raise ValueError(f"AgentLimits: max_steps >= 1, max_tokens >= 1 and wall_s > 0, got {self}")


@dataclass(frozen=True)
class _State:
    """The conversation's side of an episode (the workspace holds the files): replaced, never changed."""

    messages: tuple[Mapping[str, Any], ...]
    steps: int = 0
    used: int = 0
    attempts: int = 0
    calls: int = 0  # since the last verdict
    valid: int = 0
    invalid_actions: int = 0
    last: tuple[str, Verdict] | None = None  # the last graded submission and its verdict
    history: tuple[ToolCallRecord, ...] = ()  # every call of the episode so far
    spent: float = 0.0  # seconds the episode's steps took in the environment (tools and gradings)


@dataclass
class _Acting:
    """One action's calls as they run (local to ``step``)."""

    calls: int
    valid: int
    invalid: int
    last: tuple[str, Verdict] | None
    verdict: Verdict | None = None
    records: list[ToolCallRecord] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)


def prompt_ids(chat: ChatTemplate, spec: WorkspaceSpec) -> list[int]:
    """The ids an episode of ``spec`` starts from (what ``reset`` returns): its messages and tools
    rendered by the chat template, with the generation prompt."""
    return ChatTurns(chat, spec.messages(), tools=spec.tool_specs()).prompt_ids()


class WorkspaceEnv:
    """An agent episode in a workspace (module docstring)."""

    def __init__(self, spec: WorkspaceSpec, *, chat: ChatTemplate, pool: Any, verify: Verifier,
                 limits: AgentLimits) -> None:
        if limits.max_steps > MAX_STEPS:
            raise ValueError(f"WorkspaceEnv: max_steps must be <= {MAX_STEPS} (a workspace stacks one layer a step "
                             f"and overlayfs mounts at most 500), got {limits.max_steps}")
        if not callable(getattr(pool, "claim_uid", None)):
            raise TypeError("WorkspaceEnv needs a local sandbox pool (posttrain.sandbox.open_pool): a Workspace "
                            "lives on its host")
        self.spec, self.chat, self.pool, self.verify, self.limits = spec, chat, pool, verify, limits
        self.tools = {t.name: t for t in spec.tools}
        self.workspace: Workspace | None = None
        self.task: Task | None = None
        self.state = _State(())
        self._closed = False

    # -- the Env protocol ---------------------------------------------------------------------------

    def reset(self, task: Task) -> Observation:
        if self._closed:
            raise RuntimeError("WorkspaceEnv.reset after close")
        if self.workspace is not None:
            self.workspace.close()
        self.task = task
        self.workspace = Workspace(self.pool, self.spec.initial, storage_mb=self.spec.storage_mb, hide=self.spec.hide)
        self.ctx = ToolContext(self.workspace, self.spec.env, self.spec.command_limits, self.spec.command_timeout_s,
                               self.spec.max_command_timeout_s, self.spec.output_chars)
        self.state = _State(tuple(self.spec.messages()))
        return Observation(tuple(prompt_ids(self.chat, self.spec)), self.spec.prompt)

    def step(self, action: Generation) -> StepResult:
        if self.task is None or self.workspace is None:
            raise RuntimeError("WorkspaceEnv.step before reset (or after close)")
        st, t_step = self.state, time.monotonic()
        parse = self.chat.parse_tool_calls(action.text)
        turn = _Acting(calls=st.calls, valid=st.valid, invalid=st.invalid_actions, last=st.last)
        if not parse.ok:
            turn.calls += 1
            turn.invalid += 1
            turn.results.append({"role": "user", "content": f"Your tool call could not be read: {parse.error}"})
        elif not parse.calls:
            turn.invalid += 1
            turn.results.append({"role": "user", "content": "No tool call. Use the tools to do the task; call submit "
                                                            "when you are done."})
        for i, call in enumerate(parse.calls):
            left = None if self.limits.wall_s is None else self.limits.wall_s - st.spent - (time.monotonic() - t_step)
            infra = self._call(st, turn, i, call, left)
            if infra is not None:  # nothing of this step stands: the runner restores and steps again
                return infra
        chat_turns = ChatTurns(self.chat, st.messages, tools=self.spec.tool_specs())
        chat_turns.act(action, self.chat.assistant_message(parse))
        obs_ids = chat_turns.observe(turn.results)
        messages = tuple(chat_turns.messages)
        steps, used = st.steps + 1, st.used + len(action.completion_ids) + len(obs_ids)
        ended = self._budget(steps, used, st.spent + time.monotonic() - t_step)
        attempts = st.attempts + (turn.verdict is not None)
        how = "submit" if turn.verdict is not None else ended
        if turn.verdict is None and ended is not None:  # a budget ends the episode: grade the workspace as it is
            got = self._submit(st, {})
            if isinstance(got, StepResult):
                return dataclasses.replace(got, calls=tuple(turn.records))
            turn.verdict, _, turn.last = got
            attempts += 1
        verdict, history = turn.verdict, (*st.history, *turn.records)
        done = verdict is not None and (verdict.passed or ended is not None or not self.spec.feedback
                                        or attempts >= self.spec.max_attempts
                                        or verdict.ends_repair or CANARY in self.task.tags)
        if verdict is not None:
            verdict = _with_evidence(verdict, calls=turn.calls, valid=turn.valid, invalid=turn.invalid,
                                     attempt=attempts - 1, ended=how,
                                     episode_s=st.spent + time.monotonic() - t_step)
            if self.spec.process is not None:
                verdict = dataclasses.replace(verdict, components={**verdict.components,
                                                                   **self.spec.process(history, verdict)})
            turn.calls = turn.valid = turn.invalid = 0
        self.state = _State(messages, steps, used, attempts, turn.calls, turn.valid,
                            turn.invalid, turn.last, history, st.spent + time.monotonic() - t_step)
        if done:
            return StepResult(Observation(()), verdict, True, tuple(turn.records))
        text = "\n".join(str(m["content"]) for m in turn.results)
        return StepResult(Observation(tuple(obs_ids), text), verdict, False, tuple(turn.records))

    def _call(self, st: _State, turn: _Acting, index: int, call: Any, left: float | None) -> StepResult | None:
        """Run one call of the action into ``turn``; an infra step result when the machinery failed.
        ``left``: seconds of the wall budget left (None: none), which bounds a command's timeout;
        spent, only ``submit`` runs (64 calls of ``sleep 300`` in one action could hold a step 5 hours)."""
        t0 = time.monotonic()
        turn.calls += 1
        call = ToolCall(call.name, plain_arguments(dict(call.arguments)))
        tool = self.tools.get(call.name)
        why = (f"unknown tool {call.name!r} (tools: {', '.join(self.tools)})" if tool is None
               else check_arguments(tool, call.arguments))
        if turn.verdict is not None:
            why = "a call after submit in the same turn does not run"
        elif why is None and left is not None and left <= 0 and call.name != "submit":
            why = "the episode's time is up: a call after it does not run"
        if why is not None:
            text, ok = f"Error: {why}", False
        elif call.name == "submit":
            ok = True
            got = self._submit(st, call.arguments)
            if isinstance(got, StepResult):
                return dataclasses.replace(got, calls=(*turn.records, _record(call, "", False, t0)))
            turn.verdict, text, turn.last = got
        else:
            ok = True
            try:
                assert tool is not None and tool.run is not None
                cap = None if left is None else max(round(left, 1), 0.1)  # (a result says it: "after 1.5 s")
                ctx = self.ctx if cap is None else dataclasses.replace(
                    self.ctx, default_timeout_s=min(self.ctx.default_timeout_s, cap),
                    max_timeout_s=min(self.ctx.max_timeout_s, cap))
                text = tool.run(ctx, call.arguments)
            except WorkspaceError as e:
                text = f"Error: {self._said(e)}"
            except OSError as e:
                if e.errno not in AGENT_ERRNOS:
                    raise
                text = f"Error: {call.name}: {os.strerror(e.errno)}."
            except ToolInfraError as e:
                return StepResult(Observation(()), Verdict.infra(f"workspace tool {call.name}: {e}",
                                                                 error_class="infra:sandbox"), True,
                                  (*turn.records, _record(call, "", False, t0)))
        turn.valid += ok
        turn.records.append(_record(call, text, ok, t0))
        turn.results.append(tool_result_message(text, tool_call_id=f"call_{index}", name=call.name))
        return None

    def _said(self, error: WorkspaceError) -> str:
        """``error``'s text as the agent reads it: a host path in it (an ``OSError``'s file name under the
        sandbox's root: ``/tmp/posttrain-sbx-<pid>-.../ws-<token>/a2/u/x``) is ``<host path>``; past
        ``SAID_CHARS`` its middle is cut (a path past the host's length limit was fed back whole: ~4,000
        characters of the agent's own context, tests/envs/test_files_attacks8.py)."""
        said = re.sub(re.escape(str(self.pool.root)) + r"""[^'"\n]*""", "<host path>", str(error))
        if len(said) <= SAID_CHARS:
            return said
        return f"{said[:SAID_CHARS // 2]} ... ({len(said):,} characters) ... {said[-SAID_CHARS // 4:]}"

    def close(self) -> None:
        self._closed = True
        ws, self.workspace = self.workspace, None
        if ws is not None:
            ws.close()

    # -- Restorable -----------------------------------------------------------------------------------

    def snapshot(self) -> object:
        """The episode now: the workspace's snapshot handle and the conversation's state. O(1)."""
        if self.workspace is None:
            raise RuntimeError("WorkspaceEnv.snapshot before reset (or after close)")
        return (self.workspace.snapshot(), self.state)

    def restore(self, snapshot: object) -> None:
        """Back to ``snapshot`` (from ``snapshot()``): the workspace rolled back, the conversation's state as it was."""
        if self.workspace is None:
            raise RuntimeError("WorkspaceEnv.restore before reset (or after close)")
        handle, state = snapshot  # type: ignore[misc]
        self.workspace.rollback(to=handle)
        self.state = state

    # -- grading ------------------------------------------------------------------------------------

    def _budget(self, steps: int, used: int, spent: float) -> str | None:
        lim = self.limits
        if steps >= lim.max_steps:
            return "max_steps"
        if lim.max_tokens is not None and used >= lim.max_tokens:
            return "max_tokens"
        if lim.wall_s is not None and spent >= lim.wall_s:
            return "wall_s"
        return None

    def _submit(self, st: _State, arguments: Mapping[str, Any]
                ) -> tuple[Verdict, str, tuple[str, Verdict] | None] | StepResult:
        """Grade what the domain takes from the workspace: ``(verdict, the submit call's result, the
        graded submission)``, or an infra step result (never scored)."""
        assert self.task is not None and self.workspace is not None
        t0 = time.monotonic()
        try:
            response = self.spec.take(self.workspace, arguments)
        except WorkspaceError as e:
            why = self._said(e)
            response = fail(f"The workspace could not be graded: {why}.", "ungradable", {"error": why})
        except OSError as e:  # what the agent named or wrote (AGENT_ERRNOS): its fail, never infra
            if e.errno not in AGENT_ERRNOS:
                raise
            why = os.strerror(e.errno)
            response = fail(f"The workspace could not be graded: {why}.", "ungradable", {"error": why})
        if isinstance(response, Verdict):
            return response, _result_text(response, st.attempts + 1, self.spec), st.last
        if st.last is not None and st.last[0] == response:
            verdict = st.last[1]
            note = "(The same submission as your previous one: it was not graded again.)\n"
            return verdict, note + _result_text(verdict, st.attempts + 1, self.spec), st.last
        verdict = self.verify(self.task, response)
        if verdict.is_infra_error:
            return StepResult(Observation(()), verdict, True)
        kept = {"submission": response[:SUBMISSION_CHARS]} if self.spec.keep_submission else {}
        verdict = _with_evidence(verdict, verify_s=time.monotonic() - t0, **kept)
        return verdict, _result_text(verdict, st.attempts + 1, self.spec), (response, verdict)


def _result_text(verdict: Verdict, attempt: int, spec: WorkspaceSpec) -> str:
    """The submit call's result as the record keeps it (the model reads it only when the episode goes on:
    a failed attempt with attempts left, and not one whose wrong answer ends the episode)."""
    if verdict.passed:
        return "Accepted."
    left = spec.max_attempts - attempt
    head = f"Not accepted (attempt {attempt} of {spec.max_attempts})."
    more = (f" You may fix it and submit again ({left} attempt{'s' if left != 1 else ''} left)."
            if spec.feedback and left > 0 and not verdict.ends_repair else "")
    return f"{head}{more}\n{verdict.feedback}".rstrip()


def _with_evidence(verdict: Verdict, *, calls: int | None = None, valid: int | None = None,
                   invalid: int | None = None, **more: Any) -> Verdict:
    extra: dict[str, Any] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in more.items()}
    if calls is not None:
        extra.update({"tool_calls": {"total": calls, "valid": valid}, "invalid_actions": invalid})
    return dataclasses.replace(verdict, evidence={**verdict.evidence, **extra})


def _record(call: Any, text: str, ok: bool, t0: float) -> ToolCallRecord:
    cut = len(text) - RESULT_CHARS - RESULT_TAIL_CHARS
    clipped = text if cut <= 0 else f"{text[:RESULT_CHARS]}\n[... {cut} more ...]\n{text[-RESULT_TAIL_CHARS:]}"
    # as_text: a refused call's arguments may hold lone surrogates, which a UTF-8 record cannot
    return ToolCallRecord(as_text(call.name), as_text(to_plain(dict(call.arguments))), clipped, ok,
                          time.monotonic() - t0)
