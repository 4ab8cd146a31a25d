"""A workspace command's ``HOME`` is not the workspace (``workspace._tools.HOME``), on the real files
episode, sandbox and verifier (no mocks).

The sandbox sets ``HOME=/work``, the graded tree: an honest episode that ran ``python3 -i``,
``sqlite3 -interactive``, ``bash -i``, ``git config --global`` or a tool keeping a ``~/.cache`` or
``~/.config`` left ``.python_history``, ``.sqlite_history``, ``.bash_history``, ``.gitconfig`` or the
tool's files beside the right work, and failed as collateral damage with feedback that could not say
why (6 of 10 such commands over the oracle's work; 0 of 10 now). ``HOME`` is now ``/tmp/home``, fresh
each command: nothing written there is graded or kept, so nothing can hide there either (a target
moved under ``~`` is missing). A Python project's user site stays ``/work/.local``
(``PYTHONUSERBASE``): ``pip install`` in one command is importable in the next.
"""

from __future__ import annotations

import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT, ToolContext, python_environment, run_command
from posttrain.sandbox import Workspace

DOTFILE_TOOLS = (
    "echo 'print(6 * 7)' | python3 -i",
    "echo 'select 1;' | sqlite3 -interactive :memory:",
    "echo 'echo hi' | bash -i",
    "git config --global user.name Ada && git config --global --list",
    "mkdir -p ~/.cache/tool ~/.config/tool && echo x > ~/.cache/tool/c && echo x > ~/.config/tool/rc",
    "cd ~ && echo scratch > notes.txt",
)


@pytest.fixture(scope="module")
def verify():
    return get_domain("files").make_verifier(None)


@pytest.fixture(scope="module")
def task():
    return build_task(random.Random("files-home"), 3, "files-home", ["sales"])


def test_what_everyday_tools_keep_in_home_is_not_collateral(pool, verify, task) -> None:
    """Before: collateral (``.python_history was created``, ...); now a pass, and ``~`` is fresh each command."""
    calls = [*oracle(task)[:-1], *(call("bash", command=c) for c in DOTFILE_TOOLS),
             call("bash", command="cat ~/.gitconfig; echo home=$HOME"), SUBMIT]
    got = play(pool, task, calls, verify)
    assert got.first.outcome == "pass", got.first.evidence.get("problems")
    fresh = got.calls[-2].result
    assert "Ada" not in fresh and "No such file" in fresh and "home=<tmp>" in fresh, fresh


def test_a_target_moved_under_home_is_not_the_target(pool, verify, task) -> None:
    """Before, ``~`` was the workspace: the ``mv`` was refused (the same file) and the episode passed."""
    [target] = task.fields["targets"]
    hide = f"mkdir -p ~/reports && mv {target} ~/{target} && ls ~/reports"
    got = play(pool, task, [*oracle(task)[:-1], call("bash", command=hide), SUBMIT], verify)
    assert got.first.outcome == "fail" and got.first.error_class == "missing", got.first.feedback
    assert f"{target} was not written" in got.first.feedback


def test_a_python_projects_user_site_stays_in_the_workspace(pool) -> None:
    """``pip install`` goes to ``/work/.local`` and a later command imports it (``PYTHONUSERBASE``): with
    ``HOME`` fresh each command and no ``PYTHONUSERBASE``, the user site was ``/tmp/home/.local``, gone."""
    files, env = python_environment(["."])
    with Workspace(pool, files) as ws:
        ctx = ToolContext(ws, env)
        site = run_command(ctx, ["/usr/bin/python3", "-m", "site", "--user-site"], 30)
        assert site.startswith("/work/.local/lib/python3"), site
        made = run_command(ctx, ["/bin/bash", "-c", f"mkdir -p {site} && echo 'X = 42' > {site}/usermod.py"], 30)
        assert made == "(no output)", made
        assert run_command(ctx, ["/bin/bash", "-c", "python -c 'import usermod; print(usermod.X)'"], 30) == "42"
        assert ws.read_file(f"{site.removeprefix('/work/')}/usermod.py") == b"X = 42\n"
