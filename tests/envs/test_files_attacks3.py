"""A helper's third adversarial read of the files domain's episodes, a standing case (real generated tasks,
the real workspace episode and sandbox, the real verifier; no mocks): what a file system holds beyond a
file's bytes at a path.

- A file whose name no task's file can have (a line break, a name of bytes that are not UTF-8, a
  backslash, a target's name in NFD): the host sent it to the verifier as the single response's JSON, and
  the agent read the verifier's refusal of that JSON: "Answer format: path 'a\\nb': a control character.
  Reply with one JSON object mapping each file ...", or, for a name that is not UTF-8, "a string holds a
  lone surrogate", naming no file (4 of 4 here). ``take_final_state`` now fails it itself (``format``, as
  before), naming the file and what is wrong with its name.
- What is metadata, not content (a user xattr, the overlay's own opaque mark set as a user xattr on a
  directory of the task's files, a timestamp, a target and its directory made unreadable then put back)
  passes (a mode left changed is collateral: tests/envs/test_files_attacks5.py); a target
  left as a fifo fails ``not_regular`` (standing guards, passing before too: the host reads as root
  without following links, and trusts only ``trusted.overlay.*``, which a job cannot set).
"""

from __future__ import annotations

import random

import pytest
from agent_play import call, play

from posttrain.envs import get_domain
from posttrain.envs.files._agents import oracle
from posttrain.envs.files._env import build_task
from posttrain.envs.workspace import SUBMIT


@pytest.fixture(scope="module")
def verify():
    return get_domain("files").make_verifier(None)


@pytest.fixture(scope="module")
def task():
    return build_task(random.Random("files-attacks3"), 3, "files-attacks3", ["sales"])


def _after_the_work(pool, verify, task, command: str):
    got = play(pool, task, [*oracle(task)[:-1], call("bash", command=command), SUBMIT], verify)
    assert all(c.ok for c in got.calls[:-1]), got.calls[-2].result
    return got.first


@pytest.mark.parametrize(("command", "named"), [
    ("touch $'a\\nb'", "'a\\nb' (a control character)"),
    ("mkdir $'\\xff' && echo x > $'\\xff'/f", "b'\\xff/f' (bytes that are not UTF-8)"),
    ("echo x > 'a\\b'", "'a\\\\b' (a backslash"),
    ("cp reports/summary.json $(printf 'reports/re\\xcc\\x81sume\\xcc\\x81.json')",
     "'reports/re\\u0301sume\\u0301.json' (not in Unicode NFC form)"),
])
def test_a_file_no_task_can_name_fails_naming_it(pool, verify, task, command, named) -> None:
    """Before: the verifier's 'Answer format: ... Reply with one JSON object ...' (or 'a lone surrogate')."""
    got = _after_the_work(pool, verify, task, command)
    assert got.outcome == "fail" and got.error_class == "format", got.feedback
    assert named in got.feedback and "Rename or remove" in got.feedback, got.feedback
    assert "JSON" not in got.feedback and "surrogate" not in got.feedback, got.feedback


def test_metadata_passes_and_a_fifo_target_does_not(pool, verify, task) -> None:
    [target] = task.fields["targets"]
    metadata = (f"touch -d 1970-01-02 {target} && "
                f"python3 -c \"import os; os.setxattr('{target}', 'user.note', b'1'); "
                "os.setxattr('data', 'user.overlay.opaque', b'y')\" && "
                f"chmod 000 {target} reports && chmod 755 reports && chmod 644 {target}")
    got = _after_the_work(pool, verify, task, metadata)
    assert got.outcome == "pass", got.evidence.get("problems")
    got = _after_the_work(pool, verify, task, f"rm {target} && mkfifo {target}")
    assert got.outcome == "fail" and got.error_class == "not_regular", got.feedback
