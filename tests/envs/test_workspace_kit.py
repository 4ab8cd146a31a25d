"""The workspace agent kit on a real sandbox ``Workspace``: tool output normalization, each tool (and
what a policy would try with it), the changes a grader takes from the layers, ``WorkspaceEnv``'s
episode (invalid calls, budgets, repair feedback, snapshot/restore, close) and the scripted agent.

A toy domain grades here (``take`` = the changed files as JSON; ``verify`` = "notes.txt says done"),
so what is tested is the kit; repo's episodes are tests/envs/test_repo_agent.py.
Budget: ~25 s on 2 cores at load ~18 (about 60 sandbox jobs of ~0.1 s, one pool of 2 slots).
"""

from __future__ import annotations

import json

import pytest

from posttrain.envs import fail, passed
from posttrain.envs.workspace import (
    SPECIAL,
    AgentLimits,
    ScriptedAgent,
    ToolContext,
    WorkspaceEnv,
    WorkspaceSpec,
    bash_tool,
    default_tools,
    edit_tool,
    list_dir_tool,
    normalize_output,
    read_file_tool,
    workspace_changes,
    write_file_tool,
)
from posttrain.envs.workspace._normalize import cut_middle
from posttrain.policy import ChatTemplate, Generation, SamplingParams, build_char_tokenizer
from posttrain.rollout import Episode, run_batch
from posttrain.sandbox import Workspace, WorkspaceError
from posttrain.types import Task, Verdict

INITIAL = {"notes.txt": b"todo\n", "pkg/mod.py": b"def f():\n    return 1\n\n\ndef g():\n    return 1\n",
           "data.bin": b"\x00\x01\x02"}
TASK = Task(id="toy", domain="toy", prompt="Write done into notes.txt, then submit.", fields={})


@pytest.fixture(scope="module")
def chat():
    return ChatTemplate(build_char_tokenizer())


@pytest.fixture
def ws(pool):
    with Workspace(pool, INITIAL) as w:
        yield w


def call(ws: Workspace, tool, **arguments) -> str:
    return tool.run(ToolContext(ws), arguments)


# -- normalization ---------------------------------------------------------------------------------


def test_output_normalization_strips_what_a_run_makes_up():
    raw = ("\x1b[1;31mFAILED\x1b[0m test_a - 2026-03-04T05:06:07.123Z\r\n"
           "progress 10%\rprogress 100%\n"
           "Wed Dec  2 03:19:45 UTC 2026 pid 4242 /proc/4242/status at 0x7f3a2c1b9e80\n"
           "tmp_path=/tmp/pytest-of-nobody/pytest-3/test_x0 and tmpab12cd34 === 3 passed in 0.12s ===\n")
    assert normalize_output(raw) == (
        "FAILED test_a - <time>\nprogress 100%\n<time> pid <pid> /proc/<pid>/status at 0x<addr>\n"
        "tmp_path=<tmp> and <tmp> === 3 passed in <duration> ===")
    # the agent's own paths and file contents are not rewritten
    assert normalize_output("/work/pkg/mod.py:3: x = 0xff  # 5 s") == "/work/pkg/mod.py:3: x = 0xff  # 5 s"


def test_long_output_keeps_head_and_tail_and_says_the_cut():
    text = "".join(f"line {i}\n" for i in range(2000))
    out = normalize_output(text, limit=200)
    assert out.startswith("line 0\n") and out.endswith("line 1999")
    assert "characters cut ...]" in out and len(out) < 260
    assert cut_middle("short", 10) == "short"


# -- tools on a real workspace ----------------------------------------------------------------------


def test_bash_reports_output_exit_status_and_timeout(ws):
    assert call(ws, bash_tool(), command="echo hi; echo err >&2") == "hi\nerr"
    assert call(ws, bash_tool(), command="exit 3") == "[exit status 3]"
    out = call(ws, bash_tool(), command="echo start; sleep 5", timeout=1)
    assert out.startswith("start") and "[timed out after 1 s: killed]" in out
    # files persist between calls, processes and cd do not
    call(ws, bash_tool(), command="mkdir -p d && cd d && echo x > y && (sleep 30 &)")
    assert call(ws, bash_tool(), command="pwd; cat d/y; pgrep sleep || echo none") == "/work\nx\nnone"


def test_hostile_commands_are_the_agents_own_results_never_infra(ws):
    flood = call(ws, bash_tool(), command="yes | head -c 50000000")
    assert "characters cut ...]" in flood and flood.endswith("[output truncated]") and len(flood) < 4200
    bomb = call(ws, bash_tool(), command="f() { f | f & }; f; sleep 3", timeout=2)
    assert "[timed out after 2 s: killed]" in bomb
    assert call(ws, bash_tool(), command="kill -9 -1; kill -9 $PPID; exit 1").endswith("[exit status 1]")
    assert call(ws, bash_tool(), command="echo still here") == "still here"  # the workspace lives on
    assert call(ws, read_file_tool(), path="notes.txt") == "todo\n"


def test_file_tools_read_write_and_refuse_paths_outside(ws):
    assert call(ws, read_file_tool(), path="/work/notes.txt") == "todo\n"
    assert call(ws, read_file_tool(), path="pkg/mod.py", start_line=5, end_line=5) == (
        "[pkg/mod.py: lines 5-5 of 6; read_file with start_line=6 for more]\ndef g():\n")
    # an end before the start says so, not a header of lines 5-2 over nothing (nor 0 as "to the end")
    for end_line in (2, 0, -1):
        assert call(ws, read_file_tool(), path="pkg/mod.py", start_line=5, end_line=end_line) == (
            f"end_line {end_line} is before start_line 5: nothing read of pkg/mod.py (6 lines).")
    assert call(ws, write_file_tool(), path="new/deep/file.txt", content="x") == "Wrote 1 bytes to new/deep/file.txt."
    assert ws.read_file("new/deep/file.txt") == b"x"
    for bad in ("../escape", "/etc/passwd", "/work/../etc"):
        with pytest.raises(WorkspaceError, match="outside the repository"):
            call(ws, read_file_tool(), path=bad)
        with pytest.raises(WorkspaceError, match="outside the repository"):
            call(ws, write_file_tool(), path=bad, content="x")
    with pytest.raises(WorkspaceError, match="binary"):
        call(ws, read_file_tool(), path="data.bin")
    # a link the agent made to a file outside is never followed by the host
    call(ws, bash_tool(), command="ln -s /proc/self/environ leak; ln -s /usr/lib/os-release os")
    for link in ("leak", "os"):
        with pytest.raises(WorkspaceError):
            call(ws, read_file_tool(), path=link)


def test_writes_through_a_link_stay_in_the_workspace(ws, tmp_path):
    """A link the agent made (to a host path, or its own file) is replaced, never written through:
    the host's files are not the agent's to reach, from either side of a snapshot."""
    host = tmp_path / "host"
    host.mkdir(mode=0o777)
    call(ws, bash_tool(), command=f"ln -s {host} out; ln -s notes.txt alias")
    ws.snapshot()  # the links are in a lower layer now
    assert call(ws, write_file_tool(), path="out/x", content="x") == "Wrote 1 bytes to out/x."
    assert call(ws, write_file_tool(), path="alias", content="y") == "Wrote 1 bytes to alias."
    assert list(host.iterdir()) == [] and ws.read_file("notes.txt") == b"todo\n"
    assert ws.read_file("out/x") == b"x" and ws.read_file("alias") == b"y"
    assert call(ws, bash_tool(), command="cat out/x alias; test -L out || echo \" replaced\"") == "xy replaced"


def test_edit_replaces_one_exact_snippet_and_names_absent_or_repeated(ws):
    assert call(ws, edit_tool(), path="pkg/mod.py", old="    return 1\n", new="    return 2\n").startswith(
        "Error: the text to replace appears 2 times in pkg/mod.py")
    assert "not found in pkg/mod.py (it appears with other whitespace" in call(
        ws, edit_tool(), path="pkg/mod.py", old="def f():\n  return 1", new="x")
    assert "not found" in call(ws, edit_tool(), path="pkg/mod.py", old="nothing like it", new="x")
    assert call(ws, edit_tool(), path="pkg/mod.py", old="", new="x").startswith("Error: `old` is empty")
    assert ws.read_file("pkg/mod.py") == INITIAL["pkg/mod.py"]  # nothing changed by a refused edit
    out = call(ws, edit_tool(), path="pkg/mod.py", old="def g():\n    return 1", new="def g():\n    return 3")
    assert out == "Edited pkg/mod.py: replaced 2 line(s) at line 5 with 2."
    assert ws.read_file("pkg/mod.py").endswith(b"def g():\n    return 3\n")
    ws.write_file("latin.txt", b"caf\xe9 au lait\nprice = 1\n")  # not UTF-8: its other bytes stay as they were
    assert call(ws, edit_tool(), path="latin.txt", old="price = 1", new="price = 2").startswith("Edited latin.txt")
    assert ws.read_file("latin.txt") == b"caf\xe9 au lait\nprice = 2\n"


def test_list_dir_shows_the_tree_without_caches(ws):
    call(ws, bash_tool(), command="mkdir -p pkg/__pycache__ && touch pkg/__pycache__/m.pyc")
    assert call(ws, list_dir_tool()) == "data.bin\nnotes.txt\npkg/\npkg/mod.py"
    assert call(ws, list_dir_tool(), path="nope") == "Error: nope does not exist"


# -- what changed, from the layers ------------------------------------------------------------------


def test_changes_come_from_the_layers_whatever_the_agent_did(ws):
    call(ws, bash_tool(), command="echo done > notes.txt; rm data.bin; echo new > added.py; "
                                  "mkdir -p .cache && echo junk > .cache/x; ln -s notes.txt alias")
    ws.snapshot()  # changes in lower layers count as well as in the current one
    call(ws, bash_tool(), command="rm -r pkg && mkdir pkg && echo other > pkg/other.py")
    changes = workspace_changes(ws, INITIAL, keep=lambda p: not p.startswith(".cache/"))
    assert changes == {"notes.txt": b"done\n", "data.bin": None, "added.py": b"new\n", "alias": SPECIAL,
                       "pkg/mod.py": None, "pkg/other.py": b"other\n"}


def test_a_file_replaced_by_a_directory_is_a_change(ws):
    call(ws, bash_tool(), command="rm notes.txt && mkdir notes.txt && echo x > notes.txt/inner")
    changes = workspace_changes(ws, INITIAL)
    assert changes["notes.txt"] is SPECIAL and changes["notes.txt/inner"] == b"x\n"


def test_a_flood_of_entries_or_bytes_cannot_be_graded(ws):
    call(ws, bash_tool(), command="mkdir many && cd many && seq 1 300 | xargs touch")
    with pytest.raises(WorkspaceError, match="more than 200 entries"):
        ws.changed_paths(limit=200)
    call(ws, bash_tool(), command="truncate -s 30M big1 && truncate -s 30M big2")
    with pytest.raises(WorkspaceError, match="more than"):
        workspace_changes(ws, INITIAL)


# -- the environment ------------------------------------------------------------------------------


def toy_take(ws: Workspace, arguments) -> str | Verdict:
    changes = workspace_changes(ws, INITIAL)
    if not changes:
        return fail("Nothing changed.", "no_change")
    return json.dumps({p: (None if v is None or v is SPECIAL else v.decode()) for p, v in changes.items()})


def toy_verify(task: Task, response: str) -> Verdict:
    files = json.loads(response)
    if files.get("notes.txt") == "done\n":
        return passed("Done.")
    return fail(f"notes.txt says {files.get('notes.txt')!r}, not 'done'.", "wrong")


def spec(**over) -> WorkspaceSpec:
    return WorkspaceSpec(**{"initial": INITIAL, "prompt": TASK.prompt, "tools": default_tools(), "take": toy_take,
                            **over})


def act(chat: ChatTemplate, text: str) -> Generation:
    ids = (*chat.encode(text), chat.eos_token_id)
    return Generation((), ids, (0.0,) * len(ids), text, "eos")


def tool(chat: ChatTemplate, name: str, **arguments) -> Generation:
    return act(chat, chat.write_tool_calls([{"name": name, "arguments": arguments}]))


def play(env: WorkspaceEnv, chat: ChatTemplate, actions: list[Generation]):
    context = list(env.reset(TASK).ids)
    results = []
    for g in actions:
        r = env.step(g)
        context += [*g.completion_ids, *r.observation.ids]
        results.append(r)
        if r.done:
            break
    return context, results


def test_an_episode_runs_calls_records_them_and_grades_on_submit(pool, chat):
    env = WorkspaceEnv(spec(), chat=chat, pool=pool, verify=toy_verify, limits=AgentLimits(max_steps=10))
    actions = [act(chat, '<tool_call>{"name": "bash", "arguments": {"command": </tool_call>'),  # malformed
               act(chat, "I think I am done."),                                                   # no call
               tool(chat, "rm_rf"),                                                               # unknown tool
               tool(chat, "bash", cmd="ls"),                                                      # bad argument
               tool(chat, "bash", command="echo done > notes.txt"),
               tool(chat, "submit")]
    context, results = play(env, chat, actions)
    assert [r.done for r in results] == [False] * 5 + [True]
    assert "could not be read" in results[0].observation.text and "No tool call" in results[1].observation.text
    assert results[2].calls[0].result.startswith("Error: unknown tool 'rm_rf'") and not results[2].calls[0].ok
    assert results[3].calls[0].result == "Error: bash: unknown argument 'cmd' (expected command, timeout)"
    verdict = results[-1].verdict
    assert verdict.passed and verdict.evidence["tool_calls"] == {"total": 5, "valid": 2}
    assert verdict.evidence["invalid_actions"] == 2 and verdict.evidence["ended"] == "submit"
    assert [c.name for r in results for c in r.calls] == ["rm_rf", "bash", "bash", "submit"]
    assert all(c.seconds >= 0 for r in results for c in r.calls)
    # the context is the template's own rendering of the conversation (token-exact append)
    # (the last message is the submit's result, which a finished episode does not append)
    assert context == chat.render(env.state.messages[:-1], tools=env.spec.tool_specs(), add_generation_prompt=False)
    env.close()
    env.close()  # idempotent
    assert env.workspace is None


def test_arguments_nested_700_deep_are_the_actions_own_unreadable_call(pool, chat):
    """A call whose arguments nest 700 lists deep parses as JSON (Python reads ~1,000 levels), and turning
    them into the tool's arguments raised a RecursionError out of the step: the runner takes that for a
    bug of the environment and ends every episode of the batch. The codec refuses JSON nested more than
    ``MAX_JSON_DEPTH`` levels: the action's own unreadable call, and the episode goes on."""
    from posttrain.strict_json import MAX_JSON_DEPTH

    env = WorkspaceEnv(spec(), chat=chat, pool=pool, verify=toy_verify, limits=AgentLimits(max_steps=10))
    deep = '{"name": "bash", "arguments": {"command": "ls", "timeout": ' + "[" * 700 + "]" * 700 + "}}"
    edge = '{"name": "bash", "arguments": {"command": ' + "[" * (MAX_JSON_DEPTH - 2) + "]" * (MAX_JSON_DEPTH - 2) + "}}"
    actions = [act(chat, f"<tool_call>{deep}</tool_call>"), act(chat, f"<tool_call>{edge}</tool_call>"),
               tool(chat, "bash", command="echo done > notes.txt"), tool(chat, "submit")]
    _, results = play(env, chat, actions)
    assert "could not be read" in results[0].observation.text and "nested too deeply" in results[0].observation.text
    assert results[1].calls[0].result.startswith("Error: bash:"), results[1].calls[0].result  # read, then refused
    assert results[-1].done and results[-1].verdict.passed
    env.close()


def test_repair_feedback_then_pass_and_the_same_submission_is_not_graded_twice(pool, chat):
    graded = []

    def verify(task, response):
        graded.append(response)
        return toy_verify(task, response)

    env = WorkspaceEnv(spec(max_attempts=3, feedback=True), chat=chat, pool=pool, verify=verify,
                       limits=AgentLimits(max_steps=10))
    _, results = play(env, chat, [tool(chat, "write_file", path="notes.txt", content="later\n"), tool(chat, "submit"),
                                  tool(chat, "submit"), tool(chat, "write_file", path="notes.txt", content="done\n"),
                                  tool(chat, "submit")])
    first, again, last = results[1], results[2], results[4]
    assert first.verdict.outcome == "fail" and not first.done
    assert "Not accepted (attempt 1 of 3). You may fix it and submit again (2 attempts left)." in \
        first.observation.text and "notes.txt says 'later\\n'" in first.observation.text
    assert again.verdict.outcome == "fail" and "not graded again" in again.calls[0].result
    assert last.done and last.verdict.passed and last.verdict.evidence["attempt"] == 2
    assert len(graded) == 2
    env.close()


def test_a_wrong_answer_that_ends_the_episode_does_not_offer_another_attempt(pool, chat):
    def verify(task, response):
        return fail("Wrong: the answer is the other branch.", "wrong", {"final": True})

    env = WorkspaceEnv(spec(max_attempts=3, feedback=True), chat=chat, pool=pool, verify=verify,
                       limits=AgentLimits(max_steps=10))
    _, results = play(env, chat, [tool(chat, "write_file", path="notes.txt", content="yes\n"), tool(chat, "submit")])
    assert results[1].done and results[1].verdict.ends_repair
    said = results[1].calls[0].result
    assert "Not accepted (attempt 1 of 3)." in said and "submit again" not in said
    env.close()


def test_each_budget_grades_the_workspace_as_it_is(pool, chat, monkeypatch):
    write = tool(chat, "bash", command="echo done > notes.txt")
    env = WorkspaceEnv(spec(), chat=chat, pool=pool, verify=toy_verify, limits=AgentLimits(max_steps=2))
    _, results = play(env, chat, [tool(chat, "list_dir"), write])
    assert results[-1].done and results[-1].verdict.passed and results[-1].verdict.evidence["ended"] == "max_steps"
    env.close()
    env = WorkspaceEnv(spec(), chat=chat, pool=pool, verify=toy_verify, limits=AgentLimits(max_steps=9, max_tokens=50))
    _, results = play(env, chat, [write])
    assert results[0].done and results[0].verdict.evidence["ended"] == "max_tokens"
    env.close()
    # the wall budget on a clock of the test's: a tool that takes the time it is told
    from types import SimpleNamespace

    from posttrain.envs.workspace import Tool
    from posttrain.envs.workspace import _env as env_module

    clock = [0.0]
    monkeypatch.setattr(env_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def wait(ctx, arguments):
        clock[0] += arguments["s"]
        return "waited"

    waiting = Tool("wait", "Take s seconds.", {"type": "object", "properties": {"s": {"type": "number"}},
                                                 "required": ["s"], "additionalProperties": False}, wait)
    env = WorkspaceEnv(spec(tools=default_tools(waiting)), chat=chat, pool=pool, verify=toy_verify,
                       limits=AgentLimits(max_steps=9, wall_s=10.0))
    env.reset(TASK)
    clock[0] += 60.0  # time outside the episode's steps (waiting for a worker) is not its own
    r = env.step(tool(chat, "wait", s=6.0))
    assert not r.done
    r = env.step(tool(chat, "wait", s=6.0))
    assert r.done and r.verdict.outcome == "fail" and r.verdict.evidence["ended"] == "wall_s"
    env.close()


def test_snapshot_and_restore_bring_back_files_and_conversation(pool, chat):
    env = WorkspaceEnv(spec(), chat=chat, pool=pool, verify=toy_verify, limits=AgentLimits(max_steps=10))
    env.reset(TASK)
    env.step(tool(chat, "write_file", path="notes.txt", content="first\n"))
    snap = env.snapshot()
    state = env.state
    env.step(tool(chat, "bash", command="echo done > notes.txt; rm -r pkg"))
    assert env.workspace.read_file("notes.txt") == b"done\n"
    env.restore(snap)
    assert env.workspace.read_file("notes.txt") == b"first\n" and env.workspace.read_file("pkg/mod.py")
    assert env.state == state
    r = env.step(tool(chat, "submit"))  # the step after a restore goes on from the snapshot
    assert r.verdict.outcome == "fail" and "'first\\n'" in r.verdict.feedback
    env.close()


def test_read_only_steps_add_no_layer(pool, chat):
    """A snapshot after a step that changed nothing is the last one again (overlayfs stacks at most
    500 layers: an episode's read-only steps must not use them up)."""
    env = WorkspaceEnv(spec(), chat=chat, pool=pool, verify=toy_verify, limits=AgentLimits(max_steps=50))
    env.reset(TASK)
    first = env.snapshot()
    for _ in range(3):
        env.step(tool(chat, "read_file", path="notes.txt"))
        assert env.snapshot()[0] == first[0]
    env.step(tool(chat, "write_file", path="notes.txt", content="x"))
    assert env.snapshot()[0] == first[0] + 1 and len(env.workspace.layers) == first[0] + 1
    env.close()


def test_infra_under_a_tool_or_the_verifier_is_never_scored(pool, chat):
    env = WorkspaceEnv(spec(), chat=chat, pool=pool,
                       verify=lambda t, r: Verdict.infra("verifier down", error_class="infra:sandbox"),
                       limits=AgentLimits(max_steps=5))
    env.reset(TASK)
    env.step(tool(chat, "write_file", path="notes.txt", content="done\n"))
    r = env.step(tool(chat, "submit"))
    assert r.done and r.verdict.is_infra_error  # (the runner restores the last snapshot and steps again)
    assert env.state.attempts == 0  # nothing of the failed step stands
    from posttrain.sandbox import Execution

    env.workspace.exec = lambda *a, **k: Execution.infra("slot died")
    r = env.step(tool(chat, "bash", command="ls"))
    assert r.done and r.verdict.is_infra_error and r.verdict.error_class == "infra:sandbox"
    env.close()


def test_process_components_see_every_call(pool, chat):
    seen = []

    def process(calls, verdict):  # the attempt's verdict too: a domain pays a caught attempt nothing
        seen.append(([c.name for c in calls], verdict.outcome))
        return {"process": float(any(c.name == "read_file" for c in calls))}

    env = WorkspaceEnv(spec(process=process), chat=chat, pool=pool, verify=toy_verify, limits=AgentLimits(max_steps=5))
    _, results = play(env, chat, [tool(chat, "read_file", path="notes.txt"), tool(chat, "submit")])
    assert results[-1].verdict.components["process"] == 1.0 and seen == [(["read_file", "submit"], results[-1].verdict.outcome)]
    env.close()


# -- scripted agents --------------------------------------------------------------------------------


def test_the_scripted_agent_tells_same_prompt_tasks_apart_by_its_probes(pool, chat, monkeypatch):
    """Two tasks with one prompt: the agent reads the probe file, then plays the script of the task
    whose probe text the result holds (here: write what the file asks)."""
    class Toy:
        name, needs_sandbox = "toy-agent", True

        def workspace_spec(self, task):
            return spec(initial={**INITIAL, "ask.txt": task.fields["ask"].encode()})

        def scripted_agents(self):
            return {"obey": lambda task: [{"name": "write_file", "arguments": {"path": "notes.txt",
                                                                              "content": task.fields["ask"]}}]}

        def agent_probes(self, task):
            return [({"name": "read_file", "arguments": {"path": "ask.txt"}}, task.fields["ask"])]

    monkeypatch.setattr("posttrain.envs.workspace._agents.get_domain", lambda name: Toy())
    tasks = [Task(id=f"t{i}", domain="toy-agent", prompt="Do what ask.txt says.", fields={"ask": ask})
             for i, ask in enumerate(("done\n", "later\n"))]
    agent = ScriptedAgent(chat, tasks, "obey")
    envs = [WorkspaceEnv(Toy().workspace_spec(t), chat=chat, pool=pool, verify=toy_verify,
                         limits=AgentLimits(max_steps=6)) for t in tasks for _ in range(2)]
    eps = [Episode(t, env, f"g/{t.id}", i % 2)
           for i, (t, env) in enumerate(zip([t for t in tasks for _ in range(2)], envs, strict=True))]
    trajs = run_batch(agent, eps, SamplingParams(max_new_tokens=4096), max_turns=6)
    for env in envs:
        env.close()
    assert [tr.reward for tr in trajs] == [1.0, 1.0, 0.0, 0.0]
    assert [[c.name for t in tr.turns for c in t.calls] for tr in trajs] == [["read_file", "write_file", "submit"]] * 4
    assert trajs[0].ids == trajs[1].ids  # deterministic: one context, one action


def test_through_the_service_an_infra_error_restores_the_snapshot_and_steps_again(pool, chat):
    """The runner with a service: a grading that hits the machinery (infra) once, and a tool whose sandbox
    fails once, are each stepped again from the last snapshot on the same env; the episode passes,
    and the workspace is gone after it."""
    from posttrain.sandbox import Execution
    from posttrain.sched import LocalBackend, SchedPolicy, Service

    fails = {"verify": 1, "exec": 1}

    def flaky_verify(task, response):
        if fails["verify"]:
            fails["verify"] -= 1
            return Verdict.infra("grader's sandbox died", error_class="infra:sandbox")
        return toy_verify(task, response)

    class Script:
        def __init__(self):
            self.k = 0

        def generate(self, prompt_ids, params):
            texts = [chat.write_tool_calls([c]) for c in (
                {"name": "bash", "arguments": {"command": "echo done > notes.txt"}},
                {"name": "bash", "arguments": {"command": "cat notes.txt"}}, {"name": "submit", "arguments": {}})]
            out = []
            for p in prompt_ids:
                ids = (*chat.encode(texts[self.k]), chat.eos_token_id)
                out.append(Generation(tuple(p), ids, (0.0,) * len(ids), texts[self.k], "eos"))
            self.k += 1
            return out

    env = WorkspaceEnv(spec(), chat=chat, pool=pool, verify=flaky_verify, limits=AgentLimits(max_steps=5))
    real_exec = Workspace.exec

    def flaky_exec(self, *a, **k):
        if fails["exec"] and "cat" in " ".join(a[0]):
            fails["exec"] -= 1
            return Execution.infra("slot died")
        return real_exec(self, *a, **k)

    Workspace.exec = flaky_exec
    try:
        with Service(LocalBackend({}, pool), SchedPolicy(max_tries=3, backoff_s=0.0)) as service:
            [traj] = run_batch(Script(), [Episode(TASK, env, "g", 0)], SamplingParams(max_new_tokens=512), max_turns=5,
                               service=service)
            stats = service.stats()
    finally:
        Workspace.exec = real_exec
    assert traj.reward == 1.0 and len(traj.turns) == 3 and stats["restarts"] == 2 and fails == {"verify": 0, "exec": 0}
    assert traj.turns[1].calls[0].result == "done"
    assert env.workspace is None  # closed by the runner
