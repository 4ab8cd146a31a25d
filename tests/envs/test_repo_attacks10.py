"""An installed copy's metadata as an answer key: ``<project>-<version>.dist-info/RECORD`` under /usr.

A project pip installed as root keeps, beside its package, a ``RECORD`` with every file's sha256.
``_hide`` hid the package but not its metadata, and a generated task's bug is one mutation at one
site: a policy in its workspace could hash each one-site mutation of the buggy file (``mutate`` at
every site of it: a swapped comparison, ``and``/``or``, an inverted ``if`` undo themselves) and keep
the one whose digest ``RECORD`` lists, key-blind, whenever the host's version is the task's. The
metadata directories are hidden with the package they describe.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

import pytest

from posttrain.sandbox._hide import host_copies


def test_the_index_finds_a_distributions_metadata_by_its_normalised_name(tmp_path):
    for rel in ("lib/probe_pkg-1.0.dist-info/RECORD", "lib/Probe.Pkg-2.0.dist-info/RECORD",
                "lib/probe_pkg.egg-info/SOURCES.txt", "lib/probe_pkg_two-1.0.dist-info/RECORD",
                "lib/other-1.0.dist-info/RECORD"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    root = str(tmp_path)
    assert host_copies(["probe_pkg"], root) == [  # (nothing of these was hidden before)
        (f"{root}/lib/Probe.Pkg-2.0.dist-info", True), (f"{root}/lib/probe_pkg-1.0.dist-info", True),
        (f"{root}/lib/probe_pkg.egg-info", True)]
    assert host_copies(["pytest", "json"], root) == []


@pytest.fixture(scope="module")
def planted(usr_local):
    """A made-up project installed under /usr/local: its package and its ``RECORD`` (root only)."""
    name = f"ptrecord_{secrets.token_hex(4)}"
    original = b"def half(x):\n    return x / 2\n"
    digest = hashlib.sha256(original).hexdigest()

    def build(top: Path) -> None:
        (top / name).mkdir()
        (top / name / "__init__.py").write_bytes(original)
        (top / f"{name}-1.0.dist-info").mkdir()
        (top / f"{name}-1.0.dist-info" / "RECORD").write_text(f"{name}/__init__.py,sha256={digest},{len(original)}\n")

    with usr_local("record-test", build) as top:
        yield name, top / f"{name}-1.0.dist-info" / "RECORD", digest


def test_a_job_hiding_a_project_cannot_read_its_record_of_hashes(pool, planted):
    name, record, digest = planted
    look = ["cat", str(record)]
    assert digest in pool.exec(look, timeout=30).stdout.decode()  # what a job saw before, with or without hiding
    hidden = pool.exec(look, timeout=30, hide=[name])
    assert digest not in hidden.stdout.decode() and hidden.exit_code != 0, hidden


@pytest.fixture(scope="module")
def installed_posttrain(usr_local):
    """posttrain as ``pip install`` run as root leaves it under /usr: its packs hold every generated
    task's reference diff."""
    def build(top: Path) -> None:
        packs = top / "posttrain" / "envs" / "repo" / "data" / "packs"
        packs.mkdir(parents=True)
        for pkg in (top / "posttrain", top / "posttrain" / "envs", top / "posttrain" / "envs" / "repo"):
            (pkg / "__init__.py").write_text("")
        (packs / "toolz-1.2.0.json").write_text('{"reference": "the fixed line"}\n')
        for here, _dirs, _files in os.walk(top):
            os.chmod(here, 0o755)

    with usr_local("own-test", build) as top:
        yield top / "posttrain" / "envs" / "repo" / "data" / "packs" / "toolz-1.2.0.json"


def test_a_repo_tasks_workspace_cannot_read_an_installed_posttrains_packs(pool, installed_posttrain):
    from posttrain.envs.repo import ENV
    from posttrain.envs.repo._episode import workspace_spec
    from posttrain.sandbox import Workspace

    task = ENV.generate_tasks(1, seed=0)[0]
    spec = workspace_spec(task)
    assert "the fixed line" in pool.exec(["cat", str(installed_posttrain)], timeout=30).stdout.decode()
    with Workspace(pool, spec.initial, hide=spec.hide) as ws:  # the agent's cat; the grader hides the same names
        seen = ws.exec(["cat", str(installed_posttrain)], timeout=30)
    assert "the fixed line" not in seen.stdout.decode() and seen.exit_code != 0, seen  # read before
