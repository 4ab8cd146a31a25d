"""A policy attacking the workspace kit's episodes through its tool calls, on the real sandbox (third round):
what a call returns is bounded whatever the workspace holds, a step stays within the episode's wall
budget however many commands its action holds, an episode's steps stay within what the workspace's layers
mount, and no host path reaches the agent. Then regressions of attacks that already fail as they should
(a fifo, a socket, links out of the workspace, calls after submit, a sparse file): the agent's error result
or its own fail, never infra, never the host's file.

Steps are played as the runner plays them: a snapshot after each step that goes on."""

from __future__ import annotations

import base64
import random
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_play import CHAT, action, call

from posttrain.envs import get_domain
from posttrain.envs.doc._episode import MAX_PAGE_CHARS
from posttrain.envs.doc._pdf import render_pdf
from posttrain.envs.files._env import build_task as files_task
from posttrain.envs.workspace import SUBMIT, AgentLimits, WorkspaceEnv
from posttrain.envs.workspace._env import MAX_STEPS
from posttrain.envs.workspace._tools import MAX_FILE_CHARS
from posttrain.types import StepResult, Task

FILES, DOC = get_domain("files"), get_domain("doc")


@pytest.fixture(scope="module")
def verify():
    return {"files": FILES.make_verifier(None), "doc": DOC.make_verifier(None)}


def _files() -> Task:
    return files_task(random.Random("agent-one"), 2, "files-attack3", ["sales"])


def _doc() -> Task:
    from posttrain.envs.doc._env import build_task

    return build_task(random.Random(5), 1, "doc-attack3", "figure", pdf=False)


def _play(pool: Any, task: Task, actions: Sequence[Any], verify: Any, *, limits: AgentLimits | None = None
          ) -> list[StepResult]:
    """Step ``actions`` (a call, or a list of calls in one action); the runner's snapshot after each step
    that goes on."""
    env = WorkspaceEnv(get_domain(task.domain).workspace_spec(task), chat=CHAT, pool=pool,
                       verify=verify[task.domain], limits=limits or AgentLimits(max_steps=20))
    env.reset(task)
    out: list[StepResult] = []
    try:
        for a in actions:
            out.append(env.step(action(CHAT.write_tool_calls(a if isinstance(a, list) else [a]))))
            if out[-1].done:
                break
            env.snapshot()
    finally:
        env.close()
    return out


def _bash(command: str, **more: Any) -> dict:
    return call("bash", command=command, **more)


# -- holes: each failed before its fix -------------------------------------------------------------------------


def test_read_file_cuts_a_line_longer_than_it_shows(pool, verify) -> None:
    """A one-line file of 200,000 characters came back whole (``MAX_FILE_CHARS`` bounded lines, not a line):
    64 reads of a 4 MiB line in one action would be a 256M-token observation for the host to tokenize."""
    steps = _play(pool, _files(), [_bash("python3 -c \"open('one.txt', 'w').write('a' * 200000)\""),
                                   [call("read_file", path="one.txt"), call("read_file", path="one.txt", start_line=1)]],
                  verify)
    seen = steps[1].observation.text  # what the model reads (a record keeps the head of it)
    assert all(c.ok for c in steps[1].calls) and seen.count("characters cut") == 2, seen[:200]
    assert len(seen) < 2 * MAX_FILE_CHARS + 500, len(seen)


def test_read_pdf_cuts_a_page_longer_than_it_shows(pool, verify) -> None:
    """A PDF the agent wrote with one page of ~100,000 characters: ``read_pdf`` showed the page whole (at
    least one page, however long)."""
    pdf = render_pdf("\n".join(f"line {i} " + "word " * 15 for i in range(1200)))  # one page: no page breaks
    write = _bash(f"echo {base64.b64encode(pdf).decode()} | base64 -d > mine.pdf")
    steps = _play(pool, _doc(), [write, call("read_pdf", path="mine.pdf")], verify)
    seen = steps[1].observation.text
    assert steps[1].calls[0].ok and seen.startswith("[Page 1 of 1]"), seen[:200]
    assert "characters cut" in seen and len(seen) < MAX_PAGE_CHARS + 200, len(seen)


def test_read_pdf_refuses_a_large_file_by_its_size(pool, verify) -> None:
    """A 60 MB sparse file: ``read_pdf`` read all of it into the host's memory, then said it was too large
    (a job may write 64 MiB a file; 64 calls an action). Now the sandbox refuses it by its size, unread."""
    steps = _play(pool, _doc(), [_bash("truncate -s 60M big"), call("read_pdf", path="big")], verify)
    assert "more than" in steps[1].calls[0].result, steps[1].calls[0].result


def test_a_step_of_many_commands_stays_within_the_wall_budget(pool, verify) -> None:
    """Four ``sleep 3`` commands in one action under a 1.5 s wall budget: the budget was checked only after
    the step, so the step took 12 s (64 calls of ``sleep 300`` could hold a step over 5 hours). Now the first
    command's timeout is what is left and the rest do not run; the submit of the same action still grades,
    the agent's own fail."""
    sleeps = [_bash("sleep 3", timeout=3)] * 4
    t0 = time.monotonic()
    [step] = _play(pool, _files(), [[*sleeps, SUBMIT]], verify, limits=AgentLimits(max_steps=5, wall_s=1.5))
    assert time.monotonic() - t0 < 6
    results = [c.result for c in step.calls]
    assert "timed out after 1.5 s" in results[0], results
    assert all("time is up" in r for r in results[1:4]) and step.calls[4].name == "submit", results
    assert step.done and step.verdict is not None and step.verdict.outcome == "fail", step.verdict


def test_max_steps_beyond_what_the_layers_mount_is_refused(pool) -> None:
    """Each step that changes files freezes a layer; past 500 (overlayfs's stack) every command's mount failed,
    an infra error of the agent's making in every retry (measured: 510 steps of a write, then ``bash``). An
    episode of more steps than ``MAX_STEPS`` is refused when it is made (configuration, not the agent's)."""
    task = _files()
    with pytest.raises(ValueError, match="max_steps"):
        WorkspaceEnv(FILES.workspace_spec(task), chat=CHAT, pool=pool, verify=lambda t, r: None,
                     limits=AgentLimits(max_steps=MAX_STEPS + 1))


def test_at_max_steps_every_layer_still_mounts(pool, verify) -> None:
    """The most layers an episode of ``MAX_STEPS`` steps can stack (a write each step, a snapshot after it),
    then a command: it runs."""
    task = _files()
    env = WorkspaceEnv(FILES.workspace_spec(task), chat=CHAT, pool=pool, verify=verify["files"],
                       limits=AgentLimits(max_steps=MAX_STEPS))
    env.reset(task)
    try:
        assert env.workspace is not None
        for i in range(MAX_STEPS):  # what each step's write_file and the runner's snapshot do
            env.workspace.write_file(f"f{i}", b"x")
            env.snapshot()
        step = env.step(action(CHAT.write_tool_calls([_bash("ls f* | wc -l")])))
    finally:
        env.close()
    assert not step.done and step.calls[0].result == str(MAX_STEPS), step


def test_no_host_path_reaches_the_agent(pool, verify) -> None:
    """A socket and a link loop read back: the error named the file's host path (the sandbox's root, the
    trainer's pid, the workspace's token), which no job may see and which differs run to run."""
    make = _bash("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('s')\"; ln -s loop loop")
    steps = _play(pool, _files(), [make, [call("read_file", path="s"), call("edit", path="loop", old="a", new="b")]],
                  verify)
    for record in steps[1].calls:
        assert record.result.startswith("Error") and "posttrain-sbx" not in record.result, record.result
        assert str(pool.root) not in record.result and "<host path>" in record.result, record.result


# -- regressions: attacks that fail as they should ------------------------------------------------------------


def test_special_files_are_the_agents_error_results_and_its_fail(pool, verify) -> None:
    """A fifo (a blocking open would hang the host), a socket and a directory where a file is read: error
    results, and the submit the agent's own fail (``not_regular``), never infra."""
    make = _bash("mkfifo f; python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('s')\"; mkdir d")
    reads = [call("read_file", path="f"), call("edit", path="f", old="a", new="b"), call("read_file", path="s"),
             call("read_file", path="d"), call("list_dir", path="f")]
    t0 = time.monotonic()
    steps = _play(pool, _files(), [make, reads, SUBMIT], verify)
    assert time.monotonic() - t0 < 20
    assert all(c.result.startswith("Error") for c in steps[1].calls), [c.result for c in steps[1].calls]
    verdict = steps[2].verdict
    assert verdict is not None and (verdict.outcome, verdict.error_class) == ("fail", "not_regular"), verdict


def test_links_out_of_the_workspace_never_reach_the_host(pool, verify) -> None:
    """A link to /etc/passwd and one to a host directory (made by a job, frozen by a snapshot): the host's
    read refuses the link, its writes replace the link in the workspace; the host's file and directory stay
    as they were."""
    canary = Path("/tmp") / f"agent-attacks3-{uuid.uuid4().hex}"
    canary.mkdir()
    try:
        make = _bash(f"ln -s /etc/passwd p; ln -s {canary} d")
        calls = [call("read_file", path="p"), call("edit", path="p", old="root", new="toor"),
                 call("write_file", path="p", content="mine"), call("write_file", path="d/x", content="mine")]
        steps = _play(pool, _files(), [make, calls, _bash("cat p; cat d/x")], verify)
        assert [c.result.startswith("Error") for c in steps[1].calls] == [True, True, False, False], steps[1].calls
        assert steps[2].calls[0].result == "minemine"
        assert list(canary.iterdir()) == [] and not Path("/etc/passwd").read_text().startswith("mine")
    finally:
        canary.rmdir()


def test_calls_after_submit_and_sparse_files_cost_the_agent_only(pool, verify) -> None:
    """A call after submit in the same action does not run; a 60 MB sparse file is refused by its size by
    ``read_file`` and ``edit`` (never read) and fails the files grader's budget."""
    big = _bash("truncate -s 60M big")
    reads = [call("read_file", path="big"), call("edit", path="big", old="a", new="b")]
    steps = _play(pool, _files(), [big, reads, [SUBMIT, _bash("echo after")]], verify)
    assert all("more than" in c.result for c in steps[1].calls), steps[1].calls
    submit, after = steps[2].calls
    assert submit.ok and not after.ok and "after submit" in after.result
    assert steps[2].verdict is not None and steps[2].verdict.outcome == "fail"


@pytest.mark.parametrize("name", ["files", "doc", "cad", "repo"])
def test_every_workspace_domain_bounds_an_episodes_time(name: str) -> None:
    """Each command keeps its own timeout, but without an episode's wall budget 20 steps of 64 calls of
    ``sleep 300`` held one episode (and the host's episode slot) for over a hundred hours."""
    wall_s = get_domain(name).episode_wall_s
    assert wall_s is not None and 0 < wall_s <= 1800
