"""A policy attacking the workspace kit's episodes (fourth round), on the real sandbox and generated tasks:
what the episode's records say of a call is what the call did, whatever the call printed.

Steps are played as a scripted agent plays them (``agent_play.play``: each call written in the chat
template's format, decoded back from its ids, and stepped)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_play import CHAT, action, call, play

from posttrain.envs import get_domain
from posttrain.envs.workspace import SUBMIT, AgentLimits, WorkspaceEnv
from posttrain.envs.workspace._env import RESULT_CHARS
from posttrain.tasks._load import load_tasks

FILES, REPO = get_domain("files"), get_domain("repo")
REPO_EXAMPLES = load_tasks(Path(__file__).resolve().parents[2] / "examples" / "tasks" / "repo.jsonl")


@pytest.fixture(scope="module")
def files_verify():
    return FILES.make_verifier(None)


def _bash(command: str) -> dict:
    return {"name": "bash", "arguments": {"command": command}}


def test_a_failure_said_loudly_is_still_a_failure_in_the_records(pool, files_verify) -> None:
    """The oracle's calls, then a ``bash`` that fails, said quietly or after 3,000 characters of output. A
    record kept a result's first ``RESULT_CHARS`` characters only, and the kit says how a command ended
    on its last line (``[exit status 2]``): the loud failure read as a success, files'
    ``process.recovered`` never saw it, and failing loudly paid the process credit that failing quietly
    lost (40 of 40 generated tasks before: process 1.0 against 0.5; 0 of 40 after)."""
    task = FILES.generate_tasks(1, seed=11)[0]
    calls = [c for c in FILES.scripted_agents()["oracle"](task) if c["name"] != "submit"]
    loud_command = "python3 -c \"print('checking ' * 300)\"; ls no-such-file"
    quiet = play(pool, task, [*calls, _bash("ls no-such-file"), SUBMIT], files_verify)
    loud = play(pool, task, [*calls, _bash(loud_command), SUBMIT], files_verify)
    record = loud.calls[-2]
    assert len(record.result) < 2 * RESULT_CHARS and record.result.endswith("[exit status 2]")
    assert quiet.first.passed and loud.first.passed
    assert quiet.first.components["process.recovered"] == loud.first.components["process.recovered"] == 0.0
    assert loud.first.components["process"] == quiet.first.components["process"] < 1.0


def test_an_empty_word_in_a_command_is_the_agents_error_result(pool) -> None:
    """``run_tests(tests=[""])``: the sandbox refuses an empty word in a command (``LimitsError``), which
    came out of the step as the runner's ``StepError``: one call lost the batch, every other episode's
    too (14 of 14 example repo tasks before, 0 after). Now the agent's error result; the episode goes on
    to its own verdict."""
    task = REPO_EXAMPLES[0]
    env = WorkspaceEnv(REPO.workspace_spec(task), chat=CHAT, pool=pool, verify=REPO.make_verifier(pool),
                       limits=AgentLimits(max_steps=5))
    env.reset(task)
    try:
        first = env.step(action(CHAT.write_tool_calls([call("run_tests", tests=["", "tests"])])))
        assert not first.done and first.calls[0].result.startswith("Error: a command cannot hold an empty word")
        env.snapshot()
        last = env.step(action(CHAT.write_tool_calls([SUBMIT])))
    finally:
        env.close()
    assert last.verdict is not None and not last.verdict.passed and not last.verdict.is_infra_error


def test_a_command_longer_than_the_kernel_takes_is_the_agents_error_result(pool, files_verify) -> None:
    """A ``bash`` command of 140,000 characters and a ``list_dir`` of such a path: one word over the
    kernel's ``MAX_ARG_STRLEN`` failed the sandbox's launch (E2BIG), an infra step result that the same
    action, stepped again from the snapshot, gave again until the group was dropped (45 of 45 such calls
    on 20 tasks of files, doc, cad and repo before, 0 after)."""
    task = FILES.generate_tasks(1, seed=3)[0]
    long = "x" * 132_000
    played = play(pool, task, [call("bash", command=f"echo {long} | wc -c"), call("list_dir", path=long), SUBMIT],
                  files_verify)
    assert all(c.result.startswith("Error: the command is too long") for c in played.calls[:2])
    assert played.verdicts and not any(v.is_infra_error for v in played.verdicts)


def test_a_file_name_that_is_not_utf8_is_the_agents_fail_not_infra(pool) -> None:
    """``printf > $'notes\\xff.txt'`` beside the work: the host reads the name as a lone surrogate, which the
    repo diff carried to the verifier, which crashed on it: an infra error on every try, the group dropped
    (14 of 14 example repo tasks with the oracle's fix before, 0 after). Now the attempt is the agent's
    ``ungradable`` fail, naming the file."""
    task = REPO_EXAMPLES[0]
    played = play(pool, task, [call("bash", command="printf 'todo\\n' > $'notes\\xff.txt'"), SUBMIT],
                  REPO.make_verifier(pool))
    verdict = played.first
    assert verdict.outcome == "fail" and verdict.error_class == "ungradable", verdict
    assert "notes\\xff.txt" in verdict.feedback and "not UTF-8" in verdict.feedback


def test_a_file_name_with_a_line_break_is_refused_not_graded_as_another_file(pool) -> None:
    """A name ``"notes\\n+++ b/pkg/x.py"`` (in a directory ``"notes\\n+++ b"``) wrote a diff header of its own
    into repo's take: what was graded (an empty ``notes``) was not what the workspace held. Refused now,
    naming the file."""
    task = REPO_EXAMPLES[0]
    played = play(pool, task, [call("bash", command="printf 'x\\n' > $'notes\\n+++ b'"), SUBMIT],
                  REPO.make_verifier(pool))
    verdict = played.first
    assert verdict.outcome == "fail" and verdict.error_class == "refused", verdict
    assert "line break" in verdict.feedback


def test_an_edit_of_a_file_holding_a_form_feed_is_graded_as_it_stands() -> None:
    """repo's take split a file's lines with ``str.splitlines``, which also breaks at a form feed (a page
    break between a module's sections), ``\\x85``, ``\\u2028``...; the grader splits at ``\\n`` only: the
    honest edit of such a file did not apply (``patch_does_not_apply``), a new one was graded otherwise."""
    from posttrain.envs.repo._diff import apply_patches, parse_diff, render_diff

    before = {"m.py": "a = 1\n\x0c\nb = '\u2028'\nc = 3\n"}
    for after in ({"m.py": "a = 2\n\x0c\nb = '\u2028'\nc = 3\n"}, {"m.py": "a\x0cb\n", "n.py": "x = '\x85'"}):
        assert apply_patches(dict(before), parse_diff(render_diff(before, after))) == after
