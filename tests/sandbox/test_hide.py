"""Copies of a repository task's own code under the host's /usr are hidden from its jobs (``_hide``).

A task made by breaking one function of a project has its answer on disk wherever the project is
installed or vendored under /usr (every job sees /usr): on this project's test host the Google Cloud
SDK's vendored cachetools and inflection held the fixed lines of 49 of 114 cachetools and 55 of 55
inflection pack tasks, readable by ``cat`` from a workspace and importable by the code under test.
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import pytest

from posttrain.envs.repo import ENV
from posttrain.envs.repo._episode import workspace_spec
from posttrain.envs.repo._task import project_modules
from posttrain.sandbox import Workspace
from posttrain.sandbox._hide import forget_index, hide_args, host_copies


def test_the_index_finds_top_level_packages_modules_and_bytecode_only(tmp_path):
    """A copy sits at the top of an import root; a subpackage or submodule named like the project is
    another project's part (``_pytest/config``: hiding it broke pytest, the harness's own)."""
    for rel in ("a/probe/__init__.py", "a/probe/inner/probe.py", "b/probe.py", "b/__pycache__/probe.cpython-311.pyc",
                "c/json/__init__.py", "d/other.py", "f/pkg/__init__.py", "f/pkg/probe.py",
                "f/pkg/__pycache__/probe.cpython-311.pyc", "g/pkg/__init__.py", "g/pkg/probe/__init__.py",
                "h/_pytest/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "probe").symlink_to(tmp_path / "d")
    root = str(tmp_path)
    assert host_copies(["probe", "json", "not a name"], root) == [
        (f"{root}/a/probe", True), (f"{root}/b/__pycache__/probe.cpython-311.pyc", False), (f"{root}/b/probe.py", False)]
    assert hide_args(["probe"], root)[:6] == ["--perms", "0555", "--tmpfs", f"{root}/a/probe", "--remount-ro",
                                              f"{root}/a/probe"]
    assert host_copies(["json", "_pytest"], root) == []  # the interpreter's and the harness's own are never hidden


@pytest.fixture(scope="module")
def planted(usr_local):
    """A package and a module of a made-up project under /usr/local (root only), with a secret."""
    name = f"ptprobe_{secrets.token_hex(4)}"

    def build(top: Path) -> None:
        (top / "vendored" / name).mkdir(parents=True)
        (top / "vendored" / name / "__init__.py").write_text("SECRET = 'the original code'\n")
        (top / f"{name}.py").write_text("SECRET = 'the original code'\n")

    with usr_local("hide-test", build) as top:
        yield name, top


def test_a_job_told_to_hide_a_project_sees_none_of_its_copies_under_usr(pool, planted):
    name, top = planted
    look = ["sh", "-c", f"cat {top}/vendored/{name}/__init__.py {top}/{name}.py; ls {top}/vendored/{name}; "
            f"cd {top}/vendored && python3 -c 'import {name}; print({name}.SECRET)'"]
    seen = pool.exec(look, timeout=30)
    assert seen.stdout.decode().count("the original code") == 3  # what a job saw before
    hidden = pool.exec(look, timeout=30, hide=[name])
    assert "the original code" not in hidden.stdout.decode() and hidden.exit_code != 0, hidden
    assert pool.exec(["python3", "-c", "import json, email.utils; print(1)"], hide=[name, "json"]).stdout == b"1\n"
    with Workspace(pool, {"f": "x"}, hide=[name]) as ws:  # a workspace's commands: the agent's cat and grep
        ex = ws.exec(["sh", "-c", f"grep -r 'original code' {top}; cat f"], timeout=30)
        assert ex.stdout == b"x", ex


def test_repo_tasks_hide_their_projects_packages():
    by_project = {}
    for t in ENV.generate_tasks(289, seed=0):
        by_project.setdefault(t.id.split("-")[0], t)
    assert {p: project_modules(t.fields) for p, t in by_project.items()} == {
        "toolz": ("tlz", "toolz"), "cachetools": ("cachetools",), "inflection": ("inflection",)}
    assert workspace_spec(by_project["inflection"]).hide == ("inflection", "posttrain", "test_inflection")  # (and an
    # installed posttrain, and a copy of its tests: test_repo_attacks13)


def test_a_copy_gone_since_the_index_was_built_is_not_mounted_over(tmp_path):
    """The index is built once per process; a copy removed after it (an upgrade under a long run, another
    test's planted copy) made bwrap fail on every job of the task: each an infra error."""
    (tmp_path / "a" / "probe").mkdir(parents=True)
    (tmp_path / "a" / "probe" / "__init__.py").write_text("x")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "probe.py").write_text("x")
    root = str(tmp_path)
    forget_index()
    try:
        assert len(hide_args(["probe"], root)) == 9  # a directory: 6 options, a module file: 3
        shutil.rmtree(tmp_path / "a")
        assert hide_args(["probe"], root) == ["--ro-bind", "/dev/null", f"{root}/b/probe.py"]
    finally:
        forget_index()
