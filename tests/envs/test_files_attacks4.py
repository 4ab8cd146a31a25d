"""A helper's fourth read of the files domain: what an honest agent's checking tools leave in the
workspace, and ``~`` in a file tool's path (the real files episode, sandbox and verifier; no mocks).

- ``git init`` (to diff its work against the start) or one ``pytest`` run left ``.git`` or
  ``.pytest_cache`` beside the right work, which ``list_dir`` does not show, and the grader counted every
  file in them as created collateral: 0 of 30 such honest episodes over 6 generated tasks passed, 30 of 30
  now (``workspace.TOOL_DIRS``, ``files._episode._tool_kept``). What is moved there is graded as before:
  a kept file moved into ``.git`` is deleted, a target written only under ``.pytest_cache`` is missing,
  a ``.git`` that is a link is taken and fails.
- ``write_file("~/scratch.txt")`` wrote ``/work/~/scratch.txt`` (collateral, 0 of 6 passed); it is now the
  tool's error, naming ``~``, and nothing is written (6 of 6).
"""

from __future__ import annotations

import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle, reads, work
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT

GIT = "git -c user.email=a@example.com -c user.name=a"


@pytest.fixture(scope="module")
def verify():
    return get_domain("files").make_verifier(None)


@pytest.fixture(scope="module")
def task():
    return build_task(random.Random("files-attacks4"), 3, "files-attacks4", ["notes"])


def test_checking_tools_leftovers_are_not_collateral_but_what_is_moved_there_is(pool, verify, task) -> None:
    """Before: collateral (``.git/HEAD was created``, ``.pytest_cache/CACHEDIR.TAG was created``)."""
    check = [call("write_file", path="test_check.py", content="def test_index():\n    assert open('notes/INDEX.md')\n"),
             call("bash", command="python3 -m pytest -q test_check.py && rm test_check.py"),
             call("bash", command="git status --short | head -3; ls -d .git .pytest_cache"),
             call("list_dir", path=".", depth=1)]
    calls = [*reads(task), call("bash", command=f"git init -q && git add -A && {GIT} commit -qm start && echo ok"),
             *work(task), *check, SUBMIT]
    got = play(pool, task, calls, verify)
    assert "1 passed" in got.calls[-4].result and ".git\n.pytest_cache" in got.calls[-3].result, got.calls[-4:]
    assert ".git" not in got.calls[-2].result  # what the agent could see of its workspace
    assert got.first.outcome == "pass", got.first.evidence.get("problems")

    index = next(p for p, t in sorted(task.fields["targets"].items()) if t.get("format") == "text")
    hide = {"a kept file moved into .git": ("mkdir -p .git && mv README.md .git/", "collateral"),
            "a target kept only under .pytest_cache": (f"mkdir -p .pytest_cache/notes && mv {index} .pytest_cache/notes/",
                                                       "missing"),
            ".git a link out of the workspace": ("ln -s /etc .git", "not_regular")}
    for what, (command, expected) in hide.items():
        got = play(pool, task, [*oracle(task)[:-1], call("bash", command=command), SUBMIT], verify)
        assert got.first.outcome == "fail" and got.first.error_class == expected, (what, got.first.evidence)


def test_a_file_tool_path_under_home_is_the_tools_error(pool, verify, task) -> None:
    """Before: ``Wrote 15 bytes to ~/scratch.txt`` and a fail (``~/scratch.txt was created``)."""
    calls = [*oracle(task)[:-1], call("write_file", path="~/scratch.txt", content="checked by hand"),
             call("read_file", path="~/scratch.txt"), call("bash", command="ls -A"), SUBMIT]
    got = play(pool, task, calls, verify)
    wrote, read, listed = (c.result for c in got.calls[-4:-1])
    assert wrote.startswith("Error: '~/scratch.txt': a file tool does not expand '~'"), wrote
    assert read.startswith("Error: '~/scratch.txt'"), read
    assert "~" not in listed.splitlines(), listed
    assert got.first.outcome == "pass", got.first.evidence.get("problems")
