"""Modes in the workspace domains that take their changes with ``workspace_changes`` (repo), and what the
files domain's listing counts (the real ``Workspace``, sandbox jobs and each domain's own ``take``; no mocks).

A ``chmod`` changes no byte and a diff carries no mode, so repo never saw one: the reference fix of each
of the 14 example tasks plus ``chmod 000`` on a test file, ``chmod 4755`` / ``2644`` / ``666`` on a
source file, ``chmod 000`` on the package or ``chmod 1777 .`` was taken as the fix's diff byte for byte
(14 of 14 each, graded as the fix); a chmod alone read as "the repository's files are unchanged". Now
each is refused, its path and modes named (0 of 14), and a chmod alone is named in the ``no_diff``
feedback. The execute bit stays free: a new script made ``+x``, an atomic rewrite that leaves 0600, a
``git init`` and commit beside the fix are taken as before (14 of 14). files: what a checking tool
keeps (``.git``, ``.tox``, ...) no longer counts toward the 1,600 paths listed (a ``.git`` of 1,700
loose objects beside the oracle's work: ungradable on 6 of 6 generated tasks, passes now).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle as files_oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.repo._episode import reference_patches, take_diff
from posttrain.envs.repo._task import initial_tree
from posttrain.envs.workspace import SUBMIT
from posttrain.sandbox import Workspace
from posttrain.tasks._load import load_tasks
from posttrain.types import Verdict

REPO = get_domain("repo")
TASK = {t.id: t for t in load_tasks(Path(__file__).resolve().parents[2] / "examples" / "tasks" / "repo.jsonl")}[
    "repo-csvstats-mean"]  # its fix: csvstats/loader.py


def taken(pool, command: str, *, fix: bool = True) -> str | Verdict:
    """What repo's ``take_diff`` gives after the task's reference fix (when ``fix``), then ``command``."""
    spec = REPO.workspace_spec(TASK)
    with Workspace(pool, spec.initial) as ws:
        for path, text in reference_patches(TASK).items() if fix else ():
            assert text is not None
            ws.write_file(path, text)
        ran = ws.exec(["/bin/bash", "-c", command], timeout=60)
        assert ran.exit_code == 0, ran.stderr[-400:]
        return take_diff(initial_tree(TASK.fields))(ws, {})


@pytest.fixture(scope="module")
def fix_diff(pool) -> str:
    got = taken(pool, "true")
    assert isinstance(got, str) and "csvstats/loader.py" in got, got
    return got


ATTACKS = [
    ("chmod 000 tests/test_stats.py", "tests/test_stats.py: its mode changed from 0644 to 0000"),
    ("chmod 200 tests/test_cli.py", "tests/test_cli.py: its mode changed from 0644 to 0200"),
    ("chmod 4755 csvstats/cli.py", "csvstats/cli.py: its mode changed from 0644 to 4755"),
    ("chmod 2644 csvstats/stats.py", "csvstats/stats.py: its mode changed from 0644 to 2644"),
    ("chmod 666 csvstats/loader.py", "csvstats/loader.py: its mode changed from 0644 to 0666"),
    ("chmod 000 csvstats", "csvstats: its mode changed from 0755 to 0000"),
    ("chmod 1777 .", ".: its mode changed from 0755 to 1777"),
    ("echo 'x = 1' > tools.py && chmod 777 tools.py", "tools.py: a new file with mode 0777"),
]


@pytest.mark.parametrize(("command", "said"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_repo_a_mode_no_fix_leaves_is_refused_with_its_path_and_modes(pool, fix_diff, command, said) -> None:
    """Before: the fix's own diff (``chmod`` changes no byte), graded as the fix."""
    got = taken(pool, command)
    assert isinstance(got, Verdict), (command, got if got == fix_diff else "another diff")
    assert got.outcome == "fail" and got.error_class == "refused", (command, got.feedback)
    assert got.evidence["modes"] == [said] and said in got.feedback and got.components["format"] == 0.0, got


def test_repo_a_chmod_alone_is_named_not_read_as_unchanged(pool) -> None:
    """Before: "Nothing to grade: the repository's files are unchanged", the chmod unsaid."""
    got = taken(pool, "chmod +x csvstats/cli.py", fix=False)
    assert isinstance(got, Verdict) and got.error_class == "no_diff", got
    assert "Only modes changed, which a diff does not carry: csvstats/cli.py: its mode changed from 0644 to 0755" \
        in got.feedback, got.feedback


@pytest.mark.parametrize("command", [
    "printf '#!/bin/sh\\necho ok\\n' > check.sh && chmod +x check.sh && ./check.sh",
    "python3 -c \"import os, tempfile; p = 'csvstats/loader.py'; d = open(p, 'rb').read(); "
    "fd, t = tempfile.mkstemp(dir='csvstats'); os.write(fd, d); os.close(fd); os.replace(t, p)\" "
    "&& test $(stat -c %a csvstats/loader.py) = 600",
    "git init -q . && git add -A && git -c user.email=a@b -c user.name=a commit -qm base && chmod +x csvstats/cli.py "
    "&& mkdir -p .pytest_cache/v && chmod 700 .pytest_cache",
], ids=["new script +x", "atomic rewrite 0600", "git, +x, a private cache"])
def test_repo_honest_modes_are_taken_as_the_fix(pool, fix_diff, command) -> None:
    """Three honest responses: their diff is the fix's (the new script's lines added), as before."""
    got = taken(pool, command)
    assert isinstance(got, str), got.feedback
    if "check.sh" in command:
        assert got.startswith("--- /dev/null\n+++ b/check.sh\n") and got.endswith(fix_diff), got
    else:
        assert got == fix_diff, got


def test_mode_changes_name_each_entry_with_both_modes_and_skip_what_keep_drops(pool) -> None:
    from posttrain.envs.workspace import (  # (new in this change)
        ModeChange,
        changed_paths,
        mode_changes,
        named,
    )

    with Workspace(pool, {"a.py": "1", "pkg/b.py": "2", "pkg/c.py": "3"}) as ws:
        ws.exec(["/bin/bash", "-c", "chmod 000 a.py && chmod 4755 pkg/b.py && echo 3 > pkg/c.py && chmod 700 pkg && "
                 "echo s > run.sh && chmod 755 run.sh && mkdir -p .git/objects && "
                 "for i in $(seq 40); do echo $i > .git/objects/$i; done && chmod 000 .git/objects/1"], timeout=30)
        keep = lambda p: not p.startswith(".git")  # noqa: E731
        got = mode_changes(ws, keep=keep)
        assert [m.reason for m in got] == [
            "a.py: its mode changed from 0644 to 0000", "pkg: its mode changed from 0755 to 0700",
            "pkg/b.py: its mode changed from 0644 to 4755", "run.sh: a new file with mode 0755"], got
        assert [m.is_sane for m in got] == [False, True, False, True]
        assert got[0] == ModeChange("a.py", 0o644, 0, is_dir=False)
        # the 41 entries under .git count toward no limit of what is kept
        assert changed_paths(ws, keep=keep, limit=10) == {"a.py", "pkg/b.py", "pkg/c.py", "run.sh"}
    assert named([f"p{i}" for i in range(8)]) == "p0; p1; p2; p3; p4; p5; and 2 more"


def test_files_a_tool_directory_does_not_count_toward_the_paths_listed(pool) -> None:
    """Before: 'The workspace could not be graded: the workspace changed more than 1600 entries'."""
    task = build_task(random.Random("workspace-modes"), 4, "workspace-modes", ["notes"])
    objects = ("git init -q . && git add -A && git -c user.email=a@b -c user.name=a commit -qm base && python3 -c \""
               "import hashlib, os, zlib\nfor i in range(1700):\n d = b'blob 9\\x00scratch%d' % i; "
               "h = hashlib.sha1(d).hexdigest(); os.makedirs('.git/objects/' + h[:2], exist_ok=True); "
               "open('.git/objects/' + h[:2] + '/' + h[2:], 'wb').write(zlib.compress(d))\" && git count-objects")
    got = play(pool, task, [*files_oracle(task)[:-1], call("bash", command=objects), SUBMIT],
               get_domain("files").make_verifier(None))
    assert " objects" in got.calls[-2].result and got.first.passed, got.first.feedback


def test_files_modes_and_misnamed_name_a_list_one_way() -> None:
    """Both say "a; b; ...; and N more" (``_misnamed`` said "... b and N more")."""
    from posttrain.envs.files._episode import _misnamed, _modes

    modes = _modes([f"f{i}: a new file with mode 0000" for i in range(8)]).feedback
    names = _misnamed([(f"n{i}\\x", "a backslash") for i in range(8)]).feedback
    assert "f5: a new file with mode 0000; and 2 more. " in modes, modes
    assert "'n5\\\\x' (a backslash); and 2 more. " in names, names
