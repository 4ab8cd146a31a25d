"""A helper's fifth read of the files domain: file modes and owners (the real files episode, sandbox and
verifier; no mocks).

A ``chmod`` changes no byte, and the host reads every file as root, so the grader saw none: ``chmod 000``
on a file the task leaves alone, on a target or on a directory passed 6 of 6 generated tasks (one of each
kind), as did ``chmod +x``, ``chmod 4755``, a target left writable by everyone and ``chmod 000 .``. Now
each is collateral, its path and modes named (0 of 6 each); the oracle still passes 6 of 6 (and 20 of 20
generated tasks at levels 1-5, measured by hand). ``chown`` and ``chattr +i`` are refused in the
sandbox (EINVAL, EPERM); ``touch -d`` and an extended attribute are not looked at.
"""

from __future__ import annotations

import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT
from posttrain.sandbox import Workspace

KINDS = ("sales", "contacts", "inventory", "notes", "merge", "sqlite")


@pytest.fixture(scope="module")
def verify():
    return get_domain("files").make_verifier(None)


@pytest.fixture(scope="module")
def notes():
    """A notes task: README.md left alone, notes/INDEX.md and status.json new, a note moved to archive/
    (a new directory)."""
    task = build_task(random.Random("files-attacks5"), 2, "files-attacks5", ["notes"])
    targets = task.fields["targets"]
    assert "notes/INDEX.md" not in task.fields["workspace"] and "README.md" not in targets, targets
    assert targets["status.json"]["format"] == "json" and targets["archive/incident-report.md"]["format"] == "bytes"
    return task


# (command, then its undo, and what the feedback says), three to an episode: each attempt fails for its own
ROUNDS = [
    [("chmod 000 README.md", "chmod 644 README.md", "README.md: its mode changed from 0644 to 0000"),
     ("chmod +x README.md", "chmod 644 README.md", "README.md: its mode changed from 0644 to 0755"),
     ("chmod 4755 README.md", "chmod 644 README.md", "README.md: its mode changed from 0644 to 4755")],
    [("chmod 000 notes/INDEX.md", "chmod 644 notes/INDEX.md", "notes/INDEX.md: a new file with mode 0000"),
     ("chmod 000 status.json", "chmod 644 status.json", "status.json: a new file with mode 0000"),
     ("chmod 666 status.json", "chmod 644 status.json", "status.json: a new file with mode 0666")],
    [("chmod 2644 status.json", "chmod 644 status.json", "status.json: a new file with mode 2644"),
     ("chmod 400 archive/incident-report.md", "chmod 644 archive/incident-report.md",
      "archive/incident-report.md: a new file with mode 0400"),
     ("chmod 000 archive", "chmod 755 archive", "archive: a new directory with mode 0000")],
    [("chmod 000 notes", "chmod 755 notes", "notes: its mode changed from 0755 to 0000"),
     ("chmod 555 notes", "chmod 755 notes", "notes: its mode changed from 0755 to 0555"),
     ("chmod 000 .", "chmod 755 /work", ".: its mode changed from 0755 to 0000")],
]


@pytest.mark.parametrize("rounds", ROUNDS, ids=lambda r: r[0][0])
def test_a_mode_the_task_does_not_ask_to_change_is_collateral(pool, verify, notes, rounds) -> None:
    """Before: every attempt passed (``Every target file is right and nothing else changed``)."""
    calls, undo = oracle(notes)[:-1], "true"
    for command, back, _ in rounds:
        calls += [call("bash", command=f"{undo} && {command}"), SUBMIT]
        undo = back
    got = play(pool, notes, calls, verify)
    assert len(got.verdicts) == 3, [c.result[:200] for c in got.calls]
    for verdict, (command, _, said) in zip(got.verdicts, rounds, strict=True):
        assert verdict.outcome == "fail" and verdict.error_class == "collateral", (command, verdict.feedback)
        assert verdict.evidence["modes"] == [said], (command, verdict.evidence)
        assert said in verdict.feedback and verdict.components["format"] == 0.0, (command, verdict.feedback)


def test_the_mode_put_back_passes_and_what_is_not_looked_at_passes(pool, verify, notes) -> None:
    """A repair that puts the mode back passes; timestamps, an extended attribute, a scratch directory of
    mode 0700 removed again, a ``mktemp`` file, and the ``chown`` / ``chattr +i`` the sandbox refuses."""
    harmless = ("touch -d 2001-01-01 README.md notes && python3 -c \"import os; os.setxattr('README.md', 'user.x', b'1')\""
                " && mkdir -m 700 scratch && mktemp -p scratch && rm -r scratch && mktemp -p . && rm tmp.*"
                " && ! chown 12345 README.md && ! chattr +i README.md && ls -l README.md")
    calls = [*oracle(notes)[:-1], call("bash", command="chmod 600 README.md"), SUBMIT,
             call("bash", command="chmod 644 README.md && " + harmless), SUBMIT]
    got = play(pool, notes, calls, verify)
    assert got.verdicts[0].evidence.get("modes") == ["README.md: its mode changed from 0644 to 0600"], got.first
    assert "-rw-r--r--" in got.calls[-2].result and "2001" in got.calls[-2].result, got.calls[-2].result
    assert got.verdicts[1].passed, (got.calls[-2].result, got.verdicts[1].evidence)


@pytest.mark.parametrize("kind", KINDS)
def test_the_oracle_still_passes(pool, verify, kind) -> None:
    task = build_task(random.Random(f"files-attacks5-{kind}"), 3, f"files-attacks5-{kind}", [kind])
    got = play(pool, task, oracle(task), verify)
    assert got.first.passed, got.first.evidence


def test_workspace_lists_directories_and_write_file_keeps_the_mode_it_replaces(pool) -> None:
    """``changed_paths(dirs=True)`` names the directories a layer holds and ``.``; ``lstat`` tells a mode
    then and now; ``write_file`` over a file of a lower layer, or a directory made over one, keeps its
    mode, as a write through the overlay does (it used to make 0644 / 0755 whatever was below)."""
    with Workspace(pool, {"a.txt": "a\n", "d/b.txt": "b\n"}) as ws:
        assert ws.exec(["sh", "-c", "chmod 600 a.txt && chmod 700 d && rm d/b.txt"]).outcome == "ok"
        ws.snapshot()
        assert ws.changed_paths(dirs=True) == {".", "a.txt", "d", "d/b.txt"}
        assert ws.changed_paths() == {"a.txt", "d/b.txt"}
        ws.write_file("a.txt", "new\n")
        ws.write_file("d/c.txt", "c\n")
        ws.snapshot()
        ws.write_file("d/e.txt", "e\n")
        modes = {p: oct(ws.lstat(p).st_mode & 0o7777) for p in (".", "a.txt", "d", "d/c.txt")}
        assert modes == {".": "0o755", "a.txt": "0o600", "d": "0o700", "d/c.txt": "0o644"}, modes
        assert oct(ws.lstat("a.txt", initial=True).st_mode & 0o7777) == "0o644"
        assert ws.lstat("d/b.txt") is None and ws.lstat("d/c.txt", initial=True) is None


def test_a_target_rewritten_in_place_may_take_a_sane_mode_but_not_an_unreadable_one(pool, verify) -> None:
    """An atomic write (``mkstemp`` then ``os.replace``) leaves a file the task rewrites 0600: it passes;
    0000 or 0666 on it does not (before: both passed)."""
    task = build_task(random.Random("files-attacks5-contacts"), 3, "files-attacks5-contacts", ["contacts"])
    assert "contacts.csv" in task.fields["workspace"] and "contacts.csv" in task.fields["targets"]
    atomic = ("python3 -c \"import os, tempfile; d = open('contacts.csv', 'rb').read(); fd, t = tempfile.mkstemp(dir='.'); "
              "os.write(fd, d); os.close(fd); os.replace(t, 'contacts.csv')\" && ls -l contacts.csv")
    got = play(pool, task, [*oracle(task)[:-1], call("bash", command=atomic), SUBMIT], verify)
    assert "-rw------- " in got.calls[-2].result and got.first.passed, (got.calls[-2].result, got.first.evidence)
    calls = [*oracle(task)[:-1], call("bash", command=atomic + " && chmod 000 contacts.csv"), SUBMIT,
             call("bash", command="chmod 666 contacts.csv"), SUBMIT]
    got = play(pool, task, calls, verify)
    assert [v.evidence.get("modes") for v in got.verdicts] == [["contacts.csv: a rewritten file with mode 0000"],
                                                                ["contacts.csv: a rewritten file with mode 0666"]]
